//! WAL record framing and payload encodings.
//!
//! A segment or checkpoint file is a plain sequence of records:
//!
//! ```text
//! record  := type:u8 | len:u32 LE | crc:u32 LE | payload[len]
//! crc     := CRC-32 (IEEE) over type, len and payload
//! ```
//!
//! Payloads by type (all integers little endian; `uvarint` is LEB128, `varint` zig-zag LEB128):
//!
//! * `1` series: `uvarint n`, then `n` × (`uvarint ref`, `uvarint nlabels`,
//!   `nlabels` × (`uvarint len`, name bytes, `uvarint len`, value bytes)).
//! * `2` samples: `uvarint n`, and when `n > 0` an `i64 base_t`, then `n` ×
//!   (`varint ref - prev_ref` with `prev_ref` starting at 0, `varint t - base_t`, `u64` value bits).
//! * `3` chunks (checkpoints only): `uvarint ref`, `uvarint n`, `n` × (`uvarint len`, encoded chunk).
//! * `4` min valid time: `i64 t`; samples older than `t` are already in blocks.
//!
//! The type byte's bits 3 and 4 say whether the payload is stored compressed (see
//! [`super::compress`]); [`Decoder`] undoes that before decoding.

use super::compress::{valid_type_byte, Decompressor, TYPE_MASK};
use crate::error::{Error, Result};
use crate::labels::{Label, Labels};
use crate::varint::{get_uvarint, get_varint, put_uvarint, put_varint};

/// Size of a record header in bytes.
pub const HEADER_LEN: usize = 9;
/// Largest payload a reader accepts (guards allocations on corrupt lengths).
pub const MAX_PAYLOAD: usize = 1 << 30;

/// Record type: series definitions.
pub const TYPE_SERIES: u8 = 1;
/// Record type: samples.
pub const TYPE_SAMPLES: u8 = 2;
/// Record type: whole chunks of one series (checkpoints).
pub const TYPE_CHUNKS: u8 = 3;
/// Record type: the head's minimum valid time.
pub const TYPE_MIN_VALID: u8 = 4;

/// One sample addressed by series reference.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RefSample {
    /// The series reference.
    pub r: u64,
    /// Timestamp in milliseconds.
    pub t: i64,
    /// Value.
    pub v: f64,
}

/// A decoded record.
#[derive(Debug)]
pub enum Record<'a> {
    /// Series definitions: `(ref, labels)`.
    Series(Vec<(u64, Labels)>),
    /// Samples.
    Samples(&'a [RefSample]),
    /// Encoded chunks of one series.
    Chunks {
        /// The series reference.
        r: u64,
        /// Encoded chunks, oldest first.
        chunks: Vec<&'a [u8]>,
    },
    /// Samples older than this time are persisted in blocks.
    MinValidTime(i64),
}

/// The record type of a type byte (its compression bits cleared).
pub fn kind(ty: u8) -> u8 {
    ty & TYPE_MASK
}

/// Starts a record of type `ty` in `buf`; returns the header position for [`finish_record`].
pub fn begin_record(buf: &mut Vec<u8>, ty: u8) -> usize {
    let at = buf.len();
    buf.push(ty);
    buf.extend_from_slice(&[0u8; 8]);
    at
}

/// Completes the record started at `at`: fills in length and checksum.
pub fn finish_record(buf: &mut [u8], at: usize) {
    let len = (buf.len() - at - HEADER_LEN) as u32;
    buf[at + 1..at + 5].copy_from_slice(&len.to_le_bytes());
    let mut h = crc32fast::Hasher::new();
    h.update(&buf[at..at + 5]);
    h.update(&buf[at + HEADER_LEN..]);
    let crc = h.finalize();
    buf[at + 5..at + 9].copy_from_slice(&crc.to_le_bytes());
}

/// Encodes one series record.
pub fn encode_series<'l>(buf: &mut Vec<u8>, series: impl Iterator<Item = (u64, &'l Labels)>) {
    let at = begin_record(buf, TYPE_SERIES);
    let items: Vec<(u64, &Labels)> = series.collect();
    put_uvarint(buf, items.len() as u64);
    for (r, ls) in items {
        put_uvarint(buf, r);
        put_uvarint(buf, ls.len() as u64);
        for l in ls {
            put_uvarint(buf, l.name.len() as u64);
            buf.extend_from_slice(l.name.as_bytes());
            put_uvarint(buf, l.value.len() as u64);
            buf.extend_from_slice(l.value.as_bytes());
        }
    }
    finish_record(buf, at);
}

