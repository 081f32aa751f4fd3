//! Reading: select series by matchers over a time range, merged over blocks and the head.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::block::Block;
use crate::chunk::GroupSlot;
use crate::db::DbInner;
use crate::error::{Error, Result};
use crate::head::chunk;
use crate::labels::Labels;
use crate::matcher::Matcher;
use crate::tombstones::Intervals;

enum Src {
    Block(Arc<Block>, u64),
    Head(crate::head::HeadChunk),
}

struct SChunk {
    min_time: i64,
    max_time: i64,
    src: Src,
    /// The deleted intervals of its source that overlap it (samples in them are skipped).
    del: Option<Intervals>,
    /// For a member of a histogram group: the group's slot in the selection's [`Groups`].
    group: Option<u32>,
}

/// The histogram groups whose members one selection reads: one [`GroupSlot`] per group (by
/// block and chunk reference), so that each group is opened once (checksum, timestamps,
/// base) and each column decoded once per selection, and dropped once the selected members
/// are read.
struct Groups {
    slots: Vec<parking_lot::Mutex<GroupSlot>>,
}

/// Builds a selection's [`Groups`]: the slot of each group by block and group position.
#[derive(Default)]
struct GroupsBuilder {
    index: HashMap<(usize, u64), u32>,
    slots: Vec<GroupSlot>,
}

impl GroupsBuilder {
    /// The slot of the group whose member is the chunk at `r` of block `bi` (`bytes`), or
    /// `None` for an ordinary chunk.
    fn add(&mut self, bi: usize, r: u64, bytes: &[u8]) -> Option<u32> {
        let j = chunk::member_index(bytes)?;
        // member j's marker is j + 1 bytes before the group's first byte
        let key = (bi, r + j as u64 + 1);
        let next = self.slots.len() as u32;
        let slot = *self.index.entry(key).or_insert(next);
        if slot == next {
            self.slots.push(GroupSlot::default());
        }
        self.slots[slot as usize].want(j);
        Some(slot)
    }

    fn build(self) -> Option<Arc<Groups>> {
        (!self.slots.is_empty()).then(|| {
            Arc::new(Groups {
                slots: self
                    .slots
                    .into_iter()
                    .map(parking_lot::Mutex::new)
                    .collect(),
            })
        })
    }
}

/// The tombstones of one source for one series: `None` when the chunk `[mint, maxt]` is
/// wholly deleted (it is left out), else the intervals to skip when some of it is.
fn chunk_dels(dels: Option<&Intervals>, mint: i64, maxt: i64) -> Option<Option<Intervals>> {
    match dels {
        Some(d) if d.covers(mint, maxt) => None,
        Some(d) if d.overlaps(mint, maxt) => Some(Some(d.clone())),
        _ => Some(None),
    }
}

impl SChunk {
    /// A decoding error of this chunk, naming the block's chunk file and the offset in it.
    fn locate(&self, e: Error) -> Error {
        match &self.src {
            Src::Block(b, r) => b.locate_chunk_error(*r, e),
            Src::Head(_) => e,
        }
    }

