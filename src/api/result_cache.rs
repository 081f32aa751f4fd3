//! The cache of range-query results (`--query.result-cache-size`), as VictoriaMetrics' and
//! Thanos' query frontend keep them: a dashboard that asks for `now-6h..now` again 30 s
//! later gets the steps it already had from memory and only the new ones are evaluated.
//!
//! Results are kept per query text, step, alignment of the range to the step and lookback
//! delta, for one contiguous run of steps. Each step of a range query is evaluated on its
//! own (its value depends on the samples at or before it, never on the range), so the
//! steps of a refresh that the cache holds are the ones a cold evaluation would give, as
//! long as the data behind them did not change. That is kept true by:
//! - caching only steps old enough that no sample still arriving belongs to them (older
//!   than the newest sample and the clock, less the lookback delta; see
//!   [`cacheable_until`]);
//! - dropping cached steps from the oldest time any write touched (a late or backfilled
//!   sample, a deletion, retention: [`inferdb_storage::Db::take_oldest_write`]) before
//!   every lookup;
//! - keeping an answer whose evaluation overlapped such a change only up to the change;
//! - leaving out queries whose value at a step depends on more than that step: `@`,
//!   negative offsets, `start()`/`end()`/`range()`, duration expressions;
//! - keeping an answer's warnings and infos only where they are known to belong to the
//!   steps kept: all of them when the whole range is kept, otherwise only when every one is
//!   histogram_quantile's monotonicity info (it carries the first and last step it happened
//!   at) and none happened after the last step kept; a later request that starts after the
//!   entry's first step uses the entry only when its annotations are such infos that all
//!   happened from that start on. The cached steps' annotations are merged with those of the
//!   steps evaluated, as the engine merges them over steps.
//!
//! Memory is bounded by bytes (labels and 16 bytes a point, estimated): the least recently
//! used entries go first. Hits, misses, bytes and entries are in `/metrics`.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use inferdb_query::ast::{Duration, Expr, ExprKind};
use inferdb_query::value::Annotations;
use inferdb_storage::Labels;

use super::MatrixSeries;

/// The default `--query.result-cache-size`.
pub const DEFAULT_SIZE: &str = "256MB";

/// Bytes counted per entry on top of its series (key, bookkeeping).
const ENTRY_OVERHEAD: usize = 256;
/// Bytes counted per series on top of its label text and points.
const SERIES_OVERHEAD: usize = 64;

/// What a cached result belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Key {
    query: String,
    step: i64,
    /// `start mod step`: ranges that differ by whole steps share their steps.
    phase: i64,
    lookback: i64,
}

impl Key {
    /// The key of `query` at `step` (ms) over a range starting at `start` (ms).
    pub fn new(query: &str, start: i64, step: i64, lookback: i64) -> Self {
        Key {
            query: query.to_string(),
            step,
            phase: start.rem_euclid(step),
            lookback,
        }
    }
}

struct Entry {
    /// The first and last step held (ms), both on the key's step grid.
    first: i64,
    last: i64,
    series: Vec<MatrixSeries>,
    /// The annotations of the steps `[first, last]`.
    annos: Annotations,
    bytes: usize,
    tick: u64,
}

#[derive(Default)]
struct Inner {
    /// Counts the invalidations; `recent` holds the latest ones (count, oldest time changed),
    /// so that an answer evaluated before one is stored only up to the change.
    epoch: u64,
    recent: std::collections::VecDeque<(u64, i64)>,
    map: HashMap<Key, Entry>,
    /// Entries by last use, oldest first.
    lru: BTreeMap<u64, Key>,
    tick: u64,
    bytes: usize,
}

/// The invalidations remembered for answers still being evaluated.
const RECENT_CHANGES: usize = 256;

impl Inner {
    fn note_change(&mut self, t: i64) {
        self.epoch += 1;
        self.recent.push_back((self.epoch, t));
        if self.recent.len() > RECENT_CHANGES {
            self.recent.pop_front();
        }
    }
}

/// Counters shown in `/metrics`.
#[derive(Default)]
struct Stats {
    hits: AtomicU64,
    misses: AtomicU64,
    steps_hit: AtomicU64,
    evictions: AtomicU64,
    invalidations: AtomicU64,
}

/// A bounded cache of range-query results; see the module documentation.
pub struct ResultCache {
    capacity: usize,
    inner: Mutex<Inner>,
    stats: Stats,
}

/// What [`ResultCache::lookup`] found for a request.
pub struct Cached {
    /// The cached series, cut to the request's range.
    pub series: Vec<MatrixSeries>,
    /// The last step of the request the cache covers.
    pub last: i64,
    /// The annotations of the cached steps.
    pub annos: Annotations,
}

