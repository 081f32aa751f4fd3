//! `Display` for the AST: valid PromQL that parses back to an equal tree.
//!
//! Parsed trees print back as written up to spacing and canonical forms (durations like
//! `1h30m`, strings double-quoted, `sum by (x) (…)`). Trees built by code get parentheses
//! where precedence requires them.

use std::fmt::{self, Display, Formatter, Write};

use inferdb_storage::{MatchOp, Matcher};

use crate::ast::*;
use crate::parser::go_quote;

impl Display for Expr {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write_expr(f, self)
    }
}

impl Display for Duration {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Duration::Millis(ms) => f.write_str(&format_duration_ms(*ms)),
            Duration::Expr(e) => write_expr(f, e),
        }
    }
}

/// A duration in milliseconds as Prometheus prints it (`1h30m`, `500ms`, `0s`, `-5m`).
pub fn format_duration_ms(ms: i64) -> String {
    if ms == 0 {
        return "0s".into();
    }
    let mut out = String::new();
    let mut rest = i128::from(ms);
    if rest < 0 {
        out.push('-');
        rest = -rest;
    }
    const UNITS: [(&str, i128, bool); 7] = [
        ("y", 365 * 86_400_000, true),
        ("w", 7 * 86_400_000, true),
        ("d", 86_400_000, false),
        ("h", 3_600_000, false),
        ("m", 60_000, false),
        ("s", 1000, false),
        ("ms", 1, false),
    ];
    for (unit, mult, exact) in UNITS {
        if exact && rest % mult != 0 {
            continue;
        }
        let v = rest / mult;
        if v > 0 {
            let _ = write!(out, "{v}{unit}");
            rest -= v * mult;
        }
    }
    out
}

/// A float as a PromQL literal that parses back to the same value.
pub fn format_number(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "Inf".into() } else { "-Inf".into() };
    }
    let a = v.abs();
    if v == v.trunc() && a < 1e15 {
        return format!("{}", v as i64);
    }
    if !(1e-4..1e21).contains(&a) {
        format!("{v:e}")
    } else {
        format!("{v}")
    }
}

fn format_number_literal(n: &NumberLiteral) -> String {
    if n.duration && n.value.is_finite() {
        let ms = (n.value * 1000.0).round();
        if (ms / 1000.0 - n.value).abs() <= f64::EPSILON * n.value.abs().max(1.0)
            && ms.abs() < 9.2e18
        {
            return format_duration_ms(ms as i64);
        }
    }
    format_number(n.value)
}

/// Whether a label name can be written bare in a grouping clause.
fn bare_grouping_label(l: &str) -> bool {
    is_legacy_name(l) && !matches!(l.to_ascii_lowercase().as_str(), "without" | "inf" | "nan")
}

/// `[a-zA-Z_][a-zA-Z0-9_]*`.
fn is_legacy_name(l: &str) -> bool {
    let mut cs = l.chars();
    matches!(cs.next(), Some(c) if c == '_' || c.is_ascii_alphabetic())
        && cs.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

fn write_labels(f: &mut Formatter<'_>, labels: &[String]) -> fmt::Result {
    f.write_char('(')?;
    for (i, l) in labels.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        if bare_grouping_label(l) {
            f.write_str(l)?;
        } else {
            f.write_str(&go_quote(l))?;
        }
    }
    f.write_char(')')
}

fn write_matcher(f: &mut Formatter<'_>, m: &Matcher) -> fmt::Result {
    if is_legacy_name(&m.name) {
        f.write_str(&m.name)?;
    } else {
        f.write_str(&go_quote(&m.name))?;
    }
    f.write_str(match m.op {
        MatchOp::Equal => "=",
        MatchOp::NotEqual => "!=",
        MatchOp::RegexMatch => "=~",
        MatchOp::RegexNoMatch => "!~",
    })?;
    f.write_str(&go_quote(&m.value))
}

/// The selector without its offset and `@`.
fn write_selector_body(f: &mut Formatter<'_>, vs: &VectorSelector) -> fmt::Result {
    let mut matchers: &[Matcher] = &vs.matchers;
    if let Some(name) = &vs.name {
        if let Some((last, rest)) = vs.matchers.split_last() {
            if last.name == "__name__" && last.op == MatchOp::Equal && &last.value == name {
                matchers = rest;
            }
        }
        f.write_str(name)?;
        if matchers.is_empty() {
            return Ok(());
        }
    }
    f.write_char('{')?;
    for (i, m) in matchers.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write_matcher(f, m)?;
    }
    f.write_char('}')
}

fn write_modifiers(
    f: &mut Formatter<'_>,
    offset: &Option<Duration>,
    at: &Option<AtModifier>,
) -> fmt::Result {
    if let Some(d) = offset {
        f.write_str(" offset ")?;
        match d {
            Duration::Millis(ms) => f.write_str(&format_duration_ms(*ms))?,
            Duration::Expr(e) => {
                if matches!(e.kind, ExprKind::Binary(_)) {
                    write!(f, "({e})")?;
                } else {
                    write_expr(f, e)?;
                }
            }
        }
    }
    if let Some(at) = at {
        f.write_str(" @ ")?;
        match at {
            AtModifier::Start => f.write_str("start()")?,
            AtModifier::End => f.write_str("end()")?,
            AtModifier::Timestamp(ms) => {
                let neg = *ms < 0;
                let a = i128::from(*ms).abs();
                if neg {
                    f.write_char('-')?;
                }
                if a % 1000 == 0 {
                    write!(f, "{}", a / 1000)?;
                } else {
                    write!(f, "{}.{:03}", a / 1000, a % 1000)?;
                }
            }
        }
    }
    Ok(())
}

