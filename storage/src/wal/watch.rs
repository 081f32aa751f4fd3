//! Tails the WAL for a consumer that forwards it elsewhere (the remote-write sender).
//!
//! A [`WalWatcher`] reads the WAL folder as the writer leaves it, without locks: the newest
//! checkpoint's series records first (so series references resolve), then every segment
//! after the checkpoint in order. Series records are always reported; sample records only
//! from a start [`WalPosition`] on. It keeps up with the writer:
//!
//! * the tail of the segment being written may hold half a record (a write in progress): the
//!   watcher stops before it and reads it whole on a later [`WalWatcher::poll`];
//! * when a newer segment exists and the current one is read to its end, it moves on;
//! * segments it still needed that a checkpoint deleted (the consumer fell more than a head
//!   block behind) are counted in [`WatchStats::segments_missing`] and skipped: it reads the
//!   new checkpoint's series and continues after it;
//! * a corrupt record in a finished segment is counted in [`WatchStats::corruptions`] and the
//!   rest of that segment is skipped (replay at the next open truncates there too).
//!
//! A segment deleted while it is open is still read to its end (the descriptor keeps it).
//! Compressed and plain records are read alike (see [`super::compress`]).

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use super::record::{self, Decoder, Record, RefSample};
use super::{checkpoint_name, list, segment_name};
use crate::error::{Error, Result};
use crate::labels::Labels;

/// A place in the WAL: a segment number and a byte offset in it (the start of a record).
/// Ordered by segment, then offset. `WalPosition::default()` is "the very beginning".
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WalPosition {
    /// Segment number.
    pub segment: u32,
    /// Byte offset inside the segment.
    pub offset: u64,
}

/// What the watcher hands its consumer.
#[derive(Debug)]
pub enum WatchEvent<'a> {
    /// Series definitions (from the checkpoint or a segment): reference → labels.
    Series(&'a [(u64, Labels)]),
    /// The head chunks of one series from a checkpoint that replaced segments holding data
    /// after the start position (their samples are only here now; the consumer picks what it
    /// has not sent by time). Not reported for checkpoints of segments before the start.
    Chunks {
        /// The series reference.
        r: u64,
        /// The checkpoint's number (its samples came from segments up to this one).
        checkpoint: u32,
        /// Encoded chunks, oldest first (decode with [`crate::chunk::decode`]).
        chunks: &'a [&'a [u8]],
    },
    /// A sample record at or after the start position.
    Samples {
        /// Where the record starts.
        pos: WalPosition,
        /// Where the next record starts.
        end: WalPosition,
        /// The samples, in the order the writer logged them.
        samples: &'a [RefSample],
    },
}

/// What the watcher has read and skipped so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WatchStats {
    /// Checkpoints whose series were read.
    pub checkpoints_read: u64,
    /// Segments opened.
    pub segments_read: u64,
    /// Records decoded.
    pub records: u64,
    /// Sample records skipped because they lie before the start position.
    pub records_before_start: u64,
    /// Segments that held data after the start position but were deleted (replaced by a
    /// checkpoint) before they could be read.
    pub segments_missing: u64,
    /// Corrupt records found in finished segments (the rest of each was skipped).
    pub corruptions: u64,
}

/// Whether a [`WalWatcher::poll`] stopped because it caught up or because the consumer asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PollResult {
    /// Everything complete in the WAL has been read; poll again later.
    CaughtUp,
    /// The consumer returned `false`; the next poll continues after the last record handed out.
    Stopped,
}

/// Reads the WAL from a position on, following the writer. Not thread-safe; one per consumer.
pub struct WalWatcher {
    dir: PathBuf,
    start: WalPosition,
    started: bool,
    /// The segment being read and its open file.
    seg: u32,
    file: Option<File>,
    /// Unparsed bytes of the current segment; `buf[0]` is at file offset `buf_off`.
    buf: Vec<u8>,
    buf_off: u64,
    /// Set after a corrupt record: nothing more is read from the current segment.
    skip_rest: bool,
    decoder: Decoder,
    stats: WatchStats,
}

