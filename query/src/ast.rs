//! The typed PromQL syntax tree.
//!
//! Every node carries the byte [`Span`] it was parsed from; equality ignores spans so that
//! parse → print → parse can be compared. `Display` (in `printer.rs`) gives valid PromQL back.

use inferdb_storage::Matcher;

/// Byte offsets `[start, end)` of a node in the query text.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Span {
    /// First byte.
    pub start: usize,
    /// One past the last byte.
    pub end: usize,
}

/// An expression with its source position.
pub struct Expr {
    /// What the expression is.
    pub kind: ExprKind,
    /// Where it was in the query text.
    pub span: Span,
}

// Equality, cloning and debug printing recurse once per level, and a chain of binary operators
// is as deep as it is long: each level runs on a stack grown as needed.
impl PartialEq for Expr {
    fn eq(&self, other: &Self) -> bool {
        crate::stack::grow(|| self.kind == other.kind)
    }
}

impl Clone for Expr {
    fn clone(&self) -> Self {
        crate::stack::grow(|| Expr {
            kind: self.kind.clone(),
            span: self.span,
        })
    }
}

impl std::fmt::Debug for Expr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        crate::stack::grow(|| {
            f.debug_struct("Expr")
                .field("kind", &self.kind)
                .field("span", &self.span)
                .finish()
        })
    }
}

impl Expr {
    /// An expression without a meaningful position (built by code, not parsed).
    pub fn new(kind: ExprKind) -> Self {
        Expr {
            kind,
            span: Span::default(),
        }
    }

    /// The expression's value type, as PromQL's type checker sees it. A binary operation is a
    /// scalar when both sides are, else a vector; the left spine of operator chains is
    /// followed in a loop, so that long chains cost neither stack nor quadratic time.
    pub fn value_type(&self) -> ValueType {
        let mut e = self;
        let mut in_binary = false;
        let leaf = loop {
            match &e.kind {
                ExprKind::Number(_) => break ValueType::Scalar,
                ExprKind::String(_) => break ValueType::String,
                ExprKind::VectorSelector(_) => break ValueType::Vector,
                ExprKind::MatrixSelector(_) => break ValueType::Matrix,
                ExprKind::Subquery(_) => break ValueType::Matrix,
                ExprKind::Paren(x) | ExprKind::Unary(_, x) | ExprKind::StepInvariant(x) => e = x,
                ExprKind::Binary(b) => {
                    // right-deep (`^`) chains recurse here
                    if crate::stack::grow(|| b.rhs.value_type()) != ValueType::Scalar {
                        return ValueType::Vector;
                    }
                    in_binary = true;
                    e = &b.lhs;
                }
                ExprKind::Aggregate(_) => break ValueType::Vector,
                ExprKind::Call(c) => break crate::functions_meta::return_type(&c.func),
            }
        };
        if in_binary && leaf != ValueType::Scalar {
            ValueType::Vector
        } else {
            leaf
        }
    }
}

/// The four PromQL value types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueType {
    /// A single number.
    Scalar,
    /// A string literal.
    String,
    /// An instant vector.
    Vector,
    /// A range vector.
    Matrix,
}

impl std::fmt::Display for ValueType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ValueType::Scalar => "scalar",
            ValueType::String => "string",
            ValueType::Vector => "instant vector",
            ValueType::Matrix => "range vector",
        })
    }
}

/// The kinds of expression.
#[derive(Debug, Clone, PartialEq)]
pub enum ExprKind {
    /// A number literal (`1`, `0x1f`, `1e3`, `Inf`, `NaN`, or a duration used as a number,
    /// which is stored in seconds and printed back as written when `duration` is set).
    Number(NumberLiteral),
    /// A string literal.
    String(String),
    /// `metric{label="v"} offset 5m @ 123`.
    VectorSelector(VectorSelector),
    /// `metric{...}[5m]`.
    MatrixSelector(MatrixSelector),
    /// `expr[30m:1m]`.
    Subquery(Subquery),
    /// `( expr )`.
    Paren(Box<Expr>),
    /// `-expr` or `+expr`.
    Unary(UnaryOp, Box<Expr>),
    /// `lhs op rhs`.
    Binary(BinaryExpr),
    /// `sum by (x) (expr)`.
    Aggregate(AggregateExpr),
    /// `rate(x[5m])`.
    Call(Call),
    /// Marks a subtree whose value does not change from step to step (set by the evaluator's
    /// preprocessing, never by the parser; printed as its inner expression).
    StepInvariant(Box<Expr>),
}

