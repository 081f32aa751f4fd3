//! Tombstones: the time intervals of series deleted by `delete_series`, kept beside the data
//! they hide until a rewrite (compaction, `clean_tombstones`, a block cut from the head) drops
//! the samples.
//!
//! A block keeps its tombstones in the file `tombstones` of its folder; the head keeps its own
//! in `<data>/head_tombstones`. Both files have the layout of [`Tombstones::encode`] (see
//! `storage/FORMAT.md`) and are replaced atomically (temporary file, fsync, rename, fsync of
//! the folder), so a crash leaves either the old or the new set.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::Path;

use crate::error::{Error, Result};
use crate::labels::{Label, Labels};
use crate::varint::{get_uvarint, get_varint, put_uvarint, put_varint};

/// The name of a block's tombstone file.
pub const TOMBSTONES_FILE: &str = "tombstones";

/// The name of the head's tombstone file in the data folder.
pub const HEAD_TOMBSTONES_FILE: &str = "head_tombstones";

const MAGIC: &[u8; 4] = b"IDBT";
const VERSION: u8 = 1;
const HEADER_LEN: usize = 8;

/// A closed time interval `[mint, maxt]` in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Interval {
    /// First deleted timestamp.
    pub mint: i64,
    /// Last deleted timestamp.
    pub maxt: i64,
}

impl Interval {
    /// `[mint, maxt]`.
    pub fn new(mint: i64, maxt: i64) -> Self {
        Interval { mint, maxt }
    }
}

/// Sorted, disjoint, non-adjacent intervals: the deleted times of one series.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Intervals(Vec<Interval>);

impl Intervals {
    /// Adds `iv`, merging it with the intervals it overlaps or touches; empty intervals
    /// (`mint > maxt`) are ignored.
    pub fn add(&mut self, iv: Interval) {
        if iv.mint > iv.maxt {
            return;
        }
        let mut n = iv;
        // intervals entirely before n (not touching) stay, as do those entirely after
        let lo = self
            .0
            .partition_point(|x| x.maxt < n.mint.saturating_sub(1));
        let hi = self
            .0
            .partition_point(|x| x.mint <= n.maxt.saturating_add(1));
        for x in &self.0[lo..hi] {
            n.mint = n.mint.min(x.mint);
            n.maxt = n.maxt.max(x.maxt);
        }
        self.0.splice(lo..hi, [n]);
    }

    /// Whether `t` lies in an interval.
    pub fn contains(&self, t: i64) -> bool {
        let i = self.0.partition_point(|x| x.maxt < t);
        self.0.get(i).is_some_and(|x| x.mint <= t)
    }

    /// Whether all of `[mint, maxt]` is deleted.
    pub fn covers(&self, mint: i64, maxt: i64) -> bool {
        let i = self.0.partition_point(|x| x.maxt < mint);
        self.0
            .get(i)
            .is_some_and(|x| x.mint <= mint && x.maxt >= maxt)
    }

    /// Whether some of `[mint, maxt]` is deleted.
    pub fn overlaps(&self, mint: i64, maxt: i64) -> bool {
        let i = self.0.partition_point(|x| x.maxt < mint);
        self.0.get(i).is_some_and(|x| x.mint <= maxt)
    }

    /// Drops the parts before `t`.
    pub fn trim_before(&mut self, t: i64) {
        self.0.retain(|x| x.maxt >= t);
        if let Some(f) = self.0.first_mut() {
            f.mint = f.mint.max(t);
        }
    }

    /// No interval.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The intervals, oldest first.
    pub fn iter(&self) -> std::slice::Iter<'_, Interval> {
        self.0.iter()
    }
}

/// The deleted intervals of each series, by label set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tombstones {
    series: BTreeMap<Labels, Intervals>,
}

impl Tombstones {
    /// The deleted intervals of `l`, if any.
    pub fn get(&self, l: &Labels) -> Option<&Intervals> {
        self.series.get(l)
    }

