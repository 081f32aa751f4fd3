//! The write-ahead log: segmented, append-only, checksummed.
//!
//! The WAL lives in `<data>/wal/`. Segment files are named by an 8-digit decimal sequence
//! number (`00000001`, `00000002`, ...) and hold framed records (see [`record`]); a new
//! segment is started on open and when the current one passes the size limit. After the head
//! has been cut into a block, segments up to `N` are replaced by one file `checkpoint.N`
//! holding the live series and their head chunks, written to `checkpoint.N.tmp`, fsynced and
//! renamed.
//!
//! Replay reads the newest checkpoint, then every segment after it in order. The first torn
//! or corrupt record ends the replay: it is reported ([`tracing::warn`] and
//! [`ReplayStats::corruptions`]) and, unless read-only, the segment is truncated there and
//! later segments are deleted. Corruption is never fatal.

pub mod record;
pub mod watch;

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::labels::Labels;
pub use record::{Record, RefSample};

/// Default segment size limit.
pub const DEFAULT_SEGMENT_BYTES: u64 = 128 << 20;

/// One corruption found (and repaired unless read-only) during replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Corruption {
    /// The file.
    pub path: PathBuf,
    /// Byte offset of the first bad record.
    pub offset: u64,
    /// What was wrong.
    pub reason: String,
    /// Bytes dropped from this file and later segments.
    pub dropped_bytes: u64,
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
    /// Corruptions found; replay stopped at the first.
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

