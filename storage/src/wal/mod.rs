//! The write-ahead log: segmented, append-only, checksummed.
//!
//! The WAL lives in `<data>/wal/`. Segment files are named by an 8-digit decimal sequence
//! number (`00000001`, `00000002`, ...) and hold framed records (see [`record`]); a new
//! segment is started on open and when the current one passes the size limit. After the head
//! has been cut into a block, segments up to `N` are replaced by one file `checkpoint.N`
//! holding the live series and their head chunks, written to `checkpoint.N.tmp`, fsynced and
//! renamed.
//!
//! Replay reads the newest checkpoint, then every segment after it in order. Damage costs
//! only the damaged bytes: replay goes on at the next intact record (found by its checksum),
//! so a bad record in the middle of the log never hides the records written after it. A
//! torn write at the end of a segment is cut off. Every damaged span is reported in
//! [`ReplayStats::corruptions`] with its file, offset and length; corruption is never fatal.
//! (Prometheus' repair instead drops everything after the first bad record.)
//!
//! The writer never leaves a torn record in the middle of the log: a write that fails (a
//! full disk, a read-only folder) is cut back off the segment, the commit fails and nothing
//! of it enters the head, and the next write tries again at the same place. See
//! [`WalWriter::flush`].
//!
//! With compression on ([`WalWriter::set_compression`], `--storage.tsdb.wal-compression`)
//! each record's payload is stored snappy- or zstd-compressed when that makes it smaller,
//! flagged in its type byte (see [`compress`]); readers handle every record by its own flag,
//! so a WAL written with the setting changed between restarts replays as one.

pub mod compress;
pub mod record;
pub mod watch;

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::labels::Labels;
pub use compress::Compression;
pub use record::{Record, RefSample};

/// Default segment size limit.
pub const DEFAULT_SEGMENT_BYTES: u64 = 128 << 20;

/// One damaged span found during replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Corruption {
    /// The file.
    pub path: PathBuf,
    /// Byte offset of the first bad byte (the start of the damaged record).
    pub offset: u64,
    /// What was wrong.
    pub reason: String,
    /// Bytes skipped: up to the next intact record, or to the end of the file.
    pub dropped_bytes: u64,
    /// The damage ran to the end of the file (a torn write): nothing after it was lost, and
    /// unless read-only the segment was cut there. Otherwise the records after the span
    /// were read.
    pub tail: bool,
}

impl std::fmt::Display for Corruption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} at offset {}: {} ({} bytes {})",
            self.path.display(),
            self.offset,
            self.reason,
            self.dropped_bytes,
            if self.tail {
                "to the end of the file"
            } else {
                "skipped, the records after them kept"
            }
        )
    }
}

/// What a replay read.
#[derive(Debug, Clone, Default)]
pub struct ReplayStats {
    /// Checkpoint files read (0 or 1).
    pub checkpoints: usize,
    /// Segments read.
    pub segments: usize,
    /// Records read.
    pub records: u64,
    /// Series records' entries read.
    pub series: u64,
    /// Samples read.
    pub samples: u64,
    /// Damaged spans found, in file order.
    pub corruptions: Vec<Corruption>,
}

/// What the replay handler receives.
pub enum ReplayItem<'a> {
    /// Series definitions.
    Series(Vec<(u64, Labels)>),
    /// A batch of samples.
    Samples(&'a [RefSample]),
    /// Encoded chunks of one series (from a checkpoint).
    Chunks(u64, Vec<&'a [u8]>),
    /// Samples older than this are in blocks.
    MinValidTime(i64),
}

fn segment_name(n: u32) -> String {
    format!("{n:08}")
}

fn checkpoint_name(n: u32) -> String {
    format!("checkpoint.{n:08}")
}

/// Lists `(segments, checkpoints)` of a WAL folder, each sorted by number.
fn list(dir: &Path) -> Result<(Vec<u32>, Vec<u32>)> {
    let mut segs = Vec::new();
    let mut cps = Vec::new();
    let rd = match fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((segs, cps)),
        Err(e) => return Err(Error::io(dir, e)),
    };
    for e in rd {
        let e = e.map_err(|e| Error::io(dir, e))?;
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.len() == 8 && name.bytes().all(|b| b.is_ascii_digit()) {
            if let Ok(n) = name.parse() {
                segs.push(n);
            }
        } else if let Some(n) = name.strip_prefix("checkpoint.") {
            if n.len() == 8 && n.bytes().all(|b| b.is_ascii_digit()) {
                if let Ok(n) = n.parse() {
                    cps.push(n);
                }
            }
        }
    }
    segs.sort_unstable();
    cps.sort_unstable();
    Ok((segs, cps))
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|f| f.sync_all())
        .map_err(|e| Error::io(dir, e))
}

