//! inferdb's own metrics, shown on `GET /metrics` in the Prometheus text format.
//!
//! One process-wide registry. Code anywhere adds a metric with one line and keeps the handle
//! (registering the same name and labels again returns the same metric, so a handle may also
//! be looked up where it is used, at the cost of a lock and a map lookup):
//!
//! ```
//! use std::sync::LazyLock;
//! use inferdb::metrics::{self, Counter};
//!
//! static SENT: LazyLock<Counter> = LazyLock::new(|| {
//!     metrics::counter("doc_example_samples_sent_total", "Samples sent.")
//! });
//! SENT.add(100);
//! // one child of a labelled family
//! metrics::counter_with("doc_example_failures_total", "Failures by reason.", &[("reason", "http")]).inc();
//! let text = metrics::render();
//! assert!(text.contains("doc_example_samples_sent_total 100"));
//! assert!(text.contains("doc_example_failures_total{reason=\"http\"} 1"));
//! ```
//!
//! Values computed on demand (from a store's statistics, say) are added by a collector:
//! [`register_collector`] takes a closure that writes text-format lines (use [`write_family`]).
//! Counters are `u64` (whole events); a [`Gauge`] and a [`Histogram`]'s sum are `f64`.
//! Names follow Prometheus' own where Prometheus has the metric (`prometheus_tsdb_*`,
//! `prometheus_target_*`, `process_*`), `inferdb_*` otherwise.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};

use parking_lot::Mutex;

use crate::model::exposition::escape_label_value;

/// A value as the text format writes it (Go's `'g'`, as client_golang writes it).
fn format_float_g(v: f64) -> String {
    inferdb_query::go_format::format_float(v, inferdb_query::go_format::FloatFormat::G)
}

/// A monotonically increasing count.
#[derive(Debug, Clone, Default)]
pub struct Counter(Arc<AtomicU64>);

impl Counter {
    /// Adds one.
    pub fn inc(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
    /// Adds `n`.
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    /// The current count.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A value that goes up and down.
#[derive(Debug, Clone, Default)]
pub struct Gauge(Arc<AtomicU64>);

impl Gauge {
    /// Sets the value.
    pub fn set(&self, v: f64) {
        self.0.store(v.to_bits(), Ordering::Relaxed);
    }
    /// Adds `d` (may be negative).
    pub fn add(&self, d: f64) {
        let _ = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| {
                Some((f64::from_bits(b) + d).to_bits())
            });
    }
    /// The current value.
    pub fn get(&self) -> f64 {
        f64::from_bits(self.0.load(Ordering::Relaxed))
    }
}

#[derive(Debug)]
struct HistInner {
    bounds: Vec<f64>,
    counts: Vec<AtomicU64>,
    count: AtomicU64,
    sum: AtomicU64,
}

/// Observations counted in buckets (cumulative on output), with their sum and count.
#[derive(Debug, Clone)]
pub struct Histogram(Arc<HistInner>);

impl Histogram {
    /// A histogram outside the registry (for a family written by [`write_histograms`]), with
    /// these bucket upper bounds (`+Inf` implied).
    pub fn new(bounds: &[f64]) -> Self {
        let mut b: Vec<f64> = bounds.iter().copied().filter(|x| x.is_finite()).collect();
        b.sort_by(f64::total_cmp);
        b.dedup();
        Histogram(Arc::new(HistInner {
            counts: b.iter().map(|_| AtomicU64::new(0)).collect(),
            bounds: b,
            count: AtomicU64::new(0),
            sum: AtomicU64::new(0f64.to_bits()),
        }))
    }
    /// Records one observation.
    pub fn observe(&self, v: f64) {
        let h = &self.0;
        if let Some(i) = h.bounds.iter().position(|b| v <= *b) {
            h.counts[i].fetch_add(1, Ordering::Relaxed);
        }
        h.count.fetch_add(1, Ordering::Relaxed);
        let _ = h
            .sum
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| {
                Some((f64::from_bits(b) + v).to_bits())
            });
    }
    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.0.count.load(Ordering::Relaxed)
    }
    /// Sum of the observations.
    pub fn sum(&self) -> f64 {
        f64::from_bits(self.0.sum.load(Ordering::Relaxed))
    }
}

