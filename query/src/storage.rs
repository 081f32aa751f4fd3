//! The storage interface the evaluator reads through, and an in-memory implementation.
//!
//! A [`Queryable`] selects the series matching a set of matchers that may have samples in
//! `[mint, maxt]` and hands out a [`SampleIter`] per series; the engine seeks each iterator to
//! the start of the window it needs and streams forward, so a storage backend can decode
//! chunks lazily.

use std::collections::BTreeMap;

use inferdb_storage::{Labels, Matcher};

use crate::value::FPoint;

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
    /// Advances to the first sample with timestamp `>= t` and returns it. Implementations may
    /// or may not consume it (the engine skips a repeated sample). Never moves backwards.
    fn seek(&mut self, t: i64) -> Option<(i64, f64)>;
    /// An error met while iterating (e.g. a corrupt chunk); `None` when iteration ended
    /// normally.
    fn err(&self) -> Option<String> {
        None
    }
    /// Appends the samples in `[mint, maxt]` to `out` in time order, skipping any whose
    /// timestamp is not after the last one there. The default seeks and iterates;
    /// iterators over decoded samples copy (or move) them in bulk.
    fn read_range(&mut self, mint: i64, maxt: i64, out: &mut Vec<FPoint>) {
        let mut cur = self.seek(mint);
        while let Some((t, f)) = cur {
            if t > maxt {
                break;
            }
            // A seek that does not consume yields its sample again: skip repeats.
            if t >= mint && out.last().is_none_or(|p| p.t < t) {
                out.push(FPoint { t, f });
            }
            cur = self.next();
        }
    }
}

/// Appends the points of `pts` (sorted by time) in `[mint, maxt]` that come after the last
/// point of `out`; returns the index after the last one read.
fn extend_range(pts: &[(i64, f64)], mint: i64, maxt: i64, out: &mut Vec<FPoint>) -> usize {
    let lo = pts.partition_point(|p| p.0 < mint);
    let hi = lo + pts[lo..].partition_point(|p| p.0 <= maxt);
    out.reserve(hi - lo);
    for &(t, f) in &pts[lo..hi] {
        if out.last().is_none_or(|p| p.t < t) {
            out.push(FPoint { t, f });
        }
    }
    hi
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
    /// the empty string, as in Prometheus. The engine seeks each iterator to `mint` and reads
    /// forward until `maxt`.
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
        self.next()
    }
    fn read_range(&mut self, mint: i64, maxt: i64, out: &mut Vec<FPoint>) {
        self.pos += extend_range(&self.points[self.pos..], mint, maxt, out);
    }
}

/// An owning [`SampleIter`] over decoded samples.
#[derive(Debug, Clone, Default)]
pub struct VecIter {
    points: Vec<(i64, f64)>,
    pos: usize,
}

impl VecIter {
    /// Iterates `points` (sorted by time).
    pub fn new(points: Vec<(i64, f64)>) -> Self {
        VecIter { points, pos: 0 }
    }
}

impl Iterator for VecIter {
    type Item = (i64, f64);
    fn next(&mut self) -> Option<(i64, f64)> {
        let p = self.points.get(self.pos).copied();
        if p.is_some() {
            self.pos += 1;
        }
        p
    }
}

impl SampleIter for VecIter {
    fn seek(&mut self, t: i64) -> Option<(i64, f64)> {
        let rest = &self.points[self.pos..];
        self.pos += rest.partition_point(|p| p.0 < t);
        self.next()
    }
    fn read_range(&mut self, mint: i64, maxt: i64, out: &mut Vec<FPoint>) {
        self.pos += extend_range(&self.points[self.pos..], mint, maxt, out);
    }
}

/// Decoded samples of one series, strictly increasing in time (the `Db` adapter's
/// iterator): a read of all of them into an empty vector moves them.
#[derive(Debug, Clone, Default)]
struct PointsIter {
    points: Vec<FPoint>,
    pos: usize,
}

impl Iterator for PointsIter {
    type Item = (i64, f64);
    fn next(&mut self) -> Option<(i64, f64)> {
        let p = self.points.get(self.pos).map(|p| (p.t, p.f));
        if p.is_some() {
            self.pos += 1;
        }
        p
    }
}