/// Encodes one samples record (nothing when `samples` is empty).
pub fn encode_samples(buf: &mut Vec<u8>, samples: &[RefSample]) {
    if samples.is_empty() {
        return;
    }
    let at = begin_record(buf, TYPE_SAMPLES);
    buf.reserve(samples.len() * 11 + 16);
    put_uvarint(buf, samples.len() as u64);
    let base_t = samples[0].t;
    buf.extend_from_slice(&base_t.to_le_bytes());
    let mut prev = 0u64;
    for s in samples {
        put_varint(buf, s.r.wrapping_sub(prev) as i64);
        prev = s.r;
        put_varint(buf, s.t.wrapping_sub(base_t));
        buf.extend_from_slice(&s.v.to_bits().to_le_bytes());
    }
    finish_record(buf, at);
}

/// Encodes a chunks record for series `r`.
pub fn encode_chunks<'c>(buf: &mut Vec<u8>, r: u64, chunks: impl Iterator<Item = &'c [u8]>) {
    let at = begin_record(buf, TYPE_CHUNKS);
    let chunks: Vec<&[u8]> = chunks.collect();
    put_uvarint(buf, r);
    put_uvarint(buf, chunks.len() as u64);
    for c in chunks {
        put_uvarint(buf, c.len() as u64);
        buf.extend_from_slice(c);
    }
    finish_record(buf, at);
}

/// Encodes a min-valid-time record.
pub fn encode_min_valid(buf: &mut Vec<u8>, t: i64) {
    let at = begin_record(buf, TYPE_MIN_VALID);
    buf.extend_from_slice(&t.to_le_bytes());
    finish_record(buf, at);
}

/// Iterates the framed records of a byte buffer, verifying lengths and checksums.
///
/// Yields `(offset, type, payload)`; stops with `Err((offset, reason))` at the first record
/// that is torn or fails its checksum. An all-zero tail is reported as such.
pub struct Frames<'a> {
    buf: &'a [u8],
    off: usize,
    failed: bool,
}

impl<'a> Frames<'a> {
    /// Frames over `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Frames {
            buf,
            off: 0,
            failed: false,
        }
    }

    /// The offset of the next record (after iteration ends: the end of the valid prefix).
    pub fn offset(&self) -> usize {
        self.off
    }

    /// After the iterator reported a damaged record, moves to the next intact record (see
    /// [`next_intact`]) and resumes there: returns its offset, or `None` (iteration stays
    /// ended) when no intact record follows, so that the damage is a torn tail.
    pub fn skip_damaged(&mut self) -> Option<usize> {
        if !self.failed {
            return None;
        }
        let next = next_intact(self.buf, self.off)?;
        self.off = next;
        self.failed = false;
        Some(next)
    }
}

/// Whether a whole, checksum-verified record starts at `off` of `buf`.
fn intact_at(buf: &[u8], off: usize) -> bool {
    let Some(rest) = buf.get(off..) else {
        return false;
    };
    if rest.len() < HEADER_LEN || !valid_type_byte(rest[0]) {
        return false;
    }
    let len = u32::from_le_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize;
    if len > MAX_PAYLOAD || len > rest.len() - HEADER_LEN {
        return false;
    }
    let crc = u32::from_le_bytes([rest[5], rest[6], rest[7], rest[8]]);
    let mut h = crc32fast::Hasher::new();
    h.update(&rest[..5]);
    h.update(&rest[HEADER_LEN..HEADER_LEN + len]);
    h.finalize() == crc
}

