//! The head: the in-memory, appendable part of the database.
//!
//! Series live in [`SHARDS`] shards chosen by the label hash; each shard holds a lookup map
//! from label hash to series references and a slot table indexed by reference, behind one
//! `parking_lot::RwLock`. A series reference is `slot << 4 | shard`, so appending by reference
//! needs no hashing and no allocation. Each series has its own mutex around its open chunk
//! ([`ChunkWriter`]) and the references of its full chunks (in [`arena`] segments). The
//! postings index ([`postings`]) interns every label pair; a series points to its pairs.
//! Lock order: postings before a shard, a shard before a series.
//!
//! Chunks are cut at [`MAX_SAMPLES_PER_CHUNK`] samples and at multiples of the chunk range (the
//! block duration), so a block cut never splits a chunk.

#[allow(unsafe_code)] // chunks written into and read from shared memory maps
pub mod arena;
pub mod labels_buf;
mod postings;

pub(crate) use crate::chunk;

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use crate::error::{Error, Result};
use crate::labels::Labels;
use crate::matcher::Matcher;
use crate::wal::RefSample;
use chunk::{ChunkWriter, MAX_SAMPLES_PER_CHUNK};
use labels_buf::CompactLabels;
use postings::MemPostings;

/// Number of shards of the series map.
pub const SHARDS: usize = 16;
const SHARD_BITS: u32 = 4;

/// Where a head chunk's bytes are (as handed to readers).
#[derive(Clone)]
pub enum ChunkData {
    /// On the heap (a snapshot of the open chunk).
    Mem(Arc<[u8]>),
    /// In a memory-mapped arena segment, kept mapped while referenced.
    Arena(Arc<arena::ArenaSegment>, arena::ChunkAddr),
}

/// A head chunk handed to readers.
#[derive(Clone)]
pub struct HeadChunk {
    /// Time of the first sample.
    pub min_time: i64,
    /// Time of the last sample.
    pub max_time: i64,
    /// The encoded chunk.
    pub data: ChunkData,
}

impl HeadChunk {
    /// The encoded chunk.
    pub fn bytes(&self) -> &[u8] {
        match &self.data {
            ChunkData::Mem(b) => b,
            ChunkData::Arena(seg, a) => seg.slice(a.off, a.len),
        }
    }
}

/// A full chunk as the series keeps it: 24 bytes.
#[derive(Clone, Copy)]
struct FullChunk {
    min_time: i64,
    /// `max_time - min_time` (chunks are cut before this overflows).
    span: u32,
    addr: arena::ChunkAddr,
}

impl FullChunk {
    fn max_time(&self) -> i64 {
        self.min_time + self.span as i64
    }
}

/// The last sample appended by an uncommitted appender: `(t, value bits)`, 16 bytes
/// (`t == i64::MIN` with value bits 1 means none; a real sample at `i64::MIN` is stored with
/// its own bits, and the one ambiguous sample only loses the duplicate check).
#[derive(Clone, Copy)]
struct Pending(i64, u64);

impl Pending {
    const NONE: Pending = Pending(i64::MIN, 1);

    fn new(t: i64, v: f64) -> Pending {
        Pending(t, v.to_bits())
    }

    fn get(self) -> Option<(i64, u64)> {
        (self.0 != i64::MIN || self.1 != 1).then_some((self.0, self.1))
    }
}

struct SeriesInner {
    open: ChunkWriter,
    full: Vec<FullChunk>,
    /// Last sample appended by an uncommitted appender.
    pending: Pending,
}

/// One series in the head.
pub struct MemSeries {
    r: u64,
    labels: CompactLabels,
    inner: Mutex<SeriesInner>,
}

impl MemSeries {
    /// The series reference.
    pub fn series_ref(&self) -> u64 {
        self.r
    }

    /// The labels (unpacked).
    pub fn labels(&self) -> Labels {
        self.labels.to_labels()
    }

    /// The value of label `name`.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels.get(name)
    }

    fn heap_bytes(&self) -> usize {
        let g = self.inner.lock();
        // the Arc's counters and the allocation of the series itself
        16 + std::mem::size_of::<MemSeries>()
            + self.labels.heap_bytes()
            + g.open.heap_bytes()
            + g.full.capacity() * std::mem::size_of::<FullChunk>()
    }
}

impl SeriesInner {
    /// Appends a sample known to be newer than the last one.
    fn push(&mut self, t: i64, v: f64, chunk_range: i64, arena: &arena::ChunkArena) {
        if !self.open.is_empty()
            && (self.open.len() >= MAX_SAMPLES_PER_CHUNK
                || t.div_euclid(chunk_range) != self.open.min_time().div_euclid(chunk_range)
                || t.saturating_sub(self.open.min_time()) > u32::MAX as i64)
        {
            let bytes = self.open.finish();
            // on failure the open chunk keeps the samples (it holds up to 65535) and the
            // arena is tried again at the next sample; it logs when it starts and stops failing
            if let Ok(addr) = arena.add(&bytes, self.open.max_time()) {
                // exact capacity: a series holds a handful of full chunks
                self.full.reserve_exact(1);
                self.full.push(FullChunk {
                    min_time: self.open.min_time(),
                    span: (self.open.max_time() - self.open.min_time()) as u32,
                    addr,
                });
                self.open.reset();
            }
        }
        self.open.append(t, v);
    }

