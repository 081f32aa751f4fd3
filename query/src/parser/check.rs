//! Prometheus' `checkAST`: type checks after a successful parse, in the same order, with the
//! same messages and positions. Also normalises vector matching as Prometheus does (none
//! between a scalar and anything; many-to-many for set operators).

use super::expr::Parser;
use super::lexer::{go_quote, is_space};
use crate::ast::*;
use crate::functions_meta;

/// `histogram_quantiles` takes at most this many arguments.
const HISTOGRAM_QUANTILES_MAX_ARGS: usize = 12;

/// Go's `ValueType.String()` (used by the subquery message).
fn go_value_type(t: ValueType) -> &'static str {
    match t {
        ValueType::Scalar => "scalar",
        ValueType::String => "string",
        ValueType::Vector => "vector",
        ValueType::Matrix => "matrix",
    }
}

impl Parser<'_> {
    /// Type-checks `e`, recording errors; returns its type.
    pub(crate) fn check_ast(&mut self, e: &mut Expr) -> ValueType {
        crate::stack::grow(|| self.check_node(e))
    }

    fn check_node(&mut self, e: &mut Expr) -> ValueType {
        let start = e.span.start;
        match &mut e.kind {
            ExprKind::Number(_) => ValueType::Scalar,
            ExprKind::String(_) => ValueType::String,
            ExprKind::Paren(inner) | ExprKind::StepInvariant(inner) => self.check_ast(inner),
            ExprKind::Aggregate(a) => {
                self.expect_type(&mut a.expr, ValueType::Vector, "aggregation expression");
                if let Some(p) = a.param.as_mut() {
                    match a.op {
                        AggregateOp::CountValues => {
                            self.expect_type(p, ValueType::String, "aggregation parameter")
                        }
                        _ => self.expect_type(p, ValueType::Scalar, "aggregation parameter"),
                    }
                }
                ValueType::Vector
            }
            ExprKind::Binary(b) => {
                let lt = self.check_ast(&mut b.lhs);
                let rt = self.check_ast(&mut b.rhs);
                let op_pos = self.op_position(b.lhs.span.end);
                if b.return_bool && !b.op.is_comparison() {
                    self.err_at(
                        op_pos,
                        "bool modifier can only be used on comparison operators",
                    );
                }
                if b.op.is_comparison()
                    && !b.return_bool
                    && lt == ValueType::Scalar
                    && rt == ValueType::Scalar
                {
                    self.err_at(op_pos, "comparisons between scalars must use BOOL modifier");
                }
                if let Some(vm) = b.matching.as_mut() {
                    if b.op.is_set() && vm.card == Cardinality::OneToOne {
                        vm.card = Cardinality::ManyToMany;
                    }
                    if vm.on {
                        if let Some(l) = vm.labels.iter().find(|l| vm.include.contains(l)) {
                            let msg = format!(
                                "label {} must not occur in ON and GROUP clause at once",
                                go_quote(l)
                            );
                            self.err_at(op_pos, msg);
                        }
                    }
                }
                let ok = |t| t == ValueType::Scalar || t == ValueType::Vector;
                if !ok(lt) {
                    self.err_at(
                        b.lhs.span.start,
                        "binary expression must contain only scalar and instant vector types",
                    );
                }
                if !ok(rt) {
                    self.err_at(
                        b.rhs.span.start,
                        "binary expression must contain only scalar and instant vector types",
                    );
                }
                if lt != ValueType::Vector || rt != ValueType::Vector {
                    if let Some(vm) = b.matching.take() {
                        if !vm.labels.is_empty() {
                            self.err_at(
                                start,
                                "vector matching only allowed between instant vectors",
                            );
                        }
                    }
                } else if b.op.is_set() {
                    if let Some(vm) = &b.matching {
                        if matches!(vm.card, Cardinality::OneToMany | Cardinality::ManyToOne) {
                            self.err_at(
                                start,
                                format!(
                                    "no grouping allowed for {} operation",
                                    go_quote(b.op.as_str())
                                ),
                            );
                        }
                        if vm.card != Cardinality::ManyToMany {
                            self.err_at(start, "set operations must always be many-to-many");
                        }
                    }
                }
                if (lt == ValueType::Scalar || rt == ValueType::Scalar) && b.op.is_set() {
                    self.err_at(
                        start,
                        format!(
                            "set operator {} not allowed in binary scalar expression",
                            go_quote(b.op.as_str())
                        ),
                    );
                }
                if lt == ValueType::Scalar && rt == ValueType::Scalar {
                    ValueType::Scalar
                } else {
                    ValueType::Vector
                }
            }
            ExprKind::Call(c) => {
                let Some(sig) = functions_meta::lookup(&c.func) else {
                    return ValueType::Vector;
                };
                let n = c.args.len();
                let nargs = sig.args.len();
                if !sig.variadic && sig.optional == 0 {
                    if n != nargs {
                        self.err_at(
                            start,
                            format!(
                                "expected {nargs} argument(s) in call to {}, got {n}",
                                go_quote(sig.name)
                            ),
                        );
                    }
                } else {
                    let min = nargs - sig.optional.min(nargs);
                    let max = if sig.name == "histogram_quantiles" {
                        Some(HISTOGRAM_QUANTILES_MAX_ARGS)
                    } else if sig.variadic {
                        None
                    } else {
                        Some(nargs)
                    };
                    if n < min {
                        self.err_at(
                            start,
                            format!(
                                "expected at least {min} argument(s) in call to {}, got {n}",
                                go_quote(sig.name)
                            ),
                        );
                    } else if let Some(max) = max.filter(|&m| n > m) {
                        self.err_at(
                            start,
                            format!(
                                "expected at most {max} argument(s) in call to {}, got {n}",
                                go_quote(sig.name)
                            ),
                        );
                    }
                }
                if sig.name == "info" && n > 1 {
                    self.check_info_arg(&c.args[1], start);
                }
                for (i, arg) in c.args.iter_mut().enumerate() {
                    let idx = if i >= nargs {
                        if !sig.variadic || nargs == 0 {
                            break;
                        }
                        nargs - 1
                    } else {
                        i
                    };
                    // info()'s label selector may match the empty string.
                    let t = match &arg.kind {
                        ExprKind::VectorSelector(vs)
                            if sig.name == "info" && i == 1 && vs.name.is_none() =>
                        {
                            ValueType::Vector
                        }
                        _ => self.check_ast(arg),
                    };
                    if t != sig.args[idx] {
                        let msg = format!(
                            "expected type {} in call to function {}, got {}",
                            sig.args[idx],
                            go_quote(sig.name),
                            t
                        );
                        self.err_at(arg.span.start, msg);
                    }
                }
                sig.ret
            }
            ExprKind::Unary(_, inner) => {
                let t = self.check_ast(inner);
                if t != ValueType::Scalar && t != ValueType::Vector {
                    self.err_at(
                        start,
                        format!(
                            "unary expression only allowed on expressions of type scalar or instant vector, got {}",
                            go_quote(&t.to_string())
                        ),
                    );
                }
                t
            }
            ExprKind::Subquery(sq) => {
                let t = self.check_ast(&mut sq.expr);
                if t != ValueType::Vector {
                    self.err_at(
                        start,
                        format!(
                            "subquery is only allowed on instant vector, got {} instead",
                            go_value_type(t)
                        ),
                    );
                }
                ValueType::Matrix
            }
            ExprKind::MatrixSelector(ms) => {
                self.check_selector(&ms.selector, start);
                ValueType::Matrix
            }
            ExprKind::VectorSelector(vs) => {
                self.check_selector(vs, start);
                ValueType::Vector
            }
        }
    }

    fn expect_type(&mut self, e: &mut Expr, want: ValueType, context: &str) {
        let t = self.check_ast(e);
        if t != want {
            let msg = format!("expected type {want} in {context}, got {t}");
            self.err_at(e.span.start, msg);
        }
    }

    fn check_selector(&mut self, vs: &VectorSelector, start: usize) {
        if let Some(name) = &vs.name {
            let n = vs.matchers.len().saturating_sub(1);
            if let Some(m) = vs.matchers[..n].iter().find(|m| m.name == "__name__") {
                let msg = format!(
                    "metric name must not be set twice: {} or {}",
                    go_quote(name),
                    go_quote(&m.value)
                );
                self.err_at(start, msg);
            }
            return;
        }
        if !vs.matchers.iter().any(|m| !m.matches_empty()) {
            self.err_at(
                start,
                "vector selector must contain at least one non-empty matcher",
            );
        }
    }

    /// `info(v, {labels…})`: the second argument must be a plain label selector.
    fn check_info_arg(&mut self, arg: &Expr, call_start: usize) {
        let t = arg.value_type();
        if t != ValueType::Vector {
            let msg = format!(
                "expected type {} in call to function \"info\", got {t}",
                ValueType::Vector
            );
            self.err_at(call_start, msg);
        }
        match &arg.kind {
            ExprKind::VectorSelector(vs) if vs.name.is_some() => self.err_at(
                arg.span.start,
                "expected label selectors only, got vector selector instead",
            ),
            ExprKind::VectorSelector(_) => {}
            _ => self.err_at(arg.span.start, "expected label selectors only"),
        }
    }

    /// The first non-space byte after `from` (where a binary operator starts).
    fn op_position(&self, from: usize) -> usize {
        let bytes = self.input.as_bytes();
        let mut p = from;
        while p < bytes.len() && is_space(bytes[p] as char) {
            p += 1;
        }
        p
    }
}
