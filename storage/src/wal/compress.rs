//! Compression of WAL records (`--storage.tsdb.wal-compression`), as Prometheus does it.
//!
//! Each record is compressed on its own, and only when that makes it smaller; two bits of the
//! record's type byte say how its payload is stored, so one segment (or checkpoint) may mix
//! plain, snappy and zstd records and a WAL written with the flag on, off, or switched between
//! restarts replays alike. The bits are Prometheus' (`snappyMask`, `zstdMask` in its `wlog`):
//!
//! ```text
//! type byte := [3 bits 0] [1 bit zstd] [1 bit snappy] [3 bits record type]
//! ```
//!
//! The checksum and the length in the header cover the payload as stored (compressed).
//! Snappy is the block format (no framing); zstd is one frame with its content size, at level
//! 3 (what Prometheus' zstd "speed default" corresponds to).

use super::record::{HEADER_LEN, MAX_PAYLOAD};

/// Type-byte bit: the payload is snappy-compressed (block format).
pub const SNAPPY_BIT: u8 = 1 << 3;
/// Type-byte bit: the payload is one zstd frame.
pub const ZSTD_BIT: u8 = 1 << 4;
/// The type byte's bits that hold the record type.
pub const TYPE_MASK: u8 = SNAPPY_BIT - 1;

/// The zstd level records are written with.
const ZSTD_LEVEL: i32 = 3;

/// How the writer compresses records; the names are Prometheus'
/// `--storage.tsdb.wal-compression-type` values (and `none` for the flag off).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Compression {
    /// Records are written as they are.
    #[default]
    None,
    /// Snappy block format.
    Snappy,
    /// Zstandard.
    Zstd,
}

impl Compression {
    /// The name: `none`, `snappy` or `zstd`.
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Snappy => "snappy",
            Compression::Zstd => "zstd",
        }
    }

    /// Parses a name as [`Compression::name`] writes it.
    pub fn from_name(s: &str) -> Option<Self> {
        match s {
            "none" => Some(Compression::None),
            "snappy" => Some(Compression::Snappy),
            "zstd" => Some(Compression::Zstd),
            _ => None,
        }
    }

    fn bit(self) -> u8 {
        match self {
            Compression::None => 0,
            Compression::Snappy => SNAPPY_BIT,
            Compression::Zstd => ZSTD_BIT,
        }
    }
}

impl std::fmt::Display for Compression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Whether `ty` is a type byte a reader accepts: a known record type, at most one
/// compression bit, no other bits.
pub fn valid_type_byte(ty: u8) -> bool {
    let kind = ty & TYPE_MASK;
    let flags = ty & !TYPE_MASK;
    (super::record::TYPE_SERIES..=super::record::TYPE_MIN_VALID).contains(&kind)
        && (flags == 0 || flags == SNAPPY_BIT || flags == ZSTD_BIT)
}

/// Re-frames plain records with compressed payloads; keeps its buffers and compressor
/// between calls.
#[derive(Default)]
pub struct Compressor {
    snappy: Option<snap::raw::Encoder>,
    zstd: Option<zstd::bulk::Compressor<'static>>,
    scratch: Vec<u8>,
}

impl Compressor {
    /// Appends the records of `plain` (whole records as the `record::encode_*` functions
    /// write them) to `out`, each payload compressed with `c` when that makes it smaller and
    /// left as it is otherwise. With [`Compression::None`] the bytes are copied unchanged.
    /// Returns the payload bytes saved.
    pub fn compress_records(&mut self, plain: &[u8], c: Compression, out: &mut Vec<u8>) -> u64 {
        if c == Compression::None {
            out.extend_from_slice(plain);
            return 0;
        }
        let mut saved = 0u64;
        let mut off = 0;
        while off + HEADER_LEN <= plain.len() {
            let ty = plain[off];
            let len = u32::from_le_bytes([
                plain[off + 1],
                plain[off + 2],
                plain[off + 3],
                plain[off + 4],
            ]) as usize;
            let end = (off + HEADER_LEN + len).min(plain.len());
            let payload = &plain[off + HEADER_LEN..end];
            let packed = (ty & !TYPE_MASK) == 0 && self.compress(c, payload);
            if packed && self.scratch.len() < payload.len() {
                saved += (payload.len() - self.scratch.len()) as u64;
                let at = out.len();
                out.push(ty | c.bit());
                out.extend_from_slice(&(self.scratch.len() as u32).to_le_bytes());
                out.extend_from_slice(&[0; 4]);
                out.extend_from_slice(&self.scratch);
                let mut h = crc32fast::Hasher::new();
                h.update(&out[at..at + 5]);
                h.update(&out[at + HEADER_LEN..]);
                let crc = h.finalize();
                out[at + 5..at + 9].copy_from_slice(&crc.to_le_bytes());
            } else {
                out.extend_from_slice(&plain[off..end]);
            }
            off = end;
        }
        // a partial header cannot come from the encoders; copy it as it is
        out.extend_from_slice(&plain[off..]);
        saved
    }

