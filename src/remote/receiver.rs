//! The receiving side of remote write and remote read, independent of HTTP: [`RemoteStore`]
//! takes a decompressed remote-write body, checks all of it, and appends its samples to the
//! [`Db`] in one transaction (the same appender scrapes use); it answers remote-read queries
//! from the store's querier. `api/write.rs` and `api/read.rs` put it on `/api/v1/write` and
//! `/api/v1/read`.
//!
//! Semantics follow Prometheus' `storage/remote/write_handler.go`: an out-of-order sample, a
//! different value at an existing timestamp, or a sample older than the head rolls the whole
//! request back and answers 400 (so senders do not retry it); storage failures answer 500
//! (senders retry). inferdb is stricter than Prometheus 2 on label sets: a series whose labels
//! are unsorted, repeated, without a valid metric name or with an invalid name makes the whole
//! request a 400 before anything is stored.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use inferdb_storage::labels::{is_valid_label_name, is_valid_metric_name, METRIC_NAME};
use inferdb_storage::{Db, Error as StoreError, Label, Labels, MatchOp, Matcher, SeriesRef};
use parking_lot::Mutex;
use rustc_hash::FxHasher;

use super::proto::{self, MatcherType, MetricType, ReadRequest, ReadResponse, ResponseType};
use super::wire::{parse_labels, SeriesView, WriteView};

/// Limits and switches of the receiver.
#[derive(Debug, Clone)]
pub struct RemoteOptions {
    /// Whether `/api/v1/write` accepts data (`--web.enable-remote-write-receiver`).
    pub write_enabled: bool,
    /// The largest compressed request body accepted, bytes.
    pub max_compressed_bytes: usize,
    /// The largest decompressed request body accepted, bytes.
    pub max_decoded_bytes: usize,
    /// The most samples one remote-read request may return (Prometheus'
    /// `--storage.remote.read-sample-limit`, default 5e7; 0: no limit).
    pub read_sample_limit: usize,
}

impl Default for RemoteOptions {
    fn default() -> Self {
        RemoteOptions {
            write_enabled: false,
            max_compressed_bytes: 32 << 20,
            max_decoded_bytes: 128 << 20,
            read_sample_limit: 50_000_000,
        }
    }
}

/// Why a remote-write or remote-read request failed, with the HTTP status it maps to.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// The request is malformed or refused as a whole (400); senders must not retry it.
    #[error("{0}")]
    BadRequest(String),
    /// The store failed (500); senders retry.
    #[error("{0}")]
    Internal(String),
}

/// What one remote-write request did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteStats {
    /// Series in the request.
    pub series: usize,
    /// Samples stored (exact duplicates of stored samples are accepted and count here).
    pub samples: usize,
    /// Metadata entries recorded.
    pub metadata: usize,
    /// Exemplars dropped (inferdb stores none).
    pub exemplars: usize,
}

/// Counters for inferdb's own `/metrics`.
#[derive(Debug, Default)]
struct Counters {
    requests: AtomicU64,
    samples: AtomicU64,
    metadata: AtomicU64,
    exemplars_dropped: AtomicU64,
    invalid_requests: AtomicU64,
    out_of_order: AtomicU64,
    duplicate: AtomicU64,
    out_of_bounds: AtomicU64,
    storage_errors: AtomicU64,
    read_requests: AtomicU64,
    read_samples: AtomicU64,
}