    /// Appends the chunk's samples to `ts` and `vs` (a group member through the selection's
    /// `groups`). `Err` when the chunk cannot be opened (nothing appended); `Ok(Some(e))` for
    /// an error in its bit stream, after the samples before it.
    fn read_into(
        &self,
        groups: Option<&Groups>,
        ts: &mut Vec<i64>,
        vs: &mut Vec<f64>,
    ) -> Result<Option<Error>> {
        let bytes = match &self.src {
            Src::Block(b, r) => b.chunk(*r)?,
            Src::Head(h) => h.bytes(),
        };
        if let (Some(slot), Some(g)) = (self.group, groups) {
            return g.slots[slot as usize]
                .lock()
                .read(bytes, ts, vs)
                .map(|_| None)
                .map_err(|e| self.locate(e));
        }
        let mut it = chunk::decode(bytes).map_err(|e| self.locate(e))?;
        it.decode_into(ts, vs);
        Ok(it.err().map(|e| self.locate(relabel(e))))
    }
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
    /// The histogram groups of the selection this series came from.
    groups: Option<Arc<Groups>>,
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
    /// merged over blocks and head. Deleted samples (tombstones) are left out; a series whose
    /// chunks in the range are all deleted is not selected.
    pub fn select(&self, ms: &[Matcher]) -> Result<Vec<Series>> {
        let mut head: Vec<(Labels, Vec<SChunk>)> = Vec::new();
        let head_dels = self.db.head_tombstones();
        for m in self.db.head.select(ms) {
            let cs = self.db.head.series_chunks(&m, self.mint, self.maxt);
            if cs.is_empty() {
                continue;
            }
            let labels = m.labels();
            let dels = head_dels.get(&labels);
            let mut e = Vec::with_capacity(cs.len());
            for c in cs {
                let Some(del) = chunk_dels(dels, c.min_time, c.max_time) else {
                    continue;
                };
                e.push(SChunk {
                    min_time: c.min_time,
                    max_time: c.max_time,
                    src: Src::Head(c),
                    del,
                    group: None,
                });
            }
            head.push((labels, e));
        }
        let blocks = self.blocks();
        if blocks.is_empty() {
            // the head's series only, each label set once: sorted without a merge
            head.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            return Ok(head
                .into_iter()
                .filter(|(_, cs)| !cs.is_empty())
                .map(|(labels, chunks)| self.make_series(labels, chunks, None))
                .collect());
        }
        let mut by: BTreeMap<Labels, Vec<SChunk>> = head.into_iter().collect();
        let mut groups = GroupsBuilder::default();
        for (bi, b) in blocks.iter().enumerate() {
            let stones = b.tombstones();
            for s in b.select(ms, self.mint, self.maxt)? {
                let dels = stones.get(&s.labels);
                let e = by.entry(s.labels).or_default();
                for (m, r) in s.chunks {
                    let Some(del) = chunk_dels(dels, m.min_time, m.max_time) else {
                        continue;
                    };
                    // a chunk that cannot be read is reported when it is decoded
                    let group = b.chunk(r).ok().and_then(|c| groups.add(bi, r, c));
                    e.push(SChunk {
                        min_time: m.min_time,
                        max_time: m.max_time,
                        src: Src::Block(b.clone(), r),
                        del,
                        group,
                    });
                }
            }
        }
        let groups = groups.build();
        Ok(by
            .into_iter()
            .filter(|(_, cs)| !cs.is_empty())
            .map(|(labels, chunks)| self.make_series(labels, chunks, groups.clone()))
            .collect())
    }

    /// A selected series of `chunks` (not empty, in any order).
    fn make_series(
        &self,
        labels: Labels,
        mut chunks: Vec<SChunk>,
        groups: Option<Arc<Groups>>,
    ) -> Series {
        chunks.sort_by_key(|c| (c.min_time, c.max_time));
        // chunks with deleted samples take the merging path, which filters them
        let overlapping = chunks.windows(2).any(|w| w[1].min_time <= w[0].max_time)
            || chunks.iter().any(|c| c.del.is_some());
        Series {
            labels,
            chunks,
            mint: self.mint,
            maxt: self.maxt,
            overlapping,
            groups,
        }
    }