    /// Compresses `payload` into `self.scratch`; `false` when the codec failed (the record is
    /// then written plain).
    fn compress(&mut self, c: Compression, payload: &[u8]) -> bool {
        self.scratch.clear();
        match c {
            Compression::None => false,
            Compression::Snappy => {
                let max = snap::raw::max_compress_len(payload.len());
                if max == 0 && !payload.is_empty() {
                    return false;
                }
                self.scratch.resize(max, 0);
                let enc = self.snappy.get_or_insert_with(snap::raw::Encoder::new);
                match enc.compress(payload, &mut self.scratch) {
                    Ok(n) => {
                        self.scratch.truncate(n);
                        true
                    }
                    Err(_) => false,
                }
            }
            Compression::Zstd => {
                if self.zstd.is_none() {
                    match zstd::bulk::Compressor::new(ZSTD_LEVEL) {
                        Ok(z) => self.zstd = Some(z),
                        Err(_) => return false,
                    }
                }
                let Some(z) = self.zstd.as_mut() else {
                    return false;
                };
                self.scratch
                    .reserve(zstd::zstd_safe::compress_bound(payload.len()));
                z.compress_to_buffer(payload, &mut self.scratch).is_ok()
            }
        }
    }
}

/// Decompresses record payloads; keeps its buffer and decompressors between calls.
#[derive(Default)]
pub struct Decompressor {
    snappy: Option<snap::raw::Decoder>,
    zstd: Option<zstd::bulk::Decompressor<'static>>,
    buf: Vec<u8>,
}

