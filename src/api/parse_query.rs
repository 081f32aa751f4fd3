//! `GET|POST /api/v1/parse_query`: the expression's syntax tree as JSON, in the shape
//! Prometheus 3.0 answers it (`web/api/v1/translate_ast.go`), for the query page's tree view.
//!
//! Each node is an object with a `type` (`aggregation`, `binaryExpr`, `call`,
//! `matrixSelector`, `subquery`, `numberLiteral`, `parenExpr`, `stringLiteral`, `unaryExpr`,
//! `vectorSelector`) and that node's fields; durations and offsets are milliseconds, `@`
//! times milliseconds or `null`, keys in Go's (sorted) order. As in Prometheus, a binary
//! expression between two instant vectors always carries its `matching` (one-to-one by
//! default, many-to-many for set operators) and one with a scalar side carries `null`.

use std::fmt::Write as _;

use inferdb_query::ast::{
    AtModifier, BinaryOp, Cardinality, Duration, Expr, ExprKind, UnaryOp, ValueType, VectorSelector,
};
use inferdb_query::go_format::{format_float, FloatFormat};

use super::error::ApiError;
use super::json::{push_str, push_str_array};
use super::params::Params;
use super::router::success;

/// Handles GET and POST `/api/v1/parse_query`.
pub(crate) async fn handle(params: Params) -> Result<axum::response::Response, ApiError> {
    let expr = inferdb_query::parser::parse(params.get("query").unwrap_or(""))
        .map_err(|e| ApiError::invalid_param("query", e))?;
    Ok(success(&translate(&expr), &[], &[]))
}

/// The JSON tree of `e` (Prometheus' `translateAST`), written straight as text: a chain of
/// thousands of binary operators is as deep as it is long, so each step runs through
/// `query::stack::grow` and no intermediate tree is built (or dropped) recursively.
pub fn translate(e: &Expr) -> String {
    let mut out = String::with_capacity(256);
    write_node(&mut out, e);
    out
}

fn write_node(out: &mut String, e: &Expr) {
    inferdb_query::stack::grow(|| write_kind(out, e));
}

/// `"key":` (keys are written in Go's sorted order by the callers).
fn key(out: &mut String, k: &str) {
    if !out.ends_with('{') {
        out.push(',');
    }
    push_str(out, k);
    out.push(':');
}

fn write_kind(out: &mut String, e: &Expr) {
    out.push('{');
    match &e.kind {
        ExprKind::Aggregate(a) => {
            key(out, "expr");
            write_node(out, &a.expr);
            key(out, "grouping");
            push_str_array(out, &a.grouping);
            key(out, "op");
            push_str(out, a.op.as_str());
            key(out, "param");
            match &a.param {
                Some(p) => write_node(out, p),
                None => out.push_str("null"),
            }
            key(out, "type");
            push_str(out, "aggregation");
            key(out, "without");
            out.push_str(if a.without { "true" } else { "false" });
        }
        ExprKind::Binary(b) => {
            key(out, "bool");
            out.push_str(if b.return_bool { "true" } else { "false" });
            key(out, "lhs");
            write_node(out, &b.lhs);
            key(out, "matching");
            write_matching(out, b);
            key(out, "op");
            push_str(out, b.op.as_str());
            key(out, "rhs");
            write_node(out, &b.rhs);
            key(out, "type");
            push_str(out, "binaryExpr");
        }
        ExprKind::Call(c) => {
            key(out, "args");
            out.push('[');
            for (i, a) in c.args.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_node(out, a);
            }
            out.push(']');
            let sig = inferdb_query::functions_meta::lookup(&c.func);
            let (arg_types, variadic, ret): (Vec<&str>, i64, &str) = match sig {
                Some(s) => (
                    s.args.iter().map(|t| type_name(*t)).collect(),
                    if s.variadic { -1 } else { s.optional as i64 },
                    type_name(s.ret),
                ),
                None => (vec![], 0, type_name(e.value_type())),
            };
            key(out, "func");
            out.push('{');
            key(out, "argTypes");
            push_str_array(out, &arg_types);
            key(out, "name");
            push_str(out, &c.func);
            key(out, "returnType");
            push_str(out, ret);
            key(out, "variadic");
            let _ = write!(out, "{variadic}");
            out.push('}');
            key(out, "type");
            push_str(out, "call");
        }
        ExprKind::MatrixSelector(m) => write_selector(
            out,
            "matrixSelector",
            &m.selector,
            Some(duration_ms(&m.range)),
        ),
        ExprKind::Subquery(s) => {
            key(out, "expr");
            write_node(out, &s.expr);
            key(out, "offset");
            let _ = write!(out, "{}", s.offset.as_ref().map(duration_ms).unwrap_or(0));
            key(out, "range");
            let _ = write!(out, "{}", duration_ms(&s.range));
            key(out, "startOrEnd");
            write_start_or_end(out, &s.at);
            key(out, "step");
            let _ = write!(out, "{}", s.step.as_ref().map(duration_ms).unwrap_or(0));
            key(out, "timestamp");
            write_timestamp(out, &s.at);
            key(out, "type");
            push_str(out, "subquery");
        }
        ExprKind::Number(n) => {
            key(out, "type");
            push_str(out, "numberLiteral");
            key(out, "val");
            push_str(out, &format_float(n.value, FloatFormat::F));
        }
        ExprKind::Paren(inner) => {
            key(out, "expr");
            write_node(out, inner);
            key(out, "type");
            push_str(out, "parenExpr");
        }
        // the evaluator's marker, never parsed: the tree shows what it wraps
        ExprKind::StepInvariant(inner) => {
            out.pop();
            write_node(out, inner);
            return;
        }
        ExprKind::String(s) => {
            key(out, "type");
            push_str(out, "stringLiteral");
            key(out, "val");
            push_str(out, s);
        }
        ExprKind::Unary(op, inner) => {
            key(out, "expr");
            write_node(out, inner);
            key(out, "op");
            push_str(out, if *op == UnaryOp::Neg { "-" } else { "+" });
            key(out, "type");
            push_str(out, "unaryExpr");
        }
        ExprKind::VectorSelector(v) => write_selector(out, "vectorSelector", v, None),
    }
    out.push('}');
}

