//! Comparing Prometheus' and inferdb's answers to the same queries: result type, label sets,
//! timestamps, and values within 1e-9 relative (NaN equals NaN); plus the vLLM dashboard's
//! queries from `tests/fixtures`.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{secs, short, Client};

/// Two sample values (JSON strings) equal within 1e-9 relative (1e-12 absolute near zero);
/// NaN equals NaN, infinities must match exactly.
pub fn val_eq(a: &Value, b: &Value) -> bool {
    let (Some(a), Some(b)) = (a.as_str(), b.as_str()) else {
        return a == b;
    };
    if a == b {
        return true;
    }
    let (Ok(x), Ok(y)) = (a.parse::<f64>(), b.parse::<f64>()) else {
        return false;
    };
    if x.is_nan() && y.is_nan() {
        return true;
    }
    if x.is_infinite() || y.is_infinite() {
        return x == y;
    }
    let d = (x - y).abs();
    // 1e-9 relative; an absolute 1e-12 for results that should be zero but carry rounding
    // noise from a different summation order (e.g. deriv of a flat line)
    d <= 1e-9 * x.abs().max(y.abs()) || d <= 1e-12
}

/// Two `[time, "value"]` points equal.
pub fn point_eq(a: &Value, b: &Value) -> bool {
    match (a.as_array(), b.as_array()) {
        (Some(a), Some(b)) if a.len() == 2 && b.len() == 2 => {
            a[0].as_f64() == b[0].as_f64() && val_eq(&a[1], &b[1])
        }
        _ => false,
    }
}

fn series_eq(a: &Value, b: &Value) -> bool {
    if a["metric"] != b["metric"] {
        return false;
    }
    if a.get("value").is_some() || b.get("value").is_some() {
        return point_eq(&a["value"], &b["value"]);
    }
    match (a["values"].as_array(), b["values"].as_array()) {
        (Some(x), Some(y)) => x.len() == y.len() && x.iter().zip(y).all(|(p, q)| point_eq(p, q)),
        _ => a["values"] == b["values"],
    }
}

/// Whether Prometheus defines the order of an instant vector result.
fn ordered(q: &str) -> bool {
    let q = q.trim_start();
    q.starts_with("sort(") || q.starts_with("sort_desc(")
}

/// Compares two API answers (`a` from Prometheus, `b` from inferdb); `Err(reason)` on a
/// difference. Both refusing the query counts as equal (Prometheus 2 and 3 differ in status
/// codes and messages).
pub fn compare(
    query: &str,
    is_range: bool,
    a: &(u16, String),
    b: &(u16, String),
) -> Result<(), String> {
    let pa: Value = serde_json::from_str(&a.1).map_err(|e| format!("prometheus body: {e}"))?;
    let pb: Value = serde_json::from_str(&b.1).map_err(|e| format!("inferdb body: {e}"))?;
    if pa["status"] != pb["status"] {
        return Err("status differs".into());
    }
    if pa["status"] != "success" {
        return Ok(());
    }
    let (da, db) = (&pa["data"], &pb["data"]);
    if da["resultType"] != db["resultType"] {
        return Err("resultType differs".into());
    }
    let (ra, rb) = (&da["result"], &db["result"]);
    match (ra.as_array(), rb.as_array()) {
        (Some(x), Some(y)) if da["resultType"] == "vector" || da["resultType"] == "matrix" => {
            if x.len() != y.len() {
                return Err(format!("{} vs {} series", x.len(), y.len()));
            }
            if !is_range && ordered(query) {
                // order matters, but equal values may come in any order: compare values in order
                // and the label sets as sets
                for (p, q) in x.iter().zip(y) {
                    if !val_eq(&p["value"][1], &q["value"][1]) {
                        return Err("order or values differ".into());
                    }
                }
            }
            let key = |s: &Value| s["metric"].to_string();
            let mx: BTreeMap<String, &Value> = x.iter().map(|s| (key(s), s)).collect();
            let my: BTreeMap<String, &Value> = y.iter().map(|s| (key(s), s)).collect();
            if mx.len() != x.len() || my.len() != y.len() {
                return Err("duplicate label sets".into());
            }
            for (k, s) in &mx {
                match my.get(k) {
                    None => return Err(format!("series {k} missing in inferdb")),
                    Some(t) if !series_eq(s, t) => return Err(format!("series {k} differs")),
                    _ => {}
                }
            }
            Ok(())
        }
        _ => {
            if point_eq(ra, rb) || ra == rb {
                Ok(())
            } else {
                Err("scalar/string differs".into())
            }
        }
    }
}

/// The tally of [`compare_queries`].
#[derive(Debug, Default)]
pub struct Tally {
    /// Requests made to each server.
    pub total: usize,
    /// Requests whose answers agree.
    pub matched: usize,
    /// Requests both servers refused.
    pub both_refused: usize,
    /// Requests Prometheus answered with an empty result.
    pub empty: usize,
    /// One message per disagreeing request: the query, both answers and why they differ.
    pub mismatches: Vec<String>,
}