/// The quantiles a [`Summary`] reports, Prometheus' objectives for its own summaries.
pub const SUMMARY_QUANTILES: &[f64] = &[0.5, 0.9, 0.99];

/// How many recent observations a [`Summary`] keeps for its quantiles.
const SUMMARY_WINDOW: usize = 1024;

/// How old an observation may be and still count in a [`Summary`]'s quantiles (Prometheus'
/// default `MaxAge`).
const SUMMARY_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(600);

#[derive(Debug, Default)]
struct SummaryInner {
    count: AtomicU64,
    sum: AtomicU64,
    /// The most recent observations with when they were made, oldest overwritten first.
    recent: Mutex<(Vec<(std::time::Instant, f64)>, usize)>,
}

/// Observations with their count, sum and the quantiles 0.5, 0.9 and 0.99 of the last
/// 1,024 within 10 minutes (exact over that window, where Prometheus' client estimates over
/// all observations of the window).
#[derive(Debug, Clone, Default)]
pub struct Summary(Arc<SummaryInner>);

impl Summary {
    /// Records one observation.
    pub fn observe(&self, v: f64) {
        let s = &self.0;
        s.count.fetch_add(1, Ordering::Relaxed);
        let _ = s
            .sum
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| {
                Some((f64::from_bits(b) + v).to_bits())
            });
        let mut r = s.recent.lock();
        let now = std::time::Instant::now();
        if r.0.len() < SUMMARY_WINDOW {
            r.0.push((now, v));
        } else {
            let i = r.1;
            r.0[i] = (now, v);
            r.1 = (i + 1) % SUMMARY_WINDOW;
        }
    }
    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.0.count.load(Ordering::Relaxed)
    }
    /// Sum of the observations.
    pub fn sum(&self) -> f64 {
        f64::from_bits(self.0.sum.load(Ordering::Relaxed))
    }
    /// The `q`-quantile of the recent observations (NaN when there are none), as the
    /// observation at rank `ceil(q * n)`.
    pub fn quantile(&self, q: f64) -> f64 {
        let mut v: Vec<f64> = {
            let r = self.0.recent.lock();
            r.0.iter()
                .filter(|(t, _)| t.elapsed() <= SUMMARY_MAX_AGE)
                .map(|(_, v)| *v)
                .collect()
        };
        if v.is_empty() {
            return f64::NAN;
        }
        v.sort_by(f64::total_cmp);
        let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
        v[rank - 1]
    }
}

/// Default buckets for durations in seconds (1 ms .. 60 s).
pub const DURATION_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

#[derive(Debug, Clone)]
enum Metric {
    Counter(Counter),
    Gauge(Gauge),
    Histogram(Histogram),
    Summary(Summary),
}

impl Metric {
    fn kind(&self) -> &'static str {
        match self {
            Metric::Counter(_) => "counter",
            Metric::Gauge(_) => "gauge",
            Metric::Histogram(_) => "histogram",
            Metric::Summary(_) => "summary",
        }
    }
}

struct Family {
    help: String,
    kind: &'static str,
    /// Children by their rendered label set (`{a="x",b="y"}` or empty).
    children: BTreeMap<String, Metric>,
}

/// Writes text-format lines of the process' own metrics into the page.
pub type Collector = Box<dyn Fn(&mut String) + Send + Sync>;

#[derive(Default)]
struct Registry {
    families: Mutex<BTreeMap<String, Family>>,
    collectors: Mutex<Vec<(String, Collector)>>,
}

static REGISTRY: LazyLock<Registry> = LazyLock::new(Registry::default);