    /// Marks `[iv.mint, iv.maxt]` of series `l` deleted.
    pub fn add(&mut self, l: &Labels, iv: Interval) {
        if iv.mint > iv.maxt {
            return;
        }
        match self.series.get_mut(l) {
            Some(ivs) => ivs.add(iv),
            None => {
                let mut ivs = Intervals::default();
                ivs.add(iv);
                self.series.insert(l.clone(), ivs);
            }
        }
    }

    /// Drops every interval part before `t`, and the series left without one.
    pub fn trim_before(&mut self, t: i64) {
        for ivs in self.series.values_mut() {
            ivs.trim_before(t);
        }
        self.series.retain(|_, ivs| !ivs.is_empty());
    }

    /// No series has a deleted interval.
    pub fn is_empty(&self) -> bool {
        self.series.is_empty()
    }

    /// The number of series with deleted intervals.
    pub fn len(&self) -> usize {
        self.series.len()
    }

    /// Every series with its intervals, in label order.
    pub fn iter(&self) -> impl Iterator<Item = (&Labels, &Intervals)> {
        self.series.iter()
    }

    /// The file layout: header (`"IDBT"`, version 1, three zero bytes), then a body of
    /// `uvarint count` series, each `uvarint nlabels`, the labels as (`uvarint len`, name,
    /// `uvarint len`, value), `uvarint nintervals` and per interval `varint mint`,
    /// `uvarint maxt - mint`; then the crc32 of the body, big-endian.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + 64 * self.series.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&[VERSION, 0, 0, 0]);
        put_uvarint(&mut out, self.series.len() as u64);
        for (l, ivs) in &self.series {
            put_uvarint(&mut out, l.len() as u64);
            for x in l.iter() {
                put_uvarint(&mut out, x.name.len() as u64);
                out.extend_from_slice(x.name.as_bytes());
                put_uvarint(&mut out, x.value.len() as u64);
                out.extend_from_slice(x.value.as_bytes());
            }
            put_uvarint(&mut out, ivs.0.len() as u64);
            for iv in &ivs.0 {
                put_varint(&mut out, iv.mint);
                put_uvarint(&mut out, iv.maxt.wrapping_sub(iv.mint) as u64);
            }
        }
        let crc = crc32fast::hash(&out[HEADER_LEN..]);
        out.extend_from_slice(&crc.to_be_bytes());
        out
    }

    /// Reads the layout of [`Tombstones::encode`], checking the header, the checksum, that
    /// label sets are valid and strictly increasing and that every interval is well formed.
    /// Errors are [`Error::Corrupt`] with the byte offset (and no path).
    pub fn decode(buf: &[u8]) -> Result<Tombstones> {
        let bad = |off: usize, why: &str| Error::corrupt("tombstones", "", off as u64, why);
        if buf.len() < HEADER_LEN + 4 {
            return Err(bad(0, "file too short"));
        }
        if &buf[..4] != MAGIC {
            return Err(bad(0, "bad magic"));
        }
        if buf[4] != VERSION {
            return Err(bad(4, &format!("unknown version {}", buf[4])));
        }
        if buf[5..HEADER_LEN] != [0, 0, 0] {
            return Err(bad(5, "reserved header bytes not zero"));
        }
        let end = buf.len() - 4;
        let body = &buf[..end];
        let want = u32::from_be_bytes([buf[end], buf[end + 1], buf[end + 2], buf[end + 3]]);
        if crc32fast::hash(&body[HEADER_LEN..]) != want {
            return Err(bad(end, "checksum mismatch"));
        }
        let mut pos = HEADER_LEN;
        let uv = |pos: &mut usize| -> Result<u64> {
            let at = *pos;
            get_uvarint(body, pos).map_err(|e| bad(at, &e.to_string()))
        };
        let count = uv(&mut pos)?;
        let mut out = Tombstones::default();
        let mut prev: Option<Labels> = None;
        for _ in 0..count {
            let at = pos;
            let n = uv(&mut pos)?;
            if n > (body.len() - pos) as u64 {
                return Err(bad(at, "label count past the end"));
            }
            let mut ls = Vec::with_capacity(n as usize);
            for _ in 0..n {
                let name = read_str(body, &mut pos).map_err(|(o, w)| bad(o, w))?;
                let value = read_str(body, &mut pos).map_err(|(o, w)| bad(o, w))?;
                ls.push(Label::new(name, value));
            }
            if ls.windows(2).any(|w| w[0].name >= w[1].name) {
                return Err(bad(at, "label names not strictly increasing"));
            }
            let l = Labels::from_sorted_unchecked(ls);
            l.validate().map_err(|e| bad(at, &e.to_string()))?;
            if prev.as_ref().is_some_and(|p| *p >= l) {
                return Err(bad(at, "series not in increasing label order"));
            }
            let at = pos;
            let k = uv(&mut pos)?;
            if k == 0 || k > (body.len() - pos) as u64 {
                return Err(bad(at, "bad interval count"));
            }
            let mut ivs = Intervals::default();
            for _ in 0..k {
                let at = pos;
                let mint = get_varint(body, &mut pos).map_err(|e| bad(at, &e.to_string()))?;
                let d = uv(&mut pos)?;
                let maxt = i64::try_from(i128::from(mint) + i128::from(d))
                    .map_err(|_| bad(at, "interval end out of range"))?;
                ivs.add(Interval::new(mint, maxt));
            }
            out.series.insert(l.clone(), ivs);
            prev = Some(l);
        }
        if pos != body.len() {
            return Err(bad(pos, "trailing bytes"));
        }
        Ok(out)
    }

    /// Reads the tombstone file at `path`; a missing file is an empty set.
    pub fn read(path: &Path) -> Result<Tombstones> {
        let buf = match fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Tombstones::default()),
            Err(e) => return Err(Error::io(path, e)),
        };
        Tombstones::decode(&buf).map_err(|e| match e {
            Error::Corrupt {
                what,
                offset,
                reason,
                ..
            } => Error::Corrupt {
                what,
                path: path.to_path_buf(),
                offset,
                reason,
            },
            e => e,
        })
    }

    /// Replaces the file at `path` atomically (written to `<path>.tmp`, fsynced, renamed, the
    /// folder fsynced); an empty set removes the file.
    pub fn write(&self, path: &Path) -> Result<()> {
        let dir = path.parent().unwrap_or(Path::new("."));
        if self.is_empty() {
            match fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
                Err(e) => return Err(Error::io(path, e)),
            }
        } else {
            let mut tmp = path.as_os_str().to_os_string();
            tmp.push(".tmp");
            let tmp = std::path::PathBuf::from(tmp);
            let r = (|| {
                let mut f = fs::File::create(&tmp)?;
                f.write_all(&self.encode())?;
                f.sync_all()
            })();
            if let Err(e) = r {
                let _ = fs::remove_file(&tmp);
                return Err(Error::io(&tmp, e));
            }
            fs::rename(&tmp, path).map_err(|e| Error::io(path, e))?;
        }
        fs::File::open(dir)
            .and_then(|f| f.sync_all())
            .map_err(|e| Error::io(dir, e))
    }
}

