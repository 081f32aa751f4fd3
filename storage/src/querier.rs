//! Reading: select series by matchers over a time range, merged over blocks and the head.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::block::Block;
use crate::db::DbInner;
use crate::error::{Error, Result};
use crate::head::chunk::{self, SampleIter};
use crate::labels::Labels;
use crate::matcher::Matcher;

enum Src {
    Block(Arc<Block>, u64),
    Head(crate::head::HeadChunk),
}

struct SChunk {
    min_time: i64,
    max_time: i64,
    src: Src,
}

/// Reads the database over `[mint, maxt]`. Each call sees everything committed before it
/// started: it reads the head first and the block list after, so a block cut that moves data
/// from the head into a block meanwhile loses nothing (data seen twice is merged). Results
/// stay valid through later cuts, compactions and retention (blocks and head chunk files stay
/// mapped while referenced).
pub struct Querier {
    db: Arc<DbInner>,
    mint: i64,
    maxt: i64,
}

/// One selected series: its labels and the chunks that hold its samples in the range.
pub struct Series {
    labels: Labels,
    chunks: Vec<SChunk>,
    mint: i64,
    maxt: i64,
    overlapping: bool,
}

impl Querier {
    pub(crate) fn new(db: Arc<DbInner>, mint: i64, maxt: i64) -> Self {
        Querier { db, mint, maxt }
    }

    /// The blocks overlapping the range, now (call after reading the head).
    fn blocks(&self) -> Vec<Arc<Block>> {
        self.db
            .blocks
            .read()
            .iter()
            .filter(|b| b.meta().min_time <= self.maxt && b.meta().max_time >= self.mint)
            .cloned()
            .collect()
    }

    /// The queried range's start (inclusive).
    pub fn mint(&self) -> i64 {
        self.mint
    }

    /// The queried range's end (inclusive).
    pub fn maxt(&self) -> i64 {
        self.maxt
    }

    /// The series matching all of `ms` with samples in the range, sorted by labels, each
    /// merged over blocks and head.
    pub fn select(&self, ms: &[Matcher]) -> Result<Vec<Series>> {
        let mut by: BTreeMap<Labels, Vec<SChunk>> = BTreeMap::new();
        for m in self.db.head.select(ms) {
            let cs = self.db.head.series_chunks(&m, self.mint, self.maxt);
            if cs.is_empty() {
                continue;
            }
            let e = by.entry(m.labels()).or_default();
            for c in cs {
                e.push(SChunk {
                    min_time: c.min_time,
                    max_time: c.max_time,
                    src: Src::Head(c),
                });
            }
        }
        for b in &self.blocks() {
            for s in b.select(ms, self.mint, self.maxt)? {
                let e = by.entry(s.labels).or_default();
                for (m, r) in s.chunks {
                    e.push(SChunk {
                        min_time: m.min_time,
                        max_time: m.max_time,
                        src: Src::Block(b.clone(), r),
                    });
                }
            }
        }
        Ok(by
            .into_iter()
            .filter(|(_, cs)| !cs.is_empty())
            .map(|(labels, mut chunks)| {
                chunks.sort_by_key(|c| (c.min_time, c.max_time));
                let overlapping = chunks.windows(2).any(|w| w[1].min_time <= w[0].max_time);
                Series {
                    labels,
                    chunks,
                    mint: self.mint,
                    maxt: self.maxt,
                    overlapping,
                }
            })
            .collect())
    }

    /// The label sets of the series matching `ms` with samples in the range, sorted.
    pub fn series(&self, ms: &[Matcher]) -> Result<Vec<Labels>> {
        let mut out: Vec<Labels> = Vec::new();
        for m in self.db.head.select(ms) {
            if self.db.head.has_samples(&m, self.mint, self.maxt) {
                out.push(m.labels());
            }
        }
        for b in &self.blocks() {
            out.extend(
                b.select(ms, self.mint, self.maxt)?
                    .into_iter()
                    .filter(|s| !s.chunks.is_empty())
                    .map(|s| s.labels),
            );
        }
        out.sort();
        out.dedup();
        Ok(out)
    }

    /// Label names among series matching `ms` (all series when empty), sorted.
    pub fn label_names(&self, ms: &[Matcher]) -> Result<Vec<String>> {
        let mut out = self.db.head.label_names(ms);
        for b in &self.blocks() {
            out.extend(b.label_names(ms)?);
        }
        out.sort();
        out.dedup();
        Ok(out)
    }

    /// Values of label `name` among series matching `ms`, sorted.
    pub fn label_values(&self, name: &str, ms: &[Matcher]) -> Result<Vec<String>> {
        let mut out = self.db.head.label_values(name, ms);
        for b in &self.blocks() {
            out.extend(b.label_values(name, ms)?);
        }
        out.sort();
        out.dedup();
        Ok(out)
    }
}

impl Series {
    /// The series' labels.
    pub fn labels(&self) -> &Labels {
        &self.labels
    }

    /// The number of chunks holding its samples.
    pub fn num_chunks(&self) -> usize {
        self.chunks.len()
    }