fn label_key(labels: &[(&str, &str)]) -> String {
    if labels.is_empty() {
        return String::new();
    }
    let mut sorted: Vec<&(&str, &str)> = labels.iter().collect();
    sorted.sort_by_key(|(n, _)| *n);
    let mut s = String::from("{");
    for (i, (n, v)) in sorted.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        let _ = write!(s, "{n}=\"{}\"", escape_label_value(v));
    }
    s.push('}');
    s
}

fn get_or_register(
    name: &str,
    help: &str,
    labels: &[(&str, &str)],
    make: impl FnOnce() -> Metric,
) -> Metric {
    let key = label_key(labels);
    let mut fams = REGISTRY.families.lock();
    let fam = fams.entry(name.to_string()).or_insert_with(|| Family {
        help: help.to_string(),
        kind: "",
        children: BTreeMap::new(),
    });
    if let Some(m) = fam.children.get(&key) {
        return m.clone();
    }
    let m = make();
    if fam.kind.is_empty() {
        fam.kind = m.kind();
    }
    if fam.kind != m.kind() {
        // a programming error: the same name registered with two types. Keep the first on the
        // page; the handle still counts, unseen.
        tracing::warn!("metric {name} registered as {} and {}", fam.kind, m.kind());
        return m;
    }
    fam.children.insert(key, m.clone());
    m
}

/// Removes the series `name` with these labels from the page, as client_golang's
/// `DeleteLabelValues` does (a family left without series disappears); a handle still held
/// counts on unseen, and asking for the series again starts it at zero. Whether it existed.
pub fn delete_with(name: &str, labels: &[(&str, &str)]) -> bool {
    let mut fams = REGISTRY.families.lock();
    let Some(fam) = fams.get_mut(name) else {
        return false;
    };
    let gone = fam.children.remove(&label_key(labels)).is_some();
    if fam.children.is_empty() {
        fams.remove(name);
    }
    gone
}

/// The counter `name` without labels (registered on first use).
pub fn counter(name: &str, help: &str) -> Counter {
    counter_with(name, help, &[])
}

/// The counter `name` with these labels (registered on first use).
pub fn counter_with(name: &str, help: &str, labels: &[(&str, &str)]) -> Counter {
    match get_or_register(name, help, labels, || Metric::Counter(Counter::default())) {
        Metric::Counter(c) => c,
        _ => Counter::default(),
    }
}

/// The gauge `name` without labels.
pub fn gauge(name: &str, help: &str) -> Gauge {
    gauge_with(name, help, &[])
}

/// The gauge `name` with these labels.
pub fn gauge_with(name: &str, help: &str, labels: &[(&str, &str)]) -> Gauge {
    match get_or_register(name, help, labels, || Metric::Gauge(Gauge::default())) {
        Metric::Gauge(g) => g,
        _ => Gauge::default(),
    }
}

/// The histogram `name` with these buckets (upper bounds; `+Inf` is implied), no labels.
pub fn histogram(name: &str, help: &str, buckets: &[f64]) -> Histogram {
    histogram_with(name, help, buckets, &[])
}

/// The histogram `name` with these buckets and labels (the buckets of the first registration
/// of a label set win).
pub fn histogram_with(
    name: &str,
    help: &str,
    buckets: &[f64],
    labels: &[(&str, &str)],
) -> Histogram {
    match get_or_register(name, help, labels, || {
        Metric::Histogram(Histogram::new(buckets))
    }) {
        Metric::Histogram(h) => h,
        _ => Histogram::new(buckets),
    }
}

/// The summary `name` with these labels (registered on first use).
pub fn summary_with(name: &str, help: &str, labels: &[(&str, &str)]) -> Summary {
    match get_or_register(name, help, labels, || Metric::Summary(Summary::default())) {
        Metric::Summary(s) => s,
        _ => Summary::default(),
    }
}

