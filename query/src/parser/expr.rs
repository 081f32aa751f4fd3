//! Recursive-descent / precedence-climbing parser over the lexer's tokens, with Prometheus'
//! precedences, postfix modifiers and error messages.

use inferdb_storage::{MatchOp, Matcher};

use super::lexer::{self, go_quote, Tok, Token};
use super::literals;
use super::ParseError;
use crate::ast::*;
use crate::functions_meta;

/// Aborts parsing; the error is already recorded.
pub(crate) struct Abort;

type PResult<T> = Result<T, Abort>;

pub(crate) struct Parser<'a> {
    pub(crate) input: &'a str,
    toks: Vec<Token>,
    i: usize,
    /// Current nesting depth (see [`MAX_NESTING`]).
    depth: usize,
    /// Errors in the order Prometheus would add them; the first one is reported.
    pub(crate) errors: Vec<ParseError>,
}

/// The deepest expression nesting accepted: parentheses, unary operators, calls,
/// aggregations, subqueries and modifiers. A chain of binary operators (`a or b or … or z`)
/// is not nesting and has no limit, as in Prometheus: it is read in a loop and the walks over
/// it run on a grown stack ([`crate::stack`]).
pub const MAX_NESTING: usize = 128;

/// Precedence of `^`.
const POW_PREC: u8 = 6;

fn binary_op(t: &Tok) -> Option<BinaryOp> {
    use BinaryOp::*;
    Some(match t {
        Tok::Add => Add,
        Tok::Sub => Sub,
        Tok::Mul => Mul,
        Tok::Div => Div,
        Tok::Mod => Mod,
        Tok::Pow => Pow,
        Tok::Atan2 => Atan2,
        Tok::Eqlc => Eql,
        Tok::Neq => Neq,
        Tok::Gtr => Gtr,
        Tok::Lss => Lss,
        Tok::Gte => Gte,
        Tok::Lte => Lte,
        Tok::Land => And,
        Tok::Lor => Or,
        Tok::Lunless => Unless,
        _ => return None,
    })
}

/// Tokens that may stand as a label name in grouping clauses (Prometheus' `maybe_label`).
fn is_grouping_label(t: &Tok) -> bool {
    matches!(
        t,
        Tok::Identifier
            | Tok::MetricIdentifier
            | Tok::Agg(_)
            | Tok::Bool
            | Tok::By
            | Tok::GroupLeft
            | Tok::GroupRight
            | Tok::Fill
            | Tok::FillLeft
            | Tok::FillRight
            | Tok::Ignoring
            | Tok::Land
            | Tok::Lor
            | Tok::Lunless
            | Tok::Offset
            | Tok::On
            | Tok::Start
            | Tok::End
            | Tok::Atan2
            | Tok::Step
            | Tok::Range
            | Tok::Anchored
            | Tok::Smoothed
            | Tok::MaxOf
            | Tok::MinOf
    )
}

/// Keyword tokens that may stand as a metric name (Prometheus' `metric_identifier`, less
/// aggregators and preprocessors, which are handled where they can start a call).
fn is_metric_keyword(t: &Tok) -> bool {
    matches!(
        t,
        Tok::By
            | Tok::Without
            | Tok::Offset
            | Tok::Land
            | Tok::Lor
            | Tok::Lunless
            | Tok::Fill
            | Tok::FillLeft
            | Tok::FillRight
            | Tok::Anchored
            | Tok::Smoothed
    )
}

fn span(start: usize, end: usize) -> Span {
    Span { start, end }
}

impl<'a> Parser<'a> {
    pub(crate) fn new(input: &'a str) -> Self {
        Parser {
            input,
            toks: lexer::lex(input),
            i: 0,
            depth: 0,
            errors: Vec::new(),
        }
    }

    fn peek(&self) -> &Token {
        // The token list always ends with Eof or Error, where the parser stops.
        &self.toks[self.i.min(self.toks.len() - 1)]
    }

    fn peek_kind(&self) -> &Tok {
        &self.peek().kind
    }

    fn bump(&mut self) -> Token {
        let t = self.peek().clone();
        if !matches!(t.kind, Tok::Eof | Tok::Error(_)) {
            self.i += 1;
        }
        t
    }

