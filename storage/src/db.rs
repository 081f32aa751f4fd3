//! The database: head + WAL + blocks, with a background thread for fsync, block cuts,
//! compaction and retention.
//!
//! Folder layout: `<dir>/lock` (an `flock`ed file held by the writer), `<dir>/wal/` (see
//! [`crate::wal`]) and one folder per block (see [`crate::block`]).

use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, RwLock};

use crate::block::{self, Block, BlockMeta};
use crate::error::{Error, Result};
use crate::head::arena::ChunkArena;
use crate::head::{chunk, DirectStats, Head, MemSeries};
use crate::labels::Labels;
use crate::observe::{Event, EventHook, ReplayProgress};
use crate::querier::Querier;
use crate::tombstones::{Interval, Tombstones, HEAD_TOMBSTONES_FILE};
use crate::wal::{self, RefSample, ReplayItem, ReplayStats, WalWriter};
use crate::Sample;

/// One day in milliseconds.
const DAY_MS: i64 = 24 * 3600 * 1000;

/// Database options.
#[derive(Debug, Clone)]
pub struct Options {
    /// Delete blocks whose max time is older than the newest block's max time minus this
    /// (default 15 days; `None`: keep by age).
    pub retention_ms: Option<i64>,
    /// Delete the oldest blocks while all blocks together exceed this many bytes.
    pub retention_bytes: Option<u64>,
    /// Every committed write reaches disk (fsync) within this interval (default 1 s); a crash
    /// of the machine loses at most this much. A killed process loses nothing committed.
    pub wal_fsync_interval: Duration,
    /// The time span of a block cut from the head (default 2 h).
    pub block_duration_ms: i64,
    /// Open without lock, WAL writer or background thread; appends fail with
    /// [`Error::ReadOnly`]. For readers beside a running writer.
    pub read_only: bool,
    /// WAL segment size limit in bytes.
    pub wal_segment_bytes: u64,
    /// How WAL records and checkpoints are compressed from now on (Prometheus'
    /// `--storage.tsdb.wal-compression[-type]`); the WAL is read whatever it was written with.
    /// Default none, as Prometheus' tsdb library (its server turns snappy on).
    pub wal_compression: wal::Compression,
    /// Run the background thread (fsync, block cuts, compaction, retention).
    pub background: bool,
    /// How often the background thread checks for block cuts, compaction and retention.
    pub maintenance_interval: Duration,
    /// Filled in with the WAL replay's progress while [`Db::open`] runs (for a readiness
    /// endpoint answering meanwhile).
    pub replay_progress: Option<Arc<ReplayProgress>>,
    /// Receives timed events (compactions, WAL fsyncs), e.g. for metrics.
    pub events: Option<EventHook>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            retention_ms: Some(15 * DAY_MS),
            retention_bytes: None,
            wal_fsync_interval: Duration::from_secs(1),
            block_duration_ms: 2 * 3600 * 1000,
            read_only: false,
            wal_segment_bytes: wal::DEFAULT_SEGMENT_BYTES,
            wal_compression: wal::Compression::None,
            background: true,
            maintenance_interval: Duration::from_secs(30),
            replay_progress: None,
            events: None,
        }
    }
}

/// What opening the database found.
#[derive(Debug, Clone, Default)]
pub struct OpenStats {
    /// The WAL replay, including corruptions found and truncated.
    pub wal: ReplayStats,
    /// Blocks opened.
    pub blocks: usize,
    /// Block folders that failed to open, with the error.
    pub bad_blocks: Vec<(PathBuf, String)>,
    /// Series in the head after replay.
    pub head_series: usize,
    /// Replayed samples for series the WAL never defined (dropped).
    pub unknown_refs: u64,
}

/// A snapshot of counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DbStats {
    /// Series in the head.
    pub head_series: u64,
    /// Oldest sample in the head (`i64::MAX` when empty).
    pub head_min_time: i64,
    /// Newest sample in the head (`i64::MIN` when empty).
    pub head_max_time: i64,
    /// Approximate head memory in bytes.
    pub head_memory_bytes: u64,
    /// Samples committed since open.
    pub samples_appended: u64,
    /// Rejected: older than the newest sample of their series.
    pub out_of_order: u64,
    /// Rejected: different value at an existing timestamp.
    pub duplicate_timestamp: u64,
    /// Rejected: older than the head accepts.
    pub out_of_bounds: u64,
    /// Exact duplicates accepted silently.
    pub exact_duplicates: u64,
    /// Blocks.
    pub blocks: u64,
    /// Bytes of all blocks.
    pub block_bytes: u64,
    /// WAL writes that failed (each refused a commit).
    pub wal_writes_failed: u64,
    /// WAL fsyncs that failed.
    pub wal_fsyncs_failed: u64,
    /// WAL writes are failing now: commits are refused until one succeeds.
    pub wal_failing: bool,
    /// The WAL segment being written.
    pub wal_segment: u64,
    /// How WAL records are compressed.
    pub wal_compression: wal::Compression,
    /// Payload bytes WAL compression saved since open.
    pub wal_bytes_saved: u64,
    /// WAL checkpoints written.
    pub checkpoints: u64,
    /// WAL checkpoints that failed.
    pub checkpoints_failed: u64,
    /// Compactions done.
    pub compactions: u64,
    /// Compactions that failed.
    pub compactions_failed: u64,
    /// Block cuts from the head that failed.
    pub head_truncations_failed: u64,
    /// Series created in the head.
    pub head_series_created: u64,
    /// Series removed from the head (after a block cut, when they had no newer samples).
    pub head_series_removed: u64,
}

/// A series reference from [`Appender::get_ref`]; valid across appenders until the series
/// leaves the head (after a block cut when it has no newer samples), then appends by it
/// fail with [`Error::UnknownSeries`] and a new reference must be taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SeriesRef(pub u64);

pub(crate) struct DbInner {
    pub(crate) dir: PathBuf,
    pub(crate) opts: Options,
    pub(crate) head: Head,
    wal: Option<Mutex<WalWriter>>,
    pub(crate) blocks: RwLock<Vec<Arc<Block>>>,
    /// The head's deleted intervals (`head_tombstones`), replaced as a whole.
    head_tombstones: RwLock<Arc<Tombstones>>,
    maint: Mutex<()>,
    closed: AtomicBool,
    /// The oldest time whose data changed since [`Db::take_oldest_write`] last read it.
    oldest_write: AtomicI64,
    lock: Mutex<Option<File>>,
    open_stats: OpenStats,
    pool: Mutex<Vec<AppendBuffers>>,
    wal_health: Option<Arc<wal::WalHealth>>,
    faults: FaultCounters,
}