/// Re-encodes `chunks` (time-ordered, of one series) without the samples in `d`: the
/// survivors in chunks of at most [`crate::chunk::MAX_SAMPLES_PER_CHUNK`] samples.
pub fn drop_deleted<'a>(
    chunks: impl IntoIterator<Item = &'a [u8]>,
    d: &Intervals,
) -> Result<Vec<Vec<u8>>> {
    use crate::chunk::{decode, ChunkWriter, MAX_SAMPLES_PER_CHUNK};
    let mut out = Vec::new();
    let mut w = ChunkWriter::new();
    for c in chunks {
        let mut it = decode(c)?;
        for (t, v) in it.by_ref() {
            if d.contains(t) {
                continue;
            }
            if w.len() >= MAX_SAMPLES_PER_CHUNK {
                out.push(w.finish());
                w = ChunkWriter::new();
            }
            w.append(t, v);
        }
        if let Some(e) = it.take_err() {
            return Err(e);
        }
    }
    if !w.is_empty() {
        out.push(w.finish());
    }
    Ok(out)
}

/// The fuzz target's body: decodes `data`; what decodes must survive an encode and decode
/// unchanged. Returns the number of series decoded.
#[cfg(any(test, feature = "fuzzing"))]
pub fn fuzz_decode(data: &[u8]) -> usize {
    match Tombstones::decode(data) {
        Ok(t) => {
            let again = Tombstones::decode(&t.encode()).expect("re-encoded tombstones decode");
            assert_eq!(again, t, "tombstones changed through encode and decode");
            t.len()
        }
        Err(_) => 0,
    }
}