fn is_negative_number(e: &Expr) -> bool {
    matches!(&e.kind, ExprKind::Number(n) if n.value.is_sign_negative() && !n.value.is_nan())
}

fn write_paren_if(f: &mut Formatter<'_>, e: &Expr, paren: bool) -> fmt::Result {
    if paren {
        f.write_char('(')?;
        write_expr(f, e)?;
        f.write_char(')')
    } else {
        write_expr(f, e)
    }
}

fn write_expr(f: &mut Formatter<'_>, e: &Expr) -> fmt::Result {
    crate::stack::grow(|| write_node(f, e))
}

fn write_node(f: &mut Formatter<'_>, e: &Expr) -> fmt::Result {
    match &e.kind {
        ExprKind::Number(n) => f.write_str(&format_number_literal(n)),
        ExprKind::String(s) => f.write_str(&go_quote(s)),
        ExprKind::VectorSelector(vs) => {
            write_selector_body(f, vs)?;
            write_modifiers(f, &vs.offset, &vs.at)
        }
        ExprKind::MatrixSelector(ms) => {
            write_selector_body(f, &ms.selector)?;
            write!(f, "[{}]", ms.range)?;
            write_modifiers(f, &ms.selector.offset, &ms.selector.at)
        }
        ExprKind::Subquery(sq) => {
            let paren = matches!(sq.expr.kind, ExprKind::Binary(_) | ExprKind::Unary(..))
                || is_negative_number(&sq.expr);
            write_paren_if(f, &sq.expr, paren)?;
            write!(f, "[{}:", sq.range)?;
            if let Some(step) = &sq.step {
                write!(f, "{step}")?;
            }
            f.write_char(']')?;
            write_modifiers(f, &sq.offset, &sq.at)
        }
        ExprKind::Paren(inner) => {
            f.write_char('(')?;
            write_expr(f, inner)?;
            f.write_char(')')
        }
        ExprKind::StepInvariant(inner) => write_expr(f, inner),
        ExprKind::Unary(op, inner) => {
            f.write_str(match op {
                UnaryOp::Neg => "-",
                UnaryOp::Pos => "+",
            })?;
            let paren = matches!(&inner.kind, ExprKind::Binary(b) if b.op != BinaryOp::Pow)
                || is_negative_number(inner);
            write_paren_if(f, inner, paren)
        }
        ExprKind::Binary(b) => {
            let p = b.op.precedence();
            let right = b.op.is_right_assoc();
            let lhs_paren = match &b.lhs.kind {
                ExprKind::Binary(l) => l.op.precedence() < p || (l.op.precedence() == p && right),
                ExprKind::Unary(..) => b.op == BinaryOp::Pow,
                _ => b.op == BinaryOp::Pow && is_negative_number(&b.lhs),
            };
            let rhs_paren = match &b.rhs.kind {
                ExprKind::Binary(r) => r.op.precedence() < p || (r.op.precedence() == p && !right),
                _ => false,
            };
            write_paren_if(f, &b.lhs, lhs_paren)?;
            write!(f, " {}", b.op.as_str())?;
            if b.return_bool {
                f.write_str(" bool")?;
            }
            if let Some(vm) = &b.matching {
                let default_set = b.op.is_set()
                    && vm.card == Cardinality::ManyToMany
                    && !vm.on
                    && vm.labels.is_empty();
                if !default_set {
                    f.write_str(if vm.on { " on" } else { " ignoring" })?;
                    write_labels(f, &vm.labels)?;
                    match vm.card {
                        Cardinality::ManyToOne => {
                            f.write_str(" group_left")?;
                            write_labels(f, &vm.include)?;
                        }
                        Cardinality::OneToMany => {
                            f.write_str(" group_right")?;
                            write_labels(f, &vm.include)?;
                        }
                        _ => {}
                    }
                }
            }
            f.write_char(' ')?;
            write_paren_if(f, &b.rhs, rhs_paren)
        }
        ExprKind::Aggregate(a) => {
            f.write_str(a.op.as_str())?;
            if a.without {
                f.write_str(" without ")?;
                write_labels(f, &a.grouping)?;
                f.write_char(' ')?;
            } else if !a.grouping.is_empty() {
                f.write_str(" by ")?;
                write_labels(f, &a.grouping)?;
                f.write_char(' ')?;
            }
            f.write_char('(')?;
            if let Some(p) = &a.param {
                write_expr(f, p)?;
                f.write_str(", ")?;
            }
            write_expr(f, &a.expr)?;
            f.write_char(')')
        }
        ExprKind::Call(c) => {
            f.write_str(&c.func)?;
            f.write_char('(')?;
            for (i, a) in c.args.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write_expr(f, a)?;
            }
            f.write_char(')')
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(format_duration_ms(5_400_000), "1h30m");
        assert_eq!(format_duration_ms(500), "500ms");
        assert_eq!(format_duration_ms(0), "0s");
        assert_eq!(format_duration_ms(-300_000), "-5m");
        assert_eq!(format_duration_ms(90 * 86_400_000), "90d");
        assert_eq!(format_duration_ms(14 * 86_400_000), "2w");
        assert_eq!(format_duration_ms(365 * 86_400_000), "1y");
    }

    #[test]
    fn numbers() {
        assert_eq!(format_number(1.0), "1");
        assert_eq!(format_number(-0.5), "-0.5");
        assert_eq!(format_number(1e300), "1e300");
        assert_eq!(format_number(1.5e-7), "1.5e-7");
        assert_eq!(format_number(f64::INFINITY), "Inf");
        assert_eq!(format_number(f64::NAN), "NaN");
    }
}