    /// The label sets of the series matching `ms` with samples in the range, sorted; as
    /// Prometheus, a series whose chunks in the range are all deleted is left out.
    pub fn series(&self, ms: &[Matcher]) -> Result<Vec<Labels>> {
        let mut out: Vec<Labels> = Vec::new();
        let head_dels = self.db.head_tombstones();
        for m in self.db.head.select(ms) {
            if !self.db.head.has_samples(&m, self.mint, self.maxt) {
                continue;
            }
            let labels = m.labels();
            if let Some(d) = head_dels.get(&labels) {
                let cs = self.db.head.series_chunks(&m, self.mint, self.maxt);
                if cs.iter().all(|c| d.covers(c.min_time, c.max_time)) {
                    continue;
                }
            }
            out.push(labels);
        }
        for b in &self.blocks() {
            let stones = b.tombstones();
            out.extend(
                b.select(ms, self.mint, self.maxt)?
                    .into_iter()
                    .filter(|s| match stones.get(&s.labels) {
                        None => !s.chunks.is_empty(),
                        Some(d) => s
                            .chunks
                            .iter()
                            .any(|(m, _)| !d.covers(m.min_time, m.max_time)),
                    })
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

    /// The series' labels, taken (once its samples have been read).
    pub fn into_labels(self) -> Labels {
        self.labels
    }

    /// The number of chunks holding its samples.
    pub fn num_chunks(&self) -> usize {
        self.chunks.len()
    }

    /// Iterates the samples in the querier's range, in time order, each timestamp once.
    /// Chunks are decoded whole into buffers ([`chunk::SampleIter::decode_into`]);
    /// [`SeriesIter::next_batch`] hands them out as slices.
    pub fn iter(&self) -> SeriesIter<'_> {
        let mut it = SeriesIter {
            s: self,
            next_chunk: 0,
            ts: Vec::new(),
            vs: Vec::new(),
            pos: 0,
            end: 0,
            last_t: i64::MIN,
            started: false,
            pending_err: None,
            err: None,
        };
        if self.overlapping {
            it.merge_all();
        }
        it
    }

    /// Appends every sample in the querier's range to `ts` (timestamps) and `vs` (values), in
    /// time order, each timestamp once: the fast way to read a whole series. Returns the number
    /// of samples appended; a corrupt chunk is an error (the samples before it stay appended).
    pub fn decode_into(&self, ts: &mut Vec<i64>, vs: &mut Vec<f64>) -> Result<usize> {
        if !self.overlapping {
            return self.decode_into_direct(ts, vs);
        }
        let mut it = self.iter();
        let mut n = 0;
        while let Some((t, v)) = it.next_batch() {
            ts.extend_from_slice(t);
            vs.extend_from_slice(v);
            n += t.len();
        }
        match it.take_err() {
            Some(e) => Err(e),
            None => Ok(n),
        }
    }
}

impl Series {
    /// [`decode_into`](Series::decode_into) for chunks that do not overlap: each chunk is
    /// decoded straight into `ts` / `vs` (no copy through the iterator's buffers) and cut to
    /// the range (and after the last sample kept) in place. Same samples and errors as
    /// iterating.
    fn decode_into_direct(&self, ts: &mut Vec<i64>, vs: &mut Vec<f64>) -> Result<usize> {
        let start = ts.len();
        let mut last: Option<i64> = None;
        for c in &self.chunks {
            if c.min_time > self.maxt {
                break;
            }
            let base = ts.len();
            let stream_err = c.read_into(self.groups.as_deref(), ts, vs)?;
            let from = last.map_or(self.mint, |l| self.mint.max(l.saturating_add(1)));
            let got = &ts[base..];
            let (lo, hi) = in_range(got, from, self.maxt);
            // past the range: no later chunk matters
            let past = hi < got.len();
            ts.truncate(base + hi);
            vs.truncate(base + hi);
            if lo > 0 {
                ts.drain(base..base + lo);
                vs.drain(base..base + lo);
            }
            if ts.len() > base {
                last = ts.last().copied();
            }
            if let Some(e) = stream_err {
                return Err(e);
            }
            if past {
                break;
            }
        }
        Ok(ts.len() - start)
    }
}

/// The samples of `ts` (increasing) within `[from, maxt]`: `(lo, hi)` with `lo <= hi`. Most
/// chunks lie wholly inside the range: two comparisons instead of two binary searches.
#[inline]
fn in_range(ts: &[i64], from: i64, maxt: i64) -> (usize, usize) {
    let lo = match ts.first() {
        Some(&t) if t >= from => 0,
        _ => ts.partition_point(|&x| x < from),
    };
    let hi = match ts.last() {
        Some(&t) if t <= maxt => ts.len(),
        _ => ts.partition_point(|&x| x <= maxt),
    };
    (lo, hi.max(lo))
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
///
/// Each chunk is decoded whole into two buffers (timestamps, values) and the part inside the
/// range is handed out: by sample (`next`, `seek`) or as slices ([`next_batch`]).
///
/// [`next_batch`]: SeriesIter::next_batch
pub struct SeriesIter<'a> {
    s: &'a Series,
    next_chunk: usize,
    ts: Vec<i64>,
    vs: Vec<f64>,
    /// Next sample of the buffers to hand out; `end` is one past the last one in range.
    pos: usize,
    end: usize,
    /// The last timestamp handed out (valid when `started`).
    last_t: i64,
    started: bool,
    /// A decoding error to report once the samples before it are handed out.
    pending_err: Option<Error>,
    err: Option<Error>,
}

impl<'a> SeriesIter<'a> {
    /// Decodes chunk `c` into the buffers (cleared first); a decoding error is kept in
    /// `pending_err` after the samples before it. `false` when the chunk cannot be read.
    fn load(&mut self, c: &'a SChunk) -> bool {
        self.ts.clear();
        self.vs.clear();
        self.pos = 0;
        self.end = 0;
        match c.read_into(self.s.groups.as_deref(), &mut self.ts, &mut self.vs) {
            Ok(stream_err) => {
                self.pending_err = stream_err;
                true
            }
            Err(e) => {
                self.err = Some(e);
                false
            }
        }
    }

    fn merge_all(&mut self) {
        let s = self.s;
        let mut all: Vec<(i64, f64)> = Vec::new();
        for c in &s.chunks {
            if !self.load(c) {
                break;
            }
            all.extend(
                self.ts
                    .iter()
                    .zip(&self.vs)
                    .map(|(&t, &v)| (t, v))
                    .filter(|x| x.0 >= s.mint && x.0 <= s.maxt)
                    .filter(|x| !c.del.as_ref().is_some_and(|d| d.contains(x.0))),
            );
            if let Some(e) = self.pending_err.take() {
                self.err = Some(e);
                break;
            }
        }
        // stable: on equal timestamps the earlier chunk (blocks before head) wins
        all.sort_by_key(|x| x.0);
        all.dedup_by_key(|x| x.0);
        self.ts.clear();
        self.vs.clear();
        self.ts.extend(all.iter().map(|x| x.0));
        self.vs.extend(all.iter().map(|x| x.1));
        self.pos = 0;
        self.end = self.ts.len();
        self.next_chunk = s.chunks.len();
        // a corrupt chunk ends the series after the samples merged so far
        if let Some(e) = self.err.take() {
            self.pending_err = Some(e);
        }
    }

    /// The error that ended iteration early (a corrupt chunk), if any.
    pub fn err(&self) -> Option<&Error> {
        self.err.as_ref()
    }

    /// Takes the error that ended iteration early, so callers can return it by value.
    pub fn take_err(&mut self) -> Option<Error> {
        self.err.take()
    }

    /// The next run of samples (the rest of one chunk inside the range) as slices of
    /// timestamps and values of equal length, never empty; `None` at the end (then see
    /// [`err`](SeriesIter::err)). Mixes with `next` and `seek`.
    pub fn next_batch(&mut self) -> Option<(&[i64], &[f64])> {
        if !self.fill() {
            return None;
        }
        let (a, b) = (self.pos, self.end);
        self.pos = b;
        self.last_t = self.ts[b - 1];
        self.started = true;
        Some((&self.ts[a..b], &self.vs[a..b]))
    }

    /// Makes `pos < end` by loading chunks; `false` at the end of the series.
    #[inline]
    fn fill(&mut self) -> bool {
        if self.pos < self.end {
            return true;
        }
        self.fill_slow()
    }

    fn fill_slow(&mut self) -> bool {
        loop {
            if let Some(e) = self.pending_err.take() {
                self.err = Some(e);
                self.finish();
                return false;
            }
            if !self.advance_chunk() {
                return false;
            }
            if self.pos < self.end {
                return true;
            }
        }
    }

    /// Advances to the first sample at or after `t` and returns it.
    pub fn seek(&mut self, t: i64) -> Option<(i64, f64)> {
        if self.started && self.last_t >= t {
            return self.next();
        }
        loop {
            if self.pos < self.end {
                if self.ts[self.end - 1] >= t {
                    self.pos += self.ts[self.pos..self.end].partition_point(|&x| x < t);
                    return self.next();
                }
                self.pos = self.end;
            }
            if let Some(e) = self.pending_err.take() {
                self.err = Some(e);
                self.finish();
                return None;
            }
            // skip chunks that end before t
            while self
                .s
                .chunks
                .get(self.next_chunk)
                .is_some_and(|c| c.max_time < t)
            {
                self.next_chunk += 1;
            }
            if !self.advance_chunk() {
                return None;
            }
        }
    }

    fn finish(&mut self) {
        self.pos = 0;
        self.end = 0;
        self.next_chunk = self.s.chunks.len();
    }

    /// Loads the next chunk and sets `pos..end` to its samples inside the range and after
    /// the last sample handed out.
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
        if !self.load(c) {
            self.finish();
            return false;
        }
        let from = if self.started {
            s.mint.max(self.last_t.saturating_add(1))
        } else {
            s.mint
        };
        (self.pos, self.end) = in_range(&self.ts, from, s.maxt);
        if self.end < self.ts.len() {
            // past the range: no later chunk matters
            self.next_chunk = s.chunks.len();
        }
        true
    }
}

impl Iterator for SeriesIter<'_> {
    type Item = (i64, f64);

    #[inline]
    fn next(&mut self) -> Option<(i64, f64)> {
        if !self.fill() {
            return None;
        }
        let i = self.pos;
        self.pos += 1;
        let t = self.ts[i];
        self.last_t = t;
        self.started = true;
        Some((t, self.vs[i]))
    }
}
