//! Imported history answers like Prometheus: 24 h of 8 simulated vLLM servers (the
//! `gen_openmetrics` example's simulation, one scrape a minute, a subset of the families the
//! dashboards use) go into Prometheus 2.42 through `promtool tsdb create-blocks-from
//! openmetrics` and into inferdb through `inferdb import openmetrics`; both servers then answer
//! the same instant and range queries (the vLLM dashboard's queries and per-family queries)
//! through their HTTP APIs, compared by `common::diff::compare`.
//!
//! Sizes: 8 servers x 1440 scrapes (60 s interval), 744 series, 1,071,360 samples, 171 MB of
//! OpenMetrics text. On the loaded 2-core machine in a debug build the test took 124 s: the
//! simulation 101 s, promtool 10 s, the import 3 s, 512 queries 11 s (512 matched).
//!
//! Prometheus 2 closes range windows on the left, inferdb (like Prometheus 3) on the right, so
//! every sample sits 7 ms past a whole minute and every evaluation time is 37 s past one: no
//! window edge (evaluation minus a whole number of seconds) and no subquery step (whole
//! minutes) meets a sample. All series start at the first scrape and windows are at most
//! 1 h, while evaluation starts 70 min in, which keeps out Prometheus 2's different
//! extrapolation of `rate` for windows that reach before a counter's first sample (see
//! `tests/differential_prometheus.rs`). The simulated servers restart every 30 minutes, so
//! counters reset on both sides alike.
//!
//! Without `prometheus`/`promtool` on PATH the test is skipped with a message, unless
//! `CI=true`, where it fails.

mod common;
#[path = "../examples/gen_openmetrics.rs"]
#[allow(dead_code)]
mod gen_openmetrics;

use std::io::Write as _;
use std::time::Instant;

use common::diff::{compare_queries, dashboard_queries, Tally};
use common::{secs, Client};
use gen_openmetrics::{generate, GenOptions};

/// The first scrape (2026-12-01T00:00:00Z) in ms; samples sit 7 ms after it.
const T0: i64 = gen_openmetrics::DEFAULT_START_S * 1000;
const OFFSET_MS: i64 = 7;
const HOURS: i64 = 24;
const STEP_S: i64 = 60;
const SERVERS: u64 = 8;

/// The families of the test file (`up` comes always).
const FAMILIES: [&str; 16] = [
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:num_requests_waiting_by_reason",
    "vllm:kv_cache_usage_perc",
    "vllm:prompt_tokens",
    "vllm:generation_tokens",
    "vllm:request_success",
    "vllm:num_preemptions",
    "vllm:prefix_cache_queries",
    "vllm:prefix_cache_hits",
    "vllm:time_to_first_token_seconds",
    "vllm:e2e_request_latency_seconds",
    "vllm:request_time_per_output_token_seconds",
    "http_requests",
    "process_cpu_seconds",
    "process_resident_memory_bytes",
];

/// Queries per family, by its type.
fn family_queries(families: &[(String, String, Vec<String>)]) -> Vec<String> {
    let mut q = Vec::new();
    for (name, kind, _) in families {
        match kind.as_str() {
            "counter" => {
                let c = format!("{name}_total");
                q.push(format!("rate({c}[5m])"));
                q.push(format!("irate({c}[5m])"));
                q.push(format!("increase({c}[10m])"));
                q.push(format!("sum by (instance) (rate({c}[5m]))"));
                q.push(format!("resets({c}[1h])"));
                q.push(format!("max_over_time(rate({c}[5m])[30m:1m])"));
            }
            "gauge" => {
                q.push(name.clone());
                for f in [
                    "avg_over_time",
                    "min_over_time",
                    "max_over_time",
                    "stddev_over_time",
                    "changes",
                    "deriv",
                    "delta",
                ] {
                    q.push(format!("{f}({name}[10m])"));
                }
                q.push(format!("quantile_over_time(0.9, {name}[30m])"));
                q.push(format!("predict_linear({name}[15m], 600)"));
                q.push(format!("sum by (instance) ({name})"));
                // (no topk: the simulated gauges tie often, and which tied series a range
                // topk keeps is up to the engine; it differed in 4 of 512 queries)
                q.push(format!("max by (job) ({name})"));
                q.push(format!("{name} offset 30m"));
            }
            "histogram" => {
                for p in ["0.5", "0.9", "0.99"] {
                    q.push(format!(
                        "histogram_quantile({p}, sum by (le) (rate({name}_bucket[5m])))"
                    ));
                }
                q.push(format!("histogram_quantile(0.9, rate({name}_bucket[10m]))"));
                q.push(format!("rate({name}_sum[5m]) / rate({name}_count[5m])"));
                q.push(format!("sum by (le) (increase({name}_bucket[1h]))"));
            }
            _ => {}
        }
    }
    q.push("count(up == 1)".into());
    q.push("sum by (job) (count_over_time(up[1h]))".into());
    q
}