/// Whether every annotation is histogram_quantile's monotonicity info and all of them
/// happened within `[from, to]`.
fn only_monotonicity_within(annos: &Annotations, from: i64, to: i64) -> bool {
    annos.iter().all(|a| {
        a.monotonicity
            .as_ref()
            .is_some_and(|m| m.min_ts >= from && m.max_ts <= to)
    })
}

fn series_bytes(s: &MatrixSeries) -> usize {
    SERIES_OVERHEAD
        + s.labels
            .iter()
            .map(|l| l.name.len() + l.value.len() + 16)
            .sum::<usize>()
        + s.samples.len() * 16
}

/// The samples of `samples` (in time order) within `[from, to]`.
fn cut(samples: &[(i64, f64)], from: i64, to: i64) -> &[(i64, f64)] {
    let a = samples.partition_point(|p| p.0 < from);
    let b = samples.partition_point(|p| p.0 <= to);
    &samples[a..b.max(a)]
}

impl ResultCache {
    /// A cache of at most `capacity` bytes (0: nothing is kept).
    pub fn new(capacity: usize) -> Arc<Self> {
        Arc::new(ResultCache {
            capacity,
            inner: Mutex::new(Inner::default()),
            stats: Stats::default(),
        })
    }

    /// The invalidation count now: pass it to [`ResultCache::store`] with an answer whose
    /// evaluation starts after this call.
    pub fn epoch(&self) -> u64 {
        self.inner.lock().epoch
    }

    /// Whether anything may be kept (a size above 0).
    pub fn enabled(&self) -> bool {
        self.capacity > 0
    }

    /// The bytes held.
    pub fn bytes(&self) -> usize {
        self.inner.lock().bytes
    }

    /// The entries held.
    pub fn entries(&self) -> usize {
        self.inner.lock().map.len()
    }

    /// The cached part of the request `[start, end]` of `key`: the steps from `start` on
    /// that the cache holds (a prefix of the request), or `None` (a miss) when it holds
    /// none, not the request's first step, or annotations it cannot tell belong to the
    /// steps from `start` on.
    pub fn lookup(&self, key: &Key, start: i64, end: i64) -> Option<Cached> {
        let mut g = self.inner.lock();
        let inner = &mut *g;
        let found = match inner.map.get_mut(key) {
            Some(e)
                if e.first <= start
                    && start <= e.last
                    && ((e.first == start && e.last <= end)
                        || only_monotonicity_within(&e.annos, start, e.last.min(end))) =>
            {
                inner.tick += 1;
                inner.lru.remove(&e.tick);
                e.tick = inner.tick;
                inner.lru.insert(e.tick, key.clone());
                let last = e.last.min(end);
                // room for the steps still to come, so that appending them does not copy
                let more = usize::try_from((end - last) / key.step.max(1)).unwrap_or(0);
                let series: Vec<MatrixSeries> = e
                    .series
                    .iter()
                    .filter_map(|s| {
                        let pts = cut(&s.samples, start, last);
                        (!pts.is_empty()).then(|| {
                            let mut samples = Vec::with_capacity(pts.len() + more.min(pts.len()));
                            samples.extend_from_slice(pts);
                            MatrixSeries {
                                labels: s.labels.clone(),
                                samples,
                            }
                        })
                    })
                    .collect();
                Some(Cached {
                    series,
                    last,
                    annos: e.annos.clone(),
                })
            }
            _ => None,
        };
        drop(g);
        match &found {
            Some(c) => {
                self.stats.hits.fetch_add(1, Ordering::Relaxed);
                let steps = (c.last - start) / key.step.max(1) + 1;
                self.stats
                    .steps_hit
                    .fetch_add(steps as u64, Ordering::Relaxed);
            }
            None => {
                self.stats.misses.fetch_add(1, Ordering::Relaxed);
            }
        }
        found
    }