/// Feeds every intact record of `buf` to `f`. A damaged span followed by intact records is
/// skipped and added to `stats` as a corruption; damage that runs to the end of `buf` is
/// returned as `(offset, reason)` for the caller to repair (nothing intact follows it).
fn replay_buf(
    path: &Path,
    buf: &[u8],
    stats: &mut ReplayStats,
    decoder: &mut record::Decoder,
    f: &mut dyn FnMut(ReplayItem<'_>) -> Result<()>,
) -> Result<Option<(u64, String)>> {
    let mut frames = record::Frames::new(buf);
    loop {
        let Some(fr) = frames.next() else {
            return Ok(None);
        };
        let (off, ty, payload) = match fr {
            Ok(x) => x,
            Err((off, reason)) => match frames.skip_damaged() {
                Some(next) => {
                    stats.corruptions.push(Corruption {
                        path: path.to_path_buf(),
                        offset: off as u64,
                        reason,
                        dropped_bytes: (next - off) as u64,
                        tail: false,
                    });
                    continue;
                }
                None => return Ok(Some((off as u64, reason))),
            },
        };
        let rec = match decoder.decode(ty, payload) {
            Ok(r) => r,
            Err(e) => {
                // the frame is intact, so the records after it are where they should be
                let reason = match e {
                    Error::Corrupt { reason, .. } => reason,
                    e => e.to_string(),
                };
                stats.corruptions.push(Corruption {
                    path: path.to_path_buf(),
                    offset: off as u64,
                    reason,
                    dropped_bytes: (record::HEADER_LEN + payload.len()) as u64,
                    tail: false,
                });
                continue;
            }
        };
        stats.records += 1;
        match rec {
            Record::Series(s) => {
                stats.series += s.len() as u64;
                f(ReplayItem::Series(s))?;
            }
            Record::Samples(samples) => {
                stats.samples += samples.len() as u64;
                f(ReplayItem::Samples(samples))?;
            }
            Record::Chunks { r, chunks } => f(ReplayItem::Chunks(r, chunks))?,
            Record::MinValidTime(t) => f(ReplayItem::MinValidTime(t))?,
        }
    }
}

/// Reads every intact record of the WAL folder `dir` in order, calling `f` for each.
///
/// Damage never costs the records after it: a damaged span with intact records after it is
/// skipped (the file is left as it is), a missing segment is passed over, and damage that
/// runs to the end of a segment (a write cut short by a crash) is, unless `read_only`, cut
/// off the file. Each is listed in [`ReplayStats::corruptions`] with the bytes it cost.
/// Unless `read_only`, leftover `*.tmp` files are deleted. Returns the statistics and the
/// highest segment number seen (0 when none).
pub fn replay(
    dir: &Path,
    read_only: bool,
    f: impl FnMut(ReplayItem<'_>) -> Result<()>,
) -> Result<(ReplayStats, u32)> {
    replay_with_progress(dir, read_only, None, f)
}

/// [`replay`], keeping `progress` up to date (first, last and current segment) and, unless
/// `read_only`, logging each segment read and the replay's duration as Prometheus does.
pub fn replay_with_progress(
    dir: &Path,
    read_only: bool,
    progress: Option<&crate::observe::ReplayProgress>,
    mut f: impl FnMut(ReplayItem<'_>) -> Result<()>,
) -> Result<(ReplayStats, u32)> {
    let started = std::time::Instant::now();
    let mut stats = ReplayStats::default();
    let (segs, cps) = list(dir)?;
    if !read_only {
        if let Ok(rd) = fs::read_dir(dir) {
            for e in rd.flatten() {
                if e.file_name().to_string_lossy().ends_with(".tmp") {
                    let _ = fs::remove_file(e.path());
                }
            }
        }
    }
    let mut decoder = record::Decoder::default();
    let mut last = segs.last().copied().unwrap_or(0);
    let mut after = 0u32;
    if let Some(&cp) = cps.last() {
        let path = dir.join(checkpoint_name(cp));
        let buf = fs::read(&path).map_err(|e| Error::io(&path, e))?;
        stats.checkpoints = 1;
        if let Some((offset, reason)) = replay_buf(&path, &buf, &mut stats, &mut decoder, &mut f)? {
            // a checkpoint is written atomically, so this is real damage: report it and go
            // on with the segments (the file is replaced by the next checkpoint)
            stats.corruptions.push(Corruption {
                path,
                offset,
                reason,
                dropped_bytes: buf.len() as u64 - offset,
                tail: true,
            });
        }
        after = cp;
        last = last.max(cp);
        if !read_only {
            tracing::info!(checkpoint = cp, duration = ?started.elapsed(), "WAL checkpoint loaded");
        }
    }
    let checkpoint_done = started.elapsed();
    let segs: Vec<u32> = segs.into_iter().filter(|&s| s > after).collect();
    let (first, max_seg) = (
        segs.first().copied().unwrap_or(after),
        segs.last().copied().unwrap_or(after),
    );
    if let Some(p) = progress {
        p.start(i64::from(first), i64::from(max_seg));
    }
    if !read_only && !segs.is_empty() {
        tracing::info!(
            segments = segs.len(),
            "Replaying WAL, this may take a while"
        );
    }
    let mut expect: Option<u32> = None;
    for s in segs.into_iter() {
        if let Some(p) = progress {
            p.set_current(i64::from(s));
        }
        let path = dir.join(segment_name(s));
        if let Some(e) = expect.filter(|&e| e != s) {
            stats.corruptions.push(Corruption {
                path: path.clone(),
                offset: 0,
                reason: if s - e == 1 {
                    format!("missing WAL segment {e:08}")
                } else {
                    format!("missing WAL segments {e:08} to {:08}", s - 1)
                },
                dropped_bytes: 0,
                tail: false,
            });
        }
        expect = Some(s.wrapping_add(1));
        let buf = fs::read(&path).map_err(|e| Error::io(&path, e))?;
        stats.segments += 1;
        if let Some((offset, reason)) = replay_buf(&path, &buf, &mut stats, &mut decoder, &mut f)? {
            if !read_only {
                let file = OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .map_err(|e| Error::io(&path, e))?;
                file.set_len(offset).map_err(|e| Error::io(&path, e))?;
                file.sync_all().map_err(|e| Error::io(&path, e))?;
            }
            stats.corruptions.push(Corruption {
                path,
                offset,
                reason,
                dropped_bytes: buf.len() as u64 - offset,
                tail: true,
            });
        }
        if !read_only {
            tracing::info!(segment = s, maxSegment = max_seg, "WAL segment loaded");
        }
    }
    if let Some(p) = progress {
        p.finish();
    }
    if !read_only && (stats.segments > 0 || stats.checkpoints > 0) {
        tracing::info!(
            checkpoint_replay_duration = ?checkpoint_done,
            wal_replay_duration = ?started.elapsed().saturating_sub(checkpoint_done),
            total_replay_duration = ?started.elapsed(),
            segments = stats.segments,
            samples = stats.samples,
            series = stats.series,
            "WAL replay completed"
        );
    }
    Ok((stats, last))
}

/// The WAL writer's health, readable without its lock (for metrics and the scraper).
#[derive(Debug, Default)]
pub struct WalHealth {
    /// Writes that failed; each refused one commit.
    pub writes_failed: AtomicU64,
    /// Fsyncs that failed.
    pub fsyncs_failed: AtomicU64,
    /// Writes are failing now: commits are refused until one succeeds.
    pub failing: AtomicBool,
    /// Fsyncs are failing now.
    pub fsync_failing: AtomicBool,
    /// The segment being written.
    pub segment: AtomicU32,
    /// Payload bytes compression saved (Prometheus'
    /// `prometheus_tsdb_wal_record_bytes_saved_total`).
    pub bytes_saved: AtomicU64,
}

impl WalHealth {
    /// Counts an fsync's outcome and logs when fsyncs start or stop failing.
    pub fn fsync_result(&self, r: &Result<()>) {
        match r {
            Ok(()) => {
                if self.fsync_failing.swap(false, Ordering::Relaxed) {
                    tracing::info!("WAL fsyncs succeed again");
                }
            }
            Err(e) => {
                self.fsyncs_failed.fetch_add(1, Ordering::Relaxed);
                if !self.fsync_failing.swap(true, Ordering::Relaxed) {
                    tracing::error!(error = %e,
                        "WAL fsync failed; data committed since the last fsync may not survive a machine crash");
                }
            }
        }
    }
}

/// A run of failed writes.
struct Failing {
    since: Instant,
    writes: u64,
}

/// Appends records to the newest segment. Not thread-safe by itself: wrap it in a mutex.
pub struct WalWriter {
    dir: PathBuf,
    seg: u32,
    file: File,
    /// Bytes of whole records in the segment; the next write goes here.
    seg_bytes: u64,
    max_segment_bytes: u64,
    buf: Vec<u8>,
    /// When the oldest write not yet fsynced happened (`None`: all synced).
    unsynced: Option<Instant>,
    fsync_interval: Duration,
    /// The segment may hold bytes of a failed write past `seg_bytes` (cutting them failed
    /// too); the next write overwrites them and cuts what is left.
    dirty_tail: bool,
    failing: Option<Failing>,
    health: Arc<WalHealth>,
    compression: Compression,
    compressor: compress::Compressor,
    /// The compressed records of `buf` (when compression is on).
    packed: Vec<u8>,
}

/// Turns an I/O error of the writer into [`Error::WalWrite`].
fn write_error(e: Error) -> Error {
    match e {
        Error::Io { path, source } => Error::WalWrite { path, source },
        e => e,
    }
}

impl WalWriter {
    /// Creates the folder if needed and starts segment `after + 1`, or continues segment
    /// `after` when it exists and is empty (left by a writer that could not write to it), so
    /// that restarts on a full disk do not pile up empty segments.
    pub fn create(
        dir: &Path,
        after: u32,
        fsync_interval: Duration,
        max_segment_bytes: u64,
    ) -> Result<Self> {
        fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let empty = after > 0
            && fs::metadata(dir.join(segment_name(after)))
                .is_ok_and(|m| m.is_file() && m.len() == 0);
        let seg = if empty { after } else { after + 1 };
        let file = Self::open_segment(dir, seg)?;
        let health = Arc::new(WalHealth::default());
        health.segment.store(seg, Ordering::Relaxed);
        Ok(WalWriter {
            dir: dir.to_path_buf(),
            seg,
            file,
            seg_bytes: 0,
            max_segment_bytes: max_segment_bytes.max(1),
            buf: Vec::with_capacity(1 << 16),
            unsynced: None,
            fsync_interval,
            dirty_tail: false,
            failing: None,
            health,
            compression: Compression::None,
            compressor: compress::Compressor::default(),
            packed: Vec::new(),
        })
    }

    /// How records written from now on are compressed (see [`compress`]); records already
    /// written stay as they are, and readers handle both.
    pub fn set_compression(&mut self, c: Compression) {
        self.compression = c;
    }

    /// How records are compressed.
    pub fn compression(&self) -> Compression {
        self.compression
    }

    fn open_segment(dir: &Path, seg: u32) -> Result<File> {
        let path = dir.join(segment_name(seg));
        let f = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(&path)
            .map_err(|e| Error::io(&path, e))?;
        sync_dir(dir)?;
        Ok(f)
    }

    /// The current segment number.
    pub fn segment(&self) -> u32 {
        self.seg
    }

    /// The WAL folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The writer's health counters, shared.
    pub fn health(&self) -> Arc<WalHealth> {
        self.health.clone()
    }

    /// Whether writes are failing now (the last one failed).
    pub fn is_failing(&self) -> bool {
        self.failing.is_some()
    }

    /// The record buffer that the next [`WalWriter::flush`] writes; encode into it with the
    /// functions of [`record`].
    pub fn buf(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }

    /// Encodes series definitions into the buffer.
    pub fn log_series<'l>(&mut self, series: impl Iterator<Item = (u64, &'l Labels)>) {
        record::encode_series(&mut self.buf, series);
    }

    /// Encodes samples into the buffer (split into records of at most 1 M samples).
    pub fn log_samples(&mut self, samples: &[RefSample]) {
        for part in samples.chunks(1 << 20) {
            record::encode_samples(&mut self.buf, part);
        }
    }

    /// Writes the buffered records to the segment (one `write`), starting a new segment first
    /// if the current one is full; fsyncs when the oldest unsynced write is one fsync interval
    /// old (the database's background thread normally fsyncs sooner). The buffer is empty
    /// afterwards either way.
    ///
    /// A write that fails ([`Error::WalWrite`]: a full disk, a read-only folder) is cut back
    /// off the segment, so the segment still ends with a whole record and the next write goes
    /// to the same place; no new segment is started for it. The first failure of a run and
    /// the first success after it are logged, every failure is counted in [`WalHealth`]. A
    /// failed fsync is counted and logged but does not fail the flush: the records are
    /// written.
    pub fn flush(&mut self) -> Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let r = self.write_buf();
        self.buf.clear();
        if self.buf.capacity() > 1 << 20 {
            // a big commit (many new series at once) must not pin its buffer for good
            self.buf.shrink_to(1 << 16);
        }
        if let Err(e) = r {
            self.health.writes_failed.fetch_add(1, Ordering::Relaxed);
            match &mut self.failing {
                Some(f) => f.writes += 1,
                None => {
                    tracing::error!(error = %e,
                        "WAL write failed; appends are refused until a write succeeds (tried again at every commit)");
                    self.failing = Some(Failing {
                        since: Instant::now(),
                        writes: 1,
                    });
                    self.health.failing.store(true, Ordering::Relaxed);
                }
            }
            return Err(e);
        }
        if let Some(f) = self.failing.take() {
            tracing::warn!(
                failed_writes = f.writes,
                seconds = f.since.elapsed().as_secs(),
                segment = self.seg,
                "WAL writes succeed again; appends accepted"
            );
            self.health.failing.store(false, Ordering::Relaxed);
        }
        let since = *self.unsynced.get_or_insert_with(Instant::now);
        if since.elapsed() >= self.fsync_interval {
            // counted and logged by `sync`; the records are written
            let _ = self.sync();
        }
        Ok(())
    }

    fn write_buf(&mut self) -> Result<()> {
        use std::os::unix::fs::FileExt;
        let packed = self.compression != Compression::None;
        if packed {
            self.packed.clear();
            let saved =
                self.compressor
                    .compress_records(&self.buf, self.compression, &mut self.packed);
            self.health.bytes_saved.fetch_add(saved, Ordering::Relaxed);
        }
        let len = if packed {
            self.packed.len()
        } else {
            self.buf.len()
        } as u64;
        if self.seg_bytes > 0 && self.seg_bytes + len > self.max_segment_bytes {
            self.roll().map_err(write_error)?;
        }
        let at = self.seg_bytes;
        let data = if packed { &self.packed } else { &self.buf };
        if let Err(e) = self.file.write_all_at(data, at) {
            // cut off what part of it was written: no torn record stays in the log
            self.dirty_tail = self.file.set_len(at).is_err();
            return Err(Error::WalWrite {
                path: self.dir.join(segment_name(self.seg)),
                source: e,
            });
        }
        self.seg_bytes += len;
        if self.dirty_tail {
            // bytes of an earlier failed write beyond this one
            self.dirty_tail = self.file.set_len(self.seg_bytes).is_err();
        }
        if self.packed.capacity() > 1 << 20 {
            // as `buf`: a big commit must not pin its buffer for good
            self.packed = Vec::new();
        }
        Ok(())
    }

    /// Discards buffered, unwritten records.
    pub fn discard(&mut self) {
        self.buf.clear();
    }

    /// Fsyncs the current segment if anything was written since the last fsync.
    pub fn sync(&mut self) -> Result<()> {
        if self.unsynced.is_some() {
            let r = self
                .file
                .sync_data()
                .map_err(|e| Error::io(self.dir.join(segment_name(self.seg)), e));
            self.health.fsync_result(&r);
            r?;
            self.unsynced = None;
        }
        Ok(())
    }

    /// A second handle on the current segment to fsync without holding the writer's lock;
    /// `None` when nothing is unsynced. Marks the data as synced.
    pub fn take_sync_handle(&mut self) -> Result<Option<File>> {
        if self.unsynced.is_none() {
            return Ok(None);
        }
        let f = self
            .file
            .try_clone()
            .map_err(|e| Error::io(self.dir.join(segment_name(self.seg)), e))?;
        self.unsynced = None;
        Ok(Some(f))
    }

    /// Whether the oldest unsynced write is older than `fraction` of the fsync interval.
    /// The background thread checks every quarter interval with `fraction = 3/4`, so every
    /// write is fsynced within one interval.
    pub fn sync_due(&self, fraction: f64) -> bool {
        self.unsynced.is_some_and(|t| {
            t.elapsed().as_secs_f64() >= self.fsync_interval.as_secs_f64() * fraction
        })
    }

    /// Fsyncs the current segment and starts the next one; returns the closed segment number.
    /// On failure the current segment stays the one written.
    pub fn roll(&mut self) -> Result<u32> {
        let path = self.dir.join(segment_name(self.seg));
        if self.dirty_tail {
            self.file
                .set_len(self.seg_bytes)
                .map_err(|e| Error::io(&path, e))?;
            self.dirty_tail = false;
        }
        self.file.sync_data().map_err(|e| Error::io(&path, e))?;
        let old = self.seg;
        self.file = Self::open_segment(&self.dir, old + 1)?;
        self.seg = old + 1;
        self.seg_bytes = 0;
        self.unsynced = None;
        self.health.segment.store(self.seg, Ordering::Relaxed);
        Ok(old)
    }
}

