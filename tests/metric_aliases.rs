//! Metric-rename bridging end to end: a store holding `vllm:gpu_cache_usage_perc` (and the
//! other old names) from an old server and the new names from a new one, plus a server in
//! vLLM's deprecation window exposing both. `inferdb serve` answers a selector of the new
//! name over all three (the old server's series read under the new name, the new name winning
//! where both exist) with an `infos` entry; with `--query.no-metric-aliases` it answers the
//! same queries exactly as Prometheus 2.42 does on the same data (both loaded from one
//! OpenMetrics file through `promtool tsdb create-blocks-from openmetrics` and `inferdb
//! import openmetrics`).
//!
//! Samples sit 7 ms past a step and queries 37 s past a minute, away from series starts (see
//! `tests/cli_import_differential.rs` for why).

mod common;

use std::fmt::Write as _;

use common::diff::compare_queries;
use common::{secs, Client};

const T0_S: i64 = 1_796_000_000;
const STEP_S: i64 = 30;
const POINTS: i64 = 240; // 2 h

/// (server instance, writes old names, writes new names)
const SERVERS: [(&str, bool, bool); 3] = [
    ("old:8000", true, false),
    ("new:8000", false, true),
    ("both:8000", true, true),
];

const LE: [&str; 5] = ["0.01", "0.025", "0.05", "0.1", "+Inf"];

fn openmetrics() -> String {
    let mut s = String::new();
    let ts = |i: i64| format!("{}.007", T0_S + i * STEP_S);
    let lbl = |inst: &str| format!("instance=\"{inst}\",job=\"vllm\",model_name=\"m\"");
    // gauges: the old name reads 10x the new one on the dual server (a visible double count)
    for (name, old) in [
        ("vllm:gpu_cache_usage_perc", true),
        ("vllm:kv_cache_usage_perc", false),
    ] {
        writeln!(s, "# TYPE {name} gauge").unwrap();
        for (k, (inst, o, n)) in SERVERS.iter().enumerate() {
            if (old && !o) || (!old && !n) {
                continue;
            }
            for i in 0..POINTS {
                let base = 0.2 + 0.1 * k as f64 + 0.05 * ((i % 7) as f64);
                let v = if old && *n { base * 10.0 } else { base };
                writeln!(s, "{name}{{{}}} {v} {}", lbl(inst), ts(i)).unwrap();
            }
        }
    }
    for (name, old) in [
        ("vllm:gpu_prefix_cache_hits", true),
        ("vllm:prefix_cache_hits", false),
    ] {
        writeln!(s, "# TYPE {name} counter").unwrap();
        for (k, (inst, o, n)) in SERVERS.iter().enumerate() {
            if (old && !o) || (!old && !n) {
                continue;
            }
            for i in 0..POINTS {
                let v = (i * (100 + 10 * k as i64)) as f64;
                writeln!(s, "{name}_total{{{}}} {v} {}", lbl(inst), ts(i)).unwrap();
            }
        }
    }
    for (name, old) in [
        ("vllm:time_per_output_token_seconds", true),
        ("vllm:inter_token_latency_seconds", false),
    ] {
        writeln!(s, "# TYPE {name} histogram").unwrap();
        for (k, (inst, o, n)) in SERVERS.iter().enumerate() {
            if (old && !o) || (!old && !n) {
                continue;
            }
            for i in 0..POINTS {
                let c = i * 10;
                for (j, le) in LE.iter().enumerate() {
                    let v = c * (j as i64 + 1 + k as i64).min(5) / 5;
                    writeln!(
                        s,
                        "{name}_bucket{{{},le=\"{le}\"}} {v} {}",
                        lbl(inst),
                        ts(i)
                    )
                    .unwrap();
                }
                writeln!(s, "{name}_count{{{}}} {c} {}", lbl(inst), ts(i)).unwrap();
                writeln!(
                    s,
                    "{name}_sum{{{}}} {} {}",
                    lbl(inst),
                    c as f64 * 0.03,
                    ts(i)
                )
                .unwrap();
            }
        }
    }
    s.push_str("# EOF\n");
    s
}