/// Adds a collector, run at every render; `key` names it, and registering the same key again
/// replaces the earlier one (a restarted component does not leave a stale collector behind).
pub fn register_collector(key: &str, f: impl Fn(&mut String) + Send + Sync + 'static) {
    let mut c = REGISTRY.collectors.lock();
    c.retain(|(k, _)| k != key);
    c.push((key.to_string(), Box::new(f)));
}

/// Removes the collector registered under `key`.
pub fn unregister_collector(key: &str) {
    REGISTRY.collectors.lock().retain(|(k, _)| k != key);
}

/// Writes one family: HELP and TYPE lines, then one line per `(labels, value)`.
pub fn write_family(
    out: &mut String,
    name: &str,
    help: &str,
    kind: &str,
    rows: &[(&[(&str, &str)], f64)],
) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    for (labels, v) in rows {
        let _ = writeln!(out, "{name}{} {}", label_key(labels), format_float_g(*v));
    }
}

fn with_le(key: &str, le: &str) -> String {
    with_label(key, "le", le)
}

/// A rendered label set with one more label at the end (`le`, `quantile`).
fn with_label(key: &str, name: &str, value: &str) -> String {
    if key.is_empty() {
        format!("{{{name}=\"{value}\"}}")
    } else {
        format!("{},{name}=\"{value}\"}}", &key[..key.len() - 1])
    }
}

fn write_histogram_lines(out: &mut String, name: &str, key: &str, h: &Histogram) {
    let mut cum = 0u64;
    for (b, c) in h.0.bounds.iter().zip(&h.0.counts) {
        cum += c.load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "{name}_bucket{} {cum}",
            with_le(key, &format_float_g(*b))
        );
    }
    let _ = writeln!(
        out,
        "{name}_bucket{} {}\n{name}_sum{key} {}\n{name}_count{key} {}",
        with_le(key, "+Inf"),
        h.count(),
        format_float_g(h.sum()),
        h.count()
    );
}

/// Writes one histogram family: HELP and TYPE lines, then each child's buckets, sum and count.
pub fn write_histograms(
    out: &mut String,
    name: &str,
    help: &str,
    rows: &[(&[(&str, &str)], &Histogram)],
) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
    for (labels, h) in rows {
        write_histogram_lines(out, name, &label_key(labels), h);
    }
}

/// Writes the process metrics (`process_cpu_seconds_total`, resident and virtual memory, open
/// file descriptors) from `/proc/self` where it exists.
pub fn write_process_metrics(out: &mut String) {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return;
    };
    // fields after the command name, which is in parentheses and may hold spaces
    let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
        return;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state): utime is field 14, stime 15, vsize 23, rss 24
    let num = |i: usize| f.get(i - 3).and_then(|s| s.parse::<f64>().ok());
    // Linux reports these in USER_HZ ticks, 100 a second on every architecture it runs on
    // (independent of the kernel's CONFIG_HZ); pages are 4 KiB on x86_64 and most aarch64.
    let ticks = 100.0;
    if let (Some(u), Some(s)) = (num(14), num(15)) {
        write_family(
            out,
            "process_cpu_seconds_total",
            "Total user and system CPU time spent in seconds.",
            "counter",
            &[(&[], (u + s) / ticks)],
        );
    }
    if let Some(v) = num(23) {
        write_family(
            out,
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes.",
            "gauge",
            &[(&[], v)],
        );
    }
    if let Some(pages) = num(24) {
        write_family(
            out,
            "process_resident_memory_bytes",
            "Resident memory size in bytes.",
            "gauge",
            &[(&[], pages * 4096.0)],
        );
    }
    if let Ok(rd) = std::fs::read_dir("/proc/self/fd") {
        write_family(
            out,
            "process_open_fds",
            "Number of open file descriptors.",
            "gauge",
            &[(&[], rd.count() as f64)],
        );
    }
    if let Ok(limits) = std::fs::read_to_string("/proc/self/limits") {
        if let Some(max) = limits
            .lines()
            .find(|l| l.starts_with("Max open files"))
            .and_then(|l| l.split_whitespace().nth(3))
            .and_then(|v| v.parse::<f64>().ok())
        {
            write_family(
                out,
                "process_max_fds",
                "Maximum number of open file descriptors.",
                "gauge",
                &[(&[], max)],
            );
        }
    }
}