/// Counts of failed and completed storage operations (for `/metrics`).
#[derive(Debug, Default)]
struct FaultCounters {
    checkpoints: AtomicU64,
    checkpoints_failed: AtomicU64,
    compactions: AtomicU64,
    compactions_failed: AtomicU64,
    head_truncations_failed: AtomicU64,
    /// Maintenance is failing now (logged once per change).
    maintenance_failing: AtomicBool,
    /// The last compaction failed (logged once per change).
    compaction_failing: AtomicBool,
}

/// An appender's reusable buffers: pending samples and their series.
type AppendBuffers = (Vec<RefSample>, Vec<Arc<MemSeries>>);

struct Background {
    stop: Arc<(Mutex<bool>, Condvar)>,
    handle: JoinHandle<()>,
}

/// An open database. `Send + Sync`: share it by reference or `Arc`. One writer (appenders
/// are meant to be used by one thread at a time), many concurrent readers.
pub struct Db {
    inner: Arc<DbInner>,
    bg: Option<Background>,
}

#[allow(unsafe_code)] // flock(2) through libc
fn lock_dir(dir: &Path) -> Result<File> {
    use std::os::unix::io::AsRawFd;
    let path = dir.join("lock");
    let f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| Error::io(&path, e))?;
    // SAFETY: flock on a valid, owned file descriptor.
    let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        if e.kind() == std::io::ErrorKind::WouldBlock {
            return Err(Error::Locked(dir.to_path_buf()));
        }
        return Err(Error::io(&path, e));
    }
    Ok(f)
}

/// Releases the folder's lock before its file is closed. A process another thread forks
/// holds a copy of the descriptor until it execs, and closing ours alone would leave the lock
/// held through that copy; `LOCK_UN` releases it for every copy at once.
#[allow(unsafe_code)] // flock(2) through libc
fn unlock_dir(f: &File) {
    use std::os::unix::io::AsRawFd;
    // SAFETY: flock on a valid, owned file descriptor; an error leaves the lock to the close.
    unsafe {
        libc::flock(f.as_raw_fd(), libc::LOCK_UN);
    }
}

impl Db {
    /// Opens (creating if needed) the database in `dir`: takes the lock, opens the blocks,
    /// replays the WAL (truncating a torn or corrupt tail, see [`Db::open_stats`]) and starts
    /// the background thread.
    pub fn open(dir: impl AsRef<Path>, opts: Options) -> Result<Db> {
        let dir = dir.as_ref().to_path_buf();
        let stats: OpenStats;
        let lock = if opts.read_only {
            if !dir.is_dir() {
                return Err(Error::io(
                    &dir,
                    std::io::Error::new(std::io::ErrorKind::NotFound, "no database here"),
                ));
            }
            None
        } else {
            fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
            let l = lock_dir(&dir)?;
            block::remove_leftovers(&dir)?;
            Some(l)
        };
        // a read-only opener races the writer's checkpoints and compactions (files vanish
        // between listing and reading): it retries from scratch a few times
        let mut attempt = 0;
        let (blocks, head, last_seg) = loop {
            attempt += 1;
            let mut st = OpenStats::default();
            match Self::load(&dir, &opts, &mut st) {
                Err(Error::Io { source, .. })
                    if opts.read_only
                        && attempt < 5
                        && source.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
                Ok(_) if opts.read_only && attempt < 5 && !st.bad_blocks.is_empty() => {}
                Ok(x) => {
                    stats = st;
                    break x;
                }
            }
        };
        for c in &stats.wal.corruptions {
            tracing::warn!(path = %c.path.display(), offset = c.offset, bytes = c.dropped_bytes,
                reason = %c.reason, tail = c.tail, read_only = opts.read_only,
                "damaged WAL span skipped{}",
                if c.tail { " (end of the file, cut off)" } else { "; the records after it were read" });
        }
        for (d, e) in &stats.bad_blocks {
            tracing::warn!(block = %d.display(), error = %e, "cannot open block; skipped");
        }
        let wal_dir = dir.join("wal");
        let wal = if opts.read_only {
            None
        } else {
            let mut w = WalWriter::create(
                &wal_dir,
                last_seg,
                opts.wal_fsync_interval,
                opts.wal_segment_bytes,
            )?;
            w.set_compression(opts.wal_compression);
            Some(Mutex::new(w))
        };
        let wal_health = wal.as_ref().map(|w| w.lock().health());
        if let Some(w) = &wal {
            // every live series goes into the new segment, so later checkpoints and replays
            // never depend on segments before it
            let all = head.all_series();
            let mut w = w.lock();
            for part in all.chunks(1000) {
                let ls: Vec<(u64, Labels)> =
                    part.iter().map(|m| (m.series_ref(), m.labels())).collect();
                w.log_series(ls.iter().map(|(r, l)| (*r, l)));
            }
            if w.flush().is_err() {
                // a full disk or read-only folder: open anyway (queries work); the next
                // commit that gets through logs them first
                for m in &all {
                    head.requeue_unlogged(m.series_ref());
                }
            }
        }
        // damage in the middle of the log was skipped: a checkpoint of what was read
        // replaces the damaged segments, so it is not met (and reported) again
        let repair = wal.is_some() && stats.wal.corruptions.iter().any(|c| !c.tail);
        let head_tombstones = Tombstones::read(&dir.join(HEAD_TOMBSTONES_FILE))?;
        let inner = Arc::new(DbInner {
            dir,
            opts: opts.clone(),
            head,
            wal,
            blocks: RwLock::new(blocks),
            head_tombstones: RwLock::new(Arc::new(head_tombstones)),
            maint: Mutex::new(()),
            closed: AtomicBool::new(false),
            oldest_write: AtomicI64::new(i64::MAX),
            lock: Mutex::new(lock),
            open_stats: stats,
            pool: Mutex::new(Vec::new()),
            wal_health,
            faults: FaultCounters::default(),
        });
        if repair {
            if let Some(w) = &inner.wal {
                match inner.checkpoint(w) {
                    Ok(()) => tracing::info!("WAL checkpointed after skipping damaged spans"),
                    Err(e) => tracing::warn!(error = %e,
                        "cannot checkpoint the WAL after skipping damaged spans; they stay"),
                }
            }
        }
        let bg = if !opts.read_only && opts.background {
            Some(spawn_background(inner.clone()))
        } else {
            None
        };
        Ok(Db { inner, bg })
    }