/// Writes `checkpoint.upto` from `records` (plain records, as the `record::encode_*`
/// functions write them), compressed with `compression`, and deletes every segment `<= upto`
/// and every older checkpoint.
pub fn write_checkpoint(
    dir: &Path,
    upto: u32,
    records: &[u8],
    compression: Compression,
) -> Result<()> {
    let packed;
    let records = if compression == Compression::None {
        records
    } else {
        let mut out = Vec::with_capacity(records.len() / 2);
        compress::Compressor::default().compress_records(records, compression, &mut out);
        packed = out;
        &packed[..]
    };
    let name = checkpoint_name(upto);
    let tmp = dir.join(format!("{name}.tmp"));
    let fin = dir.join(&name);
    let written = File::create(&tmp)
        .and_then(|mut f| {
            f.write_all(records)?;
            f.sync_all()
        })
        .and_then(|()| fs::rename(&tmp, &fin));
    if let Err(e) = written {
        // a full disk: free the space at once, the segments stay as they are
        let _ = fs::remove_file(&tmp);
        return Err(Error::io(&tmp, e));
    }
    sync_dir(dir)?;
    let (segs, cps) = list(dir)?;
    for s in segs.into_iter().filter(|&s| s <= upto) {
        let p = dir.join(segment_name(s));
        fs::remove_file(&p).map_err(|e| Error::io(&p, e))?;
    }
    for c in cps.into_iter().filter(|&c| c < upto) {
        let p = dir.join(checkpoint_name(c));
        fs::remove_file(&p).map_err(|e| Error::io(&p, e))?;
    }
    sync_dir(dir)
}

