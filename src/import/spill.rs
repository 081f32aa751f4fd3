//! The import's spill store: finished chunks go to one append-only file per block range in the
//! staging folder, so the parse pass holds only a bounded buffer whatever the input's size.
//!
//! A record is `series u32 | min_time i64 | max_time i64 | len u32 | chunk bytes`
//! (little-endian). The files are private to one import and removed with the staging folder.

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// Bytes of a record header.
const HEADER: usize = 4 + 8 + 8 + 4;

/// Default bound on the bytes buffered in memory over all ranges before they are written out.
pub const DEFAULT_BUFFER_BYTES: usize = 32 << 20;

#[derive(Default)]
struct RangeBuf {
    buf: Vec<u8>,
    on_disk: bool,
}

/// Chunks per block range, buffered in memory up to a bound and appended to files beyond it.
pub struct Spill {
    dir: PathBuf,
    ranges: BTreeMap<i64, RangeBuf>,
    buffered: usize,
    cap: usize,
    /// Bytes written to the spill files so far.
    pub spilled_bytes: u64,
}

/// One chunk read back from the spill.
#[derive(Debug, Clone, Copy)]
pub struct Rec {
    /// The series index.
    pub series: u32,
    /// The chunk's first timestamp.
    pub min_time: i64,
    /// The chunk's last timestamp.
    pub max_time: i64,
    /// Offset of the chunk bytes in the range's data.
    pub off: usize,
    /// Length of the chunk bytes.
    pub len: usize,
}

impl Spill {
    /// A spill store writing its files into `dir` (created when first needed), buffering at
    /// most about `cap` bytes in memory.
    pub fn new(dir: PathBuf, cap: usize) -> Self {
        Spill {
            dir,
            ranges: BTreeMap::new(),
            buffered: 0,
            cap,
            spilled_bytes: 0,
        }
    }

    fn path(&self, range: i64) -> PathBuf {
        self.dir.join(format!("range{range}.spill"))
    }

    /// Adds a chunk of `series` to block range `range`.
    pub fn push(
        &mut self,
        range: i64,
        series: u32,
        min_time: i64,
        max_time: i64,
        chunk: &[u8],
    ) -> std::io::Result<()> {
        let rb = self.ranges.entry(range).or_default();
        rb.buf.extend_from_slice(&series.to_le_bytes());
        rb.buf.extend_from_slice(&min_time.to_le_bytes());
        rb.buf.extend_from_slice(&max_time.to_le_bytes());
        rb.buf
            .extend_from_slice(&(chunk.len() as u32).to_le_bytes());
        rb.buf.extend_from_slice(chunk);
        self.buffered += HEADER + chunk.len();
        if self.buffered > self.cap {
            self.flush()?;
        }
        Ok(())
    }

    /// Writes every buffered byte to the range files and frees the buffers.
    pub fn flush(&mut self) -> std::io::Result<()> {
        fs::create_dir_all(&self.dir)?;
        let dir = self.dir.clone();
        for (r, rb) in self.ranges.iter_mut() {
            if rb.buf.is_empty() {
                continue;
            }
            let p = dir.join(format!("range{r}.spill"));
            let mut f = OpenOptions::new().create(true).append(true).open(&p)?;
            f.write_all(&rb.buf)?;
            self.spilled_bytes += rb.buf.len() as u64;
            rb.buf = Vec::new();
            rb.on_disk = true;
        }
        self.buffered = 0;
        Ok(())
    }

    /// The block ranges that hold chunks, in order.
    pub fn ranges(&self) -> Vec<i64> {
        self.ranges.keys().copied().collect()
    }

    /// Takes all the data of `range` (its file, then its buffer) and forgets it.
    pub fn take(&mut self, range: i64) -> std::io::Result<Vec<u8>> {
        let Some(rb) = self.ranges.remove(&range) else {
            return Ok(Vec::new());
        };
        self.buffered -= rb.buf.len();
        if !rb.on_disk {
            return Ok(rb.buf);
        }
        let p = self.path(range);
        let mut data = Vec::new();
        fs::File::open(&p)?.read_to_end(&mut data)?;
        data.extend_from_slice(&rb.buf);
        let _ = fs::remove_file(&p);
        Ok(data)
    }

    /// The folder of the spill files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// The records of a range's data; `Err` when the data is cut short (it never is unless the
/// staging folder was tampered with).
pub fn records(data: &[u8]) -> Result<Vec<Rec>, String> {
    let mut out = Vec::new();
    let mut p = 0usize;
    let le4 = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    let le8 = |b: &[u8]| {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[..8]);
        i64::from_le_bytes(a)
    };
    while p < data.len() {
        let h = data
            .get(p..p + HEADER)
            .ok_or_else(|| format!("spill data cut short at byte {p}"))?;
        let len = le4(&h[20..24]) as usize;
        let off = p + HEADER;
        if off + len > data.len() {
            return Err(format!("spill data cut short at byte {p}"));
        }
        out.push(Rec {
            series: le4(&h[0..4]),
            min_time: le8(&h[4..12]),
            max_time: le8(&h[12..20]),
            off,
            len,
        });
        p = off + len;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_spill_to_files_and_read_back_in_order() {
        let dir = std::env::temp_dir().join(format!("inferdb-spill-test-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let mut s = Spill::new(dir.clone(), 64);
        for i in 0..20u32 {
            s.push(
                i64::from(i % 3) - 1,
                i,
                i64::from(i),
                i64::from(i) + 1,
                &[i as u8; 10],
            )
            .unwrap();
        }
        assert!(s.spilled_bytes > 0);
        assert_eq!(s.ranges(), vec![-1, 0, 1]);
        let d = s.take(0).unwrap();
        let recs = records(&d).unwrap();
        let series: Vec<u32> = recs.iter().map(|r| r.series).collect();
        assert_eq!(series, vec![1, 4, 7, 10, 13, 16, 19]);
        for r in &recs {
            assert_eq!(&d[r.off..r.off + r.len], &[r.series as u8; 10]);
            assert_eq!(r.max_time, r.min_time + 1);
        }
        assert!(records(&d[..d.len() - 1]).is_err());
        let _ = fs::remove_dir_all(&dir);
    }
}