    fn is_empty(&self) -> bool {
        self.open.is_empty() && self.full.is_empty()
    }

    /// The newest committed sample (time, value bits). The open chunk holds it: it is only
    /// dropped (by truncation) when everything of the series is older than the minimum
    /// valid time, which then rejects older samples by itself.
    #[inline]
    fn last(&self) -> Option<(i64, u64)> {
        self.open.last().map(|(t, v)| (t, v.to_bits()))
    }
}

#[derive(Default)]
struct Shard {
    /// Label hash -> series reference (refs fit a `u32`); further series with the same hash
    /// in `collisions`.
    by_hash: HashMap<u64, u32>,
    collisions: HashMap<u64, Vec<u64>>,
    slots: Vec<Option<Arc<MemSeries>>>,
    live: usize,
}

impl Shard {
    fn get(&self, r: u64) -> Option<&Arc<MemSeries>> {
        self.slots.get((r >> SHARD_BITS) as usize)?.as_ref()
    }

    fn find(&self, h: u64, labels: &Labels) -> Option<u64> {
        let is = |r: u64| self.get(r).is_some_and(|m| m.labels.eq_labels(labels));
        let first = u64::from(*self.by_hash.get(&h)?);
        if is(first) {
            return Some(first);
        }
        self.collisions.get(&h)?.iter().copied().find(|&r| is(r))
    }

    fn index(&mut self, h: u64, r: u64) {
        match self.by_hash.entry(h) {
            std::collections::hash_map::Entry::Occupied(_) => {
                self.collisions.entry(h).or_default().push(r)
            }
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(r as u32);
            }
        }
    }

    fn unindex(&mut self, h: u64, r: u64) {
        if self.by_hash.get(&h).map(|&x| u64::from(x)) == Some(r) {
            self.by_hash.remove(&h);
            if let Some(v) = self.collisions.get_mut(&h) {
                if let Some(next) = v.pop() {
                    self.by_hash.insert(h, next as u32);
                }
                if v.is_empty() {
                    self.collisions.remove(&h);
                }
            }
        } else if let Some(v) = self.collisions.get_mut(&h) {
            v.retain(|&x| x != r);
            if v.is_empty() {
                self.collisions.remove(&h);
            }
        }
    }
}

/// Counters of rejected and accepted samples, by reason.
#[derive(Debug, Default)]
pub struct HeadStats {
    /// Samples older than the newest one of their series.
    pub out_of_order: AtomicU64,
    /// Samples with a different value at an existing timestamp.
    pub duplicate_timestamp: AtomicU64,
    /// Samples older than the head's minimum valid time.
    pub out_of_bounds: AtomicU64,
    /// Exact duplicates, accepted silently and not stored again.
    pub exact_duplicates: AtomicU64,
    /// Samples committed.
    pub samples_appended: AtomicU64,
    /// Series created.
    pub series_created: AtomicU64,
    /// Series removed by garbage collection after a block cut.
    pub series_removed: AtomicU64,
}

/// The in-memory head.
pub struct Head {
    shards: Box<[RwLock<Shard>]>,
    /// Taken before a shard's lock where both are held.
    postings: RwLock<MemPostings>,
    min_valid: AtomicI64,
    min_time: AtomicI64,
    max_time: AtomicI64,
    chunk_range: i64,
    arena: arena::ChunkArena,
    unlogged: Mutex<Vec<u64>>,
    /// Counters by reason.
    pub stats: HeadStats,
}

/// Asks the CPU to load the cache line at `p` (a hint: any address is allowed).
#[inline(always)]
#[allow(unsafe_code)] // the prefetch intrinsic is `unsafe` though it cannot fault
fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetching is only a hint; any address is allowed.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(p as *const i8);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Asks the CPU to load every cache line of series `m` (a series spans four; an append
/// touches most of them, and a batch's series are cold).
#[inline(always)]
fn prefetch_series(m: &Arc<MemSeries>) {
    let p = Arc::as_ptr(m) as *const u8;
    let n = std::mem::size_of::<MemSeries>();
    for off in (0..n).step_by(64) {
        prefetch(p.wrapping_add(off));
    }
    // the last line, when the series does not start at a line
    prefetch(p.wrapping_add(n - 1));
}

/// What [`Head::commit_direct`] did with a batch's samples (those of unknown series aside).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DirectStats {
    /// Samples stored.
    pub appended: usize,
    /// Exact duplicates of their series' newest sample, ignored.
    pub exact_duplicates: usize,
    /// Refused: older than their series' newest sample.
    pub out_of_order: usize,
    /// Refused: another value at their series' newest timestamp.
    pub duplicate_timestamp: usize,
    /// Refused: older than the head accepts.
    pub out_of_bounds: usize,
}

impl DirectStats {
    /// Samples refused (out of order, duplicate timestamp, out of bounds).
    pub fn rejected(&self) -> usize {
        self.out_of_order + self.duplicate_timestamp + self.out_of_bounds
    }
}