/// Writes a store's statistics under Prometheus' TSDB names (`prometheus_tsdb_head_series`,
/// `prometheus_tsdb_head_samples_appended_total`, rejections by reason, blocks, WAL
/// corruptions found at open, failed WAL writes, checkpoints and compactions).
pub fn write_db_metrics(out: &mut String, db: &inferdb_storage::Db) {
    let st = db.stats();
    let float: &[(&str, &str)] = &[("type", "float")];
    write_family(
        out,
        "prometheus_tsdb_head_series",
        "Total number of series in the head block.",
        "gauge",
        &[(&[], st.head_series as f64)],
    );
    write_family(
        out,
        "prometheus_tsdb_head_series_created_total",
        "Total number of series created in the head",
        "counter",
        &[(&[], st.head_series_created as f64)],
    );
    write_family(
        out,
        "prometheus_tsdb_head_series_removed_total",
        "Total number of series removed in the head",
        "counter",
        &[(&[], st.head_series_removed as f64)],
    );
    write_family(
        out,
        "prometheus_tsdb_head_samples_appended_total",
        "Total number of appended samples.",
        "counter",
        &[(float, st.samples_appended as f64)],
    );
    write_family(
        out,
        "prometheus_tsdb_out_of_order_samples_total",
        "Total number of out of order samples ingestion failed attempts.",
        "counter",
        &[(float, st.out_of_order as f64)],
    );
    write_family(
        out,
        "prometheus_tsdb_out_of_bound_samples_total",
        "Total number of out of bound samples ingestion failed attempts.",
        "counter",
        &[(float, st.out_of_bounds as f64)],
    );
    write_family(
        out,
        "inferdb_tsdb_samples_rejected_total",
        "Samples the head refused, by reason.",
        "counter",
        &[
            (&[("reason", "out_of_order")], st.out_of_order as f64),
            (
                &[("reason", "duplicate_timestamp")],
                st.duplicate_timestamp as f64,
            ),
            (&[("reason", "out_of_bounds")], st.out_of_bounds as f64),
        ],
    );
    write_family(
        out,
        "inferdb_tsdb_exact_duplicate_samples_total",
        "Samples equal to one already stored (same timestamp and value), accepted silently.",
        "counter",
        &[(&[], st.exact_duplicates as f64)],
    );
    if st.head_min_time <= st.head_max_time {
        write_family(
            out,
            "prometheus_tsdb_head_min_time",
            "Minimum time bound of the head block.",
            "gauge",
            &[(&[], st.head_min_time as f64)],
        );
        write_family(
            out,
            "prometheus_tsdb_head_max_time",
            "Maximum timestamp of the head block.",
            "gauge",
            &[(&[], st.head_max_time as f64)],
        );
    }
    write_family(
        out,
        "inferdb_tsdb_head_memory_bytes",
        "Approximate bytes held by the head.",
        "gauge",
        &[(&[], st.head_memory_bytes as f64)],
    );
    write_family(
        out,
        "prometheus_tsdb_blocks_loaded",
        "Number of currently loaded data blocks.",
        "gauge",
        &[(&[], st.blocks as f64)],
    );
    write_family(
        out,
        "prometheus_tsdb_storage_blocks_bytes",
        "The number of bytes that are currently used for local storage by all blocks.",
        "gauge",
        &[(&[], st.block_bytes as f64)],
    );
    let open = db.open_stats();
    write_family(
        out,
        "prometheus_tsdb_wal_corruptions_total",
        "Total number of WAL corruptions (damaged spans found while replaying it at open).",
        "counter",
        &[(&[], open.wal.corruptions.len() as f64)],
    );
    write_family(
        out,
        "inferdb_tsdb_wal_replay_skipped_bytes",
        "Bytes of damaged WAL records skipped or cut off by the replay at open (the records after a damaged span are kept).",
        "gauge",
        &[(
            &[],
            open.wal
                .corruptions
                .iter()
                .map(|c| c.dropped_bytes)
                .sum::<u64>() as f64,
        )],
    );
    write_family(
        out,
        "prometheus_tsdb_wal_writes_failed_total",
        "Total number of write log writes that failed.",
        "counter",
        &[(&[], st.wal_writes_failed as f64)],
    );
    write_family(
        out,
        "inferdb_tsdb_wal_writable",
        "1 while WAL writes succeed; 0 while they fail (a full disk, a read-only folder) and appends are refused.",
        "gauge",
        &[(&[], if st.wal_failing { 0.0 } else { 1.0 })],
    );
    write_family(
        out,
        "inferdb_tsdb_wal_fsyncs_failed_total",
        "WAL fsyncs that failed.",
        "counter",
        &[(&[], st.wal_fsyncs_failed as f64)],
    );
    if st.wal_compression != inferdb_storage::wal::Compression::None {
        write_family(
            out,
            "prometheus_tsdb_wal_record_bytes_saved_total",
            "Total number of bytes saved by the optional record compression. Use this metric to learn about the effectiveness compression.",
            "counter",
            &[(
                &[("compression", st.wal_compression.name())],
                st.wal_bytes_saved as f64,
            )],
        );
    }
    write_family(
        out,
        "prometheus_tsdb_wal_segment_current",
        "Write log segment index that TSDB is currently writing to.",
        "gauge",
        &[(&[], st.wal_segment as f64)],
    );
    write_family(
        out,
        "prometheus_tsdb_checkpoint_creations_total",
        "Total number of checkpoint creations attempted.",
        "counter",
        &[(&[], (st.checkpoints + st.checkpoints_failed) as f64)],
    );
    write_family(
        out,
        "prometheus_tsdb_checkpoint_creations_failed_total",
        "Total number of checkpoint creations that failed.",
        "counter",
        &[(&[], st.checkpoints_failed as f64)],
    );
    write_family(
        out,
        "prometheus_tsdb_wal_truncations_total",
        "Total number of write log truncations attempted.",
        "counter",
        &[(&[], (st.checkpoints + st.checkpoints_failed) as f64)],
    );
    write_family(
        out,
        "prometheus_tsdb_wal_truncations_failed_total",
        "Total number of write log truncations that failed.",
        "counter",
        &[(&[], st.checkpoints_failed as f64)],
    );
    write_family(
        out,
        "prometheus_tsdb_compactions_total",
        "Total number of compactions that were executed for the partition.",
        "counter",
        &[(&[], st.compactions as f64)],
    );
    write_family(
        out,
        "prometheus_tsdb_compactions_failed_total",
        "Total number of compactions that failed for the partition.",
        "counter",
        &[(&[], st.compactions_failed as f64)],
    );
    write_family(
        out,
        "prometheus_tsdb_head_truncations_failed_total",
        "Total number of head truncations that failed.",
        "counter",
        &[(&[], st.head_truncations_failed as f64)],
    );
    write_family(
        out,
        "inferdb_tsdb_blocks_failed_to_open",
        "Block folders that failed to open at start.",
        "gauge",
        &[(&[], open.bad_blocks.len() as f64)],
    );
}