const QUERIES: [&str; 12] = [
    "avg(vllm:kv_cache_usage_perc)",
    "vllm:kv_cache_usage_perc",
    "vllm:gpu_cache_usage_perc",
    "avg(vllm:gpu_cache_usage_perc)",
    "max_over_time(vllm:kv_cache_usage_perc[10m])",
    "sum(rate(vllm:prefix_cache_hits_total[5m]))",
    "rate(vllm:gpu_prefix_cache_hits_total[5m])",
    "sum by (instance) (increase(vllm:prefix_cache_hits_total[10m]))",
    "histogram_quantile(0.9, sum by (le) (rate(vllm:inter_token_latency_seconds_bucket[5m])))",
    "histogram_quantile(0.9, sum by (le) (rate(vllm:time_per_output_token_seconds_bucket[5m])))",
    "sum(rate(vllm:inter_token_latency_seconds_count[5m]))",
    "{__name__=\"vllm:kv_cache_usage_perc\"}",
];

fn result(v: &serde_json::Value) -> &Vec<serde_json::Value> {
    v["data"]["result"].as_array().expect("a vector")
}

#[test]
fn aliases_bridge_renames_and_off_answers_like_prometheus() {
    let dir = tempfile::tempdir().unwrap();
    let om = dir.path().join("renames.om");
    std::fs::write(&om, openmetrics()).unwrap();
    let idata = dir.path().join("inferdb");
    common::inferdb_import(&om, &idata);
    let client = Client::new();
    let t = (T0_S + 90 * 60 + 37) * 1000;

    {
        let (_idb, ibase) = common::start_inferdb(dir.path(), &idata, &client);
        let q = |expr: &str| {
            client.query(
                &ibase,
                "/api/v1/query",
                &[("query", expr.to_string()), ("time", secs(t))],
            )
        };
        // one series per server under the new name; the dual server's from the new name
        let v = q("vllm:kv_cache_usage_perc");
        let r = result(&v);
        assert_eq!(r.len(), 3, "{v}");
        for s in r {
            assert_eq!(s["metric"]["__name__"], "vllm:kv_cache_usage_perc", "{v}");
            let x: f64 = s["value"][1].as_str().unwrap().parse().unwrap();
            assert!(x < 1.0, "old name counted on the dual server: {v}");
        }
        let infos = v["infos"].as_array().expect("infos");
        assert_eq!(infos.len(), 1, "{v}");
        assert!(
            infos[0]
                .as_str()
                .unwrap()
                .contains("\"vllm:gpu_cache_usage_perc\""),
            "{v}"
        );
        let avg = q("avg(vllm:kv_cache_usage_perc)");
        assert_eq!(result(&avg).len(), 1);
        assert!(avg["infos"].as_array().is_some_and(|i| !i.is_empty()));
        // counters and histograms: every series of the family
        let rate = q("sum by (instance) (rate(vllm:prefix_cache_hits_total[5m]))");
        assert_eq!(result(&rate).len(), 3, "{rate}");
        let h = q("sum by (instance, le) (rate(vllm:inter_token_latency_seconds_bucket[5m]))");
        assert_eq!(result(&h).len(), 3 * LE.len(), "{h}");
        let c = q("count(vllm:prefix_cache_hits_created) or vector(0)");
        assert_eq!(result(&c).len(), 1);
        // the old name is answered as stored, with no info
        let old = q("vllm:gpu_cache_usage_perc");
        assert_eq!(result(&old).len(), 2, "{old}");
        assert!(old.get("infos").is_none(), "{old}");
        // /api/v1/series shows what is stored
        let (_, body) = client.get(&format!(
            "{ibase}/api/v1/series?match[]=vllm:kv_cache_usage_perc&start={}&end={}",
            T0_S,
            T0_S + POINTS * STEP_S
        ));
        let sv: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(sv["data"].as_array().unwrap().len(), 2, "{body}");
    }

    if !common::require_prometheus("the metric-alias differential test") {
        return;
    }
    let pdata = dir.path().join("prom");
    common::promtool_create_blocks(&om, &pdata);
    let (_prom, pbase) = common::start_prometheus(dir.path(), &pdata, &client);
    let (_idb, ibase) =
        common::start_inferdb_with(dir.path(), &idata, &["--query.no-metric-aliases"], &client);
    let queries: Vec<String> = QUERIES.iter().map(|s| s.to_string()).collect();
    let minute = 60_000;
    let start = T0_S * 1000 + 20 * minute + 37_000;
    let tally = compare_queries(
        &client,
        &pbase,
        &ibase,
        &queries,
        |i| start + (i as i64 * 7) % 90 * minute,
        (start, start + 90 * minute),
        |_| "60",
    );
    assert!(
        tally.mismatches.is_empty(),
        "{} of {} differ:\n{}",
        tally.mismatches.len(),
        tally.total,
        tally.mismatches.join("\n")
    );
    assert_eq!(tally.matched, 2 * QUERIES.len());
    // the data is there: most answers are not empty
    assert!(tally.empty < 4, "{tally:?}");
}
