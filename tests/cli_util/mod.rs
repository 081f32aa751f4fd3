//! Shared helpers for the CLI tests: an OpenMetrics generator with the expected samples.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fmt::Write;

use inferdb_storage::Labels;

/// Expected samples per series.
pub type Expected = BTreeMap<Labels, Vec<(i64, f64)>>;

/// OpenMetrics float-seconds timestamp for `t` ms.
pub fn om_ts(t: i64) -> String {
    let s = t.div_euclid(1000);
    let ms = t.rem_euclid(1000);
    format!("{s}.{ms:03}")
}

fn labels(name: &str, pairs: &[(&str, &str)]) -> Labels {
    let mut v: Vec<(&str, &str)> = vec![("__name__", name)];
    v.extend_from_slice(pairs);
    Labels::from_pairs(v)
}

fn label_text(pairs: &[(&str, &str)]) -> String {
    let parts: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    format!("{{{}}}", parts.join(","))
}

/// A vLLM-like OpenMetrics file for `servers` servers, `n` scrapes every `step` ms from
/// `start`. Values are multiples of 1/4 (so sums are exact in any order), except in
/// `test_special` which holds NaN, ±Inf, -0.0 and odd fractions.
pub fn gen(start: i64, n: usize, step: i64, servers: usize) -> (String, Expected) {
    let mut out = String::new();
    let mut exp: Expected = BTreeMap::new();
    let family = |out: &mut String,
                  exp: &mut Expected,
                  name: &str,
                  kind: &str,
                  sample_name: &str,
                  series: Vec<Vec<(String, String)>>,
                  f: &dyn Fn(usize, usize) -> f64| {
        writeln!(out, "# TYPE {name} {kind}").unwrap();
        writeln!(out, "# HELP {name} test family {name}").unwrap();
        for (si, pairs) in series.iter().enumerate() {
            let pr: Vec<(&str, &str)> = pairs
                .iter()
                .map(|(a, b)| (a.as_str(), b.as_str()))
                .collect();
            let l = labels(sample_name, &pr);
            let text = if pr.is_empty() {
                sample_name.to_string()
            } else {
                format!("{sample_name}{}", label_text(&pr))
            };
            let e = exp.entry(l).or_default();
            for i in 0..n {
                let t = start + i as i64 * step;
                let text_v = inferdb::model::exposition::format_openmetrics_float(f(si, i));
                writeln!(out, "{text} {text_v} {}", om_ts(t)).unwrap();
                // what the text means, as the exposition parser reads it
                let v = inferdb::model::exposition::parse_value(&text_v).unwrap();
                e.push((t, v));
            }
        }
    };
    let inst = |s: usize| format!("10.0.0.{s}:8000");
    let per_server = |extra: &[(&str, &str)]| -> Vec<Vec<(String, String)>> {
        (0..servers)
            .map(|s| {
                let mut v = vec![
                    ("instance".to_string(), inst(s)),
                    (
                        "model_name".to_string(),
                        "meta-llama/Llama-3.1-8B".to_string(),
                    ),
                ];
                v.extend(extra.iter().map(|(a, b)| (a.to_string(), b.to_string())));
                v
            })
            .collect()
    };
    family(
        &mut out,
        &mut exp,
        "vllm:num_requests_running",
        "gauge",
        "vllm:num_requests_running",
        per_server(&[]),
        &|s, i| ((i * 7 + s * 3) % 40) as f64,
    );
    family(
        &mut out,
        &mut exp,
        "vllm:prompt_tokens",
        "counter",
        "vllm:prompt_tokens_total",
        per_server(&[]),
        &|s, i| (i * (100 + s)) as f64 + 0.25,
    );
    let mut hist = Vec::new();
    for s in per_server(&[]) {
        for le in ["0.5", "1.0", "+Inf"] {
            let mut v = s.clone();
            v.push(("le".into(), le.into()));
            hist.push(v);
        }
    }
    family(
        &mut out,
        &mut exp,
        "vllm:e2e_request_latency_seconds",
        "histogram",
        "vllm:e2e_request_latency_seconds_bucket",
        hist,
        &|s, i| (i * (1 + s % 3)) as f64,
    );
    // label sets that vary within one metric
    let mut varied = per_server(&[]);
    for (k, v) in varied.iter_mut().enumerate() {
        if k % 2 == 0 {
            v.push(("gpu".into(), format!("GPU-{k}")));
        }
    }
    family(
        &mut out,
        &mut exp,
        "test_varied",
        "gauge",
        "test_varied",
        varied,
        &|s, i| (s as f64) * 0.5 - (i % 5) as f64,
    );
    family(
        &mut out,
        &mut exp,
        "test_special",
        "gauge",
        "test_special",
        vec![vec![]],
        &|_, i| match i % 7 {
            0 => f64::NAN,
            1 => f64::INFINITY,
            2 => f64::NEG_INFINITY,
            3 => -0.0,
            4 => 0.1 + 0.2,
            5 => 1e-300,
            _ => i as f64 / 3.0,
        },
    );
    out.push_str("# EOF\n");
    (out, exp)
}

/// The store in `dir`, opened read-only.
pub fn open_read_only(dir: &std::path::Path) -> inferdb_storage::Db {
    inferdb_storage::Db::open(
        dir,
        inferdb_storage::Options {
            read_only: true,
            ..Default::default()
        },
    )
    .unwrap()
}

/// Reads every series of the store in `dir` over `[mint, maxt]`.
pub fn read_back(dir: &std::path::Path, mint: i64, maxt: i64) -> Expected {
    let db = open_read_only(dir);
    let q = db.querier(mint, maxt).unwrap();
    let mut out = BTreeMap::new();
    for s in q.select(&[]).unwrap() {
        let v: Vec<(i64, f64)> = s.iter().collect();
        out.insert(s.labels().clone(), v);
    }
    out
}

/// Whether two sample lists are equal bit for bit.
pub fn same_bits(a: &[(i64, f64)], b: &[(i64, f64)]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x.0 == y.0 && x.1.to_bits() == y.1.to_bits())
}
