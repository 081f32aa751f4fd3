//! TEMPORARY stand-in for `crate::chunk` (owned by the chunks helper), following the team
//! contract, so the head compiles before the real module lands. Not a real encoding.
//! Remove once `storage/src/chunk` exists (switch the alias in `head/mod.rs`).
#![allow(dead_code, missing_docs)]

use crate::error::Error;

pub const MAX_SAMPLES_PER_CHUNK: usize = 120;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkMeta {
    pub min_time: i64,
    pub max_time: i64,
    pub num_samples: u16,
}

#[derive(Default)]
pub struct ChunkWriter {
    s: Vec<(i64, f64)>,
}

impl ChunkWriter {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn append(&mut self, t: i64, v: f64) {
        self.s.push((t, v))
    }
    pub fn len(&self) -> usize {
        self.s.len()
    }
    pub fn is_empty(&self) -> bool {
        self.s.is_empty()
    }
    pub fn min_time(&self) -> i64 {
        self.s.first().map_or(0, |x| x.0)
    }
    pub fn max_time(&self) -> i64 {
        self.s.last().map_or(0, |x| x.0)
    }
    pub fn heap_bytes(&self) -> usize {
        self.s.capacity() * 16
    }
    pub fn iter(&self) -> SampleIter<'_> {
        SampleIter { s: &self.s, pos: 0 }
    }
    pub fn finish(&self) -> Vec<u8> {
        let mut b = vec![0xAB];
        b.extend_from_slice(&(self.s.len() as u32).to_le_bytes());
        for (t, v) in &self.s {
            b.extend_from_slice(&t.to_le_bytes());
            b.extend_from_slice(&v.to_bits().to_le_bytes());
        }
        let c = crc32fast::hash(&b);
        b.extend_from_slice(&c.to_le_bytes());
        b
    }
}

fn bad(r: &str) -> Error {
    Error::corrupt("chunk", "", 0, r)
}

pub fn encoded_len(b: &[u8]) -> Result<usize, Error> {
    if b.len() < 5 || b[0] != 0xAB {
        return Err(bad("bad header"));
    }
    let n = u32::from_le_bytes([b[1], b[2], b[3], b[4]]) as usize;
    let l = 5 + n.checked_mul(16).ok_or_else(|| bad("len"))? + 4;
    if b.len() < l {
        return Err(bad("truncated"));
    }
    Ok(l)
}

pub fn meta(b: &[u8]) -> Result<ChunkMeta, Error> {
    let it = decode(b)?;
    let v: Vec<(i64, f64)> = it.collect();
    Ok(ChunkMeta {
        min_time: v.first().map_or(0, |x| x.0),
        max_time: v.last().map_or(0, |x| x.0),
        num_samples: v.len() as u16,
    })
}

pub fn decode(b: &[u8]) -> Result<SampleIter<'static>, Error> {
    let n = encoded_len(b)?;
    if crc32fast::hash(&b[..n - 4]) != u32::from_le_bytes([b[n - 4], b[n - 3], b[n - 2], b[n - 1]])
    {
        return Err(bad("checksum mismatch"));
    }
    let mut s = Vec::new();
    for c in b[5..n - 4].chunks_exact(16) {
        let mut t = [0u8; 8];
        t.copy_from_slice(&c[..8]);
        let mut v = [0u8; 8];
        v.copy_from_slice(&c[8..]);
        s.push((i64::from_le_bytes(t), f64::from_bits(u64::from_le_bytes(v))));
    }
    Ok(SampleIter {
        s: Box::leak(s.into_boxed_slice()),
        pos: 0,
    })
}

pub struct SampleIter<'a> {
    s: &'a [(i64, f64)],
    pos: usize,
}

impl SampleIter<'_> {
    pub fn seek(&mut self, t: i64) -> Option<(i64, f64)> {
        for x in self.by_ref() {
            if x.0 >= t {
                return Some(x);
            }
        }
        None
    }
    pub fn err(&self) -> Option<&Error> {
        None
    }
}

impl Iterator for SampleIter<'_> {
    type Item = (i64, f64);
    fn next(&mut self) -> Option<(i64, f64)> {
        let x = *self.s.get(self.pos)?;
        self.pos += 1;
        Some(x)
    }
}