/// The query engine's timings, Prometheus' `prometheus_engine_query_duration_seconds` summary:
/// `slice` is `queue_time` (waiting for a query slot), `prepare_time` (loading series),
/// `inner_eval` (evaluation) or `result_sort` (sorting a range query's result).
pub fn observe_query_slice(slice: &str, d: std::time::Duration) {
    summary_with(
        "prometheus_engine_query_duration_seconds",
        "Query timings",
        &[("slice", slice)],
    )
    .observe(d.as_secs_f64());
}

/// Records an engine result's timings under [`observe_query_slice`]'s slices.
pub fn observe_query_timings(t: &inferdb_query::QueryTimings) {
    observe_query_slice("prepare_time", t.prepare);
    observe_query_slice("inner_eval", t.inner_eval);
    observe_query_slice("result_sort", t.result_sort);
}

/// Prometheus' buckets of `prometheus_tsdb_compaction_duration_seconds` (1 s doubling to
/// 8192 s).
const COMPACTION_BUCKETS: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0,
];

/// The hook that turns the store's timed events into Prometheus' metrics
/// (`prometheus_tsdb_compaction_duration_seconds`, `prometheus_tsdb_wal_fsync_duration_seconds`);
/// both families are on the page from the start.
pub fn storage_event_hook() -> inferdb_storage::EventHook {
    let compaction = histogram(
        "prometheus_tsdb_compaction_duration_seconds",
        "Duration of compaction runs",
        COMPACTION_BUCKETS,
    );
    let fsync = summary_with(
        "prometheus_tsdb_wal_fsync_duration_seconds",
        "Duration of write log fsync.",
        &[],
    );
    inferdb_storage::EventHook::new(move |e| match e {
        inferdb_storage::Event::Compaction { duration, ok: true } => {
            compaction.observe(duration.as_secs_f64())
        }
        inferdb_storage::Event::Compaction { ok: false, .. } => {}
        inferdb_storage::Event::WalFsync { duration } => fsync.observe(duration.as_secs_f64()),
    })
}