    /// Opens the blocks and replays the WAL into a new head.
    fn load(
        dir: &Path,
        opts: &Options,
        stats: &mut OpenStats,
    ) -> Result<(Vec<Arc<Block>>, Head, u32)> {
        let arena = if opts.read_only {
            None
        } else {
            Some(ChunkArena::create(&dir.join("chunks_head"))?)
        };
        let head = Head::new(opts.block_duration_ms.max(1), arena);
        let mut unknown = 0u64;
        let (replay, last_seg) = wal::replay_with_progress(
            &dir.join("wal"),
            opts.read_only,
            opts.replay_progress.as_deref(),
            |it| {
                apply_replay(&head, it, &mut unknown);
                Ok(())
            },
        )?;
        head.truncate_before(head.min_valid_time());
        head.take_unlogged();
        stats.wal = replay;
        stats.unknown_refs = unknown;
        stats.head_series = head.num_series();
        // blocks after the WAL: a block cut meanwhile is then seen (its samples may also be
        // in the head; queriers merge duplicates), not lost between the two
        let blocks = open_blocks(dir, opts.read_only, stats)?;
        Ok((blocks, head, last_seg))
    }

    /// A new appender (a transaction).
    pub fn appender(&self) -> Appender<'_> {
        let (samples, series) = self.inner.pool.lock().pop().unwrap_or_default();
        Appender {
            db: &self.inner,
            samples,
            series,
            done: false,
        }
    }

    /// The reference of the series with labels `l`, creating it (labels are validated); see
    /// [`Appender::get_ref`].
    pub fn get_ref(&self, l: &Labels) -> Result<SeriesRef> {
        self.appender().get_ref(l)
    }

    /// Appends and commits a batch of samples by series reference in one step, for a caller
    /// that writes whole batches (a scrape): cheaper per sample than an [`Appender`] (no
    /// pending mark, shard lock or reference count per sample).
    ///
    /// The indices of samples whose series left the head (see [`SeriesRef`]) are added to
    /// `unknown`, in order; the other samples go to the WAL in one write and are then checked
    /// and stored one by one: a sample that an [`Appender`] would refuse (out of order,
    /// another value at the series' newest timestamp, out of bounds) is counted and skipped,
    /// an exact duplicate of the newest sample is ignored. Unlike an appender's, these checks
    /// do not see samples pending in other, uncommitted appenders. On a WAL error nothing is
    /// applied.
    pub fn commit_refs(
        &self,
        samples: &[RefSample],
        unknown: &mut Vec<usize>,
    ) -> Result<DirectStats> {
        let inner = &self.inner;
        if inner.opts.read_only {
            return Err(Error::ReadOnly);
        }
        if inner.closed.load(Ordering::Relaxed) {
            return Err(Error::Closed);
        }
        let Some(wal) = &inner.wal else {
            return Err(Error::ReadOnly);
        };
        inner.wrote_at(samples.iter().map(|s| s.t).min());
        let mut w = wal.lock();
        let new = inner.head.take_unlogged();
        if !new.is_empty() {
            let ls: Vec<(u64, Labels)> = new.iter().map(|m| (m.series_ref(), m.labels())).collect();
            w.log_series(ls.iter().map(|(r, l)| (*r, l)));
        }
        let r = inner.head.commit_direct(samples, unknown, |known| {
            w.log_samples(known);
            w.flush()
        });
        if r.is_err() {
            // the series must still be logged by a later commit
            for m in &new {
                inner.head.requeue_unlogged(m.series_ref());
            }
        }
        r
    }

    /// A querier over `[mint, maxt]` (inclusive); each of its calls sees the data committed
    /// before the call.
    pub fn querier(&self, mint: i64, maxt: i64) -> Result<Querier> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        Ok(Querier::new(self.inner.clone(), mint, maxt))
    }

    /// The oldest time at which query answers may have changed since the previous call
    /// (`i64::MAX` when nothing was written): the oldest sample committed, the start of a
    /// deletion or of a backfilled block, `i64::MIN` when retention removed blocks. The
    /// value is reset by the call, so it serves one reader: the API's cache of range-query
    /// results, which drops the steps from that time on.
    pub fn take_oldest_write(&self) -> i64 {
        self.inner.oldest_write.swap(i64::MAX, Ordering::AcqRel)
    }

    /// The data folder.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// What opening found (WAL replay statistics and corruptions, blocks).
    pub fn open_stats(&self) -> &OpenStats {
        &self.inner.open_stats
    }

    /// The metadata of every block, oldest first.
    pub fn blocks(&self) -> Vec<BlockMeta> {
        self.inner
            .blocks
            .read()
            .iter()
            .map(|b| b.meta().clone())
            .collect()
    }

    /// The open blocks, oldest first.
    pub fn open_blocks(&self) -> Vec<Arc<Block>> {
        self.inner.blocks.read().clone()
    }

    /// Counters and sizes.
    pub fn stats(&self) -> DbStats {
        let h = &self.inner.head;
        let ld = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        let blocks = self.inner.blocks.read();
        DbStats {
            head_series: h.num_series() as u64,
            head_min_time: h.min_time(),
            head_max_time: h.max_time(),
            head_memory_bytes: h.memory_bytes() as u64,
            samples_appended: ld(&h.stats.samples_appended),
            out_of_order: ld(&h.stats.out_of_order),
            duplicate_timestamp: ld(&h.stats.duplicate_timestamp),
            out_of_bounds: ld(&h.stats.out_of_bounds),
            exact_duplicates: ld(&h.stats.exact_duplicates),
            head_series_created: ld(&h.stats.series_created),
            head_series_removed: ld(&h.stats.series_removed),
            blocks: blocks.len() as u64,
            block_bytes: blocks.iter().map(|b| b.size_bytes()).sum(),
            wal_writes_failed: self
                .inner
                .wal_health
                .as_ref()
                .map_or(0, |w| ld(&w.writes_failed)),
            wal_fsyncs_failed: self
                .inner
                .wal_health
                .as_ref()
                .map_or(0, |w| ld(&w.fsyncs_failed)),
            wal_failing: self
                .inner
                .wal_health
                .as_ref()
                .is_some_and(|w| w.failing.load(Ordering::Relaxed)),
            wal_segment: self
                .inner
                .wal_health
                .as_ref()
                .map_or(0, |w| w.segment.load(Ordering::Relaxed) as u64),
            wal_compression: if self.inner.wal.is_some() {
                self.inner.opts.wal_compression
            } else {
                wal::Compression::None
            },
            wal_bytes_saved: self
                .inner
                .wal_health
                .as_ref()
                .map_or(0, |w| ld(&w.bytes_saved)),
            checkpoints: ld(&self.inner.faults.checkpoints),
            checkpoints_failed: ld(&self.inner.faults.checkpoints_failed),
            compactions: ld(&self.inner.faults.compactions),
            compactions_failed: ld(&self.inner.faults.compactions_failed),
            head_truncations_failed: ld(&self.inner.faults.head_truncations_failed),
        }
    }

    /// The head (for statistics and tools).
    pub fn head(&self) -> &Head {
        &self.inner.head
    }

    /// Fsyncs the WAL now.
    pub fn sync(&self) -> Result<()> {
        match &self.inner.wal {
            Some(w) => w.lock().sync(),
            None => Ok(()),
        }
    }

    /// Runs one round of maintenance now: cuts blocks from the head while it spans more than
    /// 1.5 block durations (then checkpoints the WAL), compacts, applies retention. The
    /// background thread does this periodically.
    pub fn maintain(&self) -> Result<()> {
        self.inner.maintain()
    }

    /// Compacts the blocks as complete history (after an import): the newest block is not
    /// left out and every window of the compaction ranges that holds more than one block is
    /// merged (see [`crate::compact::plan_history`]). Blocks written into the folder since
    /// the open are not seen: reopen first.
    pub fn compact_history(&self) -> Result<()> {
        if self.inner.opts.read_only {
            return Err(Error::ReadOnly);
        }
        self.inner.compact_with(crate::compact::plan_history)
    }

    /// Cuts every complete block-duration range out of the head regardless of its span (for
    /// tools and tests); then checkpoints the WAL.
    pub fn cut_all(&self) -> Result<()> {
        self.inner.cut(true)
    }

    /// Deletes the samples in `[mint, maxt]` (inclusive) of the series matching all of `ms`,
    /// as Prometheus' `delete_series` does: tombstones in every block and in the head that
    /// hold such samples, each interval cut to the series' data there (samples appended
    /// later are not hidden). Queries, `series`, exports, block cuts and compactions leave the
    /// samples out from now on; [`Db::clean_tombstones`] rewrites the blocks without them.
    /// Each tombstone file is replaced atomically before the next is written. No matchers
    /// delete nothing.
    pub fn delete(&self, ms: &[crate::Matcher], mint: i64, maxt: i64) -> Result<()> {
        let inner = &self.inner;
        if inner.opts.read_only {
            return Err(Error::ReadOnly);
        }
        // as Prometheus: no matchers select no series (not all of them)
        if mint > maxt || ms.is_empty() {
            return Ok(());
        }
        inner.wrote_at(Some(mint));
        let _m = inner.maint.lock();
        let blocks = inner.blocks.read().clone();
        for b in &blocks {
            let found = b.select(ms, mint, maxt)?;
            if found.is_empty() {
                continue;
            }
            let mut t = (*b.tombstones()).clone();
            for s in &found {
                let (Some(first), Some(last)) = (s.chunks.first(), s.chunks.last()) else {
                    continue;
                };
                let iv = Interval::new(mint.max(first.0.min_time), maxt.min(last.0.max_time));
                t.add(&s.labels, iv);
            }
            b.set_tombstones(t)?;
        }
        let mut t = (*inner.head_tombstones()).clone();
        let mut changed = false;
        for m in inner.head.select(ms) {
            let cs = inner.head.series_chunks(&m, mint, maxt);
            let (Some(first), Some(last)) = (cs.first(), cs.last()) else {
                continue;
            };
            let iv = Interval::new(mint.max(first.min_time), maxt.min(last.max_time));
            t.add(&m.labels(), iv);
            changed = true;
        }
        if changed {
            inner.set_head_tombstones(t)?;
        }
        Ok(())
    }

    /// Rewrites every block that has tombstones without the deleted samples (Prometheus'
    /// `clean_tombstones`): each new block replaces its original in the block list, then
    /// the original folder is deleted; a block left without series is deleted. The
    /// rewritten block's level is one above the original's, so that an interrupted
    /// replacement of a level-1 block is finished at the next open. Returns the number of
    /// blocks rewritten.
    pub fn clean_tombstones(&self) -> Result<usize> {
        let inner = &self.inner;
        if inner.opts.read_only {
            return Err(Error::ReadOnly);
        }
        let _m = inner.maint.lock();
        let blocks = inner.blocks.read().clone();
        let mut n = 0;
        for b in blocks.iter().filter(|b| !b.tombstones().is_empty()) {
            let meta = crate::compact::rewrite(&inner.dir, b)?;
            let out = Arc::new(Block::open(&inner.dir.join(&meta.id))?);
            let empty = meta.num_series == 0;
            {
                let mut bl = inner.blocks.write();
                bl.retain(|x| x.meta().id != b.meta().id);
                if !empty {
                    bl.push(out.clone());
                    bl.sort_by(|x, y| {
                        (x.meta().min_time, &x.meta().id).cmp(&(y.meta().min_time, &y.meta().id))
                    });
                }
            }
            tracing::info!(block = %b.meta().id, new_block = %meta.id, series = meta.num_series,
                samples = meta.num_samples, "block rewritten without its tombstones");
            block::delete_block(b.dir())?;
            if empty {
                let d = out.dir().to_path_buf();
                drop(out);
                block::delete_block(&d)?;
            }
            n += 1;
        }
        Ok(n)
    }

    /// Writes a consistent copy of the database into `dir` (created if needed), as
    /// Prometheus' snapshot does: every block hard-linked file by file (blocks never change
    /// in place; tombstone files are replaced, not rewritten), and unless `with_head` is
    /// false the head written as one more block (deleted samples left out). The copy opens
    /// with [`Db::open`] like any data folder. Blocks are not compacted or deleted meanwhile.
    pub fn snapshot(&self, dir: &Path, with_head: bool) -> Result<()> {
        let inner = &self.inner;
        let _m = inner.maint.lock();
        fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let blocks = inner.blocks.read().clone();
        for b in &blocks {
            link_block(b.dir(), &dir.join(&b.meta().id))?;
        }
        if with_head {
            let (lo, hi) = (inner.head.min_time(), inner.head.max_time());
            if lo <= hi {
                let stones = inner.head_tombstones();
                let end = hi.saturating_add(1);
                let series = inner
                    .head
                    .chunks_in_range_iter(lo, end)
                    .filter_map(|(l, cs)| without_deleted(&stones, l, cs));
                block::write_block(dir, lo, end, series)?;
            }
        }
        File::open(dir)
            .and_then(|f| f.sync_all())
            .map_err(|e| Error::io(dir, e))
    }

    /// Writes samples older than the head into their own blocks, one per block-duration
    /// range. Fails with [`Error::OutOfBounds`] when a sample is not older than the head's
    /// oldest sample (any time is fine while the head is empty). Afterwards the head refuses
    /// samples older than the newest backfilled one.
    pub fn backfill(
        &self,
        series: impl IntoIterator<Item = (Labels, Vec<Sample>)>,
    ) -> Result<Vec<BlockMeta>> {
        let mut b = BlockBuilder::new(self.inner.opts.block_duration_ms);
        for (l, ss) in series {
            for s in ss {
                b.add(&l, s.t, s.v)?;
            }
        }
        self.backfill_block(b)
    }

    /// Writes the contents of a [`BlockBuilder`] as blocks (see [`Db::backfill`]).
    pub fn backfill_block(&self, b: BlockBuilder) -> Result<Vec<BlockMeta>> {
        let inner = &self.inner;
        if inner.opts.read_only {
            return Err(Error::ReadOnly);
        }
        let _m = inner.maint.lock();
        // the head's oldest sample (i64::MAX when the head is empty)
        let limit = inner.head.min_time();
        if b.max_time().is_some_and(|maxt| maxt >= limit) {
            return Err(Error::OutOfBounds);
        }
        let newest = b.max_time();
        let metas = b.write(&inner.dir)?;
        // the head no longer takes samples in the backfilled time (it was empty or newer)
        if let (Some(t), Some(w)) = (newest, &inner.wal) {
            let mut w = w.lock();
            inner.head.set_min_valid_time(t.saturating_add(1));
            wal::record::encode_min_valid(w.buf(), inner.head.min_valid_time());
            w.flush()?;
        }
        let mut opened = Vec::new();
        for m in &metas {
            opened.push(Arc::new(Block::open(&inner.dir.join(&m.id))?));
        }
        inner.wrote_at(metas.iter().map(|m| m.min_time).min());
        let mut bl = inner.blocks.write();
        bl.extend(opened);
        bl.sort_by(|a, b| {
            (a.meta().min_time, &a.meta().id).cmp(&(b.meta().min_time, &b.meta().id))
        });
        Ok(metas)
    }

    /// Stops the background thread, replaces the WAL segments by a checkpoint of the head
    /// (compressed chunks), fsyncs and releases the lock. The data stays in the WAL (and
    /// blocks) for the next open.
    pub fn close(mut self) -> Result<()> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<()> {
        if let Some(bg) = self.bg.take() {
            {
                let (m, cv) = &*bg.stop;
                *m.lock() = true;
                cv.notify_all();
            }
            let _ = bg.handle.join();
        }
        if self.inner.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let r = match &self.inner.wal {
            Some(w) => {
                // the checkpoint holds the head compressed, replacing the raw segments
                let _m = self.inner.maint.lock();
                self.inner.checkpoint(w).and_then(|_| w.lock().sync())
            }
            None => Ok(()),
        };
        self.inner.head.remove_arena();
        if let Some(f) = self.inner.lock.lock().take() {
            unlock_dir(&f);
        }
        r
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            tracing::warn!(error = %e, "closing the database");
        }
    }
}