/// A number literal.
#[derive(Debug, Clone, Copy)]
pub struct NumberLiteral {
    /// The value.
    pub value: f64,
    /// Set when written as a duration (`5m` used as a number means 300 seconds).
    pub duration: bool,
}

impl PartialEq for NumberLiteral {
    fn eq(&self, o: &Self) -> bool {
        // NaN literals are equal to each other for AST comparison purposes.
        (self.value == o.value || (self.value.is_nan() && o.value.is_nan()))
            && self.duration == o.duration
    }
}

/// A duration that may be an expression (`[5m * 2]`, `offset step()`), Prometheus 3 style.
#[derive(Debug, Clone, PartialEq)]
pub enum Duration {
    /// A literal, in milliseconds (`5m`, `1h30m`, `1m0s`, or a number of seconds).
    Millis(i64),
    /// A duration expression, evaluated to seconds at query start (`5m * 2`, `step()`,
    /// `min_of(5m, step())`). Its leaves are `Number` literals (durations are stored as
    /// seconds) and calls to `step`, `range`, `min_of` or `max_of`, combined by `Binary`
    /// (`+ - * / % ^`), `Unary` (`-`) and `Paren` nodes.
    Expr(Box<Expr>),
}

/// The `@` modifier of a selector or subquery.
#[derive(Debug, Clone, PartialEq)]
pub enum AtModifier {
    /// `@ 123.456` (milliseconds).
    Timestamp(i64),
    /// `@ start()`.
    Start,
    /// `@ end()`.
    End,
}

/// An instant vector selector.
#[derive(Debug, Clone, PartialEq)]
pub struct VectorSelector {
    /// The metric name if written outside the braces.
    pub name: Option<String>,
    /// All matchers, including `__name__="name"` when `name` is set (the parser adds it).
    pub matchers: Vec<Matcher>,
    /// `offset` (negative allowed); `None` when not written.
    pub offset: Option<Duration>,
    /// `@`; `None` when not written.
    pub at: Option<AtModifier>,
}

/// A range vector selector: a vector selector with a range.
#[derive(Debug, Clone, PartialEq)]
pub struct MatrixSelector {
    /// The selector (its offset and `@` are written after the range).
    pub selector: VectorSelector,
    /// The range.
    pub range: Duration,
}

/// A subquery `expr[range:step] offset d @ t`.
#[derive(Debug, Clone, PartialEq)]
pub struct Subquery {
    /// The inner expression.
    pub expr: Box<Expr>,
    /// The range.
    pub range: Duration,
    /// The resolution; `None` means the default evaluation interval.
    pub step: Option<Duration>,
    /// `offset`.
    pub offset: Option<Duration>,
    /// `@`.
    pub at: Option<AtModifier>,
}

/// Unary operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnaryOp {
    /// `-`
    Neg,
    /// `+`
    Pos,
}

/// Binary operators, in PromQL's spelling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`
    Div,
    /// `%`
    Mod,
    /// `^` (right-associative)
    Pow,
    /// `atan2`
    Atan2,
    /// `==`
    Eql,
    /// `!=`
    Neq,
    /// `>`
    Gtr,
    /// `<`
    Lss,
    /// `>=`
    Gte,
    /// `<=`
    Lte,
    /// `and`
    And,
    /// `or`
    Or,
    /// `unless`
    Unless,
}

impl BinaryOp {
    /// Precedence, higher binds tighter (Prometheus: `or` 1, `and unless` 2, comparisons 3,
    /// `+ -` 4, `* / % atan2` 5, `^` 6).
    pub fn precedence(self) -> u8 {
        use BinaryOp::*;
        match self {
            Or => 1,
            And | Unless => 2,
            Eql | Neq | Gtr | Lss | Gte | Lte => 3,
            Add | Sub => 4,
            Mul | Div | Mod | Atan2 => 5,
            Pow => 6,
        }
    }

    /// Whether the operator is right-associative (only `^`).
    pub fn is_right_assoc(self) -> bool {
        self == BinaryOp::Pow
    }

    /// Whether it is a comparison (`==`, `!=`, `>`, `<`, `>=`, `<=`).
    pub fn is_comparison(self) -> bool {
        use BinaryOp::*;
        matches!(self, Eql | Neq | Gtr | Lss | Gte | Lte)
    }