    /// Keeps the steps `[first, last]` of `series` (a whole answer over `[first, end]`, in
    /// the engine's order, with its annotations) for `key`, replacing what was kept before.
    /// Nothing is kept when `last < first`, when the annotations may belong to steps after
    /// `last`, when the entry alone would take more than a quarter of the capacity, or when
    /// the cache was invalidated since `epoch` (the answer may predate the change).
    pub fn store(
        &self,
        epoch: u64,
        key: Key,
        (first, last, end): (i64, i64, i64),
        series: &[MatrixSeries],
        annos: &Annotations,
    ) {
        if last < first || self.capacity == 0 {
            return;
        }
        let mut g = self.inner.lock();
        let inner = &mut *g;
        // data changed since the evaluation began: keep only the steps before the change
        let mut last = last;
        if inner.epoch != epoch {
            if inner.recent.front().is_none_or(|r| r.0 > epoch + 1) {
                return; // what changed is forgotten
            }
            let changed = inner
                .recent
                .iter()
                .filter(|r| r.0 > epoch)
                .map(|r| r.1)
                .min()
                .unwrap_or(i64::MAX);
            if changed <= first {
                return;
            }
            if changed <= last {
                let step = key.step.max(1);
                last = first + (changed.saturating_sub(1) - first).div_euclid(step) * step;
            }
        }
        if last < first || (last < end && !only_monotonicity_within(annos, first, last)) {
            return;
        }
        let kept: Vec<MatrixSeries> = series
            .iter()
            .filter_map(|s| {
                let pts = cut(&s.samples, first, last);
                (!pts.is_empty()).then(|| MatrixSeries {
                    labels: s.labels.clone(),
                    samples: pts.to_vec(),
                })
            })
            .collect();
        let bytes = ENTRY_OVERHEAD + key.query.len() + kept.iter().map(series_bytes).sum::<usize>();
        if let Some(old) = inner.map.remove(&key) {
            inner.lru.remove(&old.tick);
            inner.bytes -= old.bytes;
        }
        if bytes > self.capacity / 4 {
            return;
        }
        while inner.bytes + bytes > self.capacity {
            let Some((_, k)) = inner.lru.pop_first() else {
                break;
            };
            if let Some(e) = inner.map.remove(&k) {
                inner.bytes -= e.bytes;
                self.stats.evictions.fetch_add(1, Ordering::Relaxed);
            }
        }
        inner.tick += 1;
        let tick = inner.tick;
        inner.lru.insert(tick, key.clone());
        inner.bytes += bytes;
        inner.map.insert(
            key,
            Entry {
                first,
                last,
                series: kept,
                annos: annos.clone(),
                bytes,
                tick,
            },
        );
    }

    /// Drops every cached step at or after `t` (data from `t` on changed).
    pub fn invalidate_from(&self, t: i64) {
        if t == i64::MAX {
            return;
        }
        let mut g = self.inner.lock();
        let inner = &mut *g;
        inner.note_change(t);
        let mut gone = Vec::new();
        let mut freed = 0usize;
        for (k, e) in inner.map.iter_mut() {
            if e.last < t {
                continue;
            }
            self.stats.invalidations.fetch_add(1, Ordering::Relaxed);
            if e.first >= t {
                gone.push(k.clone());
                continue;
            }
            let last = e.last.min(t - 1);
            let last = last - (last - e.first).rem_euclid(k.step.max(1));
            if !only_monotonicity_within(&e.annos, e.first, last) {
                gone.push(k.clone());
                continue;
            }
            e.last = last;
            let mut bytes = ENTRY_OVERHEAD + k.query.len();
            e.series.retain_mut(|s| {
                let n = s.samples.partition_point(|p| p.0 <= last);
                s.samples.truncate(n);
                !s.samples.is_empty()
            });
            bytes += e.series.iter().map(series_bytes).sum::<usize>();
            freed += e.bytes - bytes;
            e.bytes = bytes;
        }
        inner.bytes -= freed;
        for k in gone {
            if let Some(e) = inner.map.remove(&k) {
                inner.lru.remove(&e.tick);
                inner.bytes -= e.bytes;
            }
        }
    }

    /// Drops everything.
    pub fn clear(&self) {
        let mut g = self.inner.lock();
        if !g.map.is_empty() {
            self.stats.invalidations.fetch_add(1, Ordering::Relaxed);
        }
        g.note_change(i64::MIN);
        let inner = &mut *g;
        inner.map.clear();
        inner.lru.clear();
        inner.bytes = 0;
    }

    /// Writes the cache's metrics (text format).
    pub fn write_metrics(&self, out: &mut String) {
        use crate::metrics::write_family;
        let (bytes, entries) = {
            let g = self.inner.lock();
            (g.bytes, g.map.len())
        };
        let c = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64;
        let s = &self.stats;
        let none: &[(&str, &str)] = &[];
        write_family(
            out,
            "inferdb_query_result_cache_hits_total",
            "Range queries answered at least in part from the result cache.",
            "counter",
            &[(none, c(&s.hits))],
        );
        write_family(
            out,
            "inferdb_query_result_cache_misses_total",
            "Range queries that found nothing in the result cache.",
            "counter",
            &[(none, c(&s.misses))],
        );
        write_family(
            out,
            "inferdb_query_result_cache_steps_hit_total",
            "Steps of range queries answered from the result cache.",
            "counter",
            &[(none, c(&s.steps_hit))],
        );
        write_family(
            out,
            "inferdb_query_result_cache_evictions_total",
            "Result cache entries dropped to stay within --query.result-cache-size.",
            "counter",
            &[(none, c(&s.evictions))],
        );
        write_family(
            out,
            "inferdb_query_result_cache_invalidations_total",
            "Result cache entries cut or dropped because the data behind them changed.",
            "counter",
            &[(none, c(&s.invalidations))],
        );
        write_family(
            out,
            "inferdb_query_result_cache_bytes",
            "Bytes held by the result cache (estimated).",
            "gauge",
            &[(none, bytes as f64)],
        );
        write_family(
            out,
            "inferdb_query_result_cache_max_bytes",
            "--query.result-cache-size.",
            "gauge",
            &[(none, self.capacity as f64)],
        );
        write_family(
            out,
            "inferdb_query_result_cache_entries",
            "Entries in the result cache.",
            "gauge",
            &[(none, entries as f64)],
        );
    }
}