/// Feeds every valid record of `buf` to `f`; returns the corruption that ended it, if any.
fn replay_buf(
    path: &Path,
    buf: &[u8],
    stats: &mut ReplayStats,
    samples: &mut Vec<RefSample>,
    f: &mut dyn FnMut(ReplayItem<'_>) -> Result<()>,
) -> Result<Option<Corruption>> {
    let mut frames = record::Frames::new(buf);
    for fr in frames.by_ref() {
        let (off, ty, payload) = match fr {
            Ok(x) => x,
            Err((off, reason)) => {
                return Ok(Some(Corruption {
                    path: path.to_path_buf(),
                    offset: off as u64,
                    reason,
                    dropped_bytes: (buf.len() - off) as u64,
                }))
            }
        };
        let rec = match record::decode(ty, payload, samples) {
            Ok(r) => r,
            Err(e) => {
                let reason = match e {
                    Error::Corrupt { reason, .. } => reason,
                    e => e.to_string(),
                };
                return Ok(Some(Corruption {
                    path: path.to_path_buf(),
                    offset: off as u64,
                    reason,
                    dropped_bytes: (buf.len() - off) as u64,
                }));
            }
        };
        stats.records += 1;
        match rec {
            Record::Series(s) => {
                stats.series += s.len() as u64;
                f(ReplayItem::Series(s))?;
            }
            Record::Samples => {
                stats.samples += samples.len() as u64;
                f(ReplayItem::Samples(samples))?;
            }
            Record::Chunks { r, chunks } => f(ReplayItem::Chunks(r, chunks))?,
            Record::MinValidTime(t) => f(ReplayItem::MinValidTime(t))?,
        }
    }
    Ok(None)
}

/// Reads every record of the WAL folder `dir` in order, calling `f` for each.
///
/// Unless `read_only`, a corrupt record is repaired: its segment is truncated at the record
/// and later segments are removed, and leftover `*.tmp` files are deleted. Returns the
/// statistics and the highest segment number seen (0 when none).
pub fn replay(
    dir: &Path,
    read_only: bool,
    mut f: impl FnMut(ReplayItem<'_>) -> Result<()>,
) -> Result<(ReplayStats, u32)> {
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
    let mut samples = Vec::new();
    let mut last = segs.last().copied().unwrap_or(0);
    let mut after = 0u32;
    if let Some(&cp) = cps.last() {
        let path = dir.join(checkpoint_name(cp));
        let buf = fs::read(&path).map_err(|e| Error::io(&path, e))?;
        stats.checkpoints = 1;
        if let Some(c) = replay_buf(&path, &buf, &mut stats, &mut samples, &mut f)? {
            // a checkpoint is written atomically: this is real damage, keep going with segments
            tracing::warn!(path = %c.path.display(), offset = c.offset, reason = %c.reason,
                "corrupt WAL checkpoint; records after the offset are lost");
            stats.corruptions.push(c);
        }
        after = cp;
        last = last.max(cp);
    }
    let mut expect: Option<u32> = None;
    let mut stop_at: Option<usize> = None;
    let live: Vec<u32> = segs.iter().copied().filter(|&s| s > after).collect();
    for (i, &s) in live.iter().enumerate() {
        let path = dir.join(segment_name(s));
        if let Some(e) = expect {
            if s != e {
                let c = Corruption {
                    path: path.clone(),
                    offset: 0,
                    reason: format!("missing WAL segment {e:08}"),
                    dropped_bytes: 0,
                };
                tracing::warn!(path = %path.display(), reason = %c.reason, "WAL gap");
                stats.corruptions.push(c);
                stop_at = Some(i);
                break;
            }
        }
        expect = Some(s.wrapping_add(1));
        let buf = fs::read(&path).map_err(|e| Error::io(&path, e))?;
        stats.segments += 1;
        if let Some(mut c) = replay_buf(&path, &buf, &mut stats, &mut samples, &mut f)? {
            tracing::warn!(path = %c.path.display(), offset = c.offset, reason = %c.reason,
                read_only, "corrupt or torn WAL record; truncating the WAL there");
            if !read_only {
                let file = OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .map_err(|e| Error::io(&path, e))?;
                file.set_len(c.offset).map_err(|e| Error::io(&path, e))?;
                file.sync_all().map_err(|e| Error::io(&path, e))?;
            }
            for &later in &live[i + 1..] {
                let p = dir.join(segment_name(later));
                c.dropped_bytes += fs::metadata(&p).map(|m| m.len()).unwrap_or(0);
            }
            stats.corruptions.push(c);
            stop_at = Some(i + 1);
            break;
        }
    }
    if let (Some(i), false) = (stop_at, read_only) {
        for &later in &live[i..] {
            let p = dir.join(segment_name(later));
            fs::remove_file(&p).map_err(|e| Error::io(&p, e))?;
        }
        sync_dir(dir)?;
    }
    Ok((stats, last))
}

/// Appends records to the newest segment. Not thread-safe by itself: wrap it in a mutex.
pub struct WalWriter {
    dir: PathBuf,
    seg: u32,
    file: File,
    seg_bytes: u64,
    max_segment_bytes: u64,
    buf: Vec<u8>,
    /// When the oldest write not yet fsynced happened (`None`: all synced).
    unsynced: Option<Instant>,
    fsync_interval: Duration,
    broken: bool,
}

impl WalWriter {
    /// Creates the folder if needed and starts segment `after + 1`.
    pub fn create(
        dir: &Path,
        after: u32,
        fsync_interval: Duration,
        max_segment_bytes: u64,
    ) -> Result<Self> {
        fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let seg = after + 1;
        let file = Self::open_segment(dir, seg)?;
        Ok(WalWriter {
            dir: dir.to_path_buf(),
            seg,
            file,
            seg_bytes: 0,
            max_segment_bytes: max_segment_bytes.max(1),
            buf: Vec::with_capacity(1 << 16),
            unsynced: None,
            fsync_interval,
            broken: false,
        })
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
    /// old (the database's background thread normally fsyncs sooner).
    pub fn flush(&mut self) -> Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        if self.broken
            || (self.seg_bytes > 0
                && self.seg_bytes + self.buf.len() as u64 > self.max_segment_bytes)
        {
            self.roll()?;
        }
        let path = || self.dir.join(segment_name(self.seg));
        if let Err(e) = self.file.write_all(&self.buf) {
            // a partial write leaves a torn record: continue in a fresh segment
            self.broken = true;
            self.buf.clear();
            return Err(Error::io(path(), e));
        }
        self.seg_bytes += self.buf.len() as u64;
        self.buf.clear();
        if self.buf.capacity() > 1 << 20 {
            // a big commit (many new series at once) must not pin its buffer for good
            self.buf.shrink_to(1 << 16);
        }
        let since = *self.unsynced.get_or_insert_with(Instant::now);
        if since.elapsed() >= self.fsync_interval {
            self.sync()?;
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
            self.file
                .sync_data()
                .map_err(|e| Error::io(self.dir.join(segment_name(self.seg)), e))?;
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
    pub fn roll(&mut self) -> Result<u32> {
        if !self.broken {
            self.file
                .sync_data()
                .map_err(|e| Error::io(self.dir.join(segment_name(self.seg)), e))?;
        }
        let old = self.seg;
        self.file = Self::open_segment(&self.dir, old + 1)?;
        self.seg = old + 1;
        self.seg_bytes = 0;
        self.unsynced = None;
        self.broken = false;
        Ok(old)
    }
}

/// Writes `checkpoint.upto` from `records` (already framed) and deletes every segment
/// `<= upto` and every older checkpoint.
pub fn write_checkpoint(dir: &Path, upto: u32, records: &[u8]) -> Result<()> {
    let name = checkpoint_name(upto);
    let tmp = dir.join(format!("{name}.tmp"));
    let fin = dir.join(&name);
    {
        let mut f = File::create(&tmp).map_err(|e| Error::io(&tmp, e))?;
        f.write_all(records).map_err(|e| Error::io(&tmp, e))?;
        f.sync_all().map_err(|e| Error::io(&tmp, e))?;
    }
    fs::rename(&tmp, &fin).map_err(|e| Error::io(&fin, e))?;
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
pub fn fuzz_decode(data: &[u8]) -> usize {
    let mut samples = Vec::new();
    let mut n = 0;
    for (_, ty, payload) in record::Frames::new(data).flatten() {
        if record::decode(ty, payload, &mut samples).is_ok() {
            n += 1;
        }
    }
    // also decode the whole input as each payload type, bypassing the checksum
    for ty in record::TYPE_SERIES..=record::TYPE_MIN_VALID {
        if record::decode(ty, data, &mut samples).is_ok() {
            n += 1;
        }
    }
    n
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

    #[test]
    fn corruption_drops_later_segments() {
        let d = tempfile::tempdir().unwrap();
        let w = d.path().join("wal");
        let mut wr = WalWriter::create(&w, 0, Duration::ZERO, 100).unwrap();
        for i in 0..30 {
            wr.log_samples(&[sample(i)]);
            wr.flush().unwrap();
        }
        drop(wr);
        let (segs, _) = list(&w).unwrap();
        assert!(segs.len() >= 3);
        let victim = w.join(segment_name(segs[1]));
        let mut b = fs::read(&victim).unwrap();
        b[HEADER_LEN_PUB + 3] ^= 0x40;
        fs::write(&victim, &b).unwrap();
        let (st, ss, _) = collect(&w, false);
        assert_eq!(st.corruptions.len(), 1);
        assert_eq!(st.corruptions[0].offset, 0);
        let first_seg = fs::read(w.join(segment_name(segs[0]))).unwrap();
        assert_eq!(ss.len(), record::Frames::new(&first_seg).count());
        let (segs2, _) = list(&w).unwrap();
        assert_eq!(segs2, segs[..2].to_vec());
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
        write_checkpoint(&w, old, &cp).unwrap();
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
}