/// Hard-links the files of the block folder `from` into the new folder `to`.
fn link_block(from: &Path, to: &Path) -> Result<()> {
    fn link_dir(from: &Path, to: &Path) -> Result<()> {
        fs::create_dir_all(to).map_err(|e| Error::io(to, e))?;
        for ent in fs::read_dir(from).map_err(|e| Error::io(from, e))? {
            let ent = ent.map_err(|e| Error::io(from, e))?;
            let p = ent.path();
            let ft = ent.file_type().map_err(|e| Error::io(&p, e))?;
            let name = ent.file_name();
            if ft.is_dir() {
                link_dir(&p, &to.join(&name))?;
            } else if ft.is_file() && !name.to_string_lossy().ends_with(".tmp") {
                fs::hard_link(&p, to.join(&name)).map_err(|e| Error::io(&p, e))?;
            }
        }
        File::open(to)
            .and_then(|f| f.sync_all())
            .map_err(|e| Error::io(to, e))
    }
    link_dir(from, to)
}

/// A series' chunks without the samples `stones` deletes; `None` when nothing is left.
fn without_deleted(
    stones: &Tombstones,
    l: Labels,
    cs: Vec<Vec<u8>>,
) -> Option<(Labels, Vec<Vec<u8>>)> {
    let Some(d) = stones.get(&l) else {
        return Some((l, cs));
    };
    match crate::tombstones::drop_deleted(cs.iter().map(Vec::as_slice), d) {
        Ok(out) if out.is_empty() => None,
        Ok(out) => Some((l, out)),
        Err(e) => {
            tracing::warn!(series = %l, error = %e, "cannot apply tombstones to a head chunk; kept whole");
            Some((l, cs))
        }
    }
}