/// The newest step a cached result may hold: steps after it could still change as samples
/// arrive. That is the lookback delta before the newest sample stored and before `now`,
/// whichever is earlier.
pub fn cacheable_until(now: i64, newest_sample: Option<i64>, lookback: i64) -> i64 {
    newest_sample
        .unwrap_or(now)
        .min(now)
        .saturating_sub(lookback)
}

/// Whether the value of `e` at a step depends only on that step and the data (not on the
/// query's range, nor on samples after the step).
pub fn cacheable(e: &Expr) -> bool {
    inferdb_query::stack::grow(|| cacheable_node(e))
}

fn fixed_offset(d: &Option<Duration>) -> bool {
    match d {
        None => true,
        Some(Duration::Millis(ms)) => *ms >= 0,
        Some(Duration::Expr(_)) => false,
    }
}

fn cacheable_node(e: &Expr) -> bool {
    match &e.kind {
        ExprKind::Number(_) | ExprKind::String(_) => true,
        ExprKind::VectorSelector(vs) => vs.at.is_none() && fixed_offset(&vs.offset),
        ExprKind::MatrixSelector(ms) => {
            ms.selector.at.is_none()
                && fixed_offset(&ms.selector.offset)
                && matches!(ms.range, Duration::Millis(_))
        }
        ExprKind::Subquery(sq) => {
            sq.at.is_none()
                && fixed_offset(&sq.offset)
                && matches!(sq.range, Duration::Millis(_))
                && matches!(sq.step, None | Some(Duration::Millis(_)))
                && cacheable(&sq.expr)
        }
        ExprKind::Call(c) if matches!(c.func.as_str(), "start" | "end" | "range") => false,
        ExprKind::Paren(_)
        | ExprKind::Unary(..)
        | ExprKind::StepInvariant(_)
        | ExprKind::Binary(_)
        | ExprKind::Aggregate(_)
        | ExprKind::Call(_) => e.children().all(cacheable),
    }
}

/// Joins the cached steps and the newly evaluated ones of the same query into one answer:
/// each series' cached points then its new points, series in label order (the engine's
/// order for range queries).
pub fn merge(cached: Vec<MatrixSeries>, fresh: Vec<MatrixSeries>) -> Vec<MatrixSeries> {
    let mut index: HashMap<Labels, usize> = HashMap::with_capacity(cached.len());
    let mut out = cached;
    for (i, s) in out.iter().enumerate() {
        index.insert(s.labels.clone(), i);
    }
    for s in fresh {
        match index.get(&s.labels) {
            Some(&i) => out[i].samples.extend(s.samples),
            None => {
                index.insert(s.labels.clone(), out.len());
                out.push(s);
            }
        }
    }
    out.sort_by(|a, b| a.labels.cmp(&b.labels));
    out
}

#[cfg(test)]
mod tests {
    use super::cacheable;
    use inferdb_query::parser::parse;

    #[test]
    fn cacheable_looks_at_every_sub_expression() {
        for q in [
            "rate(x[5m])",
            "sum by (a) (rate(x[5m])) / on (a) group_left count(y offset 1h)",
            "topk(3, x)",
            "max_over_time(rate(x[1m])[10m:1m])",
            r#"label_replace(-(x), "a", "$1", "b", "(.*)")"#,
        ] {
            assert!(cacheable(&parse(q).unwrap()), "{q}");
        }
        for q in [
            "x @ 100",
            "sum(rate(x[5m])) + y @ 100",
            "topk(scalar(y @ 100), x)",
            "-(x @ start())",
            "max_over_time(x[10m:1m] @ 100)",
            r#"label_replace(rate(x[1m] @ end()), "a", "$1", "b", "(.*)")"#,
        ] {
            assert!(!cacheable(&parse(q).unwrap()), "{q}");
        }
    }
}
