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
        use inferdb_storage::wal::RefSample;
        use inferdb_storage::Error;
        let mut st = AppendStats::default();
        // the samples by reference, and where each one is in `batch`
        let mut refs: Vec<RefSample> = Vec::with_capacity(batch.len());
        let mut at: Vec<u32> = Vec::with_capacity(batch.len());
        let resolve =
            |s: &SinkSample<'_>, st: &mut AppendStats| -> Result<Option<u64>, SinkError> {
                if let Some(r) = s.series.cached_ref() {
                    return Ok(Some(r));
                }
                let Some(l) = s.series.labels() else {
                    st.unresolved += 1;
                    return Ok(None);
                };
                match self.get_ref(l) {
                    Ok(r) => {
                        s.series.set_cached_ref(r.0);
                        Ok(Some(r.0))
                    }
                    Err(Error::InvalidLabels(_)) => {
                        st.rejected += 1;
                        Ok(None)
                    }
                    Err(e) => Err(SinkError(e.to_string())),
                }
            };
        for (i, s) in batch.iter().enumerate() {
            if let Some(r) = resolve(s, &mut st)? {
                refs.push(RefSample { r, t: s.t, v: s.v });
                at.push(i as u32);
            }
        }
        let mut unknown = Vec::new();
        let commit = |refs: &[RefSample], unknown: &mut Vec<usize>, st: &mut AppendStats| {
            let c = self
                .commit_refs(refs, unknown)
                .map_err(|e| SinkError(e.to_string()))?;
            st.appended += c.appended + c.exact_duplicates;
            st.rejected += c.rejected();
            Ok::<(), SinkError>(())
        };
        commit(&refs, &mut unknown, &mut st)?;
        if unknown.is_empty() {
            return Ok(st);
        }
        // series that left the head since their reference was cached: resolve them again
        // from their labels (or give them back as unresolved) and store their samples
        let mut again: Vec<RefSample> = Vec::with_capacity(unknown.len());
        for &k in &unknown {
            let s = &batch[at[k] as usize];
            s.series.clear_cached_ref();
            if let Some(r) = resolve(s, &mut st)? {
                again.push(RefSample { r, t: s.t, v: s.v });
            }
        }
        let mut still = Vec::new();
        commit(&again, &mut still, &mut st)?;
        // a reference taken just now is gone again only if a block cut raced this batch
        st.rejected += still.len();
        Ok(st)
    }
}