/// As Prometheus' parser sets it: between two instant vectors always (one-to-one by
/// default, many-to-many for set operators), `null` when a side is a scalar.
fn write_matching(out: &mut String, b: &inferdb_query::ast::BinaryExpr) {
    if b.lhs.value_type() != ValueType::Vector || b.rhs.value_type() != ValueType::Vector {
        out.push_str("null");
        return;
    }
    let (card, labels, on, include): (Cardinality, &[String], bool, &[String]) = match &b.matching {
        Some(m) => (m.card, &m.labels, m.on, &m.include),
        None if is_set(b.op) => (Cardinality::ManyToMany, &[], false, &[]),
        None => (Cardinality::OneToOne, &[], false, &[]),
    };
    out.push('{');
    key(out, "card");
    push_str(out, card_name(card));
    key(out, "include");
    push_str_array(out, include);
    key(out, "labels");
    push_str_array(out, labels);
    key(out, "on");
    out.push_str(if on { "true" } else { "false" });
    out.push('}');
}

fn write_selector(out: &mut String, kind: &str, v: &VectorSelector, range: Option<i64>) {
    key(out, "matchers");
    out.push('[');
    for (i, m) in v.matchers.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push('{');
        key(out, "name");
        push_str(out, &m.name);
        key(out, "type");
        push_str(out, &m.op.to_string());
        key(out, "value");
        push_str(out, &m.value);
        out.push('}');
    }
    out.push(']');
    key(out, "name");
    push_str(out, v.name.as_deref().unwrap_or(""));
    key(out, "offset");
    let _ = write!(out, "{}", v.offset.as_ref().map(duration_ms).unwrap_or(0));
    if let Some(r) = range {
        key(out, "range");
        let _ = write!(out, "{r}");
    }
    key(out, "startOrEnd");
    write_start_or_end(out, &v.at);
    key(out, "timestamp");
    write_timestamp(out, &v.at);
    key(out, "type");
    push_str(out, kind);
}

fn write_timestamp(out: &mut String, at: &Option<AtModifier>) {
    match at {
        Some(AtModifier::Timestamp(ms)) => {
            let _ = write!(out, "{ms}");
        }
        _ => out.push_str("null"),
    }
}

fn write_start_or_end(out: &mut String, at: &Option<AtModifier>) {
    match at {
        Some(AtModifier::Start) => push_str(out, "start"),
        Some(AtModifier::End) => push_str(out, "end"),
        _ => out.push_str("null"),
    }
}

/// Milliseconds of a duration; an expression (`[5m * 2]`) is folded when it is constant,
/// and is 0 when it needs the query's step or range (Prometheus reports only the literal
/// duration here).
fn duration_ms(d: &Duration) -> i64 {
    match d {
        Duration::Millis(ms) => *ms,
        Duration::Expr(e) => constant_seconds(e)
            .filter(|s| s.is_finite())
            .map(|s| (s * 1000.0).round() as i64)
            .unwrap_or(0),
    }
}

fn constant_seconds(e: &Expr) -> Option<f64> {
    match &e.kind {
        ExprKind::Number(n) => Some(n.value),
        ExprKind::Paren(e) | ExprKind::StepInvariant(e) => constant_seconds(e),
        ExprKind::Unary(UnaryOp::Neg, e) => constant_seconds(e).map(|v| -v),
        ExprKind::Unary(UnaryOp::Pos, e) => constant_seconds(e),
        ExprKind::Binary(b) => {
            let (l, r) = (constant_seconds(&b.lhs)?, constant_seconds(&b.rhs)?);
            Some(match b.op {
                BinaryOp::Add => l + r,
                BinaryOp::Sub => l - r,
                BinaryOp::Mul => l * r,
                BinaryOp::Div => l / r,
                BinaryOp::Mod => l % r,
                BinaryOp::Pow => l.powf(r),
                _ => return None,
            })
        }
        _ => None,
    }
}