/// Records a configuration (re)load: `prometheus_config_last_reload_successful`,
/// `prometheus_config_last_reload_success_timestamp_seconds` and reload counts by result.
pub fn record_config_reload(ok: bool) {
    gauge(
        "prometheus_config_last_reload_successful",
        "Whether the last configuration reload attempt was successful.",
    )
    .set(if ok { 1.0 } else { 0.0 });
    if ok {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        gauge(
            "prometheus_config_last_reload_success_timestamp_seconds",
            "Timestamp of the last successful configuration reload.",
        )
        .set(now.floor());
    }
    counter_with(
        "inferdb_config_reloads_total",
        "Configuration reloads (SIGHUP, POST /-/reload), by result.",
        &[("result", if ok { "success" } else { "failure" })],
    )
    .inc();
}

/// Writes `inferdb_build_info` (always 1; the labels say which build).
pub fn write_build_info(out: &mut String) {
    write_family(
        out,
        "inferdb_build_info",
        "A metric with a constant '1' value labeled by version, profile and platform from which inferdb was built.",
        "gauge",
        &[(
            &[
                ("version", crate::build_info::VERSION),
                ("revision", crate::build_info::REVISION),
                ("toolchain", crate::build_info::TOOLCHAIN),
                ("profile", crate::build_info::PROFILE),
                ("goarch", std::env::consts::ARCH),
                ("goos", std::env::consts::OS),
            ],
            1.0,
        )],
    );
}

/// The whole registry as text-format lines: build info, process metrics, every registered
/// metric, then the collectors' lines.
pub fn render() -> String {
    let mut out = String::new();
    render_into(&mut out);
    out
}

