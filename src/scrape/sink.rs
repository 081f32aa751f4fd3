//! Where scraped samples go: the [`SampleSink`] trait, an in-memory sink for tests and the
//! implementation for [`inferdb_storage::db::Db`].

use inferdb_storage::Labels;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// A series as the scraper knows it: its final labels and a slot where a sink may cache its
/// own reference for the series (so later scrapes append without hashing labels).
///
/// Once a sink holds a reference, the owner may drop the labels
/// ([`SeriesHandle::release_labels`]): the store keeps its own copy, and a sink that finds its
/// reference gone counts the sample as [`AppendStats::unresolved`] so that the owner can give
/// the labels again ([`SeriesHandle::set_labels`]) and retry.
#[derive(Debug)]
pub struct SeriesHandle {
    labels: Option<Labels>,
    sink_ref: AtomicU64,
}

impl SeriesHandle {
    /// A handle for `labels` with an empty reference slot.
    pub fn new(labels: Labels) -> Self {
        SeriesHandle {
            labels: Some(labels),
            sink_ref: AtomicU64::new(0),
        }
    }
    /// The series' labels, unless released.
    pub fn labels(&self) -> Option<&Labels> {
        self.labels.as_ref()
    }
    /// Drops the labels when a sink holds a reference (they are not needed to append then);
    /// gives whether they are gone.
    pub fn release_labels(&mut self) -> bool {
        if self.cached_ref().is_some() {
            self.labels = None;
        }
        self.labels.is_none()
    }
    /// Gives the labels back (after [`AppendStats::unresolved`]).
    pub fn set_labels(&mut self, labels: Labels) {
        self.labels = Some(labels);
    }
    /// The reference a sink stored, if any.
    pub fn cached_ref(&self) -> Option<u64> {
        match self.sink_ref.load(Ordering::Relaxed) {
            0 => None,
            r => Some(r - 1),
        }
    }
    /// Stores the sink's reference for this series.
    pub fn set_cached_ref(&self, r: u64) {
        self.sink_ref.store(r.wrapping_add(1), Ordering::Relaxed);
    }
    /// Forgets the stored reference.
    pub fn clear_cached_ref(&self) {
        self.sink_ref.store(0, Ordering::Relaxed);
    }
}

/// One sample to store.
#[derive(Debug, Clone, Copy)]
pub struct SinkSample<'a> {
    /// The series.
    pub series: &'a SeriesHandle,
    /// Milliseconds since the epoch.
    pub t: i64,
    /// The value (the staleness marker is `inferdb_storage::stale_nan()`).
    pub v: f64,
}

/// What happened to a batch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AppendStats {
    /// Samples stored.
    pub appended: usize,
    /// Samples refused as out of order, duplicate or out of bounds (skipped, not fatal).
    pub rejected: usize,
    /// Samples not stored because their series' labels were released and the sink's
    /// reference is no longer valid: the caller gives the labels back and retries them.
    pub unresolved: usize,
}

/// A batch that could not be stored at all.
#[derive(Debug, thiserror::Error)]
#[error("storing samples: {0}")]
pub struct SinkError(pub String);

/// Where the scraper writes. One call per scrape; the batch is committed as a whole where the
/// store supports transactions.
pub trait SampleSink: Send + Sync {
    /// Stores the samples of one scrape.
    fn append_batch(&self, batch: &[SinkSample<'_>]) -> Result<AppendStats, SinkError>;
}

/// An in-memory sink: every series' samples in arrival order. For tests and demos.
#[derive(Debug, Default)]
pub struct MemorySink {
    series: Mutex<BTreeMap<Labels, Vec<(i64, f64)>>>,
}

impl MemorySink {
    /// An empty sink.
    pub fn new() -> Self {
        Self::default()
    }
    /// A copy of everything stored.
    pub fn snapshot(&self) -> BTreeMap<Labels, Vec<(i64, f64)>> {
        self.series.lock().clone()
    }
    /// The samples of the series with exactly `labels`.
    pub fn get(&self, labels: &Labels) -> Vec<(i64, f64)> {
        self.series.lock().get(labels).cloned().unwrap_or_default()
    }
    /// Series whose labels include every `(name, value)` of `matchers`.
    pub fn find(&self, matchers: &[(&str, &str)]) -> Vec<(Labels, Vec<(i64, f64)>)> {
        self.series
            .lock()
            .iter()
            .filter(|(l, _)| matchers.iter().all(|(n, v)| l.get(n) == Some(*v)))
            .map(|(l, s)| (l.clone(), s.clone()))
            .collect()
    }
    /// The number of samples stored.
    pub fn num_samples(&self) -> usize {
        self.series.lock().values().map(Vec::len).sum()
    }
}

impl SampleSink for MemorySink {
    fn append_batch(&self, batch: &[SinkSample<'_>]) -> Result<AppendStats, SinkError> {
        let mut m = self.series.lock();
        let mut st = AppendStats::default();
        for s in batch {
            // this sink keeps no references, so the labels are never released
            let Some(l) = s.series.labels() else {
                st.unresolved += 1;
                continue;
            };
            let v = m.entry(l.clone()).or_default();
            match v.last() {
                Some(&(t, _)) if t >= s.t => st.rejected += 1,
                _ => {
                    v.push((s.t, s.v));
                    st.appended += 1;
                }
            }
        }
        Ok(st)
    }
}

impl SampleSink for inferdb_storage::db::Db {
    fn append_batch(&self, batch: &[SinkSample<'_>]) -> Result<AppendStats, SinkError> {
        use inferdb_storage::db::SeriesRef;
        use inferdb_storage::Error;
        let mut app = self.appender();
        let mut st = AppendStats::default();
        for s in batch {
            let mut r = match s.series.cached_ref() {
                Some(r) => SeriesRef(r),
                None => {
                    let Some(l) = s.series.labels() else {
                        st.unresolved += 1;
                        continue;
                    };
                    match app.get_ref(l) {
                        Ok(r) => {
                            s.series.set_cached_ref(r.0);
                            r
                        }
                        Err(Error::InvalidLabels(_)) => {
                            st.rejected += 1;
                            continue;
                        }
                        Err(e) => return Err(SinkError(e.to_string())),
                    }
                }
            };
            let mut res = app.append_ref(r, s.t, s.v);
            if matches!(res, Err(Error::UnknownSeries(..))) {
                // the series left the head since we cached its reference
                s.series.clear_cached_ref();
                let Some(l) = s.series.labels() else {
                    st.unresolved += 1;
                    continue;
                };
                r = app.get_ref(l).map_err(|e| SinkError(e.to_string()))?;
                s.series.set_cached_ref(r.0);
                res = app.append_ref(r, s.t, s.v);
            }
            match res {
                Ok(()) => st.appended += 1,
                Err(Error::OutOfOrder | Error::DuplicateTimestamp | Error::OutOfBounds) => {
                    st.rejected += 1
                }
                Err(e) => return Err(SinkError(e.to_string())),
            }
        }
        app.commit().map_err(|e| SinkError(e.to_string()))?;
        Ok(st)
    }
}