fn apply_replay(head: &Head, it: ReplayItem<'_>, unknown: &mut u64) {
    match it {
        ReplayItem::Series(s) => {
            for (r, l) in s {
                if !head.create_with_ref(r, l) {
                    tracing::warn!(series_ref = r, "WAL series record does not fit; skipped");
                }
            }
        }
        ReplayItem::Samples(ss) => {
            let mut cur: Option<(u64, Arc<crate::head::MemSeries>)> = None;
            for s in ss {
                let m = match &cur {
                    Some((r, m)) if *r == s.r => m.clone(),
                    _ => match head.series(s.r) {
                        Some(m) => {
                            cur = Some((s.r, m.clone()));
                            m
                        }
                        None => {
                            *unknown += 1;
                            continue;
                        }
                    },
                };
                head.replay_sample(&m, s.t, s.v);
            }
        }
        ReplayItem::Chunks(r, chunks) => {
            let Some(m) = head.series(r) else {
                *unknown += 1;
                return;
            };
            for c in chunks {
                match chunk::decode(c) {
                    Ok(it) => {
                        for (t, v) in it {
                            head.replay_sample(&m, t, v);
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "corrupt chunk in WAL checkpoint"),
                }
            }
        }
        ReplayItem::MinValidTime(t) => head.set_min_valid_time(t),
    }
}

fn open_blocks(dir: &Path, read_only: bool, stats: &mut OpenStats) -> Result<Vec<Arc<Block>>> {
    let mut blocks = Vec::new();
    for d in block::list_block_dirs(dir)? {
        match Block::open(&d) {
            Ok(b) => blocks.push(Arc::new(b)),
            Err(e) => stats.bad_blocks.push((d, e.to_string())),
        }
    }
    // a compaction or tombstone rewrite interrupted after writing its output but before
    // deleting its inputs leaves blocks whose data is also in a newer block: drop them
    let superseded = superseded_blocks(&blocks);
    let mut keep = Vec::new();
    for b in blocks {
        if superseded.contains(&b.meta().id) {
            if !read_only {
                tracing::info!(block = %b.meta().id, level = b.meta().level,
                    "deleting a block whose data is in a newer block (an interrupted compaction or rewrite)");
                let dir = b.dir().to_path_buf();
                drop(b);
                block::delete_block(&dir)?;
            }
            continue;
        }
        keep.push(b);
    }
    keep.sort_by(|a, b| (a.meta().min_time, &a.meta().id).cmp(&(b.meta().min_time, &b.meta().id)));
    stats.blocks = keep.len();
    Ok(keep)
}

/// The ids of blocks whose data another block holds: a block is the output of compacting or
/// rewriting (`clean_tombstones`) blocks when its level is higher and its sources include all
/// of theirs (a compaction's sources are the union of its inputs', a rewrite keeps its
/// input's). Both are left side by side only by a crash between writing the output and
/// deleting the inputs, at any level.
fn superseded_blocks(blocks: &[Arc<Block>]) -> std::collections::HashSet<String> {
    use std::collections::HashSet;
    let sources: Vec<HashSet<&str>> = blocks
        .iter()
        .map(|b| {
            let m = b.meta();
            let mut s: HashSet<&str> = m.sources.iter().map(String::as_str).collect();
            if s.is_empty() {
                s.insert(m.id.as_str());
            }
            s
        })
        .collect();
    let mut out = HashSet::new();
    for (i, b) in blocks.iter().enumerate() {
        let covered = blocks.iter().enumerate().any(|(j, o)| {
            j != i && o.meta().level > b.meta().level && sources[i].is_subset(&sources[j])
        });
        if covered {
            out.insert(b.meta().id.clone());
        }
    }
    out
}

fn spawn_background(inner: Arc<DbInner>) -> Background {
    let stop = Arc::new((Mutex::new(false), Condvar::new()));
    let stop2 = stop.clone();
    let handle = std::thread::Builder::new()
        .name("inferdb-storage-bg".into())
        .spawn(move || {
            // a quarter of the fsync interval, so that every write is fsynced within one
            let tick = (inner.opts.wal_fsync_interval / 4)
                .min(Duration::from_millis(250))
                .max(Duration::from_millis(1));
            let mut last_maint = Instant::now();
            loop {
                {
                    let (m, cv) = &*stop2;
                    let mut g = m.lock();
                    if *g {
                        return;
                    }
                    cv.wait_for(&mut g, tick);
                    if *g {
                        return;
                    }
                }
                // fsync failures are counted and logged by the WAL's health
                let _ = inner.sync_if_due();
                if last_maint.elapsed() >= inner.opts.maintenance_interval {
                    last_maint = Instant::now();
                    let r = inner.maintain();
                    let was = inner
                        .faults
                        .maintenance_failing
                        .swap(r.is_err(), Ordering::Relaxed);
                    match r {
                        Err(e) if !was => tracing::error!(error = %e,
                            "storage maintenance failed; retried every maintenance interval"),
                        Err(e) => tracing::debug!(error = %e, "storage maintenance failed again"),
                        Ok(()) if was => tracing::warn!("storage maintenance succeeds again"),
                        Ok(()) => {}
                    }
                }
            }
        })
        .expect("spawning the storage background thread");
    Background { stop, handle }
}

impl DbInner {
    /// Notes that data from `t` on changed (see [`Db::take_oldest_write`]).
    fn wrote_at(&self, t: Option<i64>) {
        if let Some(t) = t {
            self.oldest_write.fetch_min(t, Ordering::AcqRel);
        }
    }

    fn emit(&self, e: &Event) {
        if let Some(h) = &self.opts.events {
            h.emit(e);
        }
    }

    fn sync_if_due(&self) -> Result<()> {
        let Some(w) = &self.wal else { return Ok(()) };
        let handle = {
            let mut w = w.lock();
            if !w.sync_due(0.75) {
                return Ok(());
            }
            w.take_sync_handle()?
        };
        if let Some(f) = handle {
            // fsync outside the lock so that commits go on meanwhile
            let t = Instant::now();
            let r = f
                .sync_data()
                .map_err(|e| Error::io(self.dir.join("wal"), e));
            self.emit(&Event::WalFsync {
                duration: t.elapsed(),
            });
            if let Some(h) = &self.wal_health {
                h.fsync_result(&r);
            }
            r?;
        }
        Ok(())
    }

    fn maintain(&self) -> Result<()> {
        if self.opts.read_only {
            return Ok(());
        }
        self.cut(false).inspect_err(|_| {
            self.faults
                .head_truncations_failed
                .fetch_add(1, Ordering::Relaxed);
        })?;
        self.compact()?;
        self.apply_retention()
    }

    /// Cuts blocks from the head: while it spans more than 1.5 block durations, or (with
    /// `all`) every complete range before the newest sample's range.
    fn cut(&self, all: bool) -> Result<()> {
        let _m = self.maint.lock();
        let Some(wal) = &self.wal else {
            return Err(Error::ReadOnly);
        };
        let bd = self.opts.block_duration_ms.max(1);
        let mut cut_any = false;
        loop {
            let (lo, hi) = (self.head.min_time(), self.head.max_time());
            if lo == i64::MAX || hi < lo {
                break;
            }
            let a = lo.div_euclid(bd) * bd;
            let b = a.saturating_add(bd);
            let due = if all {
                hi >= b
            } else {
                hi.saturating_sub(lo) > bd / 2 * 3
            };
            if !due {
                break;
            }
            {
                // no commit is half-applied while the bound moves
                let _w = wal.lock();
                self.head.set_min_valid_time(b);
            }
            let started = Instant::now();
            let stones = self.head_tombstones();
            let mut series = self
                .head
                .chunks_in_range_iter(a, b)
                .filter_map(|(l, cs)| without_deleted(&stones, l, cs))
                .peekable();
            if series.peek().is_some() {
                let meta = block::write_block(&self.dir, a, b, series)?;
                let blk = Arc::new(Block::open(&self.dir.join(&meta.id))?);
                tracing::info!(ulid = %meta.id, mint = a, maxt = b, series = meta.num_series,
                    samples = meta.num_samples, bytes = blk.size_bytes(),
                    duration = ?started.elapsed(), "write block (cut from the head)");
                let mut bl = self.blocks.write();
                bl.push(blk);
                bl.sort_by(|x, y| {
                    (x.meta().min_time, &x.meta().id).cmp(&(y.meta().min_time, &y.meta().id))
                });
            }
            {
                // the block is written: the head lets go of the range even if this record
                // cannot be written (the checkpoint below carries the bound too, and without
                // either a replay only puts samples back that the block also holds)
                let mut w = wal.lock();
                wal::record::encode_min_valid(w.buf(), b);
                if w.flush().is_ok() {
                    let _ = w.sync();
                }
            }
            let gc = Instant::now();
            let removed = self.head.truncate_before(b);
            tracing::info!(series_removed = removed, duration = ?gc.elapsed(), "Head GC completed");
            self.trim_head_tombstones(b);
            cut_any = true;
        }
        if cut_any {
            let started = Instant::now();
            self.checkpoint(wal)?;
            tracing::info!(duration = ?started.elapsed(), "WAL checkpoint complete");
        }
        Ok(())
    }

    /// The head's deleted intervals.
    pub(crate) fn head_tombstones(&self) -> Arc<Tombstones> {
        self.head_tombstones.read().clone()
    }

    /// Replaces the head's tombstones: the file first (atomically), then what readers see.
    fn set_head_tombstones(&self, t: Tombstones) -> Result<()> {
        t.write(&self.dir.join(HEAD_TOMBSTONES_FILE))?;
        *self.head_tombstones.write() = Arc::new(t);
        Ok(())
    }

    /// Forgets the head's deleted intervals before `t` (that time is in blocks now, its
    /// deleted samples left out of them).
    fn trim_head_tombstones(&self, t: i64) {
        let old = self.head_tombstones();
        if old.is_empty() {
            return;
        }
        let mut new = (*old).clone();
        new.trim_before(t);
        if new != *old {
            if let Err(e) = self.set_head_tombstones(new) {
                tracing::warn!(error = %e, "cannot trim the head's tombstones; kept as they are");
            }
        }
    }

    /// Replaces every WAL segment so far by a checkpoint of the head.
    fn checkpoint(&self, wal: &Mutex<WalWriter>) -> Result<()> {
        let r = (|| {
            let (upto, buf, dir, compression) = {
                let mut w = wal.lock();
                let upto = w.roll()?;
                let mut buf = Vec::new();
                // under the WAL lock: every sample in segments <= upto is in the head
                self.head.checkpoint_records(&mut buf);
                (upto, buf, w.dir().to_path_buf(), w.compression())
            };
            let started = Instant::now();
            wal::write_checkpoint(&dir, upto, &buf, compression)?;
            tracing::debug!(upto_segment = upto, bytes = buf.len(), duration = ?started.elapsed(),
                "WAL checkpoint complete");
            Ok(())
        })();
        let c = if r.is_ok() {
            &self.faults.checkpoints
        } else {
            &self.faults.checkpoints_failed
        };
        c.fetch_add(1, Ordering::Relaxed);
        r
    }

    fn compact(&self) -> Result<()> {
        self.compact_with(crate::compact::plan_with_ranges)
    }

    /// Compacts while `planner` finds a group of blocks to merge.
    fn compact_with(&self, planner: fn(&[BlockMeta], &[i64]) -> Vec<Vec<String>>) -> Result<()> {
        let _m = self.maint.lock();
        loop {
            let blocks = self.blocks.read().clone();
            let metas: Vec<BlockMeta> = blocks.iter().map(|b| b.meta().clone()).collect();
            let ranges =
                crate::compact::ranges(self.opts.block_duration_ms, self.opts.retention_ms);
            let plan = planner(&metas, &ranges);
            let Some(group) = plan.into_iter().find(|g| g.len() > 1) else {
                return Ok(());
            };
            let inputs: Vec<&Block> = group
                .iter()
                .filter_map(|id| blocks.iter().find(|b| &b.meta().id == id).map(|b| &**b))
                .collect();
            if inputs.len() != group.len() {
                return Ok(());
            }
            let started = Instant::now();
            let in_bytes: u64 = inputs.iter().map(|b| b.size_bytes()).sum();
            let meta = crate::compact::compact(&self.dir, &inputs).inspect_err(|e| {
                self.faults
                    .compactions_failed
                    .fetch_add(1, Ordering::Relaxed);
                self.emit(&Event::Compaction {
                    duration: started.elapsed(),
                    ok: false,
                });
                if self.faults.compaction_failing.swap(true, Ordering::Relaxed) {
                    tracing::debug!(sources = ?group, error = %e, "compaction failed again");
                } else {
                    tracing::error!(sources = ?group, error = %e,
                        "compaction failed; retried every maintenance interval");
                }
            })?;
            self.faults.compactions.fetch_add(1, Ordering::Relaxed);
            if self
                .faults
                .compaction_failing
                .swap(false, Ordering::Relaxed)
            {
                tracing::warn!("compaction succeeds again");
            }
            let out = Arc::new(Block::open(&self.dir.join(&meta.id))?);
            self.emit(&Event::Compaction {
                duration: started.elapsed(),
                ok: true,
            });
            tracing::info!(ulid = %meta.id, mint = meta.min_time, maxt = meta.max_time,
                sources = ?group, input_bytes = in_bytes, bytes = out.size_bytes(),
                series = meta.num_series, samples = meta.num_samples,
                duration = ?started.elapsed(), "compact blocks");
            let dirs: Vec<PathBuf> = inputs.iter().map(|b| b.dir().to_path_buf()).collect();
            {
                let mut bl = self.blocks.write();
                bl.retain(|b| !group.contains(&b.meta().id));
                bl.push(out);
                bl.sort_by(|x, y| {
                    (x.meta().min_time, &x.meta().id).cmp(&(y.meta().min_time, &y.meta().id))
                });
            }
            for d in dirs {
                block::delete_block(&d)?;
            }
        }
    }

    fn apply_retention(&self) -> Result<()> {
        let _m = self.maint.lock();
        let blocks = self.blocks.read().clone();
        let metas: Vec<(BlockMeta, u64)> = blocks
            .iter()
            .map(|b| (b.meta().clone(), b.size_bytes()))
            .collect();
        let gone = crate::retention::blocks_to_delete(
            &metas,
            self.opts.retention_ms,
            self.opts.retention_bytes,
        );
        if gone.is_empty() {
            return Ok(());
        }
        let doomed: Vec<(PathBuf, BlockMeta, u64)> = blocks
            .iter()
            .filter(|b| gone.contains(&b.meta().id))
            .map(|b| (b.dir().to_path_buf(), b.meta().clone(), b.size_bytes()))
            .collect();
        self.blocks.write().retain(|b| !gone.contains(&b.meta().id));
        self.wrote_at(Some(i64::MIN));
        for (d, meta, bytes) in doomed {
            let started = Instant::now();
            block::delete_block(&d)?;
            tracing::info!(ulid = %meta.id, mint = meta.min_time, maxt = meta.max_time, bytes,
                duration = ?started.elapsed(),
                "Deleting obsolete block (retention: storage.tsdb.retention.time/size)");
        }
        Ok(())
    }
}

/// A transaction: samples appended here become visible (and durable in the WAL) on
/// [`Appender::commit`]; [`Appender::rollback`] or dropping discards them.
pub struct Appender<'a> {
    db: &'a DbInner,
    samples: Vec<RefSample>,
    series: Vec<Arc<MemSeries>>,
    done: bool,
}