fn read_str(body: &[u8], pos: &mut usize) -> std::result::Result<String, (usize, &'static str)> {
    let at = *pos;
    let n = get_uvarint(body, pos).map_err(|_| (at, "bad string length"))?;
    if n > (body.len() - *pos) as u64 {
        return Err((at, "string past the end"));
    }
    let s = &body[*pos..*pos + n as usize];
    *pos += n as usize;
    String::from_utf8(s.to_vec()).map_err(|_| (at, "string is not UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ivs(xs: &[(i64, i64)]) -> Intervals {
        let mut out = Intervals::default();
        for &(a, b) in xs {
            out.add(Interval::new(a, b));
        }
        out
    }

    #[test]
    fn intervals_merge_and_answer() {
        let x = ivs(&[(10, 20), (30, 40), (21, 25), (100, 90)]);
        assert_eq!(x.0, vec![Interval::new(10, 25), Interval::new(30, 40)]);
        assert!(x.contains(10) && x.contains(25) && !x.contains(26) && x.contains(40));
        assert!(!x.contains(9) && !x.contains(41));
        assert!(x.covers(12, 20) && !x.covers(20, 30));
        assert!(x.overlaps(26, 30) && !x.overlaps(26, 29) && !x.overlaps(41, 50));
        let x = ivs(&[(10, 20), (30, 40), (0, 100)]);
        assert_eq!(x.0, vec![Interval::new(0, 100)]);
        let mut x = ivs(&[(10, 20), (30, 40)]);
        x.trim_before(15);
        assert_eq!(x.0, vec![Interval::new(15, 20), Interval::new(30, 40)]);
        x.trim_before(41);
        assert!(x.is_empty());
        let x = ivs(&[(i64::MIN, i64::MAX)]);
        assert!(x.contains(0) && x.covers(i64::MIN, i64::MAX));
    }

    #[test]
    fn file_round_trips_and_refuses_damage() {
        let mut t = Tombstones::default();
        let a = Labels::from_pairs([("__name__", "up"), ("job", "a")]);
        let b = Labels::from_pairs([("__name__", "up"), ("job", "b")]);
        t.add(&b, Interval::new(-5, 7));
        t.add(&a, Interval::new(i64::MIN, i64::MAX));
        t.add(&b, Interval::new(100, 200));
        let buf = t.encode();
        assert_eq!(Tombstones::decode(&buf).unwrap(), t);
        for i in 0..buf.len() {
            let mut d = buf.clone();
            d[i] ^= 0x40;
            assert!(Tombstones::decode(&d).is_err(), "flipped byte {i} accepted");
        }
        for n in 0..buf.len() {
            assert!(Tombstones::decode(&buf[..n]).is_err());
        }
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(TOMBSTONES_FILE);
        assert!(Tombstones::read(&p).unwrap().is_empty());
        t.write(&p).unwrap();
        assert_eq!(Tombstones::read(&p).unwrap(), t);
        Tombstones::default().write(&p).unwrap();
        assert!(!p.exists());
    }
}