/// A hasher for keys that are hashes already.
#[derive(Default)]
struct IdHasher(u64);
impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, b: &[u8]) {
        for x in b {
            self.0 = (self.0 << 8) | u64::from(*x);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

const CACHE_SHARDS: usize = 16;
/// Entries per shard before the shard is cleared (bounds memory under series churn).
const CACHE_SHARD_MAX: usize = 1 << 17;
/// A thread's decompression buffer is kept for the next request up to this size.
const KEEP_BUF_BYTES: usize = 16 << 20;

struct CacheEntry {
    /// The series' label fields as they appear in a `TimeSeries` message.
    raw: Box<[u8]>,
    r: u64,
}

type CacheShard = HashMap<u64, CacheEntry, BuildHasherDefault<IdHasher>>;

/// A fast hash of a series' raw label bytes, for the series cache (collisions only cost a
/// miss: hits compare the bytes).
fn hash_raw(bytes: &[u8]) -> u64 {
    let mut h = FxHasher::default();
    h.write(bytes);
    h.finish()
}

fn fmt_pairs(pairs: &[(&str, &str)]) -> String {
    let mut s = String::from("{");
    for (i, (n, v)) in pairs.iter().enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        let _ = write!(s, "{n}={v:?}");
    }
    s.push('}');
    s
}

/// Checks one series' labels as sent: sorted by name, no name twice, a valid metric name,
/// valid label names.
fn check_labels(pairs: &[(&str, &str)]) -> Result<(), String> {
    let mut name = None;
    for (i, (n, v)) in pairs.iter().enumerate() {
        if i > 0 {
            let prev = pairs[i - 1].0;
            if prev == *n {
                return Err(format!(
                    "invalid labels {}: duplicate label name {n:?}",
                    fmt_pairs(pairs)
                ));
            }
            if prev > *n {
                return Err(format!(
                    "invalid labels {}: labels not sorted by name ({prev:?} before {n:?})",
                    fmt_pairs(pairs)
                ));
            }
        }
        if *n == METRIC_NAME {
            name = Some(*v);
        } else if !is_valid_label_name(n) {
            return Err(format!(
                "invalid labels {}: invalid label name {n:?}",
                fmt_pairs(pairs)
            ));
        }
    }
    match name {
        None | Some("") => Err(format!(
            "invalid labels {}: missing metric name",
            fmt_pairs(pairs)
        )),
        Some(m) if !is_valid_metric_name(m) => Err(format!(
            "invalid labels {}: invalid metric name {m:?}",
            fmt_pairs(pairs)
        )),
        _ => Ok(()),
    }
}

fn to_labels(pairs: &[(&str, &str)]) -> Labels {
    Labels::from_sorted_unchecked(
        pairs
            .iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(n, v)| Label::new(*n, *v))
            .collect(),
    )
}

fn metric_type_name(t: i32) -> &'static str {
    match MetricType::try_from(t) {
        Ok(MetricType::Counter) => "counter",
        Ok(MetricType::Gauge) => "gauge",
        Ok(MetricType::Histogram) => "histogram",
        Ok(MetricType::Gaugehistogram) => "gaugehistogram",
        Ok(MetricType::Summary) => "summary",
        Ok(MetricType::Info) => "info",
        Ok(MetricType::Stateset) => "stateset",
        Ok(MetricType::Unknown) | Err(_) => "unknown",
    }
}

/// One metric family's metadata as received by remote write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedMetadata {
    /// Family name.
    pub metric: String,
    /// `counter`, `gauge`, ... or `unknown`.
    pub typ: &'static str,
    /// HELP.
    pub help: String,
    /// UNIT.
    pub unit: String,
}

/// The receiver over a store: remote-write ingestion and remote-read queries.
pub struct RemoteStore {
    db: Arc<Db>,
    opts: RemoteOptions,
    cache: Vec<Mutex<CacheShard>>,
    metadata: Mutex<BTreeMap<String, ReceivedMetadata>>,
    counters: Counters,
}

impl RemoteStore {
    /// A receiver appending into `db`.
    pub fn new(db: Arc<Db>, opts: RemoteOptions) -> Self {
        RemoteStore {
            db,
            opts,
            cache: (0..CACHE_SHARDS)
                .map(|_| Mutex::new(CacheShard::default()))
                .collect(),
            metadata: Mutex::new(BTreeMap::new()),
            counters: Counters::default(),
        }
    }

    /// The options.
    pub fn options(&self) -> &RemoteOptions {
        &self.opts
    }

    fn cached(&self, h: u64, raw: &[u8]) -> Option<u64> {
        let shard = self.cache[(h as usize) % CACHE_SHARDS].lock();
        shard.get(&h).filter(|e| *e.raw == *raw).map(|e| e.r)
    }

    fn remember(&self, h: u64, raw: &[u8], r: u64) {
        let mut shard = self.cache[(h as usize) % CACHE_SHARDS].lock();
        if shard.len() >= CACHE_SHARD_MAX {
            shard.clear();
        }
        match shard.get_mut(&h) {
            Some(e) if *e.raw == *raw => e.r = r,
            _ => {
                shard.insert(h, CacheEntry { raw: raw.into(), r });
            }
        }
    }