impl Decompressor {
    /// The payload of a record with type byte `ty` as it was before compression: `raw`
    /// itself when no compression bit is set, else the decompressed bytes (in a buffer of
    /// this decompressor). An error says what is wrong with the compressed bytes.
    pub fn payload<'a>(&'a mut self, ty: u8, raw: &'a [u8]) -> Result<&'a [u8], String> {
        match ty & !TYPE_MASK {
            0 => Ok(raw),
            SNAPPY_BIT => {
                let n = snap::raw::decompress_len(raw)
                    .map_err(|e| format!("snappy-compressed record: {e}"))?;
                // snappy expands at most ~21x (a 3-byte copy of 64 bytes): a larger claim is
                // corruption, refused before allocating for it
                if n > MAX_PAYLOAD || n > raw.len().saturating_mul(32) {
                    return Err(format!(
                        "snappy-compressed record claims {n} bytes from {} compressed",
                        raw.len()
                    ));
                }
                self.buf.clear();
                self.buf.resize(n, 0);
                let dec = self.snappy.get_or_insert_with(snap::raw::Decoder::new);
                let got = dec
                    .decompress(raw, &mut self.buf)
                    .map_err(|e| format!("snappy-compressed record: {e}"))?;
                self.buf.truncate(got);
                Ok(&self.buf)
            }
            ZSTD_BIT => {
                let n = match zstd::zstd_safe::get_frame_content_size(raw) {
                    Ok(Some(n)) => n,
                    Ok(None) => return Err("zstd-compressed record: no content size".into()),
                    Err(_) => return Err("zstd-compressed record: bad frame header".into()),
                };
                if n > MAX_PAYLOAD as u64 {
                    return Err(format!("zstd-compressed record claims {n} bytes"));
                }
                if self.zstd.is_none() {
                    let d = zstd::bulk::Decompressor::new()
                        .map_err(|e| format!("zstd decompressor: {e}"))?;
                    self.zstd = Some(d);
                }
                let Some(z) = self.zstd.as_mut() else {
                    return Err("zstd decompressor unavailable".into());
                };
                self.buf.clear();
                self.buf.reserve(n as usize);
                let got = z
                    .decompress_to_buffer(raw, &mut self.buf)
                    .map_err(|e| format!("zstd-compressed record: {e}"))?;
                if got as u64 != n {
                    return Err(format!(
                        "zstd-compressed record: {got} bytes, header says {n}"
                    ));
                }
                Ok(&self.buf)
            }
            f => Err(format!("unknown compression bits {f:#04x}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::record::{self, Frames, RefSample};
    use super::*;

    fn samples(n: usize) -> Vec<RefSample> {
        (0..n)
            .map(|i| RefSample {
                r: (i % 7) as u64,
                t: 1_000 + i as i64 * 15_000,
                v: (i % 5) as f64,
            })
            .collect()
    }

    #[test]
    fn records_round_trip_with_each_codec() {
        let mut plain = Vec::new();
        record::encode_samples(&mut plain, &samples(200));
        record::encode_min_valid(&mut plain, 7); // 8 bytes: does not shrink, stays plain
        for c in [Compression::None, Compression::Snappy, Compression::Zstd] {
            let mut out = Vec::new();
            let saved = Compressor::default().compress_records(&plain, c, &mut out);
            assert_eq!(out.len() as u64 + saved, plain.len() as u64);
            let frames: Vec<_> = Frames::new(&out).map(|f| f.unwrap()).collect();
            assert_eq!(frames.len(), 2);
            assert_eq!(frames[0].1, record::TYPE_SAMPLES | c.bit(), "{c}");
            assert_eq!(
                frames[1].1,
                record::TYPE_MIN_VALID,
                "small records stay plain"
            );
            if c != Compression::None {
                assert!(
                    out.len() < plain.len() * 3 / 4,
                    "{c}: {} of {}",
                    out.len(),
                    plain.len()
                );
            }
            let mut d = Decompressor::default();
            let want: Vec<_> = Frames::new(&plain).map(|f| f.unwrap().2.to_vec()).collect();
            for (f, w) in frames.iter().zip(&want) {
                assert_eq!(d.payload(f.1, f.2).unwrap(), w.as_slice());
            }
        }
    }

    #[test]
    fn bad_compressed_payloads_are_errors() {
        let mut d = Decompressor::default();
        let s = record::TYPE_SAMPLES;
        for raw in [&[][..], &[0xff; 12][..], &[5, 0, 1, 2][..]] {
            assert!(d.payload(s | SNAPPY_BIT, raw).is_err(), "{raw:?}");
            assert!(d.payload(s | ZSTD_BIT, raw).is_err(), "{raw:?}");
        }
        // a snappy length claim far beyond what the bytes can hold
        let mut big = Vec::new();
        crate::varint::put_uvarint(&mut big, 1 << 29);
        big.push(0);
        let e = d.payload(s | SNAPPY_BIT, &big).unwrap_err();
        assert!(e.contains("claims"), "{e}");
        // a truncated zstd frame
        let z = zstd::bulk::compress(&[7u8; 4000], 3).unwrap();
        assert!(d.payload(s | ZSTD_BIT, &z[..z.len() - 2]).is_err());
        assert_eq!(d.payload(s | ZSTD_BIT, &z).unwrap(), &[7u8; 4000][..]);
        assert!(d.payload(s | SNAPPY_BIT | ZSTD_BIT, &z).is_err());
    }

    #[test]
    fn type_bytes() {
        assert!(
            valid_type_byte(1) && valid_type_byte(4 | SNAPPY_BIT) && valid_type_byte(2 | ZSTD_BIT)
        );
        for ty in [0, 5, SNAPPY_BIT, 1 | SNAPPY_BIT | ZSTD_BIT, 1 | 0x20, 0x81] {
            assert!(!valid_type_byte(ty), "{ty:#x}");
        }
        for c in ["none", "snappy", "zstd"] {
            assert_eq!(Compression::from_name(c).unwrap().name(), c);
        }
        assert_eq!(Compression::from_name("lz4"), None);
    }
}
