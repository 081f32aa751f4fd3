//! `GET|POST /api/v1/parse_query`: the expression's syntax tree as JSON, in the shape
//! Prometheus 3.0 answers it (`web/api/v1/translate_ast.go`), for the query page's tree view.
//!
//! Each node is an object with a `type` (`aggregation`, `binaryExpr`, `call`,
//! `matrixSelector`, `subquery`, `numberLiteral`, `parenExpr`, `stringLiteral`, `unaryExpr`,
//! `vectorSelector`) and that node's fields; durations and offsets are milliseconds, `@`
//! times milliseconds or `null`, keys in Go's (sorted) order. As in Prometheus, a binary
//! expression between two instant vectors always carries its `matching` (one-to-one by
//! default, many-to-many for set operators) and one with a scalar side carries `null`.

use serde_json::{json, Value};

use inferdb_query::ast::{
    AtModifier, BinaryOp, Cardinality, Duration, Expr, ExprKind, UnaryOp, ValueType, VectorSelector,
};
use inferdb_query::go_format::{format_float, FloatFormat};
use inferdb_storage::Matcher;

use super::error::ApiError;
use super::params::Params;
use super::router::success;

/// Handles GET and POST `/api/v1/parse_query`.
pub(crate) async fn handle(params: Params) -> Result<axum::response::Response, ApiError> {
    let expr = inferdb_query::parser::parse(params.get("query").unwrap_or(""))
        .map_err(|e| ApiError::invalid_param("query", e))?;
    Ok(success(&translate(&expr).to_string(), &[], &[]))
}

/// The JSON tree of `e` (Prometheus' `translateAST`).
pub fn translate(e: &Expr) -> Value {
    match &e.kind {
        ExprKind::Aggregate(a) => json!({
            "type": "aggregation",
            "op": a.op.as_str(),
            "expr": translate(&a.expr),
            "param": a.param.as_deref().map(translate),
            "grouping": a.grouping,
            "without": a.without,
        }),
        ExprKind::Binary(b) => {
            let vectors =
                b.lhs.value_type() == ValueType::Vector && b.rhs.value_type() == ValueType::Vector;
            let matching = vectors.then(|| {
                let (card, labels, on, include) = match &b.matching {
                    Some(m) => (m.card, m.labels.clone(), m.on, m.include.clone()),
                    None if is_set(b.op) => (Cardinality::ManyToMany, vec![], false, vec![]),
                    None => (Cardinality::OneToOne, vec![], false, vec![]),
                };
                json!({"card": card_name(card), "labels": labels, "on": on, "include": include})
            });
            json!({
                "type": "binaryExpr",
                "op": b.op.as_str(),
                "lhs": translate(&b.lhs),
                "rhs": translate(&b.rhs),
                "matching": matching,
                "bool": b.return_bool,
            })
        }
        ExprKind::Call(c) => {
            let sig = inferdb_query::functions_meta::lookup(&c.func);
            let (arg_types, variadic, ret): (Vec<&str>, i64, &str) = match sig {
                Some(s) => (
                    s.args.iter().map(|t| type_name(*t)).collect(),
                    if s.variadic { -1 } else { s.optional as i64 },
                    type_name(s.ret),
                ),
                None => (vec![], 0, type_name(e.value_type())),
            };
            json!({
                "type": "call",
                "func": {"name": c.func, "argTypes": arg_types, "variadic": variadic, "returnType": ret},
                "args": c.args.iter().map(translate).collect::<Vec<_>>(),
            })
        }
        ExprKind::MatrixSelector(m) => {
            let mut v = selector("matrixSelector", &m.selector);
            v["range"] = json!(duration_ms(&m.range));
            v
        }
        ExprKind::Subquery(s) => json!({
            "type": "subquery",
            "expr": translate(&s.expr),
            "range": duration_ms(&s.range),
            "offset": s.offset.as_ref().map(duration_ms).unwrap_or(0),
            "step": s.step.as_ref().map(duration_ms).unwrap_or(0),
            "timestamp": timestamp(&s.at),
            "startOrEnd": start_or_end(&s.at),
        }),
        ExprKind::Number(n) => json!({
            "type": "numberLiteral",
            "val": format_float(n.value, FloatFormat::F),
        }),
        ExprKind::Paren(inner) => json!({"type": "parenExpr", "expr": translate(inner)}),
        // the evaluator's marker, never parsed: the tree shows what it wraps
        ExprKind::StepInvariant(inner) => translate(inner),
        ExprKind::String(s) => json!({"type": "stringLiteral", "val": s}),
        ExprKind::Unary(op, inner) => json!({
            "type": "unaryExpr",
            "op": if *op == UnaryOp::Neg { "-" } else { "+" },
            "expr": translate(inner),
        }),
        ExprKind::VectorSelector(v) => selector("vectorSelector", v),
    }
}

fn selector(kind: &str, v: &VectorSelector) -> Value {
    json!({
        "type": kind,
        "name": v.name.clone().unwrap_or_default(),
        "offset": v.offset.as_ref().map(duration_ms).unwrap_or(0),
        "matchers": v.matchers.iter().map(matcher).collect::<Vec<_>>(),
        "timestamp": timestamp(&v.at),
        "startOrEnd": start_or_end(&v.at),
    })
}

fn matcher(m: &Matcher) -> Value {
    json!({"name": m.name, "value": m.value, "type": m.op.to_string()})
}

fn timestamp(at: &Option<AtModifier>) -> Value {
    match at {
        Some(AtModifier::Timestamp(ms)) => json!(ms),
        _ => Value::Null,
    }
}

fn start_or_end(at: &Option<AtModifier>) -> Value {
    match at {
        Some(AtModifier::Start) => json!("start"),
        Some(AtModifier::End) => json!("end"),
        _ => Value::Null,
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

    fn tree(q: &str) -> Value {
        translate(&inferdb_query::parser::parse(q).unwrap())
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
}