/// The append rule, shared by appenders, batch commits and WAL replay: a sample for a
/// series whose newest sample (pending or stored) is `newest` is new (`Ok(true)`), an exact
/// duplicate to ignore (`Ok(false)`), or refused as out of bounds, out of order or another
/// value at the newest timestamp.
#[inline(always)]
fn judge(t: i64, v: f64, min_valid: i64, newest: Option<(i64, u64)>) -> Result<bool> {
    if t < min_valid {
        return Err(Error::OutOfBounds);
    }
    if let Some((lt, lv)) = newest {
        if t < lt {
            return Err(Error::OutOfOrder);
        }
        if t == lt {
            return if v.to_bits() == lv {
                Ok(false)
            } else {
                Err(Error::DuplicateTimestamp)
            };
        }
    }
    Ok(true)
}

/// What an append check decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Appended {
    /// A new sample, pending until commit.
    New,
    /// An exact duplicate of the series' last sample: ignored.
    Duplicate,
}

impl Head {
    /// An empty head whose chunks do not cross multiples of `chunk_range` ms; full chunks
    /// go to `arena` when given, else to anonymous mappings.
    pub fn new(chunk_range: i64, arena: Option<arena::ChunkArena>) -> Head {
        Head {
            shards: (0..SHARDS).map(|_| RwLock::new(Shard::default())).collect(),
            postings: RwLock::new(MemPostings::default()),
            min_valid: AtomicI64::new(i64::MIN),
            min_time: AtomicI64::new(i64::MAX),
            max_time: AtomicI64::new(i64::MIN),
            chunk_range: chunk_range.max(1),
            arena: arena.unwrap_or_else(arena::ChunkArena::anonymous),
            unlogged: Mutex::new(Vec::new()),
            stats: HeadStats::default(),
        }
    }

    /// Samples older than this are rejected with [`Error::OutOfBounds`] (they are in blocks).
    pub fn min_valid_time(&self) -> i64 {
        self.min_valid.load(Ordering::Acquire)
    }

    /// Raises the minimum valid time.
    pub fn set_min_valid_time(&self, t: i64) {
        self.min_valid.fetch_max(t, Ordering::AcqRel);
    }

    /// The oldest sample time in the head (`i64::MAX` when empty).
    pub fn min_time(&self) -> i64 {
        self.min_time.load(Ordering::Acquire)
    }

    /// The newest sample time in the head (`i64::MIN` when empty).
    pub fn max_time(&self) -> i64 {
        self.max_time.load(Ordering::Acquire)
    }

    /// The number of series in the head.
    pub fn num_series(&self) -> usize {
        self.shards.iter().map(|s| s.read().live).sum()
    }

    fn shard_of(r: u64) -> usize {
        (r & (SHARDS as u64 - 1)) as usize
    }

    /// The series with reference `r`.
    pub fn series(&self, r: u64) -> Option<Arc<MemSeries>> {
        self.shards[Self::shard_of(r)].read().get(r).cloned()
    }

    /// Finds the series with these labels.
    pub fn lookup(&self, labels: &Labels) -> Option<u64> {
        let h = labels.stable_hash();
        self.shards[(h as usize) % SHARDS].read().find(h, labels)
    }

    /// Finds or creates the series with these labels (validated on creation). New series are
    /// queued for the WAL; returns the reference.
    pub fn get_or_create(&self, labels: &Labels) -> Result<u64> {
        if let Some(r) = self.lookup(labels) {
            return Ok(r);
        }
        labels.validate()?;
        let h = labels.stable_hash();
        let si = (h as usize) % SHARDS;
        let r = {
            let mut p = self.postings.write();
            let mut s = self.shards[si].write();
            if let Some(r) = s.find(h, labels) {
                return Ok(r);
            }
            let slot = s.slots.len() as u64;
            let r = (slot << SHARD_BITS) | si as u64;
            if r > u64::from(u32::MAX) {
                return Err(Error::TooManySeries);
            }
            self.insert_locked(&mut p, &mut s, r, h, labels);
            r
        };
        self.unlogged.lock().push(r);
        Ok(r)
    }

    /// Creates series `r` (which fits a `u32`) in shard `s` and the postings.
    fn insert_locked(&self, p: &mut MemPostings, s: &mut Shard, r: u64, h: u64, labels: &Labels) {
        let slot = (r >> SHARD_BITS) as usize;
        if s.slots.len() <= slot {
            // grow by an eighth, not by doubling: the table holds a pointer per series
            let more = (slot + 1 - s.slots.len()).max(s.slots.len() / 8 + 16);
            if s.slots.capacity() < slot + 1 {
                s.slots.reserve_exact(more);
            }
            s.slots.resize(slot + 1, None);
        }
        s.slots[slot] = Some(Arc::new(MemSeries {
            r,
            labels: p.add(labels, r as u32),
            inner: Mutex::new(SeriesInner {
                open: ChunkWriter::new(),
                full: Vec::new(),
                pending: Pending::NONE,
            }),
        }));
        s.index(h, r);
        s.live += 1;
        self.stats.series_created.fetch_add(1, Ordering::Relaxed);
    }