/// The offset of the first intact record after the damaged one at `damaged`, or `None` when
/// none follows. Where the damaged record's own length is plausible and an intact record (or
/// the end of the buffer) follows it, that is the answer (a flipped payload bit loses only
/// its own record); otherwise every later offset is tried. A false match needs a valid type,
/// a fitting length and a matching CRC-32 at once.
pub fn next_intact(buf: &[u8], damaged: usize) -> Option<usize> {
    if let Some(rest) = buf.get(damaged..) {
        if rest.len() >= HEADER_LEN {
            let len = u32::from_le_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize;
            let next = damaged.saturating_add(HEADER_LEN).saturating_add(len);
            if len <= rest.len() - HEADER_LEN && next < buf.len() && intact_at(buf, next) {
                return Some(next);
            }
        }
    }
    (damaged + 1..buf.len().saturating_sub(HEADER_LEN - 1)).find(|&o| intact_at(buf, o))
}

impl<'a> Iterator for Frames<'a> {
    type Item = std::result::Result<(usize, u8, &'a [u8]), (usize, String)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.off >= self.buf.len() {
            return None;
        }
        let rest = &self.buf[self.off..];
        let fail = |me: &mut Self, reason: String| {
            me.failed = true;
            Some(Err((me.off, reason)))
        };
        if rest.len() < HEADER_LEN {
            return fail(self, format!("torn record header ({} bytes)", rest.len()));
        }
        let ty = rest[0];
        if !valid_type_byte(ty) {
            let reason = if rest.iter().all(|&b| b == 0) {
                format!("zero-filled tail of {} bytes", rest.len())
            } else {
                format!("unknown record type {ty}")
            };
            return fail(self, reason);
        }
        let len = u32::from_le_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize;
        let crc = u32::from_le_bytes([rest[5], rest[6], rest[7], rest[8]]);
        if len > MAX_PAYLOAD || len > rest.len() - HEADER_LEN {
            return fail(
                self,
                format!(
                    "torn record: length {len} exceeds the {} bytes left",
                    rest.len() - HEADER_LEN
                ),
            );
        }
        let payload = &rest[HEADER_LEN..HEADER_LEN + len];
        let mut h = crc32fast::Hasher::new();
        h.update(&rest[..5]);
        h.update(payload);
        if h.finalize() != crc {
            return fail(self, "record checksum mismatch".to_string());
        }
        let at = self.off;
        self.off += HEADER_LEN + len;
        Some(Ok((at, ty, payload)))
    }
}

/// A cursor over a payload; every read is bounds-checked.
struct Cur<'a> {
    b: &'a [u8],
    i: usize,
}

fn bad(reason: impl Into<String>) -> Error {
    Error::corrupt("WAL record", "", 0, reason)
}

impl<'a> Cur<'a> {
    fn uvarint(&mut self) -> Result<u64> {
        get_uvarint(self.b, &mut self.i).map_err(|e| bad(e.to_string()))
    }
    fn varint(&mut self) -> Result<i64> {
        get_varint(self.b, &mut self.i).map_err(|e| bad(e.to_string()))
    }
    fn bytes(&mut self, n: u64) -> Result<&'a [u8]> {
        let n = usize::try_from(n).map_err(|_| bad("length overflow"))?;
        if n > self.b.len() - self.i {
            return Err(bad("length past end of record"));
        }
        let s = &self.b[self.i..self.i + n];
        self.i += n;
        Ok(s)
    }
    fn u64(&mut self) -> Result<u64> {
        let s = self.bytes(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(s);
        Ok(u64::from_le_bytes(a))
    }
    fn string(&mut self) -> Result<String> {
        let n = self.uvarint()?;
        let s = self.bytes(n)?;
        String::from_utf8(s.to_vec()).map_err(|_| bad("label is not UTF-8"))
    }
    fn done(&self) -> Result<()> {
        if self.i != self.b.len() {
            return Err(bad("trailing bytes in record"));
        }
        Ok(())
    }
}

/// Decodes a samples payload, appending to `out`.
pub fn decode_samples(payload: &[u8], out: &mut Vec<RefSample>) -> Result<()> {
    let mut c = Cur { b: payload, i: 0 };
    let n = c.uvarint()?;
    if n == 0 {
        return c.done();
    }
    // every sample takes at least 10 bytes
    if n > (payload.len() / 10) as u64 {
        return Err(bad("sample count exceeds record size"));
    }
    let base_t = c.u64()? as i64;
    out.reserve(n as usize);
    let mut prev = 0u64;
    for _ in 0..n {
        let r = prev.wrapping_add(c.varint()? as u64);
        prev = r;
        let t = base_t.wrapping_add(c.varint()?);
        let v = f64::from_bits(c.u64()?);
        out.push(RefSample { r, t, v });
    }
    c.done()
}

