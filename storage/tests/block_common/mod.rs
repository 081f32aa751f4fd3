//! Helpers shared by the block tests.
#![allow(dead_code)]

use inferdb_storage::block::{write_block, Block, BlockMeta};
use inferdb_storage::chunk::{ChunkWriter, MAX_SAMPLES_PER_CHUNK};
use inferdb_storage::{Labels, Matcher};
use std::path::Path;

/// Deterministic pseudo-random numbers (xorshift).
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Encodes samples into chunks of at most 120 samples.
pub fn encode(samples: &[(i64, f64)]) -> Vec<Vec<u8>> {
    samples
        .chunks(MAX_SAMPLES_PER_CHUNK)
        .map(|c| {
            let mut w = ChunkWriter::new();
            for &(t, v) in c {
                w.append(t, v);
            }
            w.finish()
        })
        .collect()
}

/// Writes a block from `(labels, samples)` (any order).
pub fn write(
    parent: &Path,
    mint: i64,
    maxt: i64,
    series: &[(Labels, Vec<(i64, f64)>)],
) -> BlockMeta {
    let mut s: Vec<(Labels, Vec<Vec<u8>>)> = series
        .iter()
        .map(|(l, ss)| (l.clone(), encode(ss)))
        .collect();
    s.sort_by(|a, b| a.0.cmp(&b.0));
    write_block(parent, mint, maxt, s.into_iter()).expect("write block")
}

/// All samples of the selected series, decoded, as `(labels, samples)` sorted by labels.
pub fn read_all(b: &Block, ms: &[Matcher], mint: i64, maxt: i64) -> Vec<(Labels, Vec<(i64, u64)>)> {
    b.select(ms, mint, maxt)
        .expect("select")
        .into_iter()
        .map(|s| {
            let mut out = Vec::new();
            for (m, r) in &s.chunks {
                let mut it = b.decode_chunk(*r).expect("decode");
                let mut n = 0;
                for (t, v) in it.by_ref() {
                    out.push((t, v.to_bits()));
                    n += 1;
                }
                assert!(it.err().is_none());
                assert_eq!(n, m.num_samples as usize);
            }
            (s.labels, out)
        })
        .collect()
}

/// Brute-force matcher evaluation: a missing label is the empty string.
pub fn matches_all(l: &Labels, ms: &[Matcher]) -> bool {
    ms.iter().all(|m| m.matches(l.get(&m.name).unwrap_or("")))
}