    /// Creates a series with a given reference (WAL replay). Returns false when the reference
    /// does not fit the labels' shard or is taken by other labels (the record is skipped).
    pub fn create_with_ref(&self, r: u64, labels: Labels) -> bool {
        let h = labels.stable_hash();
        let si = (h as usize) % SHARDS;
        if Self::shard_of(r) != si || r > u64::from(u32::MAX) {
            return false;
        }
        let mut p = self.postings.write();
        let mut s = self.shards[si].write();
        if let Some(m) = s.get(r) {
            return m.labels.eq_labels(&labels);
        }
        if self.lookup_locked(&s, h, &labels).is_some() {
            return false;
        }
        self.insert_locked(&mut p, &mut s, r, h, &labels);
        true
    }

    fn lookup_locked(&self, s: &Shard, h: u64, labels: &Labels) -> Option<u64> {
        s.find(h, labels)
    }

    /// Takes the series created since the last call, for the WAL.
    pub fn take_unlogged(&self) -> Vec<Arc<MemSeries>> {
        let refs = std::mem::take(&mut *self.unlogged.lock());
        refs.into_iter().filter_map(|r| self.series(r)).collect()
    }

    /// Queues a series for the WAL again (after a failed WAL write).
    pub fn requeue_unlogged(&self, r: u64) {
        self.unlogged.lock().push(r);
    }

    /// Checks a sample for series `r` and marks it pending. Counts rejections by reason.
    pub fn check_append(&self, r: u64, t: i64, v: f64) -> Result<Appended> {
        Ok(match self.check_append_series(r, t, v)? {
            Some(_) => Appended::New,
            None => Appended::Duplicate,
        })
    }

    /// Like [`Head::check_append`]; returns the series for a new sample (to hand to
    /// [`Head::commit_series`]), `None` for an exact duplicate.
    #[inline]
    pub fn check_append_series(&self, r: u64, t: i64, v: f64) -> Result<Option<Arc<MemSeries>>> {
        let shard = self.shards[Self::shard_of(r)].read();
        let Some(m) = shard.get(r) else {
            return Err(Error::UnknownSeries(r));
        };
        let mut g = m.inner.lock();
        let min_valid = self.min_valid.load(Ordering::Relaxed);
        let verdict = judge(t, v, min_valid, g.pending.get().or_else(|| g.last()));
        let counter = match &verdict {
            Ok(true) => None,
            Ok(false) => Some(&self.stats.exact_duplicates),
            Err(Error::OutOfBounds) => Some(&self.stats.out_of_bounds),
            Err(Error::OutOfOrder) => Some(&self.stats.out_of_order),
            Err(_) => Some(&self.stats.duplicate_timestamp),
        };
        if let Some(c) = counter {
            c.fetch_add(1, Ordering::Relaxed);
            return verdict.map(|_| None);
        }
        g.pending = Pending::new(t, v);
        drop(g);
        Ok(Some(m.clone()))
    }

    /// Applies checked samples (after they are in the WAL) and clears their pending marks.
    pub fn commit(&self, samples: &[RefSample]) {
        self.commit_inner(samples, |i| self.series(samples[i].r));
    }

    /// Applies checked samples with their series as returned by
    /// [`Head::check_append_series`] (`series[i]` belongs to `samples[i]`); empties `series`.
    pub fn commit_series(&self, samples: &[RefSample], series: &mut Vec<Arc<MemSeries>>) {
        let mut it = series.drain(..);
        let mut ahead: std::collections::VecDeque<Arc<MemSeries>> = Default::default();
        self.commit_inner(samples, |_| {
            // keep a few series ahead and prefetch them: the series are cold for big commits
            while ahead.len() < 5 {
                let Some(m) = it.next() else { break };
                prefetch(Arc::as_ptr(&m) as *const u8);
                ahead.push_back(m);
            }
            ahead.pop_front()
        });
    }