    /// Whether it is a set operator (`and`, `or`, `unless`).
    pub fn is_set(self) -> bool {
        matches!(self, BinaryOp::And | BinaryOp::Or | BinaryOp::Unless)
    }

    /// The operator as written in PromQL.
    pub fn as_str(self) -> &'static str {
        use BinaryOp::*;
        match self {
            Add => "+",
            Sub => "-",
            Mul => "*",
            Div => "/",
            Mod => "%",
            Pow => "^",
            Atan2 => "atan2",
            Eql => "==",
            Neq => "!=",
            Gtr => ">",
            Lss => "<",
            Gte => ">=",
            Lte => "<=",
            And => "and",
            Or => "or",
            Unless => "unless",
        }
    }
}

/// Which side of a vector match is the "many" side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cardinality {
    /// Default: each element matches at most one on the other side.
    OneToOne,
    /// `group_left`
    ManyToOne,
    /// `group_right`
    OneToMany,
    /// Set operators.
    ManyToMany,
}

/// `on(...)`/`ignoring(...)` with `group_left(...)`/`group_right(...)`.
#[derive(Debug, Clone, PartialEq)]
pub struct VectorMatching {
    /// Cardinality of the match.
    pub card: Cardinality,
    /// Labels in `on(...)` (when `on` is true) or `ignoring(...)`.
    pub labels: Vec<String>,
    /// `on` (true) or `ignoring` (false; also the default when neither is written).
    pub on: bool,
    /// Labels listed in `group_left(...)`/`group_right(...)` to copy from the "one" side.
    pub include: Vec<String>,
}

/// A binary expression.
#[derive(Debug, Clone, PartialEq)]
pub struct BinaryExpr {
    /// The operator.
    pub op: BinaryOp,
    /// Left operand.
    pub lhs: Box<Expr>,
    /// Right operand.
    pub rhs: Box<Expr>,
    /// `bool` modifier on a comparison.
    pub return_bool: bool,
    /// Vector matching, `Some` when `on`/`ignoring`/`group_*` was written or when the
    /// operator is a set operator (`card` ManyToMany) — as in Prometheus' parser.
    pub matching: Option<VectorMatching>,
}

/// Aggregation operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggregateOp {
    /// `sum`
    Sum,
    /// `avg`
    Avg,
    /// `min`
    Min,
    /// `max`
    Max,
    /// `count`
    Count,
    /// `group`
    Group,
    /// `stddev`
    Stddev,
    /// `stdvar`
    Stdvar,
    /// `topk` (parameter k)
    Topk,
    /// `bottomk` (parameter k)
    Bottomk,
    /// `quantile` (parameter φ)
    Quantile,
    /// `count_values` (parameter: label name string)
    CountValues,
    /// `limitk` (parameter k)
    Limitk,
    /// `limit_ratio` (parameter ratio)
    LimitRatio,
}

impl AggregateOp {
    /// The operator as written.
    pub fn as_str(self) -> &'static str {
        use AggregateOp::*;
        match self {
            Sum => "sum",
            Avg => "avg",
            Min => "min",
            Max => "max",
            Count => "count",
            Group => "group",
            Stddev => "stddev",
            Stdvar => "stdvar",
            Topk => "topk",
            Bottomk => "bottomk",
            Quantile => "quantile",
            CountValues => "count_values",
            Limitk => "limitk",
            LimitRatio => "limit_ratio",
        }
    }

    /// Whether the operator takes a parameter before the vector.
    pub fn has_param(self) -> bool {
        use AggregateOp::*;
        matches!(
            self,
            Topk | Bottomk | Quantile | CountValues | Limitk | LimitRatio
        )
    }
}

/// An aggregation.
#[derive(Debug, Clone, PartialEq)]
pub struct AggregateExpr {
    /// The operator.
    pub op: AggregateOp,
    /// The vector aggregated.
    pub expr: Box<Expr>,
    /// The parameter of `topk`, `quantile`, `count_values`, ...
    pub param: Option<Box<Expr>>,
    /// `by (...)`/`without (...)` labels.
    pub grouping: Vec<String>,
    /// `without` (true) or `by` (false).
    pub without: bool,
}

/// A function call.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// Function name as written (`rate`, `histogram_quantile`, ...).
    pub func: String,
    /// Arguments.
    pub args: Vec<Expr>,
}