/// Asks Prometheus (`prom`) and inferdb (`idb`) every query twice, as an instant query at
/// `time(i)` (ms) and as a range query over `range` (ms) with a step of `step(i)` seconds, and
/// compares the answers with [`compare`].
pub fn compare_queries(
    client: &Client,
    prom: &str,
    idb: &str,
    queries: &[String],
    time: impl Fn(usize) -> i64,
    range: (i64, i64),
    step: impl Fn(usize) -> &'static str,
) -> Tally {
    let mut t = Tally::default();
    for (i, q) in queries.iter().enumerate() {
        let inst = [("query", q.clone()), ("time", secs(time(i)))];
        let range = [
            ("query", q.clone()),
            ("start", secs(range.0)),
            ("end", secs(range.1)),
            ("step", step(i).to_string()),
        ];
        for (kind, path, form) in [
            ("instant", "/api/v1/query", &inst[..]),
            ("range", "/api/v1/query_range", &range[..]),
        ] {
            let a = client.post(&format!("{prom}{path}"), form);
            let b = client.post(&format!("{idb}{path}"), form);
            t.total += 1;
            if a.1.contains("\"status\":\"error\"") && b.1.contains("\"status\":\"error\"") {
                t.both_refused += 1;
                eprintln!(
                    "refused by both: [{kind}] {q}\n  prometheus: {}\n  inferdb: {}",
                    short(&a.1),
                    short(&b.1)
                );
            }
            if a.1.contains("\"result\":[]") {
                t.empty += 1;
            }
            match compare(q, kind == "range", &a, &b) {
                Ok(()) => t.matched += 1,
                Err(why) => t.mismatches.push(format!(
                    "[{kind} {}] {q}\n  why: {why}\n  prometheus ({}): {}\n  inferdb ({}): {}",
                    form[1..]
                        .iter()
                        .map(|(k, v)| format!("{k}={v}"))
                        .collect::<Vec<_>>()
                        .join(" "),
                    a.0,
                    short(&a.1),
                    b.0,
                    short(&b.1)
                )),
            }
        }
    }
    t
}

/// The vLLM dashboard's queries (`tests/fixtures/vllm/dashboard-queries.txt`, up to its
/// template variables) with the variables filled in (`$__rate_interval` by `rate_interval`),
/// without duplicates; those using a variable the test data has no value for are left out.
pub fn dashboard_queries(rate_interval: &str) -> Vec<String> {
    let text = super::conformance::fixture("vllm/dashboard-queries.txt");
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with("# ==== TEMPLATE VARIABLES") {
            break;
        }
        let l = line.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        let q = l
            .replace("$job", "vllm")
            .replace("$model_name", ".*")
            .replace("$instance", ".*")
            .replace("$__rate_interval", rate_interval)
            .replace("$__interval", "1m")
            .replace("$__range", "1h")
            .replace("$ttft_slo", "0.5")
            .replace("$tpot_slo", "0.1");
        if !q.contains('$') && !out.contains(&q) {
            out.push(q);
        }
    }
    out
}

/// A JSON sample value (`"NaN"`, `"+Inf"`, `"1.5"`) as a float; panics on anything else.
fn num(v: &Value) -> f64 {
    match v.as_str().unwrap_or("") {
        "NaN" => f64::NAN,
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        s => s.parse().unwrap_or_else(|_| panic!("bad value {v}")),
    }
}

/// Equal within 1e-9 relative, NaN equal to NaN.
fn close(a: f64, b: f64) -> bool {
    (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
}

/// Points `(time in seconds, value)` of one series.
pub type Points = Vec<(f64, f64)>;

/// The result type and labels (as sorted JSON) -> points of a vector or matrix answer.
pub fn result_map(v: &Value) -> (String, BTreeMap<String, Points>) {
    let data = &v["data"];
    let typ = data["resultType"].as_str().unwrap_or("").to_string();
    let mut out = BTreeMap::new();
    for s in data["result"].as_array().into_iter().flatten() {
        let labels: BTreeMap<String, String> = s["metric"]
            .as_object()
            .map(|o| {
                o.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                    .collect()
            })
            .unwrap_or_default();
        let key = serde_json::to_string(&labels).unwrap();
        let pts: Points = match typ.as_str() {
            "vector" => vec![(s["value"][0].as_f64().unwrap(), num(&s["value"][1]))],
            _ => s["values"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| (p[0].as_f64().unwrap(), num(&p[1])))
                .collect(),
        };
        out.insert(key, pts);
    }
    (typ, out)
}

/// The first difference between two vector or matrix answers to `query` (result type, label
/// sets, timestamps exactly, values within 1e-9 relative, NaN equal to NaN), or `None`.
pub fn first_difference(query: &str, a: &Value, b: &Value) -> Option<String> {
    let (ta, ma) = result_map(a);
    let (tb, mb) = result_map(b);
    if ta != tb {
        return Some(format!("{query}: result types {ta} vs {tb}"));
    }
    let ka: Vec<&String> = ma.keys().collect();
    let kb: Vec<&String> = mb.keys().collect();
    if ka != kb {
        return Some(format!("{query}: series differ:\n  {ka:?}\n  {kb:?}"));
    }
    for (k, pa) in &ma {
        let pb = &mb[k];
        if pa.len() != pb.len()
            || pa
                .iter()
                .zip(pb)
                .any(|(x, y)| x.0 != y.0 || !close(x.1, y.1))
        {
            return Some(format!("{query} {k}:\n  {pa:?}\n  {pb:?}"));
        }
    }
    None
}