impl Appender<'_> {
    fn writable(&self) -> Result<()> {
        if self.db.opts.read_only {
            return Err(Error::ReadOnly);
        }
        if self.db.closed.load(Ordering::Relaxed) {
            return Err(Error::Closed);
        }
        Ok(())
    }

    /// The reference of the series with labels `l`, creating it (labels are validated).
    pub fn get_ref(&mut self, l: &Labels) -> Result<SeriesRef> {
        self.writable()?;
        self.db.head.get_or_create(l).map(SeriesRef)
    }

    /// Appends a sample by series reference: no hashing, no allocation.
    ///
    /// An exact duplicate of the series' newest sample is accepted and ignored; an older
    /// sample fails with [`Error::OutOfOrder`], another value at the newest timestamp with
    /// [`Error::DuplicateTimestamp`], a sample older than the head accepts with
    /// [`Error::OutOfBounds`].
    #[inline]
    pub fn append_ref(&mut self, r: SeriesRef, t: i64, v: f64) -> Result<()> {
        if self.db.opts.read_only {
            return Err(Error::ReadOnly);
        }
        if let Some(m) = self.db.head.check_append_series(r.0, t, v)? {
            self.samples.push(RefSample { r: r.0, t, v });
            self.series.push(m);
        }
        Ok(())
    }

    /// Appends a sample by labels.
    pub fn append(&mut self, l: &Labels, t: i64, v: f64) -> Result<()> {
        let r = self.get_ref(l)?;
        self.append_ref(r, t, v)
    }

    /// The number of samples pending in this transaction.
    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// Whether nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// Writes the pending samples (and new series) to the WAL in one write, then makes them
    /// visible. On a WAL error nothing is applied.
    pub fn commit(mut self) -> Result<()> {
        self.done = true;
        let r = self.commit_inner();
        if r.is_err() {
            self.db.head.rollback_series(&self.series);
        }
        r
    }

    fn commit_inner(&mut self) -> Result<()> {
        self.writable()?;
        let Some(wal) = &self.db.wal else {
            return Err(Error::ReadOnly);
        };
        let mut w = wal.lock();
        let new = self.db.head.take_unlogged();
        if !new.is_empty() {
            let ls: Vec<(u64, Labels)> = new.iter().map(|m| (m.series_ref(), m.labels())).collect();
            w.log_series(ls.iter().map(|(r, l)| (*r, l)));
        }
        self.db.wrote_at(self.samples.iter().map(|s| s.t).min());
        w.log_samples(&self.samples);
        if let Err(e) = w.flush() {
            // the series must still be logged by a later commit
            for m in &new {
                self.db.head.requeue_unlogged(m.series_ref());
            }
            return Err(e);
        }
        self.db.head.commit_series(&self.samples, &mut self.series);
        Ok(())
    }

    /// Discards the pending samples.
    pub fn rollback(mut self) {
        self.done = true;
        self.db.head.rollback_series(&self.series);
    }
}

