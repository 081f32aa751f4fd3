//! The storage interface the evaluator reads through, and an in-memory implementation.
//!
//! A [`Queryable`] selects the series matching a set of matchers that may have samples in
//! `[mint, maxt]` and hands out a [`SampleIter`] per series; the engine seeks each iterator to
//! the start of the window it needs and streams forward, so a storage backend can decode
//! chunks lazily.

use std::collections::BTreeMap;

use inferdb_storage::{Labels, Matcher};

/// An error from the storage behind a query.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// The storage engine failed.
    #[error("{0}")]
    Storage(#[from] inferdb_storage::Error),
    /// Another failure, described.
    #[error("{0}")]
    Other(String),
}

/// A forward iterator over a series' samples `(t ms, value)` in time order, with seeking.
pub trait SampleIter: Iterator<Item = (i64, f64)> {
    /// Advances to the first sample with timestamp `>= t` and returns it (without consuming
    /// it: the next `next()` returns the same sample). Never moves backwards.
    fn seek(&mut self, t: i64) -> Option<(i64, f64)>;
    /// An error met while iterating (e.g. a corrupt chunk); `None` when iteration ended
    /// normally.
    fn err(&self) -> Option<String> {
        None
    }
}

/// One selected series: its labels and an iterator over its samples.
pub struct StoredSeries<'a> {
    /// The series' labels (with `__name__`).
    pub labels: Labels,
    /// Its samples, possibly beyond `[mint, maxt]`.
    pub samples: Box<dyn SampleIter + 'a>,
}

impl std::fmt::Debug for StoredSeries<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredSeries")
            .field("labels", &self.labels)
            .finish_non_exhaustive()
    }
}

/// What the PromQL engine reads: series selected by label matchers over a time range.
pub trait Queryable: Sync {
    /// The series matching all `matchers` that may have samples in `[mint, maxt]`
    /// (milliseconds, inclusive), sorted by labels. A matcher on a label a series lacks sees
    /// the empty string, as in Prometheus.
    fn select(
        &self,
        matchers: &[Matcher],
        mint: i64,
        maxt: i64,
    ) -> Result<Vec<StoredSeries<'_>>, StorageError>;
}

/// A slice-backed [`SampleIter`].
#[derive(Debug, Clone)]
pub struct SliceIter<'a> {
    points: &'a [(i64, f64)],
    pos: usize,
}

impl<'a> SliceIter<'a> {
    /// Iterates `points` (sorted by time).
    pub fn new(points: &'a [(i64, f64)]) -> Self {
        SliceIter { points, pos: 0 }
    }
}

impl Iterator for SliceIter<'_> {
    type Item = (i64, f64);
    fn next(&mut self) -> Option<(i64, f64)> {
        let p = self.points.get(self.pos).copied();
        if p.is_some() {
            self.pos += 1;
        }
        p
    }
}

impl SampleIter for SliceIter<'_> {
    fn seek(&mut self, t: i64) -> Option<(i64, f64)> {
        let rest = &self.points[self.pos..];
        self.pos += rest.partition_point(|p| p.0 < t);
        self.points.get(self.pos).copied()
    }
}

/// An in-memory [`Queryable`] for tests and small embeddings: a map from labels to sorted
/// samples.
#[derive(Debug, Clone, Default)]
pub struct MemStorage {
    series: BTreeMap<Labels, Vec<(i64, f64)>>,
}

impl MemStorage {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a sample; a sample at an existing timestamp replaces the old one.
    pub fn add(&mut self, labels: &Labels, t: i64, v: f64) {
        let pts = self.series.entry(labels.clone()).or_default();
        match pts.binary_search_by(|p| p.0.cmp(&t)) {
            Ok(i) => pts[i].1 = v,
            Err(i) => pts.insert(i, (t, v)),
        }
    }

    /// Removes every series.
    pub fn clear(&mut self) {
        self.series.clear();
    }

    /// The number of series.
    pub fn num_series(&self) -> usize {
        self.series.len()
    }
}

impl Queryable for MemStorage {
    fn select(
        &self,
        matchers: &[Matcher],
        mint: i64,
        maxt: i64,
    ) -> Result<Vec<StoredSeries<'_>>, StorageError> {
        let mut out = Vec::new();
        for (labels, pts) in &self.series {
            let ok = matchers
                .iter()
                .all(|m| m.matches(labels.get(&m.name).unwrap_or("")));
            if !ok {
                continue;
            }
            let lo = pts.partition_point(|p| p.0 < mint);
            let hi = pts.partition_point(|p| p.0 <= maxt);
            if lo >= hi {
                continue;
            }
            out.push(StoredSeries {
                labels: labels.clone(),
                samples: Box::new(SliceIter::new(&pts[lo..hi])),
            });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use inferdb_storage::MatchOp;

    #[test]
    fn select_and_seek() {
        let mut s = MemStorage::new();
        let a = Labels::from_pairs([("__name__", "m"), ("job", "a")]);
        let b = Labels::from_pairs([("__name__", "m"), ("job", "b")]);
        for t in 0..10 {
            s.add(&a, t * 10, t as f64);
            s.add(&b, t * 10, -(t as f64));
        }
        let sel = s
            .select(&[Matcher::new(MatchOp::Equal, "job", "a").unwrap()], 20, 50)
            .unwrap();
        assert_eq!(sel.len(), 1);
        let mut it = sel.into_iter().next().unwrap().samples;
        assert_eq!(it.seek(35), Some((40, 4.0)));
        assert_eq!(it.next(), Some((40, 4.0)));
        assert_eq!(it.next(), Some((50, 5.0)));
        assert_eq!(it.next(), None);
        let none = s
            .select(&[Matcher::new(MatchOp::Equal, "job", "c").unwrap()], 0, 100)
            .unwrap();
        assert!(none.is_empty());
        // A matcher on a missing label sees "".
        let all = s
            .select(
                &[Matcher::new(MatchOp::Equal, "missing", "").unwrap()],
                0,
                100,
            )
            .unwrap();
        assert_eq!(all.len(), 2);
    }
}