impl SampleIter for PointsIter {
    fn seek(&mut self, t: i64) -> Option<(i64, f64)> {
        let rest = &self.points[self.pos..];
        self.pos += rest.partition_point(|p| p.t < t);
        self.next()
    }
    fn read_range(&mut self, mint: i64, maxt: i64, out: &mut Vec<FPoint>) {
        let rest = &self.points[self.pos..];
        let lo = rest.partition_point(|p| p.t < mint);
        let hi = lo + rest[lo..].partition_point(|p| p.t <= maxt);
        if out.is_empty() && self.pos == 0 && lo == 0 && hi == rest.len() {
            *out = std::mem::take(&mut self.points);
            self.pos = 0;
            return;
        }
        let start = out.len();
        out.extend_from_slice(&rest[lo..hi]);
        // Keep the strictly increasing order across what `out` held.
        if start > 0 && hi > lo {
            let last = out[start - 1].t;
            let skip = out[start..].partition_point(|p| p.t <= last);
            out.drain(start..start + skip);
        }
        self.pos += hi;
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

/// Reads an on-disk [`inferdb_storage::Db`]: a querier over the range; each selected series'
/// chunks are decoded once, within the range only.
impl Queryable for inferdb_storage::Db {
    fn select(
        &self,
        matchers: &[Matcher],
        mint: i64,
        maxt: i64,
    ) -> Result<Vec<StoredSeries<'_>>, StorageError> {
        let q = self.querier(mint, maxt)?;
        let mut out = Vec::new();
        for s in q.select(matchers)? {
            let mut it = s.iter();
            let mut points: Vec<FPoint> = Vec::new();
            // Whole decoded runs at a time; the querier's range is [mint, maxt] and each
            // timestamp comes once in order, checked per run (and per sample where a run
            // does not follow on).
            while let Some((ts, vs)) = it.next_batch() {
                let (Some(&first), Some(&last)) = (ts.first(), ts.last()) else {
                    continue;
                };
                if points.capacity() == 0 {
                    // chunks of a series hold about as many samples each: size the vector
                    // once instead of doubling it (each doubling copies and faults in pages)
                    let per_chunk = ts.len().min(4096);
                    points.reserve(per_chunk.saturating_mul(s.num_chunks().max(1)) + 1);
                }
                let after = points.last().is_none_or(|p| p.t < first);
                let before = points.len();
                if after && first >= mint && last <= maxt {
                    // copied and checked for strictly increasing times in one pass; a run
                    // that is not is taken back and filtered point by point below
                    let mut prev = i64::MIN;
                    let mut ordered = true;
                    points.extend(ts.iter().zip(vs).map(|(&t, &f)| {
                        ordered &= prev < t;
                        prev = t;
                        FPoint { t, f }
                    }));
                    if ordered {
                        continue;
                    }
                    points.truncate(before);
                }
                for (&t, &f) in ts.iter().zip(vs) {
                    if t >= mint && t <= maxt && points.last().is_none_or(|p| p.t < t) {
                        points.push(FPoint { t, f });
                    }
                }
            }
            if let Some(e) = it.take_err() {
                return Err(StorageError::Storage(e));
            }
            drop(it);
            if points.is_empty() {
                continue;
            }
            out.push(StoredSeries {
                labels: s.into_labels(),
                samples: Box::new(PointsIter { points, pos: 0 }),
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

    #[test]
    fn db_answers_like_memory() {
        use crate::{Engine, EngineOptions, Value};
        let dir = tempfile::tempdir().unwrap();
        let opts = inferdb_storage::Options {
            background: false,
            ..Default::default()
        };
        let db = inferdb_storage::Db::open(dir.path(), opts).unwrap();
        let mut mem = MemStorage::new();
        let mut app = db.appender();
        for job in ["a", "b"] {
            let l = Labels::from_pairs([("__name__", "req_total"), ("job", job)]);
            for i in 0..2000i64 {
                let v = (i * if job == "a" { 3 } else { 5 }) as f64;
                app.append(&l, i * 15_000, v).unwrap();
                mem.add(&l, i * 15_000, v);
            }
        }
        app.commit().unwrap();
        // Move part of the data into blocks so both paths are read.
        db.cut_all().unwrap();
        let e = Engine::new(EngineOptions::default());
        let q = "sum by (job) (rate(req_total[5m]))";
        let a = e.range(&db, q, 600_000, 29_000_000, 60_000).unwrap();
        let b = e.range(&mem, q, 600_000, 29_000_000, 60_000).unwrap();
        assert_eq!(a.value, b.value);
        match a.value {
            Value::Matrix(m) => {
                assert_eq!(m.len(), 2);
                assert!((m[0].floats[10].f - 0.2).abs() < 1e-9);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bulk_reads_match_iteration() {
        let pts: Vec<(i64, f64)> = (0..50).map(|i| (i * 10, i as f64)).collect();
        let fps: Vec<FPoint> = pts.iter().map(|&(t, f)| FPoint { t, f }).collect();
        for (mint, maxt) in [(0, 490), (-5, 1000), (15, 200), (200, 200), (300, 100)] {
            let want: Vec<FPoint> = fps
                .iter()
                .filter(|p| p.t >= mint && p.t <= maxt)
                .copied()
                .collect();
            let mut a = Vec::new();
            SliceIter::new(&pts).read_range(mint, maxt, &mut a);
            let mut b = Vec::new();
            VecIter::new(pts.clone()).read_range(mint, maxt, &mut b);
            let mut c = Vec::new();
            PointsIter {
                points: fps.clone(),
                pos: 0,
            }
            .read_range(mint, maxt, &mut c);
            // The default implementation, through seek and next.
            struct Plain(VecIter);
            impl Iterator for Plain {
                type Item = (i64, f64);
                fn next(&mut self) -> Option<(i64, f64)> {
                    self.0.next()
                }
            }
            impl SampleIter for Plain {
                fn seek(&mut self, t: i64) -> Option<(i64, f64)> {
                    self.0.seek(t)
                }
            }
            let mut d = Vec::new();
            Plain(VecIter::new(pts.clone())).read_range(mint, maxt, &mut d);
            assert_eq!(a, want, "{mint} {maxt}");
            assert_eq!(b, want);
            assert_eq!(c, want);
            assert_eq!(d, want);
        }
        // Appending keeps time strictly increasing.
        let mut out = vec![FPoint { t: 100, f: -1.0 }];
        PointsIter {
            points: fps.clone(),
            pos: 0,
        }
        .read_range(0, 150, &mut out);
        assert_eq!(
            out.iter().map(|p| p.t).collect::<Vec<_>>(),
            [100, 110, 120, 130, 140, 150]
        );
    }
}