    fn bad(&self, msg: String) -> RemoteError {
        self.counters
            .invalid_requests
            .fetch_add(1, Ordering::Relaxed);
        RemoteError::BadRequest(msg)
    }

    /// Decompresses (snappy block format) and stores a remote-write body.
    pub fn write_compressed(&self, body: &[u8]) -> Result<WriteStats, RemoteError> {
        let size =
            snap::raw::decompress_len(body).map_err(|e| self.bad(format!("snappy decode: {e}")))?;
        if size > self.opts.max_decoded_bytes {
            return Err(self.bad(format!(
                "decompressed body of {size} bytes exceeds the limit of {} bytes",
                self.opts.max_decoded_bytes
            )));
        }
        // one decompression buffer per (blocking-pool) thread, kept across requests
        thread_local! {
            static RAW: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        RAW.with(|cell| {
            let Ok(mut buf) = cell.try_borrow_mut() else {
                // re-entered (not done today): a buffer of its own
                let raw = snap::raw::Decoder::new()
                    .decompress_vec(body)
                    .map_err(|e| self.bad(format!("snappy decode: {e}")))?;
                return self.write(&raw);
            };
            buf.clear();
            buf.resize(size, 0);
            let res = snap::raw::Decoder::new()
                .decompress(body, &mut buf)
                .map_err(|e| self.bad(format!("snappy decode: {e}")))
                .and_then(|n| self.write(&buf[..n]));
            if buf.capacity() > KEEP_BUF_BYTES {
                *buf = Vec::new();
            }
            res
        })
    }

    /// Stores an uncompressed remote-write body: all or nothing.
    pub fn write(&self, raw: &[u8]) -> Result<WriteStats, RemoteError> {
        self.counters.requests.fetch_add(1, Ordering::Relaxed);
        let mut view = WriteView::default();
        view.decode_lazy_into(raw)
            .map_err(|e| self.bad(e.to_string()))?;
        let n = view.series.len();
        let raw_of = |s: &SeriesView| {
            s.raw_labels
                .as_ref()
                .map(|r| &raw[r.start as usize..r.end as usize])
        };

        // 1. every series' labels, before anything is created or appended: a series whose raw
        // label bytes are cached was checked when it was cached; the others are parsed and
        // checked here (`pairs[ranges[i]]`)
        let mut refs: Vec<Option<u64>> = Vec::with_capacity(n);
        let mut hashes: Vec<u64> = Vec::with_capacity(n);
        let mut pairs: Vec<(&str, &str)> = Vec::new();
        let mut ranges: Vec<(u32, u32)> = Vec::with_capacity(n);
        for s in &view.series {
            let p0 = pairs.len();
            let (h, r) = match raw_of(s) {
                Some(bytes) => {
                    let h = hash_raw(bytes);
                    match self.cached(h, bytes) {
                        Some(r) => (h, Some(r)),
                        None => {
                            parse_labels(bytes, &mut pairs).map_err(|e| self.bad(e.to_string()))?;
                            (h, None)
                        }
                    }
                }
                None => {
                    pairs.extend_from_slice(view.series_labels(s));
                    (0, None)
                }
            };
            if r.is_none() {
                check_labels(&pairs[p0..]).map_err(|e| self.bad(e))?;
            }
            refs.push(r);
            hashes.push(h);
            ranges.push((p0 as u32, pairs.len() as u32));
        }
        // a series' labels, parsed again if it was a cache hit (rare paths only)
        let labels_of = |i: usize| -> Vec<(&str, &str)> {
            let (a, b) = ranges[i];
            if a < b {
                return pairs[a as usize..b as usize].to_vec();
            }
            let mut v = Vec::new();
            if let Some(bytes) = raw_of(&view.series[i]) {
                // these bytes parsed when they were cached
                let _ = parse_labels(bytes, &mut v);
            }
            v
        };

        // 2. create the series not seen before, then append everything in one transaction
        let mut app = self.db.appender();
        let internal = |e: StoreError| {
            self.counters.storage_errors.fetch_add(1, Ordering::Relaxed);
            RemoteError::Internal(e.to_string())
        };
        for (i, s) in view.series.iter().enumerate() {
            if refs[i].is_none() && !view.series_samples(s).is_empty() {
                let (a, b) = ranges[i];
                let r = app
                    .get_ref(&to_labels(&pairs[a as usize..b as usize]))
                    .map_err(|e| match e {
                        StoreError::InvalidLabels(m) => self.bad(format!("invalid labels: {m}")),
                        e => internal(e),
                    })?;
                if let Some(bytes) = raw_of(s) {
                    self.remember(hashes[i], bytes, r.0);
                }
                refs[i] = Some(r.0);
            }
        }
        let mut stored = 0usize;
        for (i, s) in view.series.iter().enumerate() {
            let Some(mut r) = refs[i] else { continue };
            for &(t, v) in view.series_samples(s) {
                let mut res = app.append_ref(SeriesRef(r), t, v);
                if matches!(res, Err(StoreError::UnknownSeries(_))) {
                    // the series left the head since it was cached
                    r = app.get_ref(&to_labels(&labels_of(i))).map_err(internal)?.0;
                    if let Some(bytes) = raw_of(s) {
                        self.remember(hashes[i], bytes, r);
                    }
                    res = app.append_ref(SeriesRef(r), t, v);
                }
                match res {
                    Ok(()) => stored += 1,
                    Err(
                        e @ (StoreError::OutOfOrder
                        | StoreError::DuplicateTimestamp
                        | StoreError::OutOfBounds),
                    ) => {
                        let c = match e {
                            StoreError::OutOfOrder => &self.counters.out_of_order,
                            StoreError::DuplicateTimestamp => &self.counters.duplicate,
                            _ => &self.counters.out_of_bounds,
                        };
                        c.fetch_add(1, Ordering::Relaxed);
                        app.rollback();
                        tracing::debug!(
                            series = %fmt_pairs(&labels_of(i)),
                            timestamp = t,
                            "remote write: {e}"
                        );
                        return Err(self.bad(e.to_string()));
                    }
                    Err(e) => return Err(internal(e)),
                }
            }
        }
        app.commit().map_err(internal)?;

        // 3. metadata, once the samples are in
        if !view.metadata.is_empty() {
            let mut md = self.metadata.lock();
            for m in &view.metadata {
                if m.family.is_empty() {
                    continue;
                }
                let e = ReceivedMetadata {
                    metric: m.family.to_string(),
                    typ: metric_type_name(m.typ),
                    help: m.help.to_string(),
                    unit: m.unit.to_string(),
                };
                if md.get(m.family) != Some(&e) {
                    md.insert(e.metric.clone(), e);
                }
            }
        }
        let c = &self.counters;
        c.samples.fetch_add(stored as u64, Ordering::Relaxed);
        c.metadata
            .fetch_add(view.metadata.len() as u64, Ordering::Relaxed);
        c.exemplars_dropped
            .fetch_add(view.exemplars as u64, Ordering::Relaxed);
        Ok(WriteStats {
            series: n,
            samples: stored,
            metadata: view.metadata.len(),
            exemplars: view.exemplars,
        })
    }

    /// Metadata received so far, one entry per family (the latest sent).
    pub fn metadata(&self) -> Vec<ReceivedMetadata> {
        self.metadata.lock().values().cloned().collect()
    }

    /// Answers a remote-read request with samples (the only response type served).
    pub fn read(&self, req: &ReadRequest) -> Result<ReadResponse, RemoteError> {
        self.counters.read_requests.fetch_add(1, Ordering::Relaxed);
        let samples_ok = req.accepted_response_types.is_empty()
            || req
                .accepted_response_types
                .contains(&(ResponseType::Samples as i32));
        if !samples_ok {
            let names: Vec<String> = req
                .accepted_response_types
                .iter()
                .map(|t| match ResponseType::try_from(*t) {
                    Ok(ResponseType::StreamedXorChunks) => "STREAMED_XOR_CHUNKS".to_string(),
                    Ok(ResponseType::Samples) => "SAMPLES".to_string(),
                    Err(_) => t.to_string(),
                })
                .collect();
            return Err(RemoteError::BadRequest(format!(
                "server does not support any of the requested response types: [{}]; supported: [SAMPLES]",
                names.join(" ")
            )));
        }
        let limit = match self.opts.read_sample_limit {
            0 => usize::MAX,
            n => n,
        };
        let mut total = 0usize;
        let mut out = ReadResponse::default();
        for q in &req.queries {
            let mut ms = Vec::with_capacity(q.matchers.len());
            for m in &q.matchers {
                let op = match MatcherType::try_from(m.r#type) {
                    Ok(MatcherType::Eq) => MatchOp::Equal,
                    Ok(MatcherType::Neq) => MatchOp::NotEqual,
                    Ok(MatcherType::Re) => MatchOp::RegexMatch,
                    Ok(MatcherType::Nre) => MatchOp::RegexNoMatch,
                    Err(_) => {
                        return Err(RemoteError::BadRequest(format!(
                            "invalid matcher type {}",
                            m.r#type
                        )))
                    }
                };
                ms.push(
                    Matcher::new(op, m.name.clone(), m.value.clone())
                        .map_err(|e| RemoteError::BadRequest(e.to_string()))?,
                );
            }
            let querier = self
                .db
                .querier(q.start_timestamp_ms, q.end_timestamp_ms)
                .map_err(|e| RemoteError::Internal(e.to_string()))?;
            let series = querier
                .select(&ms)
                .map_err(|e| RemoteError::Internal(e.to_string()))?;
            let mut result = proto::QueryResult::default();
            for s in &series {
                let mut it = s.iter();
                let mut samples = Vec::new();
                for (t, v) in it.by_ref() {
                    total += 1;
                    if total > limit {
                        return Err(RemoteError::BadRequest(format!(
                            "exceeded sample limit ({limit})"
                        )));
                    }
                    samples.push(proto::Sample {
                        value: v,
                        timestamp: t,
                    });
                }
                if let Some(e) = it.take_err() {
                    return Err(RemoteError::Internal(e.to_string()));
                }
                if samples.is_empty() {
                    continue;
                }
                result.timeseries.push(proto::TimeSeries {
                    labels: s
                        .labels()
                        .iter()
                        .map(|l| proto::Label {
                            name: l.name.clone(),
                            value: l.value.clone(),
                        })
                        .collect(),
                    samples,
                    exemplars: vec![],
                });
            }
            out.results.push(result);
        }
        self.counters
            .read_samples
            .fetch_add(total as u64, Ordering::Relaxed);
        Ok(out)
    }

    /// The receiver's counters in the Prometheus text format, for inferdb's `/metrics`.
    pub fn self_metrics(&self) -> String {
        let c = &self.counters;
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut o = String::new();
        let mut counter = |name: &str, help: &str, lines: &[(&str, u64)]| {
            let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} counter");
            for (labels, v) in lines {
                let _ = writeln!(o, "{name}{labels} {v}");
            }
        };
        counter(
            "inferdb_remote_write_requests_total",
            "Remote-write requests received.",
            &[("", g(&c.requests))],
        );
        counter(
            "inferdb_remote_write_samples_total",
            "Samples stored from remote write.",
            &[("", g(&c.samples))],
        );
        counter(
            "inferdb_remote_write_metadata_total",
            "Metadata entries received by remote write.",
            &[("", g(&c.metadata))],
        );
        counter(
            "inferdb_remote_write_exemplars_dropped_total",
            "Exemplars received by remote write and dropped (not stored).",
            &[("", g(&c.exemplars_dropped))],
        );
        counter(
            "inferdb_remote_write_invalid_requests_total",
            "Remote-write requests answered 400 (malformed, invalid labels, or a refused sample).",
            &[("", g(&c.invalid_requests))],
        );
        counter(
            "inferdb_remote_write_rejected_samples_total",
            "Samples whose refusal rolled back a remote-write request, by reason.",
            &[
                ("{reason=\"out_of_order\"}", g(&c.out_of_order)),
                ("{reason=\"duplicate_timestamp\"}", g(&c.duplicate)),
                ("{reason=\"out_of_bounds\"}", g(&c.out_of_bounds)),
            ],
        );
        counter(
            "inferdb_remote_write_storage_errors_total",
            "Remote-write requests that failed in storage (answered 500).",
            &[("", g(&c.storage_errors))],
        );
        counter(
            "inferdb_remote_read_requests_total",
            "Remote-read requests received.",
            &[("", g(&c.read_requests))],
        );
        counter(
            "inferdb_remote_read_samples_total",
            "Samples returned by remote read.",
            &[("", g(&c.read_samples))],
        );
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remote::proto::{Label as PLabel, Sample, TimeSeries, WriteRequest};
    use prost::Message;

    fn ts(labels: &[(&str, &str)], samples: &[(i64, f64)]) -> TimeSeries {
        TimeSeries {
            labels: labels
                .iter()
                .map(|(n, v)| PLabel {
                    name: n.to_string(),
                    value: v.to_string(),
                })
                .collect(),
            samples: samples
                .iter()
                .map(|(t, v)| Sample {
                    value: *v,
                    timestamp: *t,
                })
                .collect(),
            exemplars: vec![],
        }
    }

    fn body(series: Vec<TimeSeries>) -> Vec<u8> {
        WriteRequest {
            timeseries: series,
            metadata: vec![],
        }
        .encode_to_vec()
    }

    fn count(db: &Db) -> usize {
        let q = db.querier(i64::MIN, i64::MAX).unwrap();
        q.select(&[Matcher::new(MatchOp::RegexMatch, "__name__", ".+").unwrap()])
            .unwrap()
            .iter()
            .map(|s| s.iter().count())
            .sum()
    }

    #[test]
    fn all_or_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(Db::open(dir.path(), Default::default()).unwrap());
        let rs = RemoteStore::new(db.clone(), RemoteOptions::default());
        let a = [("__name__", "a"), ("job", "x")];
        let st = rs
            .write(&body(vec![ts(&a, &[(1000, 1.0), (2000, 2.0)])]))
            .unwrap();
        assert_eq!(st.samples, 2);
        // second request: a good new series, then a bad one: nothing of it is stored
        for bad in [
            ts(&[("job", "x"), ("__name__", "b")], &[(1, 1.0)]),
            ts(&[("__name__", "b"), ("__name__", "c")], &[(1, 1.0)]),
            ts(&[("job", "x")], &[(1, 1.0)]),
            ts(&[("__name__", "b"), ("1x", "y")], &[(1, 1.0)]),
        ] {
            let e = rs
                .write(&body(vec![ts(&[("__name__", "g")], &[(5, 5.0)]), bad]))
                .unwrap_err();
            assert!(
                matches!(e, RemoteError::BadRequest(ref m) if m.starts_with("invalid labels")),
                "{e}"
            );
        }
        assert_eq!(count(&db), 2);
        // an out-of-order sample rolls the whole request back
        let e = rs
            .write(&body(vec![
                ts(&[("__name__", "g")], &[(5, 5.0)]),
                ts(&a, &[(1500, 9.0)]),
            ]))
            .unwrap_err();
        assert_eq!(e.to_string(), "out of order sample");
        let e = rs.write(&body(vec![ts(&a, &[(2000, 9.0)])])).unwrap_err();
        assert_eq!(e.to_string(), "duplicate sample for timestamp");
        assert_eq!(count(&db), 2);
        // an exact duplicate is accepted (a resend)
        rs.write(&body(vec![ts(&a, &[(2000, 2.0), (3000, 3.0)])]))
            .unwrap();
        assert_eq!(count(&db), 3);
        let m = rs.self_metrics();
        assert!(
            m.contains("inferdb_remote_write_rejected_samples_total{reason=\"out_of_order\"} 1")
        );
        assert!(m.contains("inferdb_remote_write_invalid_requests_total 6"));
        // the series cache is keyed on the raw label bytes: the cached set sent unsorted is
        // still refused, the same set with an extra empty-valued label is the same series
        let e = rs
            .write(&body(vec![ts(
                &[("job", "x"), ("__name__", "a")],
                &[(4000, 4.0)],
            )]))
            .unwrap_err();
        assert!(e.to_string().contains("not sorted"), "{e}");
        rs.write(&body(vec![ts(
            &[("__name__", "a"), ("env", ""), ("job", "x")],
            &[(4000, 4.0)],
        )]))
        .unwrap();
        assert_eq!(count(&db), 4);
        // labels are UTF-8-checked even though the decoding is lazy
        let mut raw = body(vec![ts(&[("__name__", "zz\u{e9}")], &[(1, 1.0)])]);
        let at = raw.len() - raw.iter().rev().position(|b| *b == 0xc3).unwrap() - 1;
        raw[at] = 0xff;
        let e = rs.write(&raw).unwrap_err();
        assert!(e.to_string().contains("UTF-8"), "{e}");
        assert_eq!(count(&db), 4);
        // garbage
        assert!(matches!(
            rs.write_compressed(b"\xff\xff\xff\xff\xff"),
            Err(RemoteError::BadRequest(_))
        ));
    }
}