/// The direct sub-expressions of a node ([`Expr::children`]): at most two boxed operands,
/// then a call's arguments.
#[derive(Debug, Clone)]
pub struct Children<'a> {
    pair: [Option<&'a Expr>; 2],
    next: usize,
    args: std::slice::Iter<'a, Expr>,
}

impl<'a> Iterator for Children<'a> {
    type Item = &'a Expr;

    fn next(&mut self) -> Option<&'a Expr> {
        while self.next < 2 {
            self.next += 1;
            if let Some(e) = self.pair[self.next - 1] {
                return Some(e);
            }
        }
        self.args.next()
    }
}

impl Expr {
    /// The node's direct sub-expressions, in the order they are evaluated: a binary
    /// operation's left then right operand, an aggregation's parameter then its vector, a
    /// call's arguments, the inside of a subquery, parentheses or a unary operator; none for
    /// literals and selectors (a matrix selector's vector selector is part of it, not a child).
    pub fn children(&self) -> Children<'_> {
        let none: std::slice::Iter<'_, Expr> = [].iter();
        let (pair, args) = match &self.kind {
            ExprKind::Number(_)
            | ExprKind::String(_)
            | ExprKind::VectorSelector(_)
            | ExprKind::MatrixSelector(_) => ([None, None], none),
            ExprKind::Subquery(sq) => ([Some(&*sq.expr), None], none),
            ExprKind::Paren(x) | ExprKind::Unary(_, x) | ExprKind::StepInvariant(x) => {
                ([Some(&**x), None], none)
            }
            ExprKind::Binary(b) => ([Some(&*b.lhs), Some(&*b.rhs)], none),
            ExprKind::Aggregate(a) => ([a.param.as_deref(), Some(&*a.expr)], none),
            ExprKind::Call(c) => ([None, None], c.args.iter()),
        };
        Children {
            pair,
            next: 0,
            args,
        }
    }

    /// Takes the node's kind out, leaving the number 0 in its place (for code that rebuilds a
    /// node from its parts: `Expr` has a `Drop`, so its fields cannot be moved out).
    pub fn take_kind(&mut self) -> ExprKind {
        std::mem::replace(
            &mut self.kind,
            ExprKind::Number(NumberLiteral {
                value: 0.0,
                duration: false,
            }),
        )
    }
}

/// A chain of binary operators (`a or b or … or z`, `1 + 1 + … + 1`, `2 ^ 2 ^ … ^ 2`) is as
/// deep as it has terms; dropping it node by node would recurse once per operator and
/// overflow the stack for long chains, so its operator nodes are taken apart in a loop.
impl Drop for Expr {
    fn drop(&mut self) {
        let ExprKind::Binary(b) = &mut self.kind else {
            return;
        };
        let is_binary = |e: &Expr| matches!(e.kind, ExprKind::Binary(_));
        if !is_binary(&b.lhs) && !is_binary(&b.rhs) {
            return;
        }
        let mut pending = vec![b.lhs.take_kind(), b.rhs.take_kind()];
        while let Some(kind) = pending.pop() {
            if let ExprKind::Binary(mut inner) = kind {
                // `inner` drops at the end of this pass with leaves on both sides
                pending.push(inner.lhs.take_kind());
                pending.push(inner.rhs.take_kind());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::parser::parse;

    /// The printed form of each direct child of `q`'s root.
    fn children(q: &str) -> Vec<String> {
        parse(q)
            .unwrap()
            .children()
            .map(|c| c.to_string())
            .collect()
    }

    #[test]
    fn children_in_evaluation_order() {
        assert_eq!(children("a + on (x) b"), ["a", "b"]);
        assert_eq!(children("topk(3, rate(x[5m]))"), ["3", "rate(x[5m])"]);
        assert_eq!(children("sum by (l) (x)"), ["x"]);
        assert_eq!(
            children(r#"label_replace(x, "a", "$1", "b", "(.*)")"#),
            ["x", r#""a""#, r#""$1""#, r#""b""#, r#""(.*)""#]
        );
        assert_eq!(children("-(x)"), ["(x)"]);
        assert_eq!(children("(x)"), ["x"]);
        assert_eq!(children("x[5m:1m]"), ["x"]);
        assert!(children("x[5m]").is_empty());
        assert!(children("x").is_empty());
        assert!(children("1").is_empty());
    }
}