impl Drop for Appender<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.db.head.rollback_series(&self.series);
        }
        let mut s = std::mem::take(&mut self.samples);
        let mut m = std::mem::take(&mut self.series);
        s.clear();
        m.clear();
        if s.capacity() <= 1 << 20 {
            let mut pool = self.db.pool.lock();
            if pool.len() < 8 {
                pool.push((s, m));
            }
        }
    }
}

/// Collects samples for history older than the head and writes them as blocks, one per
/// block-duration range (see [`Db::backfill_block`]). Samples are buffered in memory.
pub struct BlockBuilder {
    block_duration_ms: i64,
    series: std::collections::BTreeMap<Labels, Vec<(i64, f64)>>,
}

impl BlockBuilder {
    /// An empty builder cutting blocks of `block_duration_ms`.
    pub fn new(block_duration_ms: i64) -> Self {
        BlockBuilder {
            block_duration_ms: block_duration_ms.max(1),
            series: Default::default(),
        }
    }

    /// Adds a sample (any order; on equal timestamps the first one wins).
    pub fn add(&mut self, l: &Labels, t: i64, v: f64) -> Result<()> {
        if let Some(s) = self.series.get_mut(l) {
            s.push((t, v));
            return Ok(());
        }
        l.validate()?;
        self.series.insert(l.clone(), vec![(t, v)]);
        Ok(())
    }