/// Like [`render`], appending to `out`.
pub fn render_into(out: &mut String) {
    write_build_info(out);
    write_process_metrics(out);
    {
        let fams = REGISTRY.families.lock();
        for (name, fam) in fams.iter() {
            let _ = writeln!(
                out,
                "# HELP {name} {}\n# TYPE {name} {}",
                fam.help, fam.kind
            );
            for (key, m) in &fam.children {
                match m {
                    Metric::Counter(c) => {
                        let _ = writeln!(out, "{name}{key} {}", c.get());
                    }
                    Metric::Gauge(g) => {
                        let _ = writeln!(out, "{name}{key} {}", format_float_g(g.get()));
                    }
                    Metric::Histogram(h) => write_histogram_lines(out, name, key, h),
                    Metric::Summary(sm) => {
                        for q in SUMMARY_QUANTILES {
                            let _ = writeln!(
                                out,
                                "{name}{} {}",
                                with_label(key, "quantile", &format_float_g(*q)),
                                format_float_g(sm.quantile(*q))
                            );
                        }
                        let _ = writeln!(
                            out,
                            "{name}_sum{key} {}\n{name}_count{key} {}",
                            format_float_g(sm.sum()),
                            sm.count()
                        );
                    }
                }
            }
        }
    }
    let collectors = REGISTRY.collectors.lock();
    for (_, c) in collectors.iter() {
        c(out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::exposition::{self, Entry, Format};

    #[test]
    fn registry_renders_parseable_text() {
        let c = counter_with("test_reg_total", "A test counter.", &[("reason", "a\"b")]);
        c.add(3);
        // the same name and labels give the same counter
        counter_with("test_reg_total", "A test counter.", &[("reason", "a\"b")]).inc();
        gauge("test_reg_gauge", "A gauge.").set(-2.5);
        let h = histogram("test_reg_seconds", "A histogram.", &[0.1, 1.0]);
        h.observe(0.05);
        h.observe(0.5);
        h.observe(7.0);
        register_collector("test", |o| {
            write_family(o, "test_collected", "Collected.", "gauge", &[(&[], 42.0)])
        });
        let text = render();
        let mut vals = std::collections::HashMap::new();
        for e in exposition::parse(&text, Format::PromText) {
            if let Entry::Sample(s) = e.expect("our page parses") {
                vals.insert(s.series_text.to_string(), s.value);
            }
        }
        assert_eq!(vals["test_reg_total{reason=\"a\\\"b\"}"], 4.0);
        assert_eq!(vals["test_reg_gauge"], -2.5);
        assert_eq!(vals["test_reg_seconds_bucket{le=\"0.1\"}"], 1.0);
        assert_eq!(vals["test_reg_seconds_bucket{le=\"1\"}"], 2.0);
        assert_eq!(vals["test_reg_seconds_bucket{le=\"+Inf\"}"], 3.0);
        assert_eq!(vals["test_reg_seconds_count"], 3.0);
        assert!((vals["test_reg_seconds_sum"] - 7.55).abs() < 1e-9);
        assert_eq!(vals["test_collected"], 42.0);
        let profile = crate::build_info::PROFILE;
        let info = format!(
            "inferdb_build_info{{goarch=\"{}\",goos=\"{}\",profile=\"{profile}\",revision=\"{}\",toolchain=\"{}\",version=\"{}\"}}",
            std::env::consts::ARCH,
            std::env::consts::OS,
            crate::build_info::REVISION,
            crate::build_info::TOOLCHAIN,
            crate::build_info::VERSION
        );
        assert_eq!(vals.get(&info), Some(&1.0), "{text}");
        assert!(vals
            .get("process_cpu_seconds_total")
            .is_some_and(|v| *v >= 0.0));
        assert!(vals
            .get("process_resident_memory_bytes")
            .is_some_and(|v| *v > 0.0));
        unregister_collector("test");
        assert!(!render().contains("test_collected"));
    }

    #[test]
    fn deleted_series_leave_the_page() {
        let (a, b) = (&[("am", "a")], &[("am", "b")]);
        counter_with("test_del_total", "Deleted.", a).add(2);
        counter_with("test_del_total", "Deleted.", b).add(3);
        assert!(delete_with("test_del_total", a));
        assert!(!delete_with("test_del_total", a));
        let text = render();
        assert!(!text.contains("test_del_total{am=\"a\"}"), "{text}");
        assert!(text.contains("test_del_total{am=\"b\"} 3\n"), "{text}");
        // the last series takes its family (HELP and TYPE) along; asked for again, it is new
        assert!(delete_with("test_del_total", b));
        assert!(!render().contains("test_del_total"));
        assert_eq!(counter_with("test_del_total", "Deleted.", a).get(), 0);
    }
}