    fn text(&self, t: &Token) -> &'a str {
        &self.input[t.start..t.end]
    }

    pub(crate) fn err_at(&mut self, pos: usize, msg: impl Into<String>) {
        let e = ParseError::at(self.input, pos, msg);
        self.errors.push(e);
    }

    /// The description of a token in Prometheus' "unexpected …" messages.
    fn desc(&self, t: &Token) -> String {
        let val = self.text(t);
        let quoted_short = || {
            if val.len() > 10 {
                let short: String = val.chars().take(10).collect();
                format!("{}...", go_quote(&short))
            } else {
                go_quote(val)
            }
        };
        match &t.kind {
            Tok::Eof => "end of input".into(),
            Tok::Error(m) => m.clone(),
            Tok::Comment => "comment".into(),
            Tok::Identifier => format!("identifier {}", go_quote(val)),
            Tok::MetricIdentifier => format!("metric identifier {}", go_quote(val)),
            Tok::Number => format!("number {}", quoted_short()),
            Tok::Duration => format!("duration {}", quoted_short()),
            Tok::String => format!("string {}", quoted_short()),
            Tok::Agg(_) => format!("<aggr:{val}>"),
            Tok::Bool
            | Tok::By
            | Tok::GroupLeft
            | Tok::GroupRight
            | Tok::Fill
            | Tok::FillLeft
            | Tok::FillRight
            | Tok::Ignoring
            | Tok::Offset
            | Tok::Smoothed
            | Tok::Anchored
            | Tok::On
            | Tok::Without => format!("<{val}>"),
            Tok::Comma
            | Tok::LeftParen
            | Tok::RightParen
            | Tok::LeftBrace
            | Tok::RightBrace
            | Tok::LeftBracket
            | Tok::RightBracket
            | Tok::Colon
            | Tok::Eql
            | Tok::Start
            | Tok::End
            | Tok::Step
            | Tok::Range
            | Tok::MaxOf
            | Tok::MinOf => quoted_short(),
            _ => format!("<op:{val}>"),
        }
    }

    /// Records "unexpected <token>[ in <context>][, expected <expected>]" (or the lexer's
    /// error) at the current token and aborts.
    fn unexpected<T>(&mut self, context: &str, expected: &str) -> PResult<T> {
        let t = self.peek().clone();
        let msg = match &t.kind {
            Tok::Error(m) => m.clone(),
            _ => {
                let mut m = format!("unexpected {}", self.desc(&t));
                if !context.is_empty() {
                    m.push_str(" in ");
                    m.push_str(context);
                }
                if !expected.is_empty() {
                    m.push_str(", expected ");
                    m.push_str(expected);
                }
                m
            }
        };
        self.err_at(t.start, msg);
        Err(Abort)
    }

    fn expect(&mut self, kind: Tok, context: &str, expected: &str) -> PResult<Token> {
        if *self.peek_kind() == kind {
            Ok(self.bump())
        } else {
            self.unexpected(context, expected)
        }
    }

    fn finish<T>(&mut self, r: PResult<T>) -> Result<T, ParseError> {
        match (r, self.errors.first()) {
            (Ok(v), None) => Ok(v),
            (_, Some(e)) => Err(e.clone()),
            (Err(Abort), None) => Err(ParseError::at(self.input, 0, "unexpected error")),
        }
    }

    /// `START_EXPRESSION expr EOF`, then the type checks.
    pub(crate) fn parse_expression(mut self) -> Result<Expr, ParseError> {
        let r = self.top_expression();
        let mut e = self.finish(r)?;
        self.check_ast(&mut e);
        self.finish(Ok(e))
    }

    fn top_expression(&mut self) -> PResult<Expr> {
        if *self.peek_kind() == Tok::Eof {
            self.err_at(0, "no expression found in input");
            return Err(Abort);
        }
        let e = self.expr(0)?;
        if *self.peek_kind() != Tok::Eof {
            return self.unexpected("", "");
        }
        Ok(e)
    }

    /// `START_METRIC_SELECTOR vector_selector EOF`.
    pub(crate) fn parse_metric_selector(mut self) -> Result<Vec<Matcher>, ParseError> {
        let r = self.metric_selector();
        self.finish(r)
    }

    fn metric_selector(&mut self) -> PResult<Vec<Matcher>> {
        let t = self.peek().clone();
        let name = match &t.kind {
            Tok::LeftBrace => None,
            Tok::Identifier | Tok::MetricIdentifier | Tok::Agg(_) => {
                self.bump();
                Some(self.text(&t).to_string())
            }
            k if is_metric_keyword(k)
                || matches!(
                    k,
                    Tok::Start | Tok::End | Tok::Step | Tok::Range | Tok::MaxOf | Tok::MinOf
                ) =>
            {
                self.bump();
                Some(self.text(&t).to_string())
            }
            _ => return self.unexpected("", ""),
        };
        let mut e = self.vector_selector(name, t.start)?;
        if *self.peek_kind() != Tok::Eof {
            return self.unexpected("", "");
        }
        match e.take_kind() {
            ExprKind::VectorSelector(vs) => Ok(vs.matchers),
            _ => Err(Abort),
        }
    }

    /// An expression whose binary operators all bind at least as tightly as `min_prec`.
    fn expr(&mut self, min_prec: u8) -> PResult<Expr> {
        let saved = self.depth;
        let r = self.enter().and_then(|_| self.expr_inner(min_prec));
        self.depth = saved;
        r
    }

    /// Counts one level of nesting; errors beyond [`MAX_NESTING`].
    fn enter(&mut self) -> PResult<()> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            let pos = self.peek().start;
            self.err_at(
                pos,
                format!("expression nested too deeply (more than {MAX_NESTING} levels)"),
            );
            return Err(Abort);
        }
        Ok(())
    }

    fn expr_inner(&mut self, min_prec: u8) -> PResult<Expr> {
        let mut lhs = self.unary()?;
        loop {
            let t = self.peek().clone();
            if matches!(t.kind, Tok::TrimUpper | Tok::TrimLower) {
                self.err_at(
                    t.start,
                    format!(
                        "operator {} (native histogram trimming) is not supported",
                        go_quote(self.text(&t))
                    ),
                );
                return Err(Abort);
            }
            let Some(op) = binary_op(&t.kind) else { break };
            let prec = op.precedence();
            if prec < min_prec {
                break;
            }
            self.bump();
            let (return_bool, matching) = self.bin_modifiers(op)?;
            // a chain of `^` is not nesting: its right side is read without counting a level
            // (on a grown stack: the recursion is as deep as the chain is long)
            let rhs = if op.is_right_assoc() {
                crate::stack::grow(|| self.expr_inner(prec))?
            } else {
                self.expr(prec + 1)?
            };
            let sp = span(lhs.span.start, rhs.span.end);
            lhs = Expr {
                kind: ExprKind::Binary(BinaryExpr {
                    op,
                    lhs: Box::new(lhs),
                    rhs: Box::new(rhs),
                    return_bool,
                    matching,
                }),
                span: sp,
            };
        }
        Ok(lhs)
    }

    /// `bool`, `on(…)`/`ignoring(…)`, `group_left(…)`/`group_right(…)` after an operator.
    fn bin_modifiers(&mut self, op: BinaryOp) -> PResult<(bool, Option<VectorMatching>)> {
        let mut return_bool = false;
        if *self.peek_kind() == Tok::Bool {
            self.bump();
            return_bool = true;
        }
        let mut matching = None;
        if matches!(self.peek_kind(), Tok::On | Tok::Ignoring) {
            let on = *self.peek_kind() == Tok::On;
            self.bump();
            let labels = self.grouping_labels()?;
            let mut vm = VectorMatching {
                card: Cardinality::OneToOne,
                labels,
                on,
                include: Vec::new(),
            };
            if matches!(self.peek_kind(), Tok::GroupLeft | Tok::GroupRight) {
                vm.card = if *self.peek_kind() == Tok::GroupLeft {
                    Cardinality::ManyToOne
                } else {
                    Cardinality::OneToMany
                };
                self.bump();
                if *self.peek_kind() == Tok::LeftParen {
                    vm.include = self.grouping_labels()?;
                }
            }
            matching = Some(vm);
        }
        if matches!(self.peek_kind(), Tok::Fill | Tok::FillLeft | Tok::FillRight) {
            let t = self.peek().clone();
            self.err_at(
                t.start,
                "binop fill modifiers are experimental and not enabled",
            );
            return Err(Abort);
        }
        if op.is_set() && matching.is_none() {
            matching = Some(VectorMatching {
                card: Cardinality::ManyToMany,
                labels: Vec::new(),
                on: false,
                include: Vec::new(),
            });
        }
        Ok((return_bool, matching))
    }

    /// `grouping_labels`: `( label, … )`.
    fn grouping_labels(&mut self) -> PResult<Vec<String>> {
        self.expect(Tok::LeftParen, "grouping opts", "\"(\"")?;
        let mut labels = Vec::new();
        if *self.peek_kind() == Tok::RightParen {
            self.bump();
            return Ok(labels);
        }
        loop {
            let t = self.peek().clone();
            if is_grouping_label(&t.kind) {
                self.bump();
                labels.push(self.text(&t).to_string());
            } else if t.kind == Tok::String {
                self.bump();
                let s = self.unquote(&t);
                if s.is_empty() || !super::is_valid_utf8(&s) {
                    self.err_at(
                        t.start,
                        format!("invalid label name for grouping: {}", go_quote(&s)),
                    );
                }
                labels.push(s);
            } else {
                return self.unexpected("grouping opts", "label");
            }
            match self.peek_kind() {
                Tok::Comma => {
                    self.bump();
                    if *self.peek_kind() == Tok::RightParen {
                        self.bump();
                        return Ok(labels);
                    }
                }
                Tok::RightParen => {
                    self.bump();
                    return Ok(labels);
                }
                _ => return self.unexpected("grouping opts", "\",\" or \")\""),
            }
        }
    }

    fn unquote(&mut self, t: &Token) -> String {
        let raw = self.text(t);
        match literals::unquote(raw) {
            Ok(s) => s,
            Err(why) => {
                self.err_at(
                    t.start,
                    format!("error unquoting string {}: {why}", go_quote(raw)),
                );
                String::new()
            }
        }
    }

    /// Unary `+`/`-` (binding like `*`, below `^`), folded into number literals.
    fn unary(&mut self) -> PResult<Expr> {
        let t = self.peek().clone();
        let op = match t.kind {
            Tok::Add => UnaryOp::Pos,
            Tok::Sub => UnaryOp::Neg,
            _ => {
                let p = self.primary()?;
                return self.postfix(p);
            }
        };
        self.bump();
        let operand = self.expr(POW_PREC)?;
        let sp = span(t.start, operand.span.end);
        if let ExprKind::Number(mut n) = operand.kind {
            if op == UnaryOp::Neg {
                n.value = -n.value;
            }
            return Ok(Expr {
                kind: ExprKind::Number(n),
                span: sp,
            });
        }
        Ok(Expr {
            kind: ExprKind::Unary(op, Box::new(operand)),
            span: sp,
        })
    }

    fn primary(&mut self) -> PResult<Expr> {
        let t = self.peek().clone();
        match &t.kind {
            Tok::Number => {
                self.bump();
                let value = match literals::parse_number(self.text(&t)) {
                    Ok(v) => v,
                    Err(m) => {
                        self.err_at(t.start, m);
                        0.0
                    }
                };
                Ok(Expr {
                    kind: ExprKind::Number(NumberLiteral {
                        value,
                        duration: false,
                    }),
                    span: span(t.start, t.end),
                })
            }
            Tok::Duration => {
                self.bump();
                let value = self.duration_token_secs(&t);
                Ok(Expr {
                    kind: ExprKind::Number(NumberLiteral {
                        value,
                        duration: true,
                    }),
                    span: span(t.start, t.end),
                })
            }
            Tok::String => {
                self.bump();
                let s = self.unquote(&t);
                Ok(Expr {
                    kind: ExprKind::String(s),
                    span: span(t.start, t.end),
                })
            }
            Tok::LeftParen => {
                self.bump();
                let inner = self.expr(0)?;
                let close = self.expect(Tok::RightParen, "", "")?;
                Ok(Expr {
                    kind: ExprKind::Paren(Box::new(inner)),
                    span: span(t.start, close.end),
                })
            }
            Tok::LeftBrace => self.vector_selector(None, t.start),
            Tok::Identifier => {
                self.bump();
                if *self.peek_kind() == Tok::LeftParen {
                    self.call(&t)
                } else {
                    self.vector_selector(Some(self.text(&t).to_string()), t.start)
                }
            }
            Tok::MetricIdentifier => {
                self.bump();
                self.vector_selector(Some(self.text(&t).to_string()), t.start)
            }
            Tok::Agg(op) => {
                let op = *op;
                self.bump();
                if matches!(self.peek_kind(), Tok::LeftParen | Tok::By | Tok::Without) {
                    self.aggregate(op, &t)
                } else {
                    self.vector_selector(Some(self.text(&t).to_string()), t.start)
                }
            }
            Tok::Start | Tok::End | Tok::Step | Tok::Range | Tok::MaxOf | Tok::MinOf => {
                self.bump();
                if *self.peek_kind() == Tok::LeftParen {
                    self.call(&t)
                } else {
                    self.vector_selector(Some(self.text(&t).to_string()), t.start)
                }
            }
            k if is_metric_keyword(k) => {
                self.bump();
                self.vector_selector(Some(self.text(&t).to_string()), t.start)
            }
            _ => self.unexpected("", ""),
        }
    }

    /// A duration token's value in seconds, as Go's `Duration.Seconds()`.
    fn duration_token_secs(&mut self, t: &Token) -> f64 {
        match literals::parse_duration_ns(self.text(t)) {
            Ok(ns) => {
                let sec = ns / 1_000_000_000;
                let nsec = ns % 1_000_000_000;
                sec as f64 + nsec as f64 / 1e9
            }
            Err(m) => {
                self.err_at(t.start, m);
                0.0
            }
        }
    }

    /// `name{matchers}`, `name` or `{matchers}`; the current token is the `{` if any.
    fn vector_selector(&mut self, name: Option<String>, start: usize) -> PResult<Expr> {
        let mut end = start + name.as_ref().map_or(0, |n| n.len());
        let mut matchers = Vec::new();
        if *self.peek_kind() == Tok::LeftBrace {
            self.bump();
            end = self.label_matchers(&mut matchers)?;
        }
        if let Some(n) = &name {
            matchers.push(Matcher::equal("__name__", n.clone()));
        }
        Ok(Expr {
            kind: ExprKind::VectorSelector(VectorSelector {
                name,
                matchers,
                offset: None,
                at: None,
            }),
            span: span(start, end),
        })
    }

    fn match_op(t: &Tok) -> Option<MatchOp> {
        Some(match t {
            Tok::Eql => MatchOp::Equal,
            Tok::Neq => MatchOp::NotEqual,
            Tok::EqlRegex => MatchOp::RegexMatch,
            Tok::NeqRegex => MatchOp::RegexNoMatch,
            _ => return None,
        })
    }

    /// The matchers after `{`, through `}`; returns the end of the `}`.
    fn label_matchers(&mut self, out: &mut Vec<Matcher>) -> PResult<usize> {
        if *self.peek_kind() == Tok::RightBrace {
            return Ok(self.bump().end);
        }
        loop {
            let t = self.peek().clone();
            match t.kind {
                Tok::Identifier => {
                    self.bump();
                    let name = self.text(&t).to_string();
                    let Some(op) = Self::match_op(self.peek_kind()) else {
                        return self.unexpected("label matching", "label matching operator");
                    };
                    self.bump();
                    self.matcher_value(name, op, t.start, out)?;
                }
                Tok::String => {
                    self.bump();
                    let name = self.unquote(&t);
                    if let Some(op) = Self::match_op(self.peek_kind()) {
                        self.bump();
                        self.matcher_value(name, op, t.start, out)?;
                    } else {
                        out.push(Matcher::equal("__name__", name));
                    }
                }
                _ => return self.unexpected("label matching", "identifier or \"}\""),
            }
            match self.peek_kind() {
                Tok::Comma => {
                    self.bump();
                    if *self.peek_kind() == Tok::RightBrace {
                        return Ok(self.bump().end);
                    }
                }
                Tok::RightBrace => return Ok(self.bump().end),
                _ => return self.unexpected("label matching", "\",\" or \"}\""),
            }
        }
    }

    fn matcher_value(
        &mut self,
        name: String,
        op: MatchOp,
        start: usize,
        out: &mut Vec<Matcher>,
    ) -> PResult<()> {
        if *self.peek_kind() != Tok::String {
            return self.unexpected("label matching", "string");
        }
        let v = self.bump();
        let value = self.unquote(&v);
        match Matcher::new(op, name.clone(), value.clone()) {
            Ok(m) => out.push(m),
            Err(e) => {
                let msg = match e {
                    inferdb_storage::Error::InvalidRegex(m) => {
                        format!("error parsing regexp: {m}")
                    }
                    other => other.to_string(),
                };
                self.err_at(start, msg);
                out.push(Matcher::equal(name, value));
            }
        }
        Ok(())
    }

    /// `name(args…)`; the name is consumed, the current token is `(`.
    fn call(&mut self, name_tok: &Token) -> PResult<Expr> {
        let name = self.text(name_tok).to_string();
        let (args, end) = self.call_body()?;
        match functions_meta::lookup(&name) {
            Some(_) => {}
            None => self.err_at(
                name_tok.start,
                format!("unknown function with name {}", go_quote(&name)),
            ),
        }
        Ok(Expr {
            kind: ExprKind::Call(Call { func: name, args }),
            span: span(name_tok.start, end),
        })
    }

    /// `( expr, … )`; returns the arguments and the end of the `)`.
    fn call_body(&mut self) -> PResult<(Vec<Expr>, usize)> {
        self.expect(Tok::LeftParen, "", "")?;
        let mut args = Vec::new();
        if *self.peek_kind() == Tok::RightParen {
            return Ok((args, self.bump().end));
        }
        loop {
            args.push(self.expr(0)?);
            match self.peek_kind() {
                Tok::Comma => {
                    let comma = self.bump();
                    if *self.peek_kind() == Tok::RightParen {
                        self.err_at(
                            comma.start,
                            "trailing commas not allowed in function call args",
                        );
                        return Ok((args, self.bump().end));
                    }
                }
                Tok::RightParen => return Ok((args, self.bump().end)),
                _ => return self.unexpected("", ""),
            }
        }
    }

    /// An aggregation; the operator is consumed.
    fn aggregate(&mut self, op: AggregateOp, op_tok: &Token) -> PResult<Expr> {
        let mut grouping = Vec::new();
        let mut without = false;
        let mut have_modifier = false;
        if matches!(self.peek_kind(), Tok::By | Tok::Without) {
            without = *self.peek_kind() == Tok::Without;
            self.bump();
            grouping = self.grouping_labels()?;
            have_modifier = true;
        }
        if *self.peek_kind() != Tok::LeftParen {
            return self.unexpected("aggregation", "");
        }
        let (mut args, mut end) = self.call_body()?;
        if !have_modifier && matches!(self.peek_kind(), Tok::By | Tok::Without) {
            without = *self.peek_kind() == Tok::Without;
            let t = self.bump();
            grouping = self.grouping_labels()?;
            end = end.max(t.end);
            // The grouping's closing parenthesis ends the aggregation.
            end = self.toks[self.i.saturating_sub(1)].end.max(end);
        }
        let sp = span(op_tok.start, end);
        let dummy = || Expr {
            kind: ExprKind::Number(NumberLiteral {
                value: 0.0,
                duration: false,
            }),
            span: sp,
        };
        let desired = if op.has_param() { 2 } else { 1 };
        let (expr, param) = if args.is_empty() {
            self.err_at(sp.start, "no arguments for aggregate expression provided");
            (dummy(), None)
        } else if args.len() != desired {
            self.err_at(
                sp.start,
                format!(
                    "wrong number of arguments for aggregate expression provided, expected {desired}, got {}",
                    args.len()
                ),
            );
            (dummy(), None)
        } else if desired == 2 {
            let e = args.pop().unwrap_or_else(dummy);
            let p = args.pop().unwrap_or_else(dummy);
            (e, Some(Box::new(p)))
        } else {
            (args.pop().unwrap_or_else(dummy), None)
        };
        Ok(Expr {
            kind: ExprKind::Aggregate(AggregateExpr {
                op,
                expr: Box::new(expr),
                param,
                grouping,
                without,
            }),
            span: sp,
        })
    }

    /// Range selectors, subqueries, `offset` and `@` after an expression.
    fn postfix(&mut self, e: Expr) -> PResult<Expr> {
        let saved = self.depth;
        let r = self.postfix_inner(e);
        self.depth = saved;
        r
    }

    fn postfix_inner(&mut self, mut e: Expr) -> PResult<Expr> {
        loop {
            let t = self.peek().clone();
            if matches!(t.kind, Tok::LeftBracket | Tok::Offset | Tok::At) {
                self.enter()?;
            }
            e = match t.kind {
                Tok::LeftBracket => self.range_or_subquery(e)?,
                Tok::Offset => self.offset(e)?,
                Tok::At => self.at(e)?,
                Tok::Anchored | Tok::Smoothed => {
                    self.bump();
                    self.err_at(
                        e.span.start,
                        format!(
                            "{} modifier is experimental and not enabled",
                            self.text(&t).to_ascii_lowercase()
                        ),
                    );
                    e
                }
                _ => return Ok(e),
            };
        }
    }

    fn range_or_subquery(&mut self, mut e: Expr) -> PResult<Expr> {
        let lb = self.bump();
        let range = self.positive_duration(
            "subquery or range selector",
            "number, duration, step(), or range()",
        )?;
        match self.peek_kind() {
            Tok::RightBracket => {
                let rb = self.bump();
                let sp = span(e.span.start, rb.end);
                match e.take_kind() {
                    ExprKind::VectorSelector(vs) => {
                        if vs.offset.is_some() {
                            self.err_at(lb.start, "no offset modifiers allowed before range");
                        } else if vs.at.is_some() {
                            self.err_at(lb.start, "no @ modifiers allowed before range");
                        }
                        Ok(Expr {
                            kind: ExprKind::MatrixSelector(MatrixSelector {
                                selector: vs,
                                range,
                            }),
                            span: sp,
                        })
                    }
                    kind => {
                        self.err_at(lb.start, "ranges only allowed for vector selectors");
                        Ok(Expr { kind, span: sp })
                    }
                }
            }
            Tok::Colon => {
                self.bump();
                let step = if *self.peek_kind() == Tok::RightBracket {
                    None
                } else {
                    Some(self.positive_duration(
                        "subquery selector",
                        "number, duration, step(), range(), or \"]\"",
                    )?)
                };
                let rb = self.expect(Tok::RightBracket, "subquery selector", "\"]\"")?;
                let start = e.span.start;
                Ok(Expr {
                    kind: ExprKind::Subquery(Subquery {
                        expr: Box::new(e),
                        range,
                        step,
                        offset: None,
                        at: None,
                    }),
                    span: span(start, rb.end),
                })
            }
            _ => self.unexpected("subquery or range", "\":\" or \"]\""),
        }
    }

    /// A range or step: a duration expression that, when a literal, must be positive.
    fn positive_duration(&mut self, context: &str, expected: &str) -> PResult<Duration> {
        let d = self.duration_expr(0, context, expected)?;
        if let ExprKind::Number(n) = &d.kind {
            if n.value <= 0.0 {
                self.err_at(d.span.start, "duration must be greater than 0");
            }
        }
        Ok(to_duration(d))
    }

    /// A duration expression (inside brackets or parentheses after `offset`).
    fn duration_expr(&mut self, min_prec: u8, context: &str, expected: &str) -> PResult<Expr> {
        let saved = self.depth;
        let r = self
            .enter()
            .and_then(|_| self.duration_expr_inner(min_prec, context, expected));
        self.depth = saved;
        r
    }

    fn duration_expr_inner(
        &mut self,
        min_prec: u8,
        context: &str,
        expected: &str,
    ) -> PResult<Expr> {
        let mut lhs = self.duration_unary(context, expected)?;
        loop {
            let t = self.peek().clone();
            let op = match t.kind {
                Tok::Add => BinaryOp::Add,
                Tok::Sub => BinaryOp::Sub,
                Tok::Mul => BinaryOp::Mul,
                Tok::Div => BinaryOp::Div,
                Tok::Mod => BinaryOp::Mod,
                Tok::Pow => BinaryOp::Pow,
                _ => break,
            };
            let prec = op.precedence();
            if prec < min_prec {
                break;
            }
            self.bump();
            self.enter()?;
            let next_min = if op.is_right_assoc() { prec } else { prec + 1 };
            let rhs = self.duration_expr(next_min, context, expected)?;
            let sp = span(lhs.span.start, rhs.span.end);
            let zero_rhs = matches!(&rhs.kind, ExprKind::Number(n) if n.value == 0.0);
            if zero_rhs && matches!(op, BinaryOp::Div | BinaryOp::Mod) {
                self.err_at(
                    t.start,
                    if op == BinaryOp::Div {
                        "division by zero"
                    } else {
                        "modulo by zero"
                    },
                );
            }
            lhs = Expr {
                kind: ExprKind::Binary(BinaryExpr {
                    op,
                    lhs: Box::new(lhs),
                    rhs: Box::new(rhs),
                    return_bool: false,
                    matching: None,
                }),
                span: sp,
            };
        }
        Ok(lhs)
    }

    fn duration_unary(&mut self, context: &str, expected: &str) -> PResult<Expr> {
        let t = self.peek().clone();
        let neg = match t.kind {
            Tok::Add => false,
            Tok::Sub => true,
            _ => return self.duration_atom(context, expected),
        };
        self.bump();
        let operand = self.duration_expr(POW_PREC, context, expected)?;
        Ok(self.apply_sign(neg, t.start, operand))
    }

    /// Applies a unary sign to a duration expression: folded into literals (with the range
    /// check), `-` kept on anything else, `+` dropped.
    fn apply_sign(&mut self, neg: bool, start: usize, mut operand: Expr) -> Expr {
        let sp = span(start, operand.span.end);
        match operand.take_kind() {
            ExprKind::Number(mut n) => {
                if neg {
                    n.value = -n.value;
                }
                if literals::duration_out_of_range(n.value) {
                    self.err_at(start, "duration out of range");
                    n.value = 0.0;
                }
                Expr {
                    kind: ExprKind::Number(n),
                    span: sp,
                }
            }
            kind if neg => Expr {
                kind: ExprKind::Unary(
                    UnaryOp::Neg,
                    Box::new(Expr {
                        kind,
                        span: operand.span,
                    }),
                ),
                span: sp,
            },
            kind => Expr {
                kind,
                span: operand.span,
            },
        }
    }

    /// Literals, `step()`, `range()`, `min_of(a, b)`, `max_of(a, b)`, `( … )`.
    fn duration_atom(&mut self, context: &str, expected: &str) -> PResult<Expr> {
        let t = self.peek().clone();
        match t.kind {
            Tok::Number | Tok::Duration => {
                self.bump();
                let (value, duration) = if t.kind == Tok::Number {
                    match literals::parse_number(self.text(&t)) {
                        Ok(v) => (v, false),
                        Err(m) => {
                            self.err_at(t.start, m);
                            (0.0, false)
                        }
                    }
                } else {
                    (self.duration_token_secs(&t), true)
                };
                let value = if literals::duration_out_of_range(value) || value.is_nan() {
                    self.err_at(t.start, "duration out of range");
                    0.0
                } else {
                    value
                };
                Ok(Expr {
                    kind: ExprKind::Number(NumberLiteral { value, duration }),
                    span: span(t.start, t.end),
                })
            }
            Tok::Step | Tok::Range => {
                self.bump();
                self.expect(Tok::LeftParen, context, expected)?;
                let close = self.expect(Tok::RightParen, context, expected)?;
                let func = if t.kind == Tok::Step { "step" } else { "range" };
                Ok(Expr {
                    kind: ExprKind::Call(Call {
                        func: func.into(),
                        args: Vec::new(),
                    }),
                    span: span(t.start, close.end),
                })
            }
            Tok::MaxOf | Tok::MinOf => {
                self.bump();
                self.expect(Tok::LeftParen, context, expected)?;
                let a = self.duration_expr(0, context, expected)?;
                self.expect(Tok::Comma, context, "\",\"")?;
                let b = self.duration_expr(0, context, expected)?;
                let close = self.expect(Tok::RightParen, context, "\")\"")?;
                let func = if t.kind == Tok::MaxOf {
                    "max_of"
                } else {
                    "min_of"
                };
                Ok(Expr {
                    kind: ExprKind::Call(Call {
                        func: func.into(),
                        args: vec![a, b],
                    }),
                    span: span(t.start, close.end),
                })
            }
            Tok::LeftParen => {
                self.bump();
                let inner = self.duration_expr(0, context, expected)?;
                let close = self.expect(Tok::RightParen, context, "\")\"")?;
                Ok(Expr {
                    kind: ExprKind::Paren(Box::new(inner)),
                    span: span(t.start, close.end),
                })
            }
            _ => self.unexpected(context, expected),
        }
    }

    /// `offset d`: a signed literal, `step()`, `range()`, `min_of`/`max_of`, or a
    /// parenthesised duration expression.
    fn offset(&mut self, mut e: Expr) -> PResult<Expr> {
        self.bump();
        const CTX: &str = "offset";
        const EXP: &str = "number, duration, step(), or range()";
        let t = self.peek().clone();
        let sign = match t.kind {
            Tok::Add => Some(false),
            Tok::Sub => Some(true),
            _ => None,
        };
        if sign.is_some() {
            self.bump();
        }
        let atom_tok = self.peek().clone();
        let atom = match atom_tok.kind {
            Tok::Number | Tok::Duration => {
                self.bump();
                let mut value = if atom_tok.kind == Tok::Number {
                    match literals::parse_number(self.text(&atom_tok)) {
                        Ok(v) => v,
                        Err(m) => {
                            self.err_at(atom_tok.start, m);
                            0.0
                        }
                    }
                } else {
                    self.duration_token_secs(&atom_tok)
                };
                if sign == Some(true) {
                    value = -value;
                }
                if literals::duration_out_of_range(value) || value.is_nan() {
                    self.err_at(t.start, "duration out of range");
                    value = 0.0;
                }
                Expr {
                    kind: ExprKind::Number(NumberLiteral {
                        value,
                        duration: atom_tok.kind == Tok::Duration,
                    }),
                    span: span(t.start, atom_tok.end),
                }
            }
            Tok::Step | Tok::Range | Tok::MaxOf | Tok::MinOf | Tok::LeftParen => {
                let a = self.duration_atom(CTX, EXP)?;
                match sign {
                    Some(neg) => self.apply_sign(neg, t.start, a),
                    None => a,
                }
            }
            _ => return self.unexpected(CTX, EXP),
        };
        let end = atom.span.end;
        let d = to_duration(atom);
        let target = match &mut e.kind {
            ExprKind::VectorSelector(vs) => Some(&mut vs.offset),
            ExprKind::MatrixSelector(ms) => Some(&mut ms.selector.offset),
            ExprKind::Subquery(sq) => Some(&mut sq.offset),
            _ => None,
        };
        match target {
            Some(slot) if slot.is_some() => {
                self.err_at(e.span.start, "offset may not be set multiple times");
            }
            Some(slot) => {
                *slot = Some(d);
                e.span.end = end;
            }
            None => self.err_at(
                e.span.start,
                "offset modifier must be preceded by an instant vector selector or range vector selector or a subquery",
            ),
        }
        Ok(e)
    }

    /// `@ t`, `@ start()`, `@ end()`.
    fn at(&mut self, mut e: Expr) -> PResult<Expr> {
        self.bump();
        let t = self.peek().clone();
        let (at, end) = match t.kind {
            Tok::Start | Tok::End => {
                self.bump();
                self.expect(Tok::LeftParen, "@", "timestamp")?;
                let close = self.expect(Tok::RightParen, "@", "timestamp")?;
                let at = if t.kind == Tok::Start {
                    AtModifier::Start
                } else {
                    AtModifier::End
                };
                (at, close.end)
            }
            _ => {
                let neg = match t.kind {
                    Tok::Add => {
                        self.bump();
                        false
                    }
                    Tok::Sub => {
                        self.bump();
                        true
                    }
                    _ => false,
                };
                let n = self.peek().clone();
                let mut v = match n.kind {
                    Tok::Number => {
                        self.bump();
                        match literals::parse_number(self.text(&n)) {
                            Ok(v) => v,
                            Err(m) => {
                                self.err_at(n.start, m);
                                0.0
                            }
                        }
                    }
                    Tok::Duration => {
                        self.bump();
                        self.duration_token_secs(&n)
                    }
                    _ => return self.unexpected("@", "timestamp"),
                };
                if neg {
                    v = -v;
                }
                if !v.is_finite() || v >= i64::MAX as f64 || v <= i64::MIN as f64 {
                    self.err_at(
                        e.span.start,
                        format!(
                            "timestamp out of bounds for @ modifier: {}",
                            crate::go_format::format_float_fixed(v, 6)
                        ),
                    );
                }
                (AtModifier::Timestamp((v * 1000.0).round() as i64), n.end)
            }
        };
        let target = match &mut e.kind {
            ExprKind::VectorSelector(vs) => Some(&mut vs.at),
            ExprKind::MatrixSelector(ms) => Some(&mut ms.selector.at),
            ExprKind::Subquery(sq) => Some(&mut sq.at),
            _ => None,
        };
        match target {
            Some(slot) if slot.is_some() => {
                self.err_at(e.span.start, "@ <timestamp> may not be set multiple times");
            }
            Some(slot) => {
                *slot = Some(at);
                e.span.end = end;
            }
            None => self.err_at(
                e.span.start,
                "@ modifier must be preceded by an instant vector selector or range vector selector or a subquery",
            ),
        }
        Ok(e)
    }
}

/// A parsed duration expression as the AST holds it: a literal becomes milliseconds.
fn to_duration(e: Expr) -> Duration {
    match e.kind {
        ExprKind::Number(n) => Duration::Millis(literals::seconds_to_ms(n.value)),
        _ => Duration::Expr(Box::new(e)),
    }
}
