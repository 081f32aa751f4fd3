//! PromQL range-query benchmark: the vLLM/dcgm workload of `benches/workload.rs` loaded into an
//! `inferdb_storage::Db` (backfilled into blocks, as `inferdb import openmetrics` and
//! `promtool tsdb create-blocks-from openmetrics` do), then range queries over the whole
//! workload at a 15 s step, in-process through `inferdb_query::Engine`.
//!
//! ```text
//! cargo bench --bench query                                   # summary + criterion groups
//! INFERDB_BENCH_SUMMARY_ONLY=1 cargo bench --bench query      # summary only
//! INFERDB_BENCH_HOURS=2 INFERDB_BENCH_SUMMARY_ONLY=1 cargo bench --bench query   # quick run
//! ```
//!
//! `INFERDB_BENCH_HOURS` (default 24) sets the workload length, `INFERDB_BENCH_REPS` (default 5)
//! the repetitions of each query in the summary, `INFERDB_BENCH_QUERY` one query of the summary
//! by name (for profiling), `INFERDB_FIXTURES` the fixtures folder.
//!
//! "Samples scanned" counts, as Prometheus' query statistics do, every sample inside every
//! range-selector window at every step (a sample in 20 windows counts 20 times); the bench
//! gets the figure from the engine itself as `sum(count_over_time(<selector>[5m]))` over the
//! same range. Throughput is given per wall second and per CPU second of the whole process
//! (user + system time of all threads from `/proc/self/stat`, 10 ms ticks): the engine splits
//! a range query's steps over threads, and the bench machine is shared, so the per-CPU figure
//! is the one to compare.

#[path = "workload.rs"]
mod workload;

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::Criterion;
use inferdb_query::{Engine, EngineOptions, Value};
use inferdb_storage::{BlockBuilder, Db, Labels, Options};

/// The benchmarked queries: name, PromQL, and the range selectors whose windows it scans.
pub const QUERIES: &[(&str, &str, &[&str])] = &[
    (
        "rate_one_counter",
        "rate(vllm:generation_tokens_total[5m])",
        &["vllm:generation_tokens_total"],
    ),
    (
        "rate_gpu_energy_1s",
        "rate(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION[5m])",
        &["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"],
    ),
    (
        "histogram_quantile_p99",
        "histogram_quantile(0.99, sum by (le) (rate(vllm:e2e_request_latency_seconds_bucket[5m])))",
        &["vllm:e2e_request_latency_seconds_bucket"],
    ),
    (
        "sum_by_model",
        "sum by (model_name) (rate(vllm:request_success_total[5m]))",
        &["vllm:request_success_total"],
    ),
    (
        "binop_two_rates",
        "rate(vllm:e2e_request_latency_seconds_sum[5m]) / rate(vllm:e2e_request_latency_seconds_count[5m])",
        &[
            "vllm:e2e_request_latency_seconds_sum",
            "vllm:e2e_request_latency_seconds_count",
        ],
    ),
];

/// Query step in ms.
pub const STEP_MS: i64 = 15_000;

fn env_f64(name: &str, default: f64) -> f64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// CPU time of the whole process (all threads, also those that have exited).
fn process_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // fields after the command name (which may contain spaces) in parentheses
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 (1-based) = 11 and 12 after the name
    let ticks: u64 = f.get(11).and_then(|x| x.parse().ok()).unwrap_or(0)
        + f.get(12).and_then(|x| x.parse().ok()).unwrap_or(0);
    Duration::from_millis(ticks * 10)
}

fn labels_of(s: &workload::Series) -> Labels {
    Labels::from_pairs(s.labels.iter().map(|(n, v)| (n.as_str(), v.as_str())))
}

/// Builds the store: the workload without staleness markers (what its OpenMetrics text
/// carries, so the data equals what promtool and `inferdb import` load), backfilled into
/// blocks and compacted.
fn build_store(dir: &std::path::Path, wl: &workload::Workload) -> Db {
    let opts = Options {
        background: false,
        ..Options::default()
    };
    let mut b = BlockBuilder::new(opts.block_duration_ms);
    for s in &wl.series {
        let l = labels_of(s);
        for &(t, v) in &s.samples {
            if v.to_bits() == workload::STALE_NAN_BITS {
                continue;
            }
            b.add(&l, t, v).expect("backfill sample");
        }
    }
    let db = Db::open(dir, opts).expect("open db");
    db.backfill_block(b).expect("backfill");
    db.maintain().expect("compact");
    db
}