    /// Checks and applies samples by series reference in one pass, for a caller that
    /// commits whole batches (a scrape): no pending marks, no shard lock or reference count
    /// per sample; each series lock is taken twice, uncontended (to prefetch the open
    /// chunk's tail, then to append).
    ///
    /// First resolves every reference (under all shard read locks, held to the end); the
    /// indices of samples whose series is not in the head go to `unknown`. Then `log` gets
    /// the other samples (to write them to the WAL); when it fails nothing is applied.
    /// Then each sample is checked against its series as [`Head::check_append`] does and
    /// appended. The logged samples include the ones the check then refuses: a WAL replay
    /// refuses them the same way, since it applies the samples in the same order.
    pub fn commit_direct(
        &self,
        samples: &[RefSample],
        unknown: &mut Vec<usize>,
        log: impl FnOnce(&[RefSample]) -> Result<()>,
    ) -> Result<DirectStats> {
        let guards: Vec<_> = self.shards.iter().map(|s| s.read()).collect();
        let mut series: Vec<&MemSeries> = Vec::with_capacity(samples.len());
        let unknown_before = unknown.len();
        for (i, s) in samples.iter().enumerate() {
            if let Some(a) = samples.get(i + 8) {
                let slots = &guards[Self::shard_of(a.r)].slots;
                prefetch(slots.as_ptr().wrapping_add((a.r >> SHARD_BITS) as usize) as *const u8);
            }
            match guards[Self::shard_of(s.r)].get(s.r) {
                Some(m) => {
                    prefetch_series(m);
                    series.push(m)
                }
                None => unknown.push(i),
            }
        }
        // each open chunk's bit buffer is a heap block of its own, cold as well: the series
        // have arrived by now, so ask for the buffers' tails while the WAL is written
        for m in &series {
            let tail = m.inner.lock().open.tail_addr();
            prefetch(tail);
        }
        if unknown.len() == unknown_before {
            log(samples)?;
        } else {
            let mut skip = unknown[unknown_before..].iter().copied().peekable();
            let known: Vec<RefSample> = samples
                .iter()
                .enumerate()
                .filter(|&(i, _)| skip.next_if_eq(&i).is_none())
                .map(|(_, s)| *s)
                .collect();
            log(&known)?;
        }
        let mut st = DirectStats::default();
        let (mut lo, mut hi) = (i64::MAX, i64::MIN);
        let min_valid = self.min_valid.load(Ordering::Acquire);
        let mut skip = unknown[unknown_before..].iter().copied().peekable();
        let known = samples
            .iter()
            .enumerate()
            .filter(|&(i, _)| skip.next_if_eq(&i).is_none());
        for ((_, s), m) in known.zip(series) {
            let mut g = m.inner.lock();
            let counter = match judge(s.t, s.v, min_valid, g.last()) {
                Ok(true) => None,
                Ok(false) => Some(&mut st.exact_duplicates),
                Err(Error::OutOfBounds) => Some(&mut st.out_of_bounds),
                Err(Error::OutOfOrder) => Some(&mut st.out_of_order),
                Err(_) => Some(&mut st.duplicate_timestamp),
            };
            if let Some(c) = counter {
                *c += 1;
                continue;
            }
            g.push(s.t, s.v, self.chunk_range, &self.arena);
            lo = lo.min(s.t);
            hi = hi.max(s.t);
            st.appended += 1;
        }
        drop(guards);
        if st.appended > 0 {
            self.min_time.fetch_min(lo, Ordering::AcqRel);
            self.max_time.fetch_max(hi, Ordering::AcqRel);
        }
        let add = |c: &AtomicU64, n: usize| {
            if n > 0 {
                c.fetch_add(n as u64, Ordering::Relaxed);
            }
        };
        add(&self.stats.samples_appended, st.appended);
        add(&self.stats.out_of_bounds, st.out_of_bounds);
        add(&self.stats.out_of_order, st.out_of_order);
        add(&self.stats.duplicate_timestamp, st.duplicate_timestamp);
        add(&self.stats.exact_duplicates, st.exact_duplicates);
        Ok(st)
    }