/// Decodes arbitrary bytes as a WAL segment; for fuzzing. Never panics.
#[cfg(any(test, feature = "fuzzing"))]
pub fn fuzz_decode(data: &[u8]) -> usize {
    let mut decoder = record::Decoder::default();
    let mut n = 0;
    for (_, ty, payload) in record::Frames::new(data).flatten() {
        if decoder.decode(ty, payload).is_ok() {
            n += 1;
        }
    }
    // also decode the whole input as each payload type, bypassing the checksum
    for ty in record::TYPE_SERIES..=record::TYPE_MIN_VALID {
        if decoder.decode(ty, data).is_ok() {
            n += 1;
        }
    }
    n
}

/// Decodes arbitrary bytes as one record's type byte (the first byte) and stored payload
/// (the rest), bypassing framing and checksum, so that the decompressors and the payload
/// decoders see every input; for fuzzing. Returns whether it decoded. Never panics.
#[cfg(any(test, feature = "fuzzing"))]
pub fn fuzz_decode_record(data: &[u8]) -> bool {
    let Some((&ty, raw)) = data.split_first() else {
        return false;
    };
    let mut decoder = record::Decoder::default();
    if decoder.decode(ty, raw).is_ok() {
        return true;
    }
    // the same bytes under each compression, whatever the first byte's bits said
    let kind = record::kind(ty);
    for bits in [0, compress::SNAPPY_BIT, compress::ZSTD_BIT] {
        let _ = decoder.decode(kind | bits, raw);
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(dir: &Path, ro: bool) -> (ReplayStats, Vec<RefSample>, Vec<(u64, Labels)>) {
        let mut ss = Vec::new();
        let mut series = Vec::new();
        let (st, _) = replay(dir, ro, |it| {
            match it {
                ReplayItem::Samples(s) => ss.extend_from_slice(s),
                ReplayItem::Series(s) => series.extend(s),
                _ => {}
            }
            Ok(())
        })
        .unwrap();
        (st, ss, series)
    }

    fn sample(i: i64) -> RefSample {
        RefSample {
            r: (i % 3) as u64,
            t: i,
            v: i as f64,
        }
    }

    #[test]
    fn writes_rolls_and_replays() {
        let d = tempfile::tempdir().unwrap();
        let w = d.path().join("wal");
        let mut wr = WalWriter::create(&w, 0, Duration::from_secs(1), 200).unwrap();
        let l = Labels::from_pairs([("__name__", "m")]);
        wr.log_series([(0u64, &l)].into_iter());
        wr.flush().unwrap();
        for i in 0..50 {
            wr.log_samples(&[sample(i)]);
            wr.flush().unwrap();
        }
        assert!(wr.segment() > 2, "segments roll at the size limit");
        drop(wr);
        let (st, ss, series) = collect(&w, false);
        assert_eq!(series, vec![(0, l)]);
        assert_eq!(ss.len(), 50);
        assert!(ss.iter().enumerate().all(|(i, s)| s.t == i as i64));
        assert!(st.corruptions.is_empty());
    }

    #[test]
    fn torn_tail_is_truncated_and_reported() {
        let d = tempfile::tempdir().unwrap();
        let w = d.path().join("wal");
        let mut wr = WalWriter::create(&w, 0, Duration::from_secs(1), 1 << 20).unwrap();
        for i in 0..10 {
            wr.log_samples(&[sample(i)]);
            wr.flush().unwrap();
        }
        let seg = w.join(segment_name(wr.segment()));
        drop(wr);
        let len = fs::metadata(&seg).unwrap().len();
        let f = OpenOptions::new().write(true).open(&seg).unwrap();
        f.set_len(len - 4).unwrap();
        drop(f);
        // read-only replay reports but does not repair
        let (st, ss, _) = collect(&w, true);
        assert_eq!(ss.len(), 9);
        assert_eq!(st.corruptions.len(), 1);
        assert_eq!(fs::metadata(&seg).unwrap().len(), len - 4);
        let (st, ss, _) = collect(&w, false);
        assert_eq!(ss.len(), 9);
        assert_eq!(st.corruptions[0].path, seg);
        let rec = len / 10;
        assert_eq!(st.corruptions[0].offset, rec * 9);
        assert_eq!(fs::metadata(&seg).unwrap().len(), rec * 9);
        let (st, ss, _) = collect(&w, false);
        assert!(st.corruptions.is_empty());
        assert_eq!(ss.len(), 9);
    }

    /// Writes `n` one-sample records (`t = 0..n`), rolling at `seg_bytes`; returns the
    /// segment numbers.
    fn write_n(w: &Path, n: i64, seg_bytes: u64) -> Vec<u32> {
        let mut wr = WalWriter::create(w, 0, Duration::ZERO, seg_bytes).unwrap();
        for i in 0..n {
            wr.log_samples(&[sample(i)]);
            wr.flush().unwrap();
        }
        drop(wr);
        list(w).unwrap().0
    }

    fn times(ss: &[RefSample]) -> Vec<i64> {
        ss.iter().map(|s| s.t).collect()
    }

    #[test]
    fn damage_in_the_middle_keeps_later_segments() {
        let d = tempfile::tempdir().unwrap();
        let w = d.path().join("wal");
        let segs = write_n(&w, 30, 100);
        assert!(segs.len() >= 3);
        let victim = w.join(segment_name(segs[1]));
        let per_seg = record::Frames::new(&fs::read(&victim).unwrap()).count();
        let mut b = fs::read(&victim).unwrap();
        b[HEADER_LEN_PUB + 3] ^= 0x40; // the first record's payload
        fs::write(&victim, &b).unwrap();
        let (st, ss, _) = collect(&w, false);
        assert_eq!(st.corruptions.len(), 1, "{:?}", st.corruptions);
        let c = &st.corruptions[0];
        assert_eq!((&c.path, c.offset, c.tail), (&victim, 0, false));
        assert_eq!(
            c.dropped_bytes,
            (b.len() / per_seg) as u64,
            "one record skipped"
        );
        // only the damaged record's sample is missing
        let lost = per_seg as i64; // segs[0] holds t = 0..per_seg
        let want: Vec<i64> = (0..30).filter(|&t| t != lost).collect();
        assert_eq!(times(&ss), want);
        assert_eq!(list(&w).unwrap().0, segs, "no segment deleted");
    }

    #[test]
    fn garbage_between_records_is_skipped() {
        let d = tempfile::tempdir().unwrap();
        let w = d.path().join("wal");
        let segs = write_n(&w, 10, 1 << 20);
        let seg = w.join(segment_name(segs[0]));
        let b = fs::read(&seg).unwrap();
        let rec = b.len() / 10;
        // a torn write of 2.5 records, then 37 bytes of garbage, in the middle of the log
        let mut out = b[..rec * 4].to_vec();
        let mut torn = Vec::new();
        record::encode_samples(&mut torn, &[sample(100), sample(101), sample(102)]);
        out.extend_from_slice(&torn[..torn.len() / 2]);
        out.extend((0..37u8).map(|i| i.wrapping_mul(151)));
        let skipped = out.len() - rec * 4;
        out.extend_from_slice(&b[rec * 4..]);
        fs::write(&seg, &out).unwrap();
        let (st, ss, _) = collect(&w, true);
        assert_eq!(times(&ss), (0..10).collect::<Vec<_>>());
        assert_eq!(st.corruptions.len(), 1);
        let c = &st.corruptions[0];
        assert_eq!(
            (c.offset, c.dropped_bytes),
            ((rec * 4) as u64, skipped as u64)
        );
        assert!(!c.tail);
        assert!(c.to_string().contains("skipped"), "{c}");
        // repairing replay leaves the file alone (the database checkpoints it away)
        let (st, ss, _) = collect(&w, false);
        assert_eq!(ss.len(), 10);
        assert_eq!(st.corruptions.len(), 1);
        assert_eq!(fs::read(&seg).unwrap(), out);
    }

    #[test]
    fn a_missing_segment_costs_only_itself() {
        let d = tempfile::tempdir().unwrap();
        let w = d.path().join("wal");
        let segs = write_n(&w, 20, 60);
        assert!(segs.len() >= 4);
        let gone = w.join(segment_name(segs[1]));
        let lost = record::Frames::new(&fs::read(&gone).unwrap()).count();
        fs::remove_file(&gone).unwrap();
        let (st, ss, _) = collect(&w, false);
        assert_eq!(ss.len(), 20 - lost);
        assert_eq!(ss.last().unwrap().t, 19);
        assert_eq!(st.corruptions.len(), 1);
        assert!(st.corruptions[0].reason.contains("missing"));
        assert_eq!(list(&w).unwrap().0.len(), segs.len() - 1);
    }

    #[test]
    fn torn_tail_of_an_earlier_segment_keeps_later_ones() {
        let d = tempfile::tempdir().unwrap();
        let w = d.path().join("wal");
        let segs = write_n(&w, 20, 60);
        let first = w.join(segment_name(segs[0]));
        let n0 = record::Frames::new(&fs::read(&first).unwrap()).count();
        let len = fs::metadata(&first).unwrap().len();
        let mut f = OpenOptions::new().append(true).open(&first).unwrap();
        f.write_all(&[2, 200, 0, 0]).unwrap(); // half a header
        drop(f);
        let (st, ss, _) = collect(&w, false);
        assert_eq!(times(&ss), (0..20).collect::<Vec<_>>());
        assert_eq!(st.corruptions.len(), 1);
        assert!(st.corruptions[0].tail);
        assert_eq!(fs::metadata(&first).unwrap().len(), len, "cut back");
        assert!(n0 > 0);
    }

    #[test]
    fn next_intact_scans_past_a_broken_length() {
        let mut buf = Vec::new();
        for i in 0..5 {
            record::encode_samples(&mut buf, &[sample(i)]);
        }
        let rec = buf.len() / 5;
        // the second record's length field is destroyed: found by scanning
        buf[rec + 2] = 0xff;
        assert_eq!(record::next_intact(&buf, rec), Some(rec * 2));
        // a payload bit: found right after the record
        buf[rec + 2] = 0;
        let mut b2 = Vec::new();
        for i in 0..5 {
            record::encode_samples(&mut b2, &[sample(i)]);
        }
        b2[rec * 3 + 12] ^= 1;
        assert_eq!(record::next_intact(&b2, rec * 3), Some(rec * 4));
        // nothing intact after the last record
        assert_eq!(record::next_intact(&b2, rec * 4 + 1), None);
    }

    const HEADER_LEN_PUB: usize = record::HEADER_LEN;

    #[test]
    fn checkpoint_replaces_segments() {
        let d = tempfile::tempdir().unwrap();
        let w = d.path().join("wal");
        let mut wr = WalWriter::create(&w, 0, Duration::from_secs(1), 1 << 20).unwrap();
        wr.log_samples(&[sample(1)]);
        wr.flush().unwrap();
        let old = wr.roll().unwrap();
        wr.log_samples(&[sample(2)]);
        wr.flush().unwrap();
        let mut cp = Vec::new();
        record::encode_min_valid(&mut cp, 100);
        record::encode_samples(&mut cp, &[sample(7)]);
        write_checkpoint(&w, old, &cp, Compression::None).unwrap();
        drop(wr);
        let mut seen = Vec::new();
        let (st, last) = replay(&w, false, |it| {
            match it {
                ReplayItem::MinValidTime(t) => seen.push(t),
                ReplayItem::Samples(s) => seen.extend(s.iter().map(|s| s.t)),
                _ => {}
            }
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, vec![100, 7, 2]);
        assert_eq!(st.checkpoints, 1);
        assert_eq!(last, 2);
        let (segs, cps) = list(&w).unwrap();
        assert_eq!((segs, cps), (vec![2], vec![1]));
    }

    #[test]
    fn sync_is_due_by_the_oldest_unsynced_write() {
        let d = tempfile::tempdir().unwrap();
        let mut slow = WalWriter::create(d.path(), 0, Duration::from_secs(3600), 1 << 20).unwrap();
        assert!(!slow.sync_due(0.0), "nothing written");
        slow.log_samples(&[sample(1)]);
        slow.flush().unwrap();
        assert!(slow.sync_due(0.0));
        assert!(!slow.sync_due(0.75));
        assert!(slow.take_sync_handle().unwrap().is_some());
        assert!(!slow.sync_due(0.0));
        assert!(slow.take_sync_handle().unwrap().is_none());
        drop(slow);
        // a zero interval fsyncs on every flush
        let mut eager = WalWriter::create(d.path(), 5, Duration::ZERO, 1 << 20).unwrap();
        eager.log_samples(&[sample(1)]);
        eager.flush().unwrap();
        assert!(!eager.sync_due(0.0));
    }

    #[test]
    fn fuzz_decode_survives_garbage() {
        let mut buf = Vec::new();
        record::encode_samples(&mut buf, &[sample(1), sample(2)]);
        for i in 0..buf.len() {
            for bit in 0..8 {
                let mut b = buf.clone();
                b[i] ^= 1 << bit;
                fuzz_decode(&b);
                fuzz_decode(&b[..i]);
            }
        }
        assert_eq!(fuzz_decode(&buf), 1);
    }

    /// Samples that compress: a few series, regular times, repeated values.
    fn regular(from: i64, n: i64) -> Vec<RefSample> {
        (from..from + n)
            .map(|i| RefSample {
                r: (i % 4) as u64,
                t: 1_000_000 + i * 15_000,
                v: (i % 3) as f64,
            })
            .collect()
    }

    /// The type bytes of every record of a file.
    fn type_bytes(path: &Path) -> Vec<u8> {
        record::Frames::new(&fs::read(path).unwrap())
            .map(|f| f.unwrap().1)
            .collect()
    }

    #[test]
    fn compression_switched_between_restarts_replays_as_one() {
        let d = tempfile::tempdir().unwrap();
        let w = d.path().join("wal");
        let l = Labels::from_pairs([("__name__", "m"), ("job", "a".repeat(30).as_str())]);
        let runs = [
            Compression::None,
            Compression::Snappy,
            Compression::Zstd,
            Compression::None,
            Compression::Snappy,
        ];
        let mut last = 0;
        for (i, c) in runs.iter().enumerate() {
            let mut wr = WalWriter::create(&w, last, Duration::from_secs(1), 1 << 20).unwrap();
            wr.set_compression(*c);
            wr.log_series([(i as u64, &l)].into_iter());
            wr.log_samples(&regular(i as i64 * 50, 50));
            wr.flush().unwrap();
            last = wr.segment();
            let saved = wr.health().bytes_saved.load(Ordering::Relaxed);
            assert_eq!(saved > 0, *c != Compression::None, "{c}: {saved}");
            drop(wr);
            let bits = match c {
                Compression::None => 0,
                Compression::Snappy => compress::SNAPPY_BIT,
                Compression::Zstd => compress::ZSTD_BIT,
            };
            let seg = w.join(segment_name(last));
            let tys = type_bytes(&seg);
            assert_eq!(
                tys,
                vec![record::TYPE_SERIES | bits, record::TYPE_SAMPLES | bits],
                "{c}"
            );
        }
        let (st, ss, series) = collect(&w, true);
        assert!(st.corruptions.is_empty(), "{:?}", st.corruptions);
        assert_eq!(ss, regular(0, 250));
        assert_eq!(series.len(), runs.len());
        // a compressed checkpoint of the first three segments, then the rest
        let mut cp = Vec::new();
        record::encode_min_valid(&mut cp, 5);
        record::encode_series(&mut cp, [(0u64, &l)].into_iter());
        record::encode_samples(&mut cp, &regular(0, 150));
        write_checkpoint(&w, 3, &cp, Compression::Zstd).unwrap();
        let tys = type_bytes(&w.join(checkpoint_name(3)));
        assert_eq!(
            tys,
            vec![
                record::TYPE_MIN_VALID,
                record::TYPE_SERIES | compress::ZSTD_BIT,
                record::TYPE_SAMPLES | compress::ZSTD_BIT
            ]
        );
        let (st, ss, series) = collect(&w, false);
        assert!(st.corruptions.is_empty(), "{:?}", st.corruptions);
        assert_eq!((st.checkpoints, st.segments), (1, 2));
        assert_eq!(ss, regular(0, 250));
        assert_eq!(
            series.iter().map(|s| s.0).collect::<Vec<_>>(),
            vec![0, 3, 4]
        );
    }

    #[test]
    fn a_corrupt_compressed_record_is_reported_and_skipped() {
        let d = tempfile::tempdir().unwrap();
        let w = d.path().join("wal");
        let mut wr = WalWriter::create(&w, 0, Duration::from_secs(1), 1 << 20).unwrap();
        wr.set_compression(Compression::Snappy);
        for i in 0..3 {
            wr.log_samples(&regular(i * 40, 40));
            wr.flush().unwrap();
        }
        let seg = w.join(segment_name(wr.segment()));
        drop(wr);
        let b = fs::read(&seg).unwrap();
        let frames: Vec<(usize, u8, Vec<u8>)> = record::Frames::new(&b)
            .map(|f| f.map(|(o, t, p)| (o, t, p.to_vec())).unwrap())
            .collect();
        assert!(frames
            .iter()
            .all(|f| f.1 == record::TYPE_SAMPLES | compress::SNAPPY_BIT));
        // the middle record: a valid frame (length and checksum right) around snappy bytes
        // that do not decompress, as a bug or a bad disk behind the checksum would leave
        let (off, ty, payload) = &frames[1];
        let mut bad = payload.clone();
        for x in bad.iter_mut().skip(2) {
            *x = 0xfe;
        }
        let mut out = b[..*off].to_vec();
        let at = record::begin_record(&mut out, *ty);
        out.extend_from_slice(&bad);
        record::finish_record(&mut out, at);
        out.extend_from_slice(&b[off + record::HEADER_LEN + payload.len()..]);
        assert_eq!(out.len(), b.len());
        fs::write(&seg, &out).unwrap();
        let (st, ss, _) = collect(&w, false);
        assert_eq!(st.corruptions.len(), 1, "{:?}", st.corruptions);
        let c = &st.corruptions[0];
        assert_eq!((&c.path, c.offset, c.tail), (&seg, *off as u64, false));
        assert!(c.reason.contains("snappy"), "{}", c.reason);
        assert!(c.to_string().contains(&seg.display().to_string()), "{c}");
        let mut want = regular(0, 40);
        want.extend(regular(80, 40));
        assert_eq!(ss, want, "the records around it are read");
        // a zstd bit on the same bytes: reported the same way
        out[*off] = record::TYPE_SAMPLES | compress::ZSTD_BIT;
        let at = *off;
        let mut again = out[..at].to_vec();
        let h = record::begin_record(&mut again, record::TYPE_SAMPLES | compress::ZSTD_BIT);
        again.extend_from_slice(&bad);
        record::finish_record(&mut again, h);
        again.extend_from_slice(&out[at + record::HEADER_LEN + bad.len()..]);
        fs::write(&seg, &again).unwrap();
        let (st, ss, _) = collect(&w, true);
        assert_eq!(st.corruptions.len(), 1);
        assert!(
            st.corruptions[0].reason.contains("zstd"),
            "{:?}",
            st.corruptions
        );
        assert_eq!(ss, want);
    }
}