fn matrix_points(v: &Value) -> usize {
    match v {
        Value::Matrix(m) => m.iter().map(|s| s.floats.len()).sum(),
        _ => 0,
    }
}

/// Samples scanned by `selectors` over the range: the engine's own count of every window.
fn samples_scanned(e: &Engine, db: &Db, selectors: &[&str], start: i64, end: i64) -> f64 {
    let mut n = 0.0;
    for sel in selectors {
        let q = format!("sum(count_over_time({sel}[5m]))");
        let r = e.range(db, &q, start, end, STEP_MS).expect("count query");
        if let Value::Matrix(m) = r.value {
            n += m
                .iter()
                .flat_map(|s| s.floats.iter())
                .map(|p| p.f)
                .sum::<f64>();
        }
    }
    n
}

fn main() {
    let hours = env_f64("INFERDB_BENCH_HOURS", 24.0);
    let reps = env_f64("INFERDB_BENCH_REPS", 5.0).max(1.0) as usize;
    let cfg = workload::Config::hours(hours);
    let t0 = Instant::now();
    let wl = workload::generate(&cfg);
    let n_samples = wl.num_samples();
    println!(
        "workload: {hours} h, {} series, {n_samples} samples, generated in {:.1} s",
        wl.series.len(),
        t0.elapsed().as_secs_f64()
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let t0 = Instant::now();
    let db = build_store(dir.path(), &wl);
    drop(wl);
    println!(
        "store: {} blocks, built in {:.1} s",
        db.blocks().len(),
        t0.elapsed().as_secs_f64()
    );
    // the whole workload, on step multiples
    let start = (cfg.start_ms / STEP_MS + 1) * STEP_MS;
    let end = (cfg.start_ms + cfg.duration_ms) / STEP_MS * STEP_MS;
    let steps = (end - start) / STEP_MS + 1;
    let engine = Engine::new(EngineOptions::default());
    println!("range: [{start}, {end}] ms, step 15 s, {steps} steps, {reps} reps per query");
    println!(
        "{:<24} {:>12} {:>10} {:>10} {:>10} {:>12} {:>12}",
        "query", "scanned", "points", "wall_ms", "cpu_ms", "M/s wall", "M/s per CPU"
    );
    let only = std::env::var("INFERDB_BENCH_QUERY").ok();
    for (name, q, sels) in QUERIES {
        if only.as_deref().is_some_and(|o| o != *name) {
            continue;
        }
        let scanned = samples_scanned(&engine, &db, sels, start, end);
        // warm-up (page cache, allocator)
        let r = engine.range(&db, q, start, end, STEP_MS).expect("query");
        let points = matrix_points(&r.value);
        let (w0, c0) = (Instant::now(), process_cpu());
        for _ in 0..reps {
            black_box(engine.range(&db, q, start, end, STEP_MS).expect("query"));
        }
        let wall = w0.elapsed().as_secs_f64() / reps as f64;
        let cpu = (process_cpu() - c0).as_secs_f64() / reps as f64;
        println!(
            "{:<24} {:>12.0} {:>10} {:>10.1} {:>10.1} {:>12.1} {:>12.1}",
            name,
            scanned,
            points,
            wall * 1e3,
            cpu * 1e3,
            scanned / wall / 1e6,
            if cpu > 0.0 {
                scanned / cpu / 1e6
            } else {
                f64::NAN
            },
        );
    }
    if std::env::var_os("INFERDB_BENCH_SUMMARY_ONLY").is_some() {
        return;
    }
    let mut c = Criterion::default()
        .configure_from_args()
        .sample_size(10)
        .measurement_time(Duration::from_secs(10));
    let mut g = c.benchmark_group("query_range_15s");
    for (name, q, _) in QUERIES {
        g.bench_function(*name, |b| {
            b.iter(|| black_box(engine.range(&db, q, start, end, STEP_MS).expect("query")))
        });
    }
    g.finish();
    c.final_summary();
}