fn is_set(op: BinaryOp) -> bool {
    op.is_set()
}

fn card_name(c: Cardinality) -> &'static str {
    match c {
        Cardinality::OneToOne => "one-to-one",
        Cardinality::ManyToOne => "many-to-one",
        Cardinality::OneToMany => "one-to-many",
        Cardinality::ManyToMany => "many-to-many",
    }
}

/// Go's `parser.ValueType` strings.
fn type_name(t: ValueType) -> &'static str {
    match t {
        ValueType::Scalar => "scalar",
        ValueType::String => "string",
        ValueType::Vector => "vector",
        ValueType::Matrix => "matrix",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use serde_json::{json, Value};

    fn tree(q: &str) -> Value {
        let text = translate(&inferdb_query::parser::parse(q).unwrap());
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
    }

    #[test]
    fn selectors_aggregations_and_calls() {
        let t = tree(
            r#"sum by (model_name) (rate(vllm:generation_tokens_total{job=~"v.*"}[1m] offset 5m))"#,
        );
        assert_eq!(
            t.to_string(),
            concat!(
                r#"{"expr":{"args":[{"matchers":[{"name":"job","type":"=~","value":"v.*"},"#,
                r#"{"name":"__name__","type":"=","value":"vllm:generation_tokens_total"}],"#,
                r#""name":"vllm:generation_tokens_total","offset":300000,"range":60000,"startOrEnd":null,"#,
                r#""timestamp":null,"type":"matrixSelector"}],"#,
                r#""func":{"argTypes":["matrix"],"name":"rate","returnType":"vector","variadic":0},"type":"call"},"#,
                r#""grouping":["model_name"],"op":"sum","param":null,"type":"aggregation","without":false}"#
            )
        );
    }

    #[test]
    fn binary_matching_as_prometheus_sets_it() {
        // two vectors: one-to-one by default
        let t = tree("a / b");
        assert_eq!(
            t["matching"],
            json!({"card": "one-to-one", "labels": [], "on": false, "include": []})
        );
        // set operators: many-to-many
        assert_eq!(tree("a or b")["matching"]["card"], "many-to-many");
        // written matching
        let t = tree("a * on (x) group_left (y) b");
        assert_eq!(
            t["matching"],
            json!({"card": "many-to-one", "labels": ["x"], "on": true, "include": ["y"]})
        );
        // a scalar side: no matching; bool kept
        let t = tree("a > bool 1");
        assert_eq!(t["matching"], Value::Null);
        assert_eq!(t["bool"], true);
        assert_eq!(t["rhs"], json!({"type": "numberLiteral", "val": "1"}));
    }

    #[test]
    fn literals_subqueries_and_modifiers() {
        assert_eq!(tree("1e21")["val"], "1000000000000000000000");
        // a sign on a number literal is folded into it, as Go's parser does
        assert_eq!(
            tree("-Inf"),
            json!({"type": "numberLiteral", "val": "-Inf"})
        );
        assert_eq!(tree("-up")["type"], "unaryExpr");
        assert_eq!(tree(r#""x""#), json!({"type": "stringLiteral", "val": "x"}));
        let t = tree("max_over_time((up)[30m:1m] @ end())");
        let s = &t["args"][0];
        assert_eq!(s["type"], "subquery");
        assert_eq!(
            (s["range"].as_i64(), s["step"].as_i64()),
            (Some(1_800_000), Some(60_000))
        );
        assert_eq!(s["startOrEnd"], "end");
        assert_eq!(s["expr"]["type"], "parenExpr");
        let v = tree("up @ 100");
        assert_eq!(v["timestamp"], 100_000);
        assert_eq!(v["name"], "up");
        let f = tree(r#"label_join(up, "a", ",", "b", "c")"#);
        assert_eq!(f["func"]["variadic"], -1);
        assert_eq!(
            f["func"]["argTypes"],
            json!(["vector", "string", "string", "string"])
        );
        assert_eq!(tree("round(up)")["func"]["variadic"], 1);
        assert_eq!(tree("up[5m * 2]")["range"], 600_000);
    }

    #[test]
    fn a_long_chain_is_written_on_a_small_stack() {
        // as deep as it is long: 10,000 terms, on a 256 KB thread
        let q = vec!["up"; 10_000].join(" or ");
        let text = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(move || {
                let e = inferdb_query::parser::parse(&q).unwrap();
                translate(&e)
            })
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(text.matches(r#""type":"binaryExpr""#).count(), 9_999);
        assert_eq!(text.matches(r#""type":"vectorSelector""#).count(), 10_000);
        assert!(
            text.starts_with(r#"{"bool":false,"lhs":{"bool":false,"lhs":"#),
            "{}",
            &text[..80]
        );
    }
}