impl WalWatcher {
    /// A watcher of the WAL folder `dir` that reports samples from `start` on (series
    /// records before it are reported too, so references resolve).
    pub fn new(dir: impl AsRef<Path>, start: WalPosition) -> Self {
        WalWatcher {
            dir: dir.as_ref().to_path_buf(),
            start,
            started: false,
            seg: 0,
            file: None,
            buf: Vec::new(),
            buf_off: 0,
            skip_rest: false,
            decoder: Decoder::default(),
            stats: WatchStats::default(),
        }
    }

    /// What has been read so far.
    pub fn stats(&self) -> &WatchStats {
        &self.stats
    }

    /// The position of the next record to read.
    pub fn position(&self) -> WalPosition {
        WalPosition {
            segment: self.seg,
            offset: self.buf_off,
        }
    }

    /// Reads every complete record now in the WAL and hands it to `f` (which returns `false`
    /// to stop early). Never blocks: returns [`PollResult::CaughtUp`] at the end of what the
    /// writer has written so far.
    pub fn poll(&mut self, f: &mut dyn FnMut(WatchEvent<'_>) -> bool) -> Result<PollResult> {
        if !self.started {
            if !self.begin(f)? {
                return Ok(PollResult::Stopped);
            }
            self.started = true;
        }
        loop {
            if self.file.is_none() && !self.open_current(f)? {
                return Ok(PollResult::CaughtUp);
            }
            if !self.skip_rest {
                self.fill()?;
                match self.drain(f)? {
                    Drain::Stopped => return Ok(PollResult::Stopped),
                    Drain::Clean | Drain::Torn => {}
                    Drain::Corrupt => {
                        self.stats.corruptions += 1;
                        self.skip_rest = true;
                    }
                }
            }
            // at the end of what is there: move on only when a newer segment exists
            let (segs, cps) = list(&self.dir)?;
            let newer = segs.iter().any(|&s| s > self.seg) || cps.iter().any(|&c| c >= self.seg);
            if !newer {
                return Ok(PollResult::CaughtUp);
            }
            if !self.skip_rest {
                // the writer may have finished the segment just before rolling: read once more
                self.fill()?;
                match self.drain(f)? {
                    Drain::Stopped => return Ok(PollResult::Stopped),
                    Drain::Clean => {}
                    Drain::Torn | Drain::Corrupt => {
                        tracing::warn!(segment = self.seg, offset = self.buf_off,
                            "finished WAL segment ends in a torn or corrupt record; skipping its rest");
                        self.stats.corruptions += 1;
                    }
                }
            }
            self.seg += 1;
            self.file = None;
            self.buf.clear();
            self.buf_off = 0;
            self.skip_rest = false;
        }
    }

    /// Reads the newest checkpoint's series and picks the first segment to read.
    fn begin(&mut self, f: &mut dyn FnMut(WatchEvent<'_>) -> bool) -> Result<bool> {
        let (segs, cps) = list(&self.dir)?;
        let mut first = segs.first().copied().unwrap_or(1);
        if let Some(&cp) = cps.last() {
            let chunks = self.start.segment > 0 && self.start.segment <= cp;
            if !self.read_checkpoint(cp, chunks, f)? {
                return Ok(false);
            }
            first = cp + 1;
            if let Some(&s) = segs.iter().find(|&&s| s > cp) {
                first = s;
            }
        }
        if self.start.segment > 0 && self.start.segment < first {
            let missing = u64::from(first - self.start.segment);
            tracing::warn!(
                from = self.start.segment,
                to = first - 1,
                "WAL segments after the start position were deleted; skipping them"
            );
            self.stats.segments_missing += missing;
        }
        let last = segs.last().copied().unwrap_or(first);
        if self.start.segment > last.max(first) + 1 {
            // a position from another WAL (the folder was replaced): start at its beginning
            tracing::warn!(
                start = self.start.segment,
                last,
                "start position is past the WAL's end; reading from its first segment"
            );
            self.start = WalPosition::default();
        }
        self.seg = first;
        Ok(true)
    }

    fn read_checkpoint(
        &mut self,
        cp: u32,
        with_chunks: bool,
        f: &mut dyn FnMut(WatchEvent<'_>) -> bool,
    ) -> Result<bool> {
        let path = self.dir.join(checkpoint_name(cp));
        let buf = match std::fs::read(&path) {
            Ok(b) => b,
            // replaced by a newer one meanwhile: the caller lists again
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(true),
            Err(e) => return Err(Error::io(&path, e)),
        };
        self.stats.checkpoints_read += 1;
        for fr in record::Frames::new(&buf) {
            let Ok((_, ty, payload)) = fr else {
                self.stats.corruptions += 1;
                break;
            };
            let kind = record::kind(ty);
            if kind != record::TYPE_SERIES && !(with_chunks && kind == record::TYPE_CHUNKS) {
                continue;
            }
            match self.decoder.decode(ty, payload) {
                Ok(Record::Series(s)) => {
                    self.stats.records += 1;
                    if !f(WatchEvent::Series(&s)) {
                        return Ok(false);
                    }
                }
                Ok(Record::Chunks { r, chunks }) => {
                    self.stats.records += 1;
                    let ev = WatchEvent::Chunks {
                        r,
                        checkpoint: cp,
                        chunks: &chunks,
                    };
                    if !f(ev) {
                        return Ok(false);
                    }
                }
                _ => {
                    self.stats.corruptions += 1;
                    break;
                }
            }
        }
        Ok(true)
    }

    /// Opens the current segment; when it is gone, skips to the checkpoint that replaced it.
    /// Returns `false` when there is nothing to open yet.
    fn open_current(&mut self, f: &mut dyn FnMut(WatchEvent<'_>) -> bool) -> Result<bool> {
        loop {
            let path = self.dir.join(segment_name(self.seg));
            match File::open(&path) {
                Ok(file) => {
                    self.file = Some(file);
                    self.buf.clear();
                    self.buf_off = 0;
                    self.skip_rest = false;
                    self.stats.segments_read += 1;
                    // read from the segment's start even when the start position is inside
                    // it: its series records are needed
                    return Ok(true);
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io(&path, e)),
            }
            let (segs, cps) = list(&self.dir)?;
            let cp = cps.last().copied().filter(|&c| c >= self.seg);
            let next_seg = segs.iter().copied().find(|&s| s > self.seg);
            match (cp, next_seg) {
                (Some(cp), _) => {
                    // deleted by a checkpoint: what we still needed is gone
                    let needed_from = self.seg.max(self.start.segment);
                    if cp >= needed_from {
                        self.stats.segments_missing += u64::from(cp - needed_from + 1);
                    }
                    tracing::warn!(
                        segment = self.seg,
                        checkpoint = cp,
                        "WAL segments were checkpointed before they were read; skipping them"
                    );
                    if !self.read_checkpoint(cp, cp >= needed_from, f)? {
                        return Ok(false);
                    }
                    self.seg = cp + 1;
                }
                (None, Some(n)) => {
                    // a gap in the numbering (a repair removed segments)
                    if n > self.start.segment {
                        self.stats.segments_missing +=
                            u64::from(n - self.seg.max(self.start.segment));
                    }
                    self.seg = n;
                }
                (None, None) => return Ok(false),
            }
        }
    }

    /// Appends what the file has beyond the buffer.
    fn fill(&mut self) -> Result<()> {
        let Some(file) = &mut self.file else {
            return Ok(());
        };
        file.read_to_end(&mut self.buf)
            .map_err(|e| Error::io(self.dir.join(segment_name(self.seg)), e))?;
        Ok(())
    }

    /// Hands out the complete records of the buffer.
    fn drain(&mut self, f: &mut dyn FnMut(WatchEvent<'_>) -> bool) -> Result<Drain> {
        let buf = std::mem::take(&mut self.buf);
        let mut frames = record::Frames::new(&buf);
        let mut out = Drain::Clean;
        let mut consumed = 0usize;
        for fr in frames.by_ref() {
            let (off, ty, payload) = match fr {
                Ok(x) => x,
                Err((_, reason)) => {
                    out = if reason.starts_with("torn") || reason.starts_with("zero-filled") {
                        Drain::Torn
                    } else {
                        Drain::Corrupt
                    };
                    if out == Drain::Corrupt {
                        tracing::warn!(segment = self.seg, offset = self.buf_off + consumed as u64,
                            %reason, "corrupt WAL record");
                    }
                    break;
                }
            };
            let end = off + record::HEADER_LEN + payload.len();
            let pos = WalPosition {
                segment: self.seg,
                offset: self.buf_off + off as u64,
            };
            let endp = WalPosition {
                segment: self.seg,
                offset: self.buf_off + end as u64,
            };
            let keep_going = match record::kind(ty) {
                record::TYPE_SERIES => match self.decoder.decode(ty, payload) {
                    Ok(Record::Series(s)) => {
                        self.stats.records += 1;
                        f(WatchEvent::Series(&s))
                    }
                    _ => {
                        out = Drain::Corrupt;
                        break;
                    }
                },
                record::TYPE_SAMPLES => {
                    if pos < self.start {
                        self.stats.records_before_start += 1;
                        true
                    } else {
                        let Ok(samples) = self.decoder.decode_samples(ty, payload) else {
                            out = Drain::Corrupt;
                            break;
                        };
                        self.stats.records += 1;
                        f(WatchEvent::Samples {
                            pos,
                            end: endp,
                            samples,
                        })
                    }
                }
                // min-valid-time and chunk records carry nothing to forward
                _ => true,
            };
            consumed = end;
            if !keep_going {
                out = Drain::Stopped;
                break;
            }
        }
        self.buf_off += consumed as u64;
        self.buf = buf;
        self.buf.drain(..consumed);
        Ok(out)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Drain {
    Clean,
    Torn,
    Corrupt,
    Stopped,
}

#[cfg(test)]
mod tests {
    use super::super::{write_checkpoint, WalWriter};
    use super::*;
    use std::fs::OpenOptions;
    use std::io::Write;
    use std::time::Duration;

    #[derive(Default)]
    struct Seen {
        series: Vec<(u64, Labels)>,
        samples: Vec<(WalPosition, RefSample)>,
        chunk_samples: Vec<RefSample>,
    }

    fn poll_all(w: &mut WalWatcher, seen: &mut Seen) -> PollResult {
        w.poll(&mut |ev| {
            match ev {
                WatchEvent::Series(s) => seen.series.extend_from_slice(s),
                WatchEvent::Samples { pos, samples, .. } => {
                    seen.samples.extend(samples.iter().map(|s| (pos, *s)))
                }
                WatchEvent::Chunks { r, chunks, .. } => {
                    for c in chunks {
                        for (t, v) in crate::chunk::decode(c).unwrap() {
                            seen.chunk_samples.push(RefSample { r, t, v });
                        }
                    }
                }
            }
            true
        })
        .unwrap()
    }

    fn s(r: u64, t: i64) -> RefSample {
        RefSample { r, t, v: t as f64 }
    }

    fn ts(seen: &Seen) -> Vec<i64> {
        seen.samples.iter().map(|(_, s)| s.t).collect()
    }

    #[test]
    fn follows_appends_and_rolls() {
        let d = tempfile::tempdir().unwrap();
        let wal = d.path().join("wal");
        let mut wr = WalWriter::create(&wal, 0, Duration::from_secs(1), 1 << 20).unwrap();
        let l = Labels::from_pairs([("__name__", "m")]);
        wr.log_series([(7u64, &l)].into_iter());
        wr.log_samples(&[s(7, 1), s(7, 2)]);
        wr.flush().unwrap();
        let mut w = WalWatcher::new(&wal, WalPosition::default());
        let mut seen = Seen::default();
        assert_eq!(poll_all(&mut w, &mut seen), PollResult::CaughtUp);
        assert_eq!(seen.series, vec![(7, l.clone())]);
        assert_eq!(ts(&seen), vec![1, 2]);
        // nothing new: nothing reported
        assert_eq!(poll_all(&mut w, &mut seen), PollResult::CaughtUp);
        assert_eq!(ts(&seen), vec![1, 2]);
        wr.log_samples(&[s(7, 3)]);
        wr.flush().unwrap();
        wr.roll().unwrap();
        wr.log_samples(&[s(7, 4)]);
        wr.flush().unwrap();
        poll_all(&mut w, &mut seen);
        assert_eq!(ts(&seen), vec![1, 2, 3, 4]);
        assert_eq!(w.position().segment, 2);
        assert_eq!(w.stats().segments_missing, 0);
        assert_eq!(w.stats().corruptions, 0);
    }

    #[test]
    fn torn_tail_waits_for_the_rest() {
        let d = tempfile::tempdir().unwrap();
        let wal = d.path().join("wal");
        std::fs::create_dir_all(&wal).unwrap();
        let mut rec = Vec::new();
        record::encode_samples(&mut rec, &[s(1, 10)]);
        let mut second = Vec::new();
        record::encode_samples(&mut second, &[s(1, 20), s(1, 30)]);
        let path = wal.join(segment_name(1));
        let mut file = File::create(&path).unwrap();
        file.write_all(&rec).unwrap();
        // half of the second record: a write in progress
        let half = second.len() / 2;
        file.write_all(&second[..half]).unwrap();
        let mut w = WalWatcher::new(&wal, WalPosition::default());
        let mut seen = Seen::default();
        assert_eq!(poll_all(&mut w, &mut seen), PollResult::CaughtUp);
        assert_eq!(ts(&seen), vec![10]);
        assert_eq!(w.stats().corruptions, 0, "a torn tail is not corruption");
        assert_eq!(w.position().offset, rec.len() as u64);
        file.write_all(&second[half..]).unwrap();
        poll_all(&mut w, &mut seen);
        assert_eq!(ts(&seen), vec![10, 20, 30]);
        assert_eq!(seen.samples[1].0.offset, rec.len() as u64);
        assert_eq!(w.stats().corruptions, 0);
    }

    #[test]
    fn starts_at_a_position_with_series_from_before_it() {
        let d = tempfile::tempdir().unwrap();
        let wal = d.path().join("wal");
        let mut wr = WalWriter::create(&wal, 0, Duration::from_secs(1), 1 << 20).unwrap();
        let a = Labels::from_pairs([("__name__", "a")]);
        let b = Labels::from_pairs([("__name__", "b")]);
        wr.log_series([(1u64, &a)].into_iter());
        wr.log_samples(&[s(1, 1)]);
        wr.flush().unwrap();
        wr.roll().unwrap();
        wr.log_series([(2u64, &b)].into_iter());
        wr.log_samples(&[s(2, 2)]);
        wr.flush().unwrap();
        // find the second segment's sample record
        let mut w = WalWatcher::new(&wal, WalPosition::default());
        let mut all = Seen::default();
        poll_all(&mut w, &mut all);
        let start = all.samples[1].0;
        assert_eq!(start.segment, 2);
        let mut w = WalWatcher::new(&wal, start);
        let mut seen = Seen::default();
        poll_all(&mut w, &mut seen);
        assert_eq!(seen.series, vec![(1, a), (2, b)]);
        assert_eq!(ts(&seen), vec![2]);
        assert_eq!(w.stats().records_before_start, 1);
    }

    #[test]
    fn checkpoint_series_first_and_deleted_segments_counted() {
        let d = tempfile::tempdir().unwrap();
        let wal = d.path().join("wal");
        let mut wr = WalWriter::create(&wal, 0, Duration::from_secs(1), 1 << 20).unwrap();
        let a = Labels::from_pairs([("__name__", "a")]);
        wr.log_series([(1u64, &a)].into_iter());
        wr.log_samples(&[s(1, 1)]);
        wr.flush().unwrap();
        // a watcher that read segment 1 and wants segment 2 ...
        let mut w = WalWatcher::new(&wal, WalPosition::default());
        let mut seen = Seen::default();
        poll_all(&mut w, &mut seen);
        assert_eq!(ts(&seen), vec![1]);
        drop(w);
        let pos = WalPosition {
            segment: 2,
            offset: 0,
        };
        wr.roll().unwrap(); // 2
        wr.log_samples(&[s(1, 2)]);
        wr.flush().unwrap();
        wr.roll().unwrap(); // 3
        wr.log_samples(&[s(1, 3)]);
        wr.flush().unwrap();
        let upto = wr.roll().unwrap(); // 4 is current, checkpoint 3
        let mut cp = Vec::new();
        record::encode_series(&mut cp, [(1u64, &a)].into_iter());
        let mut cw = crate::chunk::ChunkWriter::new();
        for t in 1..=3 {
            cw.append(t, t as f64);
        }
        let enc = cw.finish();
        record::encode_chunks(&mut cp, 1, [enc.as_slice()].into_iter());
        write_checkpoint(&wal, upto, &cp, super::super::Compression::None).unwrap();
        wr.log_samples(&[s(1, 4)]);
        wr.flush().unwrap();
        // a watcher that starts after the checkpoint gets no chunks
        let mut late = WalWatcher::new(
            &wal,
            WalPosition {
                segment: 4,
                offset: 0,
            },
        );
        let mut seen_late = Seen::default();
        poll_all(&mut late, &mut seen_late);
        assert!(seen_late.chunk_samples.is_empty());
        assert_eq!(ts(&seen_late), vec![4]);
        // ... resumes at 2: segments 2 and 3 are gone, their samples are in the chunks
        let mut w = WalWatcher::new(&wal, pos);
        let mut seen = Seen::default();
        poll_all(&mut w, &mut seen);
        assert_eq!(seen.series, vec![(1, a)]);
        assert_eq!(ts(&seen), vec![4]);
        let cs: Vec<i64> = seen.chunk_samples.iter().map(|s| s.t).collect();
        assert_eq!(cs, vec![1, 2, 3]);
        assert_eq!(w.stats().segments_missing, 2);
        assert_eq!(w.stats().checkpoints_read, 1);
    }

    #[test]
    fn segments_checkpointed_while_running_are_skipped() {
        let d = tempfile::tempdir().unwrap();
        let wal = d.path().join("wal");
        let mut wr = WalWriter::create(&wal, 0, Duration::from_secs(1), 1 << 20).unwrap();
        let a = Labels::from_pairs([("__name__", "a")]);
        wr.log_series([(1u64, &a)].into_iter());
        wr.log_samples(&[s(1, 1)]);
        wr.flush().unwrap();
        let mut w = WalWatcher::new(&wal, WalPosition::default());
        let mut seen = Seen::default();
        poll_all(&mut w, &mut seen);
        // the watcher holds segment 1 open; 1 gets more data, then 2, then both are checkpointed
        wr.log_samples(&[s(1, 2)]);
        wr.flush().unwrap();
        wr.roll().unwrap();
        wr.log_samples(&[s(1, 3)]);
        wr.flush().unwrap();
        let upto = wr.roll().unwrap();
        let mut cp = Vec::new();
        record::encode_series(&mut cp, [(1u64, &a)].into_iter());
        write_checkpoint(&wal, upto, &cp, super::super::Compression::None).unwrap();
        wr.log_samples(&[s(1, 4)]);
        wr.flush().unwrap();
        poll_all(&mut w, &mut seen);
        // segment 1 is read to its end through the open descriptor; 2 is lost
        assert_eq!(ts(&seen), vec![1, 2, 4]);
        assert_eq!(w.stats().segments_missing, 1);
    }

    #[test]
    fn corrupt_record_in_a_finished_segment_is_counted_and_skipped() {
        let d = tempfile::tempdir().unwrap();
        let wal = d.path().join("wal");
        let mut wr = WalWriter::create(&wal, 0, Duration::from_secs(1), 1 << 20).unwrap();
        wr.log_samples(&[s(1, 1)]);
        wr.flush().unwrap();
        wr.log_samples(&[s(1, 2)]);
        wr.flush().unwrap();
        wr.roll().unwrap();
        wr.log_samples(&[s(1, 3)]);
        wr.flush().unwrap();
        let p = wal.join(segment_name(1));
        let mut b = std::fs::read(&p).unwrap();
        let n = b.len();
        b[n - 2] ^= 0xff;
        let mut f = OpenOptions::new().write(true).open(&p).unwrap();
        f.write_all(&b).unwrap();
        drop(f);
        let mut w = WalWatcher::new(&wal, WalPosition::default());
        let mut seen = Seen::default();
        poll_all(&mut w, &mut seen);
        assert_eq!(ts(&seen), vec![1, 3]);
        assert_eq!(w.stats().corruptions, 1);
    }

    #[test]
    fn consumer_can_stop_and_continue() {
        let d = tempfile::tempdir().unwrap();
        let wal = d.path().join("wal");
        let mut wr = WalWriter::create(&wal, 0, Duration::from_secs(1), 1 << 20).unwrap();
        for t in 0..5 {
            wr.log_samples(&[s(1, t)]);
        }
        wr.flush().unwrap();
        let mut w = WalWatcher::new(&wal, WalPosition::default());
        let mut got = Vec::new();
        loop {
            let r = w
                .poll(&mut |ev| {
                    if let WatchEvent::Samples { samples, .. } = ev {
                        got.push(samples[0].t);
                    }
                    false
                })
                .unwrap();
            if r == PollResult::CaughtUp {
                break;
            }
        }
        assert_eq!(got, vec![0, 1, 2, 3, 4]);
    }

    #[test]
    fn reads_compressed_and_plain_records_alike() {
        use super::super::compress::{SNAPPY_BIT, ZSTD_BIT};
        use super::super::Compression;
        let d = tempfile::tempdir().unwrap();
        let wal = d.path().join("wal");
        let mut wr = WalWriter::create(&wal, 0, Duration::from_secs(1), 1 << 20).unwrap();
        let a = Labels::from_pairs([("__name__", "a"), ("pod", "p".repeat(40).as_str())]);
        let batch = |from: i64| -> Vec<RefSample> { (from..from + 30).map(|t| s(1, t)).collect() };
        wr.set_compression(Compression::Snappy);
        wr.log_series([(1u64, &a)].into_iter());
        wr.log_samples(&batch(0));
        wr.flush().unwrap();
        wr.set_compression(Compression::None);
        wr.log_samples(&batch(30));
        wr.flush().unwrap();
        wr.set_compression(Compression::Zstd);
        wr.log_samples(&batch(60));
        wr.flush().unwrap();
        let tys: Vec<u8> = record::Frames::new(&std::fs::read(wal.join(segment_name(1))).unwrap())
            .map(|f| f.unwrap().1)
            .collect();
        let (ser, smp) = (record::TYPE_SERIES, record::TYPE_SAMPLES);
        assert_eq!(
            tys,
            vec![ser | SNAPPY_BIT, smp | SNAPPY_BIT, smp, smp | ZSTD_BIT]
        );
        let mut w = WalWatcher::new(&wal, WalPosition::default());
        let mut seen = Seen::default();
        poll_all(&mut w, &mut seen);
        assert_eq!(seen.series, vec![(1, a.clone())]);
        assert_eq!(ts(&seen), (0..90).collect::<Vec<_>>());
        assert_eq!(w.stats().corruptions, 0);
        // a zstd checkpoint replaces segment 1 (series and chunks compressed); a watcher
        // resuming inside it gets the chunks
        let upto = wr.roll().unwrap();
        let mut cp = Vec::new();
        record::encode_series(&mut cp, [(1u64, &a)].into_iter());
        let mut cw = crate::chunk::ChunkWriter::new();
        for t in 0..90 {
            cw.append(t, t as f64);
        }
        let enc = cw.finish();
        record::encode_chunks(&mut cp, 1, [enc.as_slice()].into_iter());
        write_checkpoint(&wal, upto, &cp, Compression::Zstd).unwrap();
        let cp_tys: Vec<u8> =
            record::Frames::new(&std::fs::read(wal.join(checkpoint_name(upto))).unwrap())
                .map(|f| f.unwrap().1)
                .collect();
        assert_eq!(cp_tys[0], ser | ZSTD_BIT);
        wr.log_samples(&batch(90));
        wr.flush().unwrap();
        let mut w = WalWatcher::new(
            &wal,
            WalPosition {
                segment: 1,
                offset: 10,
            },
        );
        let mut seen = Seen::default();
        poll_all(&mut w, &mut seen);
        assert_eq!(seen.series, vec![(1, a)]);
        let cs: Vec<i64> = seen.chunk_samples.iter().map(|s| s.t).collect();
        assert_eq!(cs, (0..90).collect::<Vec<_>>());
        assert_eq!(ts(&seen), (90..120).collect::<Vec<_>>());
        assert_eq!(w.stats().corruptions, 0);
    }
}
