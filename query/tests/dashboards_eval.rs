//! Every expression of vLLM's Grafana dashboards (`tests/fixtures/vllm/dashboard-queries.txt`)
//! evaluates, as an instant and as a range query, over an hour of vLLM-like data made from the
//! captured `/metrics` pages; instant results equal the range results at the same time.

mod common;

use std::collections::BTreeMap;

use inferdb_query::storage::MemStorage;
use inferdb_query::{Engine, EngineOptions, Value};
use inferdb_storage::Labels;

use common::{dashboard_expressions, fixture, substitute};

/// Parses a text-format page into `(labels, value)` (enough of the format for the fixtures).
fn parse_page(page: &str) -> Vec<(Labels, f64)> {
    let mut out = Vec::new();
    for line in page.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (series, value) = match line.rfind('}') {
            Some(i) => (&line[..=i], line[i + 1..].trim()),
            None => match line.split_once(' ') {
                Some((a, b)) => (a, b.trim()),
                None => continue,
            },
        };
        let value = value.split_whitespace().next().unwrap_or("");
        let Ok(v) = value.parse::<f64>() else {
            continue;
        };
        let mut pairs: Vec<(String, String)> = Vec::new();
        let (name, rest) = match series.find('{') {
            Some(i) => (&series[..i], &series[i + 1..series.len() - 1]),
            None => (series, ""),
        };
        pairs.push(("__name__".into(), name.to_string()));
        let mut rest = rest;
        while let Some(eq) = rest.find("=\"") {
            let lname = rest[..eq].trim().trim_start_matches(',').trim().to_string();
            let after = &rest[eq + 2..];
            let mut val = String::new();
            let mut chars = after.char_indices();
            let mut end = after.len();
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => {
                        if let Some((_, n)) = chars.next() {
                            val.push(if n == 'n' { '\n' } else { n });
                        }
                    }
                    '"' => {
                        end = i + 1;
                        break;
                    }
                    c => val.push(c),
                }
            }
            pairs.push((lname, val));
            rest = &after[end..];
        }
        out.push((Labels::from_pairs(pairs), v));
    }
    out
}

/// An hour of scrapes every 30 s of two instances: counters grow, gauges wander, the load
/// page's values scaled by time.
fn build_storage() -> MemStorage {
    let pages: Vec<Vec<(Labels, f64)>> = [
        "metrics-idle.txt",
        "metrics-load.txt",
        "metrics-saturated.txt",
    ]
    .iter()
    .map(|p| parse_page(&fixture(&format!("vllm/{p}"))))
    .collect();
    let mut db = MemStorage::new();
    for (inst_i, inst) in ["10.0.0.1:8000", "10.0.0.2:8000"].iter().enumerate() {
        for step in 0..=120i64 {
            let t = step * 30_000 + 7;
            let page = &pages[(step as usize / 20 + inst_i) % pages.len()];
            let scale = 1.0 + step as f64 / 5.0;
            for (l, v) in page {
                let name = l.metric_name().unwrap_or("");
                let counter = name.ends_with("_total")
                    || name.ends_with("_count")
                    || name.ends_with("_sum")
                    || name.ends_with("_bucket");
                let v = if counter { v * scale } else { *v };
                let l = l.with("job", "vllm").with("instance", inst);
                db.add(&l, t, v);
            }
            let up = Labels::from_pairs([("__name__", "up"), ("job", "vllm"), ("instance", inst)]);
            db.add(&up, t, 1.0);
        }
    }
    db
}

#[test]
fn dashboard_queries_evaluate() {
    let text = fixture("vllm/dashboard-queries.txt");
    let db = build_storage();
    let engine = Engine::new(EngineOptions::default());
    let (start, end, step) = (3_000_000i64, 3_600_000i64, 60_000i64);
    let mut n = 0;
    let mut non_empty = 0;
    let mut failures = Vec::new();
    for line in dashboard_expressions(&text) {
        n += 1;
        let q = substitute(line);
        let inst = match engine.instant(&db, &q, end) {
            Ok(r) => r,
            Err(e) => {
                failures.push(format!("{q}: instant: {e}"));
                continue;
            }
        };
        let range = match engine.range(&db, &q, start, end, step) {
            Ok(r) => r,
            Err(e) => {
                failures.push(format!("{q}: range: {e}"));
                continue;
            }
        };
        // The instant result equals the range result's last step.
        let at_end: BTreeMap<Labels, f64> = match &range.value {
            Value::Matrix(m) => m
                .iter()
                .filter_map(|s| {
                    s.floats
                        .last()
                        .filter(|p| p.t == end)
                        .map(|p| (s.metric.clone(), p.f))
                })
                .collect(),
            other => {
                failures.push(format!("{q}: range query gave {}", other.type_name()));
                continue;
            }
        };
        let instant: BTreeMap<Labels, f64> = match &inst.value {
            Value::Vector(v) => v.iter().map(|s| (s.metric.clone(), s.f)).collect(),
            Value::Scalar { v, .. } => [(Labels::default(), *v)].into_iter().collect(),
            other => {
                failures.push(format!("{q}: instant query gave {}", other.type_name()));
                continue;
            }
        };
        let same = instant.len() == at_end.len()
            && instant.iter().zip(at_end.iter()).all(|((la, a), (lb, b))| {
                la == lb
                    && (a == b
                        || (a.is_nan() && b.is_nan())
                        || (a - b).abs() <= 1e-9 * a.abs().max(b.abs()))
            });
        if !same {
            failures.push(format!("{q}: instant {instant:?} != range end {at_end:?}"));
        }
        if !instant.is_empty() {
            non_empty += 1;
        }
    }
    assert!(n > 100, "only {n} dashboard expressions found");
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // Most panels show data on vLLM-like input (some need metrics the pages lack).
    assert!(
        non_empty * 2 > n,
        "only {non_empty} of {n} expressions returned data"
    );
    eprintln!("{n} dashboard expressions evaluated, {non_empty} with data");
}