    /// The newest sample time, if any.
    pub fn max_time(&self) -> Option<i64> {
        self.series
            .values()
            .flat_map(|s| s.iter().map(|x| x.0))
            .max()
    }

    /// Writes the blocks under `parent`; returns their metadata.
    pub fn write(mut self, parent: &Path) -> Result<Vec<BlockMeta>> {
        let bd = self.block_duration_ms;
        let mut ranges = std::collections::BTreeSet::new();
        for s in self.series.values_mut() {
            s.sort_by_key(|x| x.0);
            s.dedup_by_key(|x| x.0);
            for x in s.iter() {
                ranges.insert(x.0.div_euclid(bd));
            }
        }
        let mut metas = Vec::new();
        for k in ranges {
            let (a, b) = (k * bd, k * bd + bd);
            let mut out: Vec<(Labels, Vec<Vec<u8>>)> = Vec::new();
            for (l, s) in &self.series {
                let lo = s.partition_point(|x| x.0 < a);
                let hi = s.partition_point(|x| x.0 < b);
                if lo == hi {
                    continue;
                }
                let mut chunks = Vec::new();
                for part in s[lo..hi].chunks(chunk::MAX_SAMPLES_PER_CHUNK) {
                    let mut w = chunk::ChunkWriter::new();
                    for &(t, v) in part {
                        w.append(t, v);
                    }
                    chunks.push(w.finish());
                }
                out.push((l.clone(), chunks));
            }
            // the block ends after its newest sample rather than at the range end, so that
            // it never claims time the head may still fill
            let newest = self
                .series
                .values()
                .filter_map(|s| {
                    s[s.partition_point(|x| x.0 < a)..s.partition_point(|x| x.0 < b)].last()
                })
                .map(|x| x.0)
                .max()
                .unwrap_or(a);
            let end = b.min(newest.saturating_add(1));
            metas.push(block::write_block(parent, a, end, out.into_iter())?);
        }
        Ok(metas)
    }
}