/// Decodes the records of a file, compressed or not: the type byte and payload as
/// [`Frames`] yields them in, a [`Record`] out. Keeps its buffers between records.
#[derive(Default)]
pub struct Decoder {
    samples: Vec<RefSample>,
    decompressor: Decompressor,
}

impl Decoder {
    /// Decodes the record with type byte `ty` and stored payload `raw`.
    pub fn decode<'a>(&'a mut self, ty: u8, raw: &'a [u8]) -> Result<Record<'a>> {
        let payload = self.decompressor.payload(ty, raw).map_err(bad)?;
        decode(kind(ty), payload, &mut self.samples)
    }

    /// Decodes a samples record (type byte `ty`, stored payload `raw`).
    pub fn decode_samples<'a>(&'a mut self, ty: u8, raw: &'a [u8]) -> Result<&'a [RefSample]> {
        if kind(ty) != TYPE_SAMPLES {
            return Err(bad(format!("record type {} is not samples", kind(ty))));
        }
        let payload = self.decompressor.payload(ty, raw).map_err(bad)?;
        self.samples.clear();
        decode_samples(payload, &mut self.samples)?;
        Ok(&self.samples)
    }
}

/// Decodes a plain (uncompressed) record payload of type `ty`. Samples go to `samples`
/// (cleared first).
pub fn decode<'a>(
    ty: u8,
    payload: &'a [u8],
    samples: &'a mut Vec<RefSample>,
) -> Result<Record<'a>> {
    let mut c = Cur { b: payload, i: 0 };
    match ty {
        TYPE_SERIES => {
            let n = c.uvarint()?;
            if n > payload.len() as u64 {
                return Err(bad("series count exceeds record size"));
            }
            let mut out = Vec::with_capacity(n as usize);
            for _ in 0..n {
                let r = c.uvarint()?;
                let nl = c.uvarint()?;
                if nl > payload.len() as u64 {
                    return Err(bad("label count exceeds record size"));
                }
                let mut ls = Vec::with_capacity(nl as usize);
                for _ in 0..nl {
                    let name = c.string()?;
                    let value = c.string()?;
                    ls.push(Label { name, value });
                }
                let sorted = ls.windows(2).all(|w| w[0].name < w[1].name)
                    && ls.iter().all(|l| !l.value.is_empty());
                if !sorted {
                    return Err(bad("labels not sorted or not unique"));
                }
                out.push((r, Labels::from_sorted_unchecked(ls)));
            }
            c.done()?;
            Ok(Record::Series(out))
        }
        TYPE_SAMPLES => {
            samples.clear();
            decode_samples(payload, samples)?;
            Ok(Record::Samples(samples))
        }
        TYPE_CHUNKS => {
            let r = c.uvarint()?;
            let n = c.uvarint()?;
            if n > payload.len() as u64 {
                return Err(bad("chunk count exceeds record size"));
            }
            let mut chunks = Vec::with_capacity(n as usize);
            for _ in 0..n {
                let len = c.uvarint()?;
                chunks.push(c.bytes(len)?);
            }
            c.done()?;
            Ok(Record::Chunks { r, chunks })
        }
        TYPE_MIN_VALID => {
            let t = c.u64()? as i64;
            c.done()?;
            Ok(Record::MinValidTime(t))
        }
        _ => Err(bad(format!("unknown record type {ty}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_records() {
        let long = "ab".repeat(40);
        let l1 = Labels::from_pairs([("__name__", "a:b"), ("x", long.as_str())]);
        let l2 = Labels::from_pairs([("__name__", "c")]);
        let mut buf = Vec::new();
        encode_series(&mut buf, [(1u64, &l1), (u64::MAX, &l2)].into_iter());
        let ss = vec![
            RefSample {
                r: 5,
                t: 1000,
                v: 1.5,
            },
            RefSample {
                r: 2,
                t: i64::MIN,
                v: f64::from_bits(crate::STALE_NAN_BITS),
            },
            RefSample {
                r: u64::MAX,
                t: i64::MAX,
                v: -0.0,
            },
        ];
        encode_samples(&mut buf, &ss);
        encode_chunks(&mut buf, 7, [&[b'c'; 100][..], &b""[..]].into_iter());
        encode_min_valid(&mut buf, -42);
        // the same records compressed: the decoder reads both alike
        let mut packed = Vec::new();
        super::super::compress::Compressor::default().compress_records(
            &buf,
            super::super::Compression::Snappy,
            &mut packed,
        );
        let packed_types: Vec<u8> = Frames::new(&packed).map(|f| f.unwrap().1).collect();
        let snappy = super::super::compress::SNAPPY_BIT;
        assert_eq!(
            packed_types,
            vec![
                TYPE_SERIES | snappy,
                TYPE_SAMPLES | snappy,
                TYPE_CHUNKS | snappy,
                TYPE_MIN_VALID
            ]
        );
        for file in [&buf, &packed] {
            let mut d = Decoder::default();
            let frames: Vec<_> = Frames::new(file).map(|f| f.unwrap()).collect();
            assert_eq!(frames.len(), 4);
            match d.decode(frames[0].1, frames[0].2).unwrap() {
                Record::Series(s) => assert_eq!(s, vec![(1, l1.clone()), (u64::MAX, l2.clone())]),
                r => panic!("{r:?}"),
            }
            match d.decode(frames[1].1, frames[1].2).unwrap() {
                Record::Samples(out) => {
                    assert_eq!(out.len(), 3);
                    for (a, b) in out.iter().zip(&ss) {
                        assert_eq!((a.r, a.t, a.v.to_bits()), (b.r, b.t, b.v.to_bits()));
                    }
                }
                r => panic!("{r:?}"),
            }
            match d.decode(frames[2].1, frames[2].2).unwrap() {
                Record::Chunks { r, chunks } => {
                    assert_eq!(r, 7);
                    assert_eq!(chunks, vec![&[b'c'; 100][..], &b""[..]]);
                }
                r => panic!("{r:?}"),
            }
            assert!(matches!(
                d.decode(frames[3].1, frames[3].2).unwrap(),
                Record::MinValidTime(-42)
            ));
        }
    }

    #[test]
    fn detects_torn_and_flipped_records() {
        let mut buf = Vec::new();
        encode_min_valid(&mut buf, 1);
        encode_min_valid(&mut buf, 2);
        let whole = buf.len();
        // torn: cut inside the second record
        let torn = &buf[..whole - 3];
        let mut f = Frames::new(torn);
        assert!(f.next().unwrap().is_ok());
        let (off, _) = f.next().unwrap().unwrap_err();
        assert_eq!(off, whole / 2);
        assert!(f.next().is_none());
        // flipped payload byte in the first record
        let mut flipped = buf.clone();
        flipped[HEADER_LEN + 2] ^= 0x10;
        let (off, reason) = Frames::new(&flipped).next().unwrap().unwrap_err();
        assert_eq!(off, 0);
        assert!(reason.contains("checksum"), "{reason}");
        // zero tail
        let mut z = buf.clone();
        z.extend_from_slice(&[0u8; 20]);
        let errs: Vec<_> = Frames::new(&z).filter_map(|f| f.err()).collect();
        assert_eq!(errs.len(), 1);
        assert!(errs[0].1.contains("zero"), "{}", errs[0].1);
    }

    #[test]
    fn rejects_bad_payloads() {
        let mut out = Vec::new();
        assert!(decode(TYPE_SAMPLES, &[0xff; 3], &mut out).is_err());
        assert!(decode(TYPE_SERIES, &[1, 1, 1, 0xff], &mut out).is_err());
        assert!(decode(TYPE_CHUNKS, &[1, 1, 100], &mut out).is_err());
        assert!(decode(TYPE_MIN_VALID, &[1, 2], &mut out).is_err());
        // unsorted labels
        let mut p = Vec::new();
        put_uvarint(&mut p, 1);
        put_uvarint(&mut p, 1);
        put_uvarint(&mut p, 2);
        for s in ["b", "1", "a", "1"] {
            put_uvarint(&mut p, 1);
            p.extend_from_slice(s.as_bytes());
        }
        assert!(decode(TYPE_SERIES, &p, &mut out).is_err());
    }
}