    fn commit_inner<M: std::ops::Deref<Target = MemSeries>>(
        &self,
        samples: &[RefSample],
        mut series: impl FnMut(usize) -> Option<M>,
    ) {
        let (mut lo, mut hi) = (i64::MAX, i64::MIN);
        let mut n = 0u64;
        let min_valid = self.min_valid.load(Ordering::Acquire);
        for (i, s) in samples.iter().enumerate() {
            let Some(m) = series(i) else { continue };
            let mut g = m.inner.lock();
            g.pending = Pending::NONE;
            if g.last().is_some_and(|(lt, _)| s.t <= lt) {
                continue;
            }
            if s.t < min_valid {
                // a block was cut since the sample was checked
                self.stats.out_of_bounds.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            g.push(s.t, s.v, self.chunk_range, &self.arena);
            lo = lo.min(s.t);
            hi = hi.max(s.t);
            n += 1;
        }
        if n > 0 {
            self.min_time.fetch_min(lo, Ordering::AcqRel);
            self.max_time.fetch_max(hi, Ordering::AcqRel);
            self.stats.samples_appended.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Clears the pending marks of rolled-back samples.
    pub fn rollback(&self, samples: &[RefSample]) {
        for s in samples {
            if let Some(m) = self.series(s.r) {
                m.inner.lock().pending = Pending::NONE;
            }
        }
    }

    /// Clears the pending marks of these series.
    pub fn rollback_series(&self, series: &[Arc<MemSeries>]) {
        for m in series {
            m.inner.lock().pending = Pending::NONE;
        }
    }

    /// Appends one replayed sample: silently skips unknown series, samples before the minimum
    /// valid time and samples not newer than the series' last one. Returns whether it was added.
    pub fn replay_sample(&self, m: &MemSeries, t: i64, v: f64) -> bool {
        let mut g = m.inner.lock();
        if !matches!(
            judge(t, v, self.min_valid.load(Ordering::Relaxed), g.last()),
            Ok(true)
        ) {
            return false;
        }
        g.push(t, v, self.chunk_range, &self.arena);
        self.min_time.fetch_min(t, Ordering::Relaxed);
        self.max_time.fetch_max(t, Ordering::Relaxed);
        true
    }

    /// All series, unordered.
    pub fn all_series(&self) -> Vec<Arc<MemSeries>> {
        let mut out = Vec::new();
        for s in self.shards.iter() {
            out.extend(s.read().slots.iter().flatten().cloned());
        }
        out
    }

    /// The series matching all matchers, unordered.
    pub fn select(&self, ms: &[Matcher]) -> Vec<Arc<MemSeries>> {
        let candidates: Option<Vec<u64>> = {
            let p = self.postings.read();
            // the narrowest matcher that does not match the empty string picks candidates
            let mut best: Option<Vec<u64>> = None;
            for m in ms.iter().filter(|m| !m.matches_empty()) {
                let mut refs: Vec<u64> = Vec::new();
                if m.op == crate::matcher::MatchOp::Equal {
                    refs.extend(p.get(&m.name, &m.value).iter().map(|&r| u64::from(r)));
                } else {
                    for (v, l) in p.values(&m.name) {
                        if m.matches(v) {
                            refs.extend(l.iter().map(|&r| u64::from(r)));
                        }
                    }
                }
                if best.as_ref().is_none_or(|b| refs.len() < b.len()) {
                    best = Some(refs);
                }
            }
            best
        };
        let series: Vec<Arc<MemSeries>> = match candidates {
            Some(refs) => refs.into_iter().filter_map(|r| self.series(r)).collect(),
            None => self.all_series(),
        };
        series
            .into_iter()
            .filter(|s| {
                ms.iter()
                    .all(|m| m.matches(s.labels.get(&m.name).unwrap_or("")))
            })
            .collect()
    }

    /// Label names of series matching `ms` (all series when empty), sorted.
    pub fn label_names(&self, ms: &[Matcher]) -> Vec<String> {
        if ms.is_empty() {
            return self.postings.read().names().map(str::to_string).collect();
        }
        let mut names: Vec<String> = self
            .select(ms)
            .iter()
            .flat_map(|s| s.labels.iter().map(|l| l.0.to_string()).collect::<Vec<_>>())
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// Values of label `name` among series matching `ms`, sorted.
    pub fn label_values(&self, name: &str, ms: &[Matcher]) -> Vec<String> {
        if ms.is_empty() {
            return self
                .postings
                .read()
                .values(name)
                .map(|(v, _)| v.to_string())
                .collect();
        }
        let mut vals: Vec<String> = self
            .select(ms)
            .iter()
            .filter_map(|s| s.labels.get(name).map(str::to_string))
            .collect();
        vals.sort();
        vals.dedup();
        vals
    }

    /// The chunks of every series that lie entirely in `[mint, maxt)`, sorted by labels.
    pub fn chunks_in_range(&self, mint: i64, maxt: i64) -> Vec<(Labels, Vec<Vec<u8>>)> {
        self.chunks_in_range_iter(mint, maxt).collect()
    }

    /// Like [`Head::chunks_in_range`], one series at a time (a block cut holds only one
    /// series' chunks in memory).
    pub fn chunks_in_range_iter(
        &self,
        mint: i64,
        maxt: i64,
    ) -> impl Iterator<Item = (Labels, Vec<Vec<u8>>)> + '_ {
        let mut series: Vec<(Labels, Arc<MemSeries>)> = self
            .all_series()
            .into_iter()
            .filter(|m| self.has_samples(m, mint, maxt.saturating_sub(1)))
            .map(|m| (m.labels(), m))
            .collect();
        series.sort_by(|a, b| a.0.cmp(&b.0));
        series.into_iter().filter_map(move |(l, m)| {
            let g = m.inner.lock();
            let mut cs: Vec<Vec<u8>> = g
                .full
                .iter()
                .filter(|c| c.min_time >= mint && c.max_time() < maxt)
                .filter_map(|c| self.full_bytes(c))
                .map(|c| c.bytes().to_vec())
                .collect();
            if !g.open.is_empty() && g.open.min_time() >= mint && g.open.max_time() < maxt {
                cs.push(g.open.finish());
            }
            (!cs.is_empty()).then_some((l, cs))
        })
    }

    /// Drops everything older than `t` (now persisted in a block), raises the minimum valid
    /// time to `t` and removes series left empty with nothing pending. Returns the number of
    /// series removed.
    pub fn truncate_before(&self, t: i64) -> usize {
        self.set_min_valid_time(t);
        let mut lo = i64::MAX;
        let mut removed = Vec::new();
        for si in 0..SHARDS {
            let mut s = self.shards[si].write();
            let mut gone = Vec::new();
            for m in s.slots.iter().flatten() {
                let mut g = m.inner.lock();
                g.full.retain(|c| c.max_time() >= t);
                g.full.shrink_to_fit();
                if !g.open.is_empty() && g.open.max_time() < t {
                    g.open = ChunkWriter::new();
                }
                if let Some(c) = g.full.first() {
                    lo = lo.min(c.min_time);
                } else if !g.open.is_empty() {
                    lo = lo.min(g.open.min_time());
                }
                if g.is_empty() && g.pending.get().is_none() {
                    gone.push(m.r);
                }
            }
            for r in gone {
                let slot = (r >> SHARD_BITS) as usize;
                if let Some(m) = s.slots[slot].take() {
                    let h = m.labels().stable_hash();
                    s.unindex(h, r);
                    s.live -= 1;
                    removed.push(m);
                }
            }
        }
        if !removed.is_empty() {
            let mut p = self.postings.write();
            for m in &removed {
                p.remove(&m.labels, m.r as u32);
            }
            self.stats
                .series_removed
                .fetch_add(removed.len() as u64, Ordering::Relaxed);
        }
        self.min_time.store(lo, Ordering::Release);
        if lo == i64::MAX {
            self.max_time.store(i64::MIN, Ordering::Release);
        }
        self.arena.release_before(t);
        removed.len()
    }

    /// Removes the chunk arena's files (after close).
    pub fn remove_arena(&self) {
        self.arena.remove();
    }

    fn full_bytes(&self, c: &FullChunk) -> Option<HeadChunk> {
        Some(HeadChunk {
            min_time: c.min_time,
            max_time: c.max_time(),
            data: ChunkData::Arena(self.arena.segment(c.addr.seg)?, c.addr),
        })
    }

    /// Whether series `m` has chunks overlapping `[mint, maxt]`.
    pub fn has_samples(&self, m: &MemSeries, mint: i64, maxt: i64) -> bool {
        let g = m.inner.lock();
        g.full
            .iter()
            .any(|c| c.max_time() >= mint && c.min_time <= maxt)
            || (!g.open.is_empty() && g.open.max_time() >= mint && g.open.min_time() <= maxt)
    }

    /// The chunks of series `m` overlapping `[mint, maxt]`, oldest first; the open chunk is
    /// encoded as coded so far ([`ChunkWriter::snapshot`]: no re-coding for a read).
    pub fn series_chunks(&self, m: &MemSeries, mint: i64, maxt: i64) -> Vec<HeadChunk> {
        let g = m.inner.lock();
        let mut out: Vec<HeadChunk> = g
            .full
            .iter()
            .filter(|c| c.max_time() >= mint && c.min_time <= maxt)
            .filter_map(|c| self.full_bytes(c))
            .collect();
        if !g.open.is_empty() && g.open.max_time() >= mint && g.open.min_time() <= maxt {
            out.push(HeadChunk {
                min_time: g.open.min_time(),
                max_time: g.open.max_time(),
                data: ChunkData::Mem(g.open.snapshot().into()),
            });
        }
        out
    }

    /// Approximate heap memory held by the head (series, labels, chunks, postings).
    pub fn memory_bytes(&self) -> usize {
        let series: usize = self.all_series().iter().map(|m| m.heap_bytes()).sum();
        let shards: usize = self
            .shards
            .iter()
            .map(|s| {
                let s = s.read();
                s.slots.capacity() * 8 + s.by_hash.capacity() * 13 + s.collisions.len() * 64
            })
            .sum();
        let postings = self.postings.read().memory_bytes();
        series + shards + postings
    }

    /// Encodes the head as checkpoint records: every live series and its chunks.
    pub fn checkpoint_records(&self, buf: &mut Vec<u8>) {
        crate::wal::record::encode_min_valid(buf, self.min_valid_time());
        let all = self.all_series();
        for part in all.chunks(1000) {
            let ls: Vec<(u64, Labels)> = part.iter().map(|m| (m.r, m.labels())).collect();
            crate::wal::record::encode_series(buf, ls.iter().map(|(r, l)| (*r, l)));
        }
        for m in &all {
            let g = m.inner.lock();
            let full: Vec<HeadChunk> = g.full.iter().filter_map(|c| self.full_bytes(c)).collect();
            let open = (!g.open.is_empty()).then(|| g.open.finish());
            let chunks = full.iter().map(HeadChunk::bytes).chain(open.as_deref());
            crate::wal::record::encode_chunks(buf, m.r, chunks);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(v: &str) -> Labels {
        Labels::from_pairs([("__name__", "m"), ("i", v)])
    }

    fn rs(r: u64, t: i64, v: f64) -> RefSample {
        RefSample { r, t, v }
    }

    fn samples(h: &Head, r: u64) -> Vec<(i64, f64)> {
        let m = h.series(r).unwrap();
        let mut out = Vec::new();
        for c in h.series_chunks(&m, i64::MIN, i64::MAX) {
            out.extend(chunk::decode(c.bytes()).unwrap());
        }
        out
    }

    #[test]
    fn append_rules_by_reason() {
        let h = Head::new(1000, None);
        let r = h.get_or_create(&l("a")).unwrap();
        assert_eq!(h.get_or_create(&l("a")).unwrap(), r);
        assert_eq!(h.check_append(r, 10, 1.0).unwrap(), Appended::New);
        h.commit(&[rs(r, 10, 1.0)]);
        assert_eq!(h.check_append(r, 10, 1.0).unwrap(), Appended::Duplicate);
        assert!(matches!(
            h.check_append(r, 10, 2.0),
            Err(Error::DuplicateTimestamp)
        ));
        assert!(matches!(h.check_append(r, 9, 1.0), Err(Error::OutOfOrder)));
        // NaN duplicates compare by bits
        assert_eq!(h.check_append(r, 11, f64::NAN).unwrap(), Appended::New);
        assert_eq!(
            h.check_append(r, 11, f64::NAN).unwrap(),
            Appended::Duplicate
        );
        assert!(matches!(
            h.check_append(r, 11, crate::stale_nan()),
            Err(Error::DuplicateTimestamp)
        ));
        h.rollback(&[rs(r, 11, f64::NAN)]);
        // exact duplicates of committed special values, whatever the chunk's value coding
        let z = h.get_or_create(&l("z")).unwrap();
        for (t, v) in [
            (1, -0.0),
            (2, 5.0),
            (3, 0.1),
            (4, f64::NAN),
            (5, f64::INFINITY),
        ] {
            assert_eq!(h.check_append(z, t, v).unwrap(), Appended::New);
            h.commit(&[rs(z, t, v)]);
            assert_eq!(h.check_append(z, t, v).unwrap(), Appended::Duplicate, "{v}");
        }
        assert_eq!(h.check_append(r, 11, 5.0).unwrap(), Appended::New);
        assert!(matches!(
            h.check_append(99, 1, 1.0),
            Err(Error::UnknownSeries(99))
        ));
        h.set_min_valid_time(100);
        assert!(matches!(
            h.check_append(r, 50, 1.0),
            Err(Error::OutOfBounds)
        ));
        let st = &h.stats;
        assert_eq!(st.duplicate_timestamp.load(Ordering::Relaxed), 2);
        assert_eq!(st.out_of_order.load(Ordering::Relaxed), 1);
        assert_eq!(st.out_of_bounds.load(Ordering::Relaxed), 1);
        assert_eq!(st.exact_duplicates.load(Ordering::Relaxed), 7);
        assert!(h.get_or_create(&Labels::from_pairs([("x", "y")])).is_err());
    }

    #[test]
    fn cuts_chunks_and_truncates() {
        let h = Head::new(1000, None);
        let a = h.get_or_create(&l("a")).unwrap();
        let b = h.get_or_create(&l("b")).unwrap();
        let mut batch = Vec::new();
        for t in 0..2500 {
            batch.push(rs(a, t, t as f64));
        }
        batch.push(rs(b, 5, 1.0));
        h.commit(&batch);
        assert_eq!((h.min_time(), h.max_time()), (0, 2499));
        let got = samples(&h, a);
        assert_eq!(got.len(), 2500);
        assert!(got.iter().enumerate().all(|(i, s)| s.0 == i as i64));
        let m = h.series(a).unwrap();
        for c in h.series_chunks(&m, i64::MIN, i64::MAX) {
            assert_eq!(c.min_time.div_euclid(1000), c.max_time.div_euclid(1000));
            assert!(chunk::decode(c.bytes()).unwrap().count() <= MAX_SAMPLES_PER_CHUNK);
        }
        let cut = h.chunks_in_range(0, 1000);
        assert_eq!(cut.len(), 2);
        assert_eq!(cut[0].0, l("a"));
        let n: usize = cut[0]
            .1
            .iter()
            .map(|c| chunk::decode(c).unwrap().count())
            .sum();
        assert_eq!(n, 1000);
        assert_eq!(h.truncate_before(1000), 1, "series b is gone");
        assert!(h.series(b).is_none());
        assert_eq!(h.lookup(&l("b")), None);
        assert_eq!(h.label_values("i", &[]), vec!["a".to_string()]);
        assert_eq!(h.min_time(), 1000);
        assert_eq!(samples(&h, a).len(), 1500);
    }

    #[test]
    fn selects_by_matchers() {
        use crate::matcher::MatchOp;
        let h = Head::new(1000, None);
        for v in ["a", "b", "c"] {
            h.get_or_create(&l(v)).unwrap();
        }
        h.get_or_create(&Labels::from_pairs([("__name__", "other")]))
            .unwrap();
        let sel = |ms: &[Matcher]| {
            let mut v: Vec<String> = h
                .select(ms)
                .iter()
                .map(|s| s.labels().to_string())
                .collect();
            v.sort();
            v
        };
        assert_eq!(sel(&[Matcher::equal("i", "b")]), vec![r#"m{i="b"}"#]);
        let re = Matcher::new(MatchOp::RegexMatch, "i", "a|c").unwrap();
        assert_eq!(sel(&[re]), vec![r#"m{i="a"}"#, r#"m{i="c"}"#]);
        let ne = Matcher::new(MatchOp::NotEqual, "i", "a").unwrap();
        assert_eq!(sel(&[ne]).len(), 3, "includes the series without label i");
        assert_eq!(sel(&[Matcher::equal("i", "")]), vec!["other"]);
        assert_eq!(h.label_names(&[]), vec!["__name__", "i"]);
        assert_eq!(
            h.label_names(&[Matcher::equal("__name__", "other")]),
            vec!["__name__"]
        );
        assert_eq!(h.label_values("__name__", &[]), vec!["m", "other"]);
    }

    #[test]
    fn series_allocation_fits_256_byte_class() {
        // Arc counters + MemSeries: glibc serves requests up to 248 B from 256 B chunks
        assert!(16 + std::mem::size_of::<MemSeries>() <= 248);
    }

    #[test]
    fn replay_with_refs() {
        let h = Head::new(1000, None);
        let la = l("a");
        let r = (7 << SHARD_BITS) | (la.stable_hash() as usize % SHARDS) as u64;
        assert!(h.create_with_ref(r, la.clone()));
        assert!(h.create_with_ref(r, la.clone()));
        assert!(!h.create_with_ref(r ^ 1, la.clone()), "wrong shard");
        assert_eq!(h.lookup(&la), Some(r));
        let m = h.series(r).unwrap();
        assert!(h.replay_sample(&m, 5, 1.0));
        assert!(!h.replay_sample(&m, 5, 1.0));
        // new series get fresh slots after the replayed ones
        let r2 = h.get_or_create(&l("z")).unwrap();
        assert_ne!(r2, r);
    }
}