#[test]
fn imported_24h_of_8_servers_answers_like_prometheus() {
    if !common::require_prometheus("the import differential test") {
        return;
    }
    let t_start = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let om = dir.path().join("history.om");
    let gen = {
        let f = std::fs::File::create(&om).unwrap();
        let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
        generate(
            &mut w,
            &GenOptions {
                servers: SERVERS,
                hours: HOURS as f64,
                step_s: STEP_S as f64,
                offset_ms: OFFSET_MS,
                families: Some(FAMILIES.iter().map(|s| s.to_string()).collect()),
                ..GenOptions::default()
            },
        )
        .unwrap()
    };
    let size = std::fs::metadata(&om).unwrap().len();
    let t_gen = t_start.elapsed();
    assert_eq!(gen.families.len(), FAMILIES.len() + 1, "{:?}", gen.families);

    let pdata = dir.path().join("prom");
    common::promtool_create_blocks(&om, &pdata);
    let t_promtool = t_start.elapsed();
    let idata = dir.path().join("inferdb");
    let out = common::inferdb_import(&om, &idata);
    assert!(
        out.contains(&format!("{} samples", gen.samples)),
        "import summary: {out}"
    );
    let t_import = t_start.elapsed();
    std::fs::remove_file(&om).unwrap();

    let client = Client::new();
    let (_prom, pbase) = common::start_prometheus(dir.path(), &pdata, &client);
    let (_idb, ibase) = common::start_inferdb(dir.path(), &idata, &client);

    let mut queries = family_queries(&gen.families);
    let own = queries.len();
    // Grafana's $__rate_interval is four scrape intervals
    for d in dashboard_queries("4m") {
        if !queries.contains(&d) {
            queries.push(d);
        }
    }
    // every sample arrived on both sides (counted per metric name: count_over_time drops the
    // name, so one query over all metrics would meet equal label sets)
    let day_end = T0 + HOURS * 3_600_000;
    let mut names: Vec<&str> = gen
        .families
        .iter()
        .flat_map(|(_, _, series)| series.iter())
        .map(|s| s.split('{').next().unwrap_or(s))
        .collect();
    names.sort_unstable();
    names.dedup();
    for base in [&pbase, &ibase] {
        let mut total = 0u64;
        for n in &names {
            let q = format!("sum(count_over_time({n}[1d]))");
            let (_, body) = client.post(
                &format!("{base}/api/v1/query"),
                &[("query", q.clone()), ("time", secs(day_end))],
            );
            let v: serde_json::Value = serde_json::from_str(&body).unwrap();
            let c = v["data"]["result"][0]["value"][1]
                .as_str()
                .and_then(|x| x.parse::<u64>().ok())
                .unwrap_or_else(|| panic!("{base}: {q}: {body}"));
            total += c;
        }
        assert_eq!(total, gen.samples, "{base}: samples counted per metric");
    }

    // instant queries spread over the day, 37 s past a minute; range queries over most of it
    let minute = 60_000;
    let eval = |i: usize| T0 + (70 + (i as i64 * 97) % (HOURS * 60 - 80)) * minute + 37_000;
    let range_start = T0 + 70 * minute + 37_000;
    let range_end = T0 + (HOURS * 60 - 3) * minute + 37_000;
    let step = |i: usize| if i.is_multiple_of(2) { "600" } else { "780" };
    let Tally {
        total,
        matched,
        empty,
        mismatches,
        ..
    } = compare_queries(
        &client,
        &pbase,
        &ibase,
        &queries,
        eval,
        (range_start, range_end),
        step,
    );
    let _ = writeln!(
        std::io::stderr(),
        "import differential: {} series, {} samples ({:.0} MB OpenMetrics, {SERVERS} servers x {HOURS} h every {STEP_S} s); \
         {total} queries, {matched} matched ({} distinct expressions: {own} per family, {} dashboard; {empty} empty on Prometheus); \
         generate {:.1}s, promtool {:.1}s, inferdb import {:.1}s, queries {:.1}s",
        gen.series,
        gen.samples,
        size as f64 / 1e6,
        queries.len(),
        queries.len() - own,
        t_gen.as_secs_f64(),
        (t_promtool - t_gen).as_secs_f64(),
        (t_import - t_promtool).as_secs_f64(),
        (t_start.elapsed() - t_import).as_secs_f64(),
    );
    for m in &mismatches {
        eprintln!("MISMATCH {m}\n");
    }
    assert!(queries.len() >= 100, "only {} queries", queries.len());
    // (126 of 512 are empty on both: dashboard panels for families this file leaves out)
    assert!(empty * 3 < total, "{empty} of {total} results are empty");
    assert!(
        mismatches.is_empty(),
        "{} of {total} queries differ from Prometheus:\n{}",
        mismatches.len(),
        mismatches.join("\n\n")
    );
}