    /// Iterates the samples in the querier's range, in time order, each timestamp once.
    pub fn iter(&self) -> SeriesIter<'_> {
        let mut it = SeriesIter {
            s: self,
            next_chunk: 0,
            cur: None,
            merged: None,
            last_t: None,
            err: None,
        };
        if self.overlapping {
            it.merged = Some(it.merge_all().into_iter());
        }
        it
    }
}

fn relabel(e: &Error) -> Error {
    match e {
        Error::Corrupt {
            what,
            path,
            offset,
            reason,
        } => Error::Corrupt {
            what,
            path: path.clone(),
            offset: *offset,
            reason: reason.clone(),
        },
        e => Error::corrupt("chunk", "", 0, e.to_string()),
    }
}

/// Iterates one series' samples; see [`SeriesIter::err`] after it ends.
pub struct SeriesIter<'a> {
    s: &'a Series,
    next_chunk: usize,
    cur: Option<SampleIter<'a>>,
    merged: Option<std::vec::IntoIter<(i64, f64)>>,
    last_t: Option<i64>,
    err: Option<Error>,
}

impl<'a> SeriesIter<'a> {
    fn open(&mut self, c: &'a SChunk) -> Option<SampleIter<'a>> {
        let bytes: &'a [u8] = match &c.src {
            Src::Block(b, r) => match b.chunk(*r) {
                Ok(x) => x,
                Err(e) => {
                    self.err = Some(e);
                    return None;
                }
            },
            Src::Head(c) => c.bytes(),
        };
        match chunk::decode(bytes) {
            Ok(it) => Some(it),
            Err(e) => {
                self.err = Some(e);
                None
            }
        }
    }

    fn merge_all(&mut self) -> Vec<(i64, f64)> {
        let mut all = Vec::new();
        let s = self.s;
        for c in &s.chunks {
            if let Some(it) = self.open(c) {
                let mut it = it;
                all.extend(it.by_ref().filter(|x| x.0 >= s.mint && x.0 <= s.maxt));
                if let Some(e) = it.err() {
                    self.err = Some(relabel(e));
                }
            }
        }
        // stable: on equal timestamps the earlier chunk (blocks before head) wins
        all.sort_by_key(|x| x.0);
        all.dedup_by_key(|x| x.0);
        all
    }

    /// The error that ended iteration early (a corrupt chunk), if any.
    pub fn err(&self) -> Option<&Error> {
        self.err.as_ref()
    }

    /// Takes the error that ended iteration early, so callers can return it by value.
    pub fn take_err(&mut self) -> Option<Error> {
        self.err.take()
    }

    /// Advances to the first sample at or after `t` and returns it.
    pub fn seek(&mut self, t: i64) -> Option<(i64, f64)> {
        if let Some(m) = &mut self.merged {
            return m.find(|x| x.0 >= t);
        }
        if self.last_t.is_some_and(|l| l >= t) {
            return self.next();
        }
        // drop chunks that end before t
        if let Some(c) = self
            .next_chunk
            .checked_sub(1)
            .and_then(|i| self.s.chunks.get(i))
        {
            if c.max_time < t {
                self.cur = None;
            }
        }
        if self.cur.is_none() {
            while self
                .s
                .chunks
                .get(self.next_chunk)
                .is_some_and(|c| c.max_time < t)
            {
                self.next_chunk += 1;
            }
        }
        let target = t.max(self.s.mint);
        loop {
            if let Some(it) = &mut self.cur {
                if let Some(x) = it.seek(target) {
                    if x.0 > self.s.maxt {
                        self.finish();
                        return None;
                    }
                    self.last_t = Some(x.0);
                    return Some(x);
                }
                if let Some(e) = it.err() {
                    self.err = Some(relabel(e));
                    self.finish();
                    return None;
                }
                self.cur = None;
            }
            if !self.advance_chunk() {
                return None;
            }
        }
    }

    fn finish(&mut self) {
        self.cur = None;
        self.next_chunk = self.s.chunks.len();
    }

    fn advance_chunk(&mut self) -> bool {
        let s = self.s;
        let Some(c) = s.chunks.get(self.next_chunk) else {
            return false;
        };
        self.next_chunk += 1;
        if c.min_time > s.maxt {
            self.finish();
            return false;
        }
        match self.open(c) {
            Some(it) => {
                self.cur = Some(it);
                true
            }
            None => {
                self.finish();
                false
            }
        }
    }
}

impl Iterator for SeriesIter<'_> {
    type Item = (i64, f64);

    fn next(&mut self) -> Option<(i64, f64)> {
        if let Some(m) = &mut self.merged {
            return m.next();
        }
        loop {
            if let Some(it) = &mut self.cur {
                for x in it.by_ref() {
                    if x.0 < self.s.mint || self.last_t.is_some_and(|l| x.0 <= l) {
                        continue;
                    }
                    if x.0 > self.s.maxt {
                        self.finish();
                        return None;
                    }
                    self.last_t = Some(x.0);
                    return Some(x);
                }
                if let Some(e) = it.err() {
                    self.err = Some(relabel(e));
                    self.finish();
                    return None;
                }
                self.cur = None;
            }
            if !self.advance_chunk() {
                return None;
            }
        }
    }
}
