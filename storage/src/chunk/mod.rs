//! Compressed chunks of up to [`MAX_SAMPLES_PER_CHUNK`] samples of one series.
//!
//! Timestamps are coded as deltas of deltas (or deltas against the first delta, or not at all
//! when the spacing is perfectly regular); values either Gorilla-style XOR'd, or as scaled
//! integers (`v == n / 10^k`) coded as deltas or deltas of deltas, or not at all when constant.
//! Residuals go through an adaptive Rice coder ([`bitstream`]). The [`ChunkWriter`] codes samples
//! as they arrive (integers while the values allow it, switching to XOR when a value does not)
//! and [`ChunkWriter::finish`] re-codes the chunk with whichever variant is smallest.
//! Every value bit pattern (`-0.0`, NaNs including the staleness marker, infinities)
//! round-trips exactly.
//!
//! # Byte layout
//!
//! ```text
//! chunk   := kind [intparams] count:uvarint body_len:uvarint body crc32:u32le
//! kind    := u8: bits 0-1 value coding (1 XOR, 2 integer, 3 constant),
//!                bit 2 timestamps as delta - first delta (else delta of delta),
//!                bit 3 timestamps regular (no timestamp bits); bits 2 and 3 both set:
//!                timestamps as offsets from the grid t0 + i * first_delta,
//!                bit 4 timestamp residuals run-length coded ([`bitstream::Sparse`]),
//!                bits 5-7 zero
//! intparams := u8 (only for integer coding): bits 0-3 decimals k (<= 9),
//!                bit 4 residual is the delta (else delta of delta),
//!                bit 5 all residuals zero (no value bits),
//!                bit 6 residuals run-length coded,
//!                bit 7 residuals Rice coded with one parameter for the chunk
//!                ([`bitstream::FixedRice`]: 6 bits before the first value code; bits 5 and
//!                6 zero), else with the adaptive parameter
//! body    := (empty when count = 0)
//!            t0:zigzag-uvarint [first_delta:zigzag-uvarint if count >= 2]
//!            first_value:uvarint (integer: zigzag(n0); else the f64 bits byte-swapped,
//!                                 so values with short mantissas take few bytes)
//!            bitstream: for samples 2.. : [timestamp residual] [value code], MSB first,
//!                       zero-padded to a byte
//! crc32   := CRC-32 (IEEE) of every byte from kind to the end of body
//! ```
//!
//! Residuals of timestamps and integers are zigzag mapped and coded with the adaptive
//! [`bitstream::Rice`] coder, or, when most are zero, as runs of zeros and non-zero residuals
//! ([`bitstream::Sparse`]); integer residuals may also use one Rice parameter for the whole
//! chunk ([`bitstream::FixedRice`], usually the smallest and the fastest to decode); XOR value
//! codes follow the Gorilla paper (see [`xor`]).

pub(crate) mod bitstream;
pub(crate) mod int;
pub(crate) mod xor;

use crate::error::Error;
use crate::varint::{get_uvarint, put_uvarint, unzigzag, zigzag};
use bitstream::{
    BitReader, BitSink, BitWriter, FixedRice, Rice, Sparse, StreamCost, EXCEPTION, RICE_ESCAPE,
};
use xor::XorState;

/// The number of samples at which the head should cut a chunk.
pub const MAX_SAMPLES_PER_CHUNK: usize = 120;

/// The most samples one encoded chunk can hold (appends beyond are ignored).
pub const MAX_ENCODED_SAMPLES: usize = u16::MAX as usize;

const KIND_MASK: u8 = 0b11;
const KIND_XOR: u8 = 1;
const KIND_INT: u8 = 2;
const KIND_CONST: u8 = 3;
const TS_DELTA: u8 = 1 << 2;
const TS_REGULAR: u8 = 1 << 3;
const TS_SPARSE: u8 = 1 << 4;
const KIND_RESERVED: u8 = 0xe0;
const INT_DEC_MASK: u8 = 0x0f;
const INT_DELTA: u8 = 1 << 4;
const INT_NO_BITS: u8 = 1 << 5;
const INT_SPARSE: u8 = 1 << 6;
const INT_FIXED: u8 = 1 << 7;

/// How a chunk codes its timestamps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeEncoding {
    /// Coded delta of delta (Gorilla's scheme).
    DeltaOfDelta {
        /// Residuals run-length coded.
        sparse: bool,
    },
    /// Coded difference between each delta and the first delta.
    Delta {
        /// Residuals run-length coded.
        sparse: bool,
    },
    /// All deltas equal the first: no timestamp bits.
    Regular,
    /// Coded offset of each timestamp from the grid `t0 + i * first_delta` (scrape jitter that
    /// returns to the grid costs one residual instead of two).
    Grid {
        /// Residuals run-length coded.
        sparse: bool,
    },
}

/// How a chunk codes its values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueEncoding {
    /// Gorilla XOR of the float bits.
    Xor,
    /// Integers `n` with `v == n / 10^decimals`, coded as residuals.
    Int {
        /// The number of decimals `k`.
        decimals: u8,
        /// Residuals are deltas of deltas (else deltas).
        delta_of_delta: bool,
        /// All residuals are zero: no value bits.
        no_bits: bool,
        /// Residuals run-length coded.
        sparse: bool,
        /// Residuals Rice coded with one parameter for the whole chunk (else with the
        /// adaptive parameter); never with `no_bits` or `sparse`.
        fixed_k: bool,
    },
    /// Every value has the first value's bits: no value bits.
    Const,
}

/// Which coding [`ChunkWriter::finish_with`] produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EncodePolicy {
    /// The smallest variant (what [`ChunkWriter::finish`] does).
    Auto,
    /// Classic Gorilla: delta-of-delta timestamps and XOR values, whatever the data.
    Xor,
    /// Delta-of-delta timestamps and delta-of-delta scaled integers with the adaptive Rice
    /// parameter; only possible while every value is an integer (or has at most 9 decimals).
    Int,
    /// As [`Int`](EncodePolicy::Int) with one Rice parameter for the chunk's values.
    IntFixedRice,
}

/// The decoded header of an encoded chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkHeader {
    /// Timestamp coding.
    pub time: TimeEncoding,
    /// Value coding.
    pub value: ValueEncoding,
    /// Number of samples.
    pub num_samples: u16,
    /// Length of the whole chunk in bytes (header, body and checksum).
    pub len: usize,
}

/// Time range and sample count of a chunk, as kept in indexes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkMeta {
    /// Timestamp of the first sample (`i64::MAX` for an empty chunk).
    pub min_time: i64,
    /// Timestamp of the last sample (`i64::MIN` for an empty chunk).
    pub max_time: i64,
    /// Number of samples.
    pub num_samples: u16,
}

fn corrupt(offset: usize, reason: impl Into<String>) -> Error {
    Error::corrupt("chunk", "", offset as u64, reason)
}

/// A residual stream coder: plain adaptive Rice or run-length (sparse).
#[derive(Debug, Clone, Copy)]
enum ResCoder {
    Rice(Rice),
    Sparse(Sparse),
    Fixed(FixedRice),
}

impl ResCoder {
    fn new(use_sparse: bool, fixed: bool) -> Self {
        if use_sparse {
            ResCoder::Sparse(Sparse::default())
        } else if fixed {
            ResCoder::Fixed(FixedRice::default())
        } else {
            ResCoder::Rice(Rice::default())
        }
    }

    /// Codes residual `z`, the `j`th of its stream; `ahead` holds the whole stream's residuals
    /// (needed by the run-length and fixed-parameter codings only).
    // always inlined into the writer's per-sample step (the third coding's arm kept it out
    // of line, ~5 % more instructions per sample)
    #[inline(always)]
    fn encode(&mut self, z: u64, j: usize, ahead: &[u64], w: &mut BitWriter) -> u32 {
        match self {
            ResCoder::Rice(r) => r.encode(z, w),
            ResCoder::Sparse(s) => {
                let run = || {
                    ahead
                        .get(j..)
                        .map_or(0, |r| r.iter().take_while(|&&x| x == 0).count() as u64)
                };
                s.encode_at(z, run, w)
            }
            ResCoder::Fixed(f) => Self::encode_fixed(f, z, ahead, w),
        }
    }

    /// The one-parameter arm of [`encode`](ResCoder::encode), kept out of the way of the
    /// online writer's path (only `finish` re-codes with it).
    #[cold]
    #[inline(never)]
    fn encode_fixed(f: &mut FixedRice, z: u64, ahead: &[u64], w: &mut BitWriter) -> u32 {
        f.encode_at(z, ahead, w)
    }

    #[inline]
    fn decode(&mut self, r: &mut BitReader<'_>) -> u64 {
        match self {
            ResCoder::Rice(c) => c.decode(r),
            ResCoder::Sparse(s) => s.decode(r),
            ResCoder::Fixed(f) => f.decode(r),
        }
    }
}

/// Offset of timestamp `t` of sample `i` from the grid `t0 + i * delta1`.
#[inline]
fn grid_offset(t: i64, t0: i64, i: u16, delta1: i64) -> i64 {
    t.wrapping_sub(t0.wrapping_add(i64::from(i).wrapping_mul(delta1)))
}

fn time_sparse(t: TimeEncoding) -> bool {
    match t {
        TimeEncoding::Delta { sparse }
        | TimeEncoding::DeltaOfDelta { sparse }
        | TimeEncoding::Grid { sparse } => sparse,
        TimeEncoding::Regular => false,
    }
}

fn value_sparse(v: ValueEncoding) -> bool {
    matches!(v, ValueEncoding::Int { sparse: true, .. })
}

fn value_fixed(v: ValueEncoding) -> bool {
    matches!(v, ValueEncoding::Int { fixed_k: true, .. })
}

/// A coder for one chunk with fixed codings.
#[derive(Debug, Clone)]
struct Encoder {
    w: BitWriter,
    time: TimeEncoding,
    value: ValueEncoding,
    count: u16,
    t0: i64,
    delta1: i64,
    t_last: i64,
    delta_prev: i64,
    first_bits: u64,
    n_prev: i64,
    d_prev: i64,
    ts_coder: ResCoder,
    v_coder: ResCoder,
    xor: XorState,
}

impl Encoder {
    fn new(time: TimeEncoding, value: ValueEncoding) -> Self {
        Encoder {
            w: BitWriter::new(),
            time,
            value,
            count: 0,
            t0: 0,
            delta1: 0,
            t_last: 0,
            delta_prev: 0,
            first_bits: 0,
            n_prev: 0,
            d_prev: 0,
            ts_coder: ResCoder::new(time_sparse(time), false),
            v_coder: ResCoder::new(value_sparse(value), value_fixed(value)),
            xor: XorState::default(),
        }
    }

    /// Codes a sample; `n` is the scaled integer of `v` for integer coding (ignored otherwise).
    /// Returns the (timestamp, value) bits written.
    #[inline]
    fn push(&mut self, t: i64, v: f64, n: Option<i64>) -> (u32, u32) {
        self.push_ahead(t, v, n, &[], &[])
    }

    /// [`push`](Encoder::push) for run-length coded streams: `ts_ahead` / `v_ahead` hold all
    /// timestamp / value residuals of the chunk.
    #[inline]
    fn push_ahead(
        &mut self,
        t: i64,
        v: f64,
        n: Option<i64>,
        ts_ahead: &[u64],
        v_ahead: &[u64],
    ) -> (u32, u32) {
        let bits = v.to_bits();
        let (mut tb, mut vb) = (0, 0);
        if self.count == 0 {
            let n = n.unwrap_or(0);
            self.t0 = t;
            self.t_last = t;
            self.first_bits = bits;
            self.n_prev = n;
            self.d_prev = 0;
            self.xor = XorState::new(bits);
        } else {
            let delta = t.wrapping_sub(self.t_last);
            if self.count == 1 {
                self.delta1 = delta;
            } else {
                match self.time {
                    TimeEncoding::Regular => {}
                    TimeEncoding::Delta { .. } => {
                        let z = zigzag(delta.wrapping_sub(self.delta1));
                        let j = usize::from(self.count - 2);
                        tb = self.ts_coder.encode(z, j, ts_ahead, &mut self.w)
                    }
                    TimeEncoding::DeltaOfDelta { .. } => {
                        let z = zigzag(delta.wrapping_sub(self.delta_prev));
                        let j = usize::from(self.count - 2);
                        tb = self.ts_coder.encode(z, j, ts_ahead, &mut self.w)
                    }
                    TimeEncoding::Grid { .. } => {
                        let z = zigzag(grid_offset(t, self.t0, self.count, self.delta1));
                        let j = usize::from(self.count - 2);
                        tb = self.ts_coder.encode(z, j, ts_ahead, &mut self.w)
                    }
                }
            }
            self.delta_prev = delta;
            self.t_last = t;
            if !matches!(self.value, ValueEncoding::Xor) {
                // only the XOR coding uses the state; the others keep the last value in it
                self.xor.set_prev(bits);
            }
            match self.value {
                ValueEncoding::Const => {}
                ValueEncoding::Xor => vb = self.xor.encode(bits, &mut self.w),
                ValueEncoding::Int {
                    delta_of_delta,
                    no_bits,
                    ..
                } => {
                    let j = usize::from(self.count - 1);
                    match n {
                        Some(n) => {
                            let d = n.wrapping_sub(self.n_prev);
                            let r = if delta_of_delta {
                                d.wrapping_sub(self.d_prev)
                            } else {
                                d
                            };
                            if !no_bits {
                                vb = self.v_coder.encode(zigzag(r), j, v_ahead, &mut self.w);
                            }
                            self.d_prev = d;
                            self.n_prev = n;
                        }
                        None => {
                            // exception: a raw value; the integer state stays
                            vb = self.v_coder.encode(EXCEPTION, j, v_ahead, &mut self.w);
                            self.w.write(bits, 64);
                            vb += 64;
                        }
                    }
                }
            }
        }
        self.count += 1;
        (tb, vb)
    }

    fn kind_bytes(&self) -> ([u8; 2], usize) {
        let mut b0 = match self.value {
            ValueEncoding::Xor => KIND_XOR,
            ValueEncoding::Int { .. } => KIND_INT,
            ValueEncoding::Const => KIND_CONST,
        };
        match self.time {
            TimeEncoding::DeltaOfDelta { .. } => {}
            TimeEncoding::Delta { .. } => b0 |= TS_DELTA,
            TimeEncoding::Regular => b0 |= TS_REGULAR,
            TimeEncoding::Grid { .. } => b0 |= TS_DELTA | TS_REGULAR,
        }
        if time_sparse(self.time) {
            b0 |= TS_SPARSE;
        }
        match self.value {
            ValueEncoding::Int {
                decimals,
                delta_of_delta,
                no_bits,
                sparse,
                fixed_k,
            } => {
                let mut b1 = decimals & INT_DEC_MASK;
                if !delta_of_delta {
                    b1 |= INT_DELTA;
                }
                if no_bits {
                    b1 |= INT_NO_BITS;
                }
                if sparse {
                    b1 |= INT_SPARSE;
                }
                if fixed_k {
                    b1 |= INT_FIXED;
                }
                ([b0, b1], 2)
            }
            _ => ([b0, 0], 1),
        }
    }

    fn first_value_code(&self) -> u64 {
        match self.value {
            // the first value always fits an integer coding (else the chunk is XOR)
            ValueEncoding::Int { decimals, .. } => {
                zigzag(int::to_scaled(f64::from_bits(self.first_bits), decimals).unwrap_or(0))
            }
            _ => self.first_bits.swap_bytes(),
        }
    }

    /// The encoded chunk: header, body, checksum.
    fn to_bytes(&self) -> Vec<u8> {
        let mut prefix = Vec::with_capacity(32);
        if self.count > 0 {
            put_uvarint(&mut prefix, zigzag(self.t0));
            if self.count >= 2 {
                put_uvarint(&mut prefix, zigzag(self.delta1));
            }
            put_uvarint(&mut prefix, self.first_value_code());
        }
        let bitstream = self.w.bytes();
        let body_len = prefix.len() + bitstream.len();
        let mut out = Vec::with_capacity(body_len + 16);
        let (kb, kn) = self.kind_bytes();
        out.extend_from_slice(&kb[..kn]);
        put_uvarint(&mut out, u64::from(self.count));
        put_uvarint(&mut out, body_len as u64);
        out.extend_from_slice(&prefix);
        out.extend_from_slice(bitstream);
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    fn iter(&self) -> SampleIter<'_> {
        SampleIter::new(
            self.time,
            self.value,
            self.count,
            self.t0,
            self.delta1,
            self.first_value_code(),
            BitReader::new(self.w.padded(), self.w.bit_len()),
            0,
        )
    }
}

/// An open, appendable chunk (the head's current chunk of a series).
///
/// Samples are coded as they arrive, so the memory held is about the size of the finished
/// chunk. Values start in the integer coding while they are whole numbers (or have few
/// decimals) and the chunk is re-coded once as XOR when a value does not fit.
/// [`finish`](ChunkWriter::finish) decodes the chunk, prices the alternative codings over it
/// and emits the smallest; [`snapshot`](ChunkWriter::snapshot) emits the chunk as coded (for
/// readers of the open chunk). The writer keeps no pricing state: it is 160 bytes inline.
#[derive(Debug, Clone)]
pub struct ChunkWriter {
    enc: Encoder,
    /// Values coded as exceptions.
    exceptions: u8,
}

impl Default for ChunkWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl ChunkWriter {
    /// An empty chunk.
    pub fn new() -> Self {
        Self::with_value_encoding(ValueEncoding::Xor)
    }

    fn with_value_encoding(value: ValueEncoding) -> Self {
        ChunkWriter {
            enc: Encoder::new(TimeEncoding::DeltaOfDelta { sparse: false }, value),
            exceptions: 0,
        }
    }

    /// Appends a sample. The caller guarantees that `t` is greater than [`max_time`]; a sample
    /// that is not, or one beyond [`MAX_ENCODED_SAMPLES`], is ignored. The head cuts chunks at
    /// [`MAX_SAMPLES_PER_CHUNK`] (see [`is_full`](ChunkWriter::is_full)).
    ///
    /// [`max_time`]: ChunkWriter::max_time
    pub fn append(&mut self, t: i64, v: f64) {
        let count = self.enc.count;
        if usize::from(count) >= MAX_ENCODED_SAMPLES || (count > 0 && t <= self.enc.t_last) {
            return;
        }
        if count == 0 {
            let value = match int::min_decimals(v, 0) {
                Some(k) => int_encoding(k),
                None => ValueEncoding::Xor,
            };
            // keep the bit buffer of a writer that was reset
            let w = std::mem::replace(&mut self.enc.w, BitWriter::new());
            *self = Self::with_value_encoding(value);
            self.enc.w = w;
            let n = int::to_scaled(v, decimals_of(value));
            self.push(t, v, n);
            return;
        }
        let ValueEncoding::Int { decimals: k, .. } = self.enc.value else {
            self.push(t, v, None);
            return;
        };
        if let Some(n) = int::to_scaled(v, k) {
            self.push(t, v, Some(n));
            return;
        }
        // more decimals for all values
        let wider = int::min_decimals(v, k.saturating_add(1)).filter(|&k2| {
            let factor = int::POW10_I[usize::from(k2 - k)];
            self.max_abs_scaled(k)
                .checked_mul(factor)
                .is_some_and(|m| m <= int::MAX_INT)
        });
        if let Some(k2) = wider {
            self.recode(int_encoding(k2));
            if let ValueEncoding::Int { decimals: k2, .. } = self.enc.value {
                if let Some(n) = int::to_scaled(v, k2) {
                    self.push(t, v, Some(n));
                    return;
                }
            }
        }
        // a few special values (staleness markers, NaN) are exceptions; more mean XOR
        if matches!(self.enc.value, ValueEncoding::Int { .. })
            && self.exceptions < MAX_EXCEPTIONS
            && !v.is_finite()
        {
            self.push(t, v, None);
            return;
        }
        self.recode(ValueEncoding::Xor);
        self.push(t, v, None);
    }

    /// Re-codes the samples so far with another value coding; values that a new integer
    /// coding cannot represent become exceptions.
    fn recode(&mut self, value: ValueEncoding) {
        let k = decimals_of(value);
        let first_fits = self
            .iter()
            .next()
            .is_some_and(|(_, v)| int::to_scaled(v, k).is_some());
        let value = if matches!(value, ValueEncoding::Int { .. }) && !first_fits {
            ValueEncoding::Xor
        } else {
            value
        };
        let mut next = Self::with_value_encoding(value);
        for (t, v) in self.iter() {
            next.push(t, v, int::to_scaled(v, k));
        }
        *self = next;
    }

    /// Codes one sample online. `n` is the scaled integer for the integer coding (`None`: an
    /// exception).
    #[inline]
    fn push(&mut self, t: i64, v: f64, n: Option<i64>) {
        let is_int = matches!(self.enc.value, ValueEncoding::Int { .. });
        if is_int && n.is_none() {
            self.exceptions = self.exceptions.saturating_add(1);
        }
        self.enc.push(t, v, n);
    }

    /// The largest `|n|` of the values so far as integers with `k` decimals (exceptions
    /// left out). Decodes the chunk: only needed when a value asks for more decimals, which
    /// happens a few times per chunk at most (the writer keeps no running maximum, 8 bytes
    /// less per open chunk).
    fn max_abs_scaled(&self, k: u8) -> i64 {
        self.iter()
            .filter_map(|(_, v)| int::to_scaled(v, k))
            .fold(0, |m, n| m.max(n.saturating_abs()))
    }

    /// Empties the chunk for the next one but keeps its bit buffer: the next chunk of a series
    /// is usually as large, and growing a fresh buffer again would leave the allocator a trail
    /// of freed small blocks per series.
    pub fn reset(&mut self) {
        let mut w = std::mem::replace(&mut self.enc.w, BitWriter::new());
        w.clear();
        *self = Self::new();
        self.enc.w = w;
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        usize::from(self.enc.count)
    }

    /// Whether no sample was appended.
    pub fn is_empty(&self) -> bool {
        self.enc.count == 0
    }

    /// Whether the chunk holds [`MAX_SAMPLES_PER_CHUNK`] samples (time to cut a new one).
    pub fn is_full(&self) -> bool {
        self.len() >= MAX_SAMPLES_PER_CHUNK
    }

    /// Timestamp of the first sample (`i64::MAX` when empty).
    pub fn min_time(&self) -> i64 {
        if self.is_empty() {
            i64::MAX
        } else {
            self.enc.t0
        }
    }

    /// Timestamp of the last sample (`i64::MIN` when empty).
    pub fn max_time(&self) -> i64 {
        if self.is_empty() {
            i64::MIN
        } else {
            self.enc.t_last
        }
    }

    /// The last sample appended.
    pub fn last(&self) -> Option<(i64, f64)> {
        if self.is_empty() {
            return None;
        }
        // the XOR state holds the last value's bits in every coding (see `Encoder::push_ahead`)
        Some((self.enc.t_last, f64::from_bits(self.enc.xor.prev())))
    }

    /// Iterates the samples appended so far (no allocation per sample).
    pub fn iter(&self) -> SampleIter<'_> {
        self.enc.iter()
    }

    /// The value coding currently used by the open chunk.
    pub fn value_encoding(&self) -> ValueEncoding {
        self.enc.value
    }

    /// The encoded chunk (header, body, crc32) in the smallest coding; self-delimiting.
    pub fn finish(&self) -> Vec<u8> {
        let (ts, vs) = self.decode_all();
        let (time, value, param) = self.cheapest(&ts, &vs);
        self.encode_from(&ts, &vs, time, value, param)
    }

    /// The encoded chunk as coded so far, without re-coding (cheap; for readers of the open
    /// chunk). [`finish`](ChunkWriter::finish) is usually smaller.
    pub fn snapshot(&self) -> Vec<u8> {
        self.enc.to_bytes()
    }

    /// The samples so far, decoded in bulk.
    fn decode_all(&self) -> (Vec<i64>, Vec<f64>) {
        let n = self.len();
        let (mut ts, mut vs) = (Vec::with_capacity(n), Vec::with_capacity(n));
        self.iter().decode_into(&mut ts, &mut vs);
        (ts, vs)
    }

    /// The smallest coding of the samples `ts`, `vs` (this chunk's, decoded): every
    /// timestamp and value coding is priced over the whole chunk at once (pricing while
    /// appending would cost every open chunk ~140 bytes of trackers).
    /// With one Rice parameter for the values, its value comes along.
    fn cheapest(&self, ts: &[i64], vs: &[f64]) -> (TimeEncoding, ValueEncoding, Option<u32>) {
        let (ts_delta, ts_dod, ts_grid) = time_costs(ts);
        let first = vs.first().map_or(0, |v| v.to_bits());
        let v_const = vs.iter().all(|v| v.to_bits() == first);
        let time = if ts.len() <= 2 || ts_delta.all_zero() {
            TimeEncoding::Regular
        } else {
            let (db, ds) = ts_delta.best();
            let (ddb, dds) = ts_dod.best();
            let (gb, gs) = ts_grid.best();
            if gb < db && gb < ddb {
                TimeEncoding::Grid { sparse: gs }
            } else if db < ddb {
                TimeEncoding::Delta { sparse: ds }
            } else {
                TimeEncoding::DeltaOfDelta { sparse: dds }
            }
        };
        let mut param = None;
        let value = if v_const {
            ValueEncoding::Const
        } else {
            match self.enc.value {
                ValueEncoding::Int { decimals, .. } => {
                    let c = int_costs(vs, decimals);
                    let int = |delta_of_delta, sparse, fixed_k| ValueEncoding::Int {
                        decimals,
                        delta_of_delta,
                        no_bits: false,
                        sparse,
                        fixed_k,
                    };
                    let (int_bits, int) = if c.dod.all_zero() {
                        (
                            0,
                            ValueEncoding::Int {
                                decimals,
                                delta_of_delta: true,
                                no_bits: true,
                                sparse: false,
                                fixed_k: false,
                            },
                        )
                    } else {
                        let (db, ds) = c.delta.best();
                        let (ddb, dds) = c.dod.best();
                        let (dod, adaptive_bits, sparse) = if db < ddb {
                            (false, db, ds)
                        } else {
                            (true, ddb, dds)
                        };
                        // one parameter for the same residuals, priced only for the order
                        // the adaptive coders prefer (pricing both costs the writer ~10 %);
                        // on a tie the one parameter (fastest to decode)
                        let (k, fixed_bits) = c.fixed(dod);
                        if fixed_bits <= adaptive_bits {
                            param = Some(k);
                            (fixed_bits, int(dod, false, true))
                        } else {
                            (adaptive_bits, int(dod, sparse, false))
                        }
                    };
                    if u64::from(c.xor_bits) < int_bits {
                        param = None;
                        ValueEncoding::Xor
                    } else {
                        int
                    }
                }
                other => other,
            }
        };
        (time, value, param)
    }

    /// The encoded chunk in a chosen coding; `None` when `policy` is [`EncodePolicy::Int`] and
    /// a value is not an integer with at most 9 decimals.
    pub fn finish_with(&self, policy: EncodePolicy) -> Option<Vec<u8>> {
        match policy {
            EncodePolicy::Auto => Some(self.finish()),
            EncodePolicy::Xor => Some(self.encode_as(
                TimeEncoding::DeltaOfDelta { sparse: false },
                ValueEncoding::Xor,
            )),
            EncodePolicy::Int | EncodePolicy::IntFixedRice => {
                let decimals = match self.enc.value {
                    ValueEncoding::Int { decimals, .. } => decimals,
                    _ if self.is_empty() => 0,
                    _ => return None,
                };
                Some(self.encode_as(
                    TimeEncoding::DeltaOfDelta { sparse: false },
                    ValueEncoding::Int {
                        decimals,
                        delta_of_delta: true,
                        no_bits: false,
                        sparse: false,
                        fixed_k: policy == EncodePolicy::IntFixedRice,
                    },
                ))
            }
        }
    }

    fn encode_as(&self, time: TimeEncoding, value: ValueEncoding) -> Vec<u8> {
        if time == self.enc.time && value == self.enc.value {
            return self.enc.to_bytes();
        }
        let (ts, vs) = self.decode_all();
        self.encode_from(&ts, &vs, time, value, None)
    }

    /// Codes this chunk's samples `ts`, `vs` (decoded) with the given codings; `param` is the
    /// one Rice parameter of the values when already chosen.
    fn encode_from(
        &self,
        ts: &[i64],
        vs: &[f64],
        time: TimeEncoding,
        value: ValueEncoding,
        param: Option<u32>,
    ) -> Vec<u8> {
        if time == self.enc.time && value == self.enc.value {
            return self.enc.to_bytes();
        }
        let mut e = Encoder::new(time, value);
        if let (Some(p), ResCoder::Fixed(_)) = (param, e.v_coder) {
            e.v_coder = ResCoder::Fixed(FixedRice::with_param(p));
        }
        let k = decimals_of(value);
        let is_int = matches!(value, ValueEncoding::Int { .. });
        let n = ts.len();
        let ns: Vec<Option<i64>> = if is_int {
            vs.iter().map(|&v| int::to_scaled(v, k)).collect()
        } else {
            Vec::new()
        };
        let scaled = |i: usize| ns.get(i).copied().flatten();
        let (mut ts_ahead, mut v_ahead) = (Vec::new(), Vec::new());
        if time_sparse(time) || value_sparse(value) || (value_fixed(value) && param.is_none()) {
            // the run-length coding writes a run's length where it starts: collect residuals
            let dod_t = matches!(time, TimeEncoding::DeltaOfDelta { .. });
            let grid_t = matches!(time, TimeEncoding::Grid { .. });
            let t0 = ts.first().copied().unwrap_or(0);
            let dod_v = matches!(
                value,
                ValueEncoding::Int {
                    delta_of_delta: true,
                    ..
                }
            );
            ts_ahead.reserve(n);
            v_ahead.reserve(n);
            let (mut prev_t, mut delta1, mut delta_prev, mut n_prev, mut d_prev) = (0, 0, 0, 0, 0);
            for (i, &t) in ts.iter().enumerate() {
                if i >= 1 {
                    let delta = t.wrapping_sub(prev_t);
                    if i == 1 {
                        delta1 = delta;
                    } else if grid_t {
                        let i = u16::try_from(i).unwrap_or(u16::MAX);
                        ts_ahead.push(zigzag(grid_offset(t, t0, i, delta1)));
                    } else {
                        let base = if dod_t { delta_prev } else { delta1 };
                        ts_ahead.push(zigzag(delta.wrapping_sub(base)));
                    }
                    delta_prev = delta;
                }
                prev_t = t;
                match scaled(i) {
                    Some(n) => {
                        if i >= 1 {
                            let d = n.wrapping_sub(n_prev);
                            v_ahead.push(zigzag(if dod_v { d.wrapping_sub(d_prev) } else { d }));
                            d_prev = d;
                        }
                        n_prev = n;
                    }
                    None => v_ahead.push(EXCEPTION),
                }
            }
        }
        for (i, (&t, &v)) in ts.iter().zip(vs).enumerate() {
            e.push_ahead(t, v, scaled(i), &ts_ahead, &v_ahead);
        }
        e.to_bytes()
    }

    #[doc(hidden)]
    pub fn debug_sizes() -> [usize; 5] {
        [
            std::mem::size_of::<Self>(),
            std::mem::size_of::<Encoder>(),
            std::mem::size_of::<StreamCost>(),
            std::mem::size_of::<ResCoder>(),
            std::mem::size_of::<XorState>(),
        ]
    }

    /// Heap memory held (the bit buffer's capacity), for head-memory accounting. The writer
    /// itself is `size_of::<ChunkWriter>()` bytes inline.
    pub fn heap_bytes(&self) -> usize {
        self.enc.w.heap_bytes()
    }

    /// The address the next sample's bits go to, for a caller that prefetches it before
    /// appending to many cold chunks (the bit buffer is a heap block of its own).
    pub fn tail_addr(&self) -> *const u8 {
        self.enc.w.tail_addr()
    }
}

/// Prices the timestamp residual streams of `ts`: deltas against the first delta, deltas of
/// deltas, offsets from the grid (the residuals of samples 2..).
fn time_costs(ts: &[i64]) -> (StreamCost, StreamCost, StreamCost) {
    let (mut delta, mut dod, mut grid) = (StreamCost::new(), StreamCost::new(), StreamCost::new());
    if let [t0, t1, ..] = *ts {
        let delta1 = t1.wrapping_sub(t0);
        let mut prev = delta1;
        for (i, w) in ts.windows(2).enumerate().skip(1) {
            let d = w[1].wrapping_sub(w[0]);
            delta.add(zigzag(d.wrapping_sub(delta1)));
            dod.add(zigzag(d.wrapping_sub(prev)));
            let i = u16::try_from(i + 1).unwrap_or(u16::MAX);
            grid.add(zigzag(grid_offset(w[1], t0, i, delta1)));
            prev = d;
        }
    }
    (delta, dod, grid)
}

/// The prices of a chunk's integer value streams (see [`int_costs`]).
struct IntCosts {
    /// Deltas, adaptive Rice and run-length coded.
    delta: StreamCost,
    /// Deltas of deltas, adaptive Rice and run-length coded.
    dod: StreamCost,
    /// The XOR coding's bits.
    xor_bits: u32,
    /// The residuals: deltas, deltas of deltas ([`EXCEPTION`] for exceptions).
    zd: Vec<u64>,
    zdd: Vec<u64>,
    exceptions: u64,
}

impl IntCosts {
    /// The parameter and bits of the deltas (or, with `dod`, the deltas of deltas) Rice coded
    /// with one parameter ([`FixedRice`]), exceptions' raw values included.
    fn fixed(&self, dod: bool) -> (u32, u64) {
        let (k, bits) = FixedRice::choose(if dod { &self.zdd } else { &self.zd });
        (k, bits + 64 * self.exceptions)
    }
}

/// Prices the value streams of `vs` for an integer coding with `k` decimals (values it cannot
/// represent are exceptions): deltas and deltas of deltas in every residual coding, and the
/// XOR coding's bits.
fn int_costs(vs: &[f64], k: u8) -> IntCosts {
    let (mut delta, mut dod) = (StreamCost::new(), StreamCost::new());
    let Some((&first, rest)) = vs.split_first() else {
        return IntCosts {
            delta,
            dod,
            xor_bits: 0,
            zd: Vec::new(),
            zdd: Vec::new(),
            exceptions: 0,
        };
    };
    let (mut zd, mut zdd) = (
        Vec::with_capacity(rest.len()),
        Vec::with_capacity(rest.len()),
    );
    let mut exceptions = 0u64;
    let mut xor = XorState::new(first.to_bits());
    let mut xor_bits = 0u32;
    let (mut n_prev, mut d_prev) = (int::to_scaled(first, k).unwrap_or(0), 0i64);
    for &v in rest {
        let b = xor.encode(v.to_bits(), &mut bitstream::BitCounter(0));
        xor_bits = xor_bits.saturating_add(b);
        match int::to_scaled(v, k) {
            Some(n) => {
                let d = n.wrapping_sub(n_prev);
                let (a, b) = (zigzag(d), zigzag(d.wrapping_sub(d_prev)));
                delta.add(a);
                dod.add(b);
                zd.push(a);
                zdd.push(b);
                d_prev = d;
                n_prev = n;
            }
            None => {
                delta.add_exception();
                dod.add_exception();
                zd.push(EXCEPTION);
                zdd.push(EXCEPTION);
                exceptions += 1;
            }
        }
    }
    IntCosts {
        delta,
        dod,
        xor_bits,
        zd,
        zdd,
        exceptions,
    }
}

/// How many values an integer-coded chunk may hold as raw exceptions before it turns to XOR.
const MAX_EXCEPTIONS: u8 = 4;

fn int_encoding(decimals: u8) -> ValueEncoding {
    ValueEncoding::Int {
        decimals,
        delta_of_delta: true,
        no_bits: false,
        sparse: false,
        fixed_k: false,
    }
}

fn decimals_of(v: ValueEncoding) -> u8 {
    match v {
        ValueEncoding::Int { decimals, .. } => decimals,
        _ => 0,
    }
}

/// A parsed header.
struct Parsed {
    time: TimeEncoding,
    value: ValueEncoding,
    count: u16,
    body_start: usize,
    body_end: usize,
    total: usize,
}

#[inline]
fn parse_header(bytes: &[u8]) -> Result<Parsed, Error> {
    let b0 = *bytes.first().ok_or_else(|| corrupt(0, "empty chunk"))?;
    if b0 & KIND_RESERVED != 0 {
        return Err(corrupt(0, format!("unknown chunk encoding byte {b0:#04x}")));
    }
    let sparse = b0 & TS_SPARSE != 0;
    let time = match (b0 & TS_DELTA != 0, b0 & TS_REGULAR != 0) {
        (false, false) => TimeEncoding::DeltaOfDelta { sparse },
        (true, false) => TimeEncoding::Delta { sparse },
        (false, true) if !sparse => TimeEncoding::Regular,
        (true, true) => TimeEncoding::Grid { sparse },
        _ => return Err(corrupt(0, format!("conflicting timestamp flags {b0:#04x}"))),
    };
    let mut pos = 1;
    let value = match b0 & KIND_MASK {
        KIND_XOR => ValueEncoding::Xor,
        KIND_CONST => ValueEncoding::Const,
        KIND_INT => {
            let b1 = *bytes
                .get(1)
                .ok_or_else(|| corrupt(1, "truncated chunk header"))?;
            pos = 2;
            let decimals = b1 & INT_DEC_MASK;
            let fixed_k = b1 & INT_FIXED != 0;
            if decimals > int::MAX_DECIMALS || (fixed_k && b1 & (INT_NO_BITS | INT_SPARSE) != 0) {
                return Err(corrupt(1, format!("bad integer parameters {b1:#04x}")));
            }
            ValueEncoding::Int {
                decimals,
                delta_of_delta: b1 & INT_DELTA == 0,
                no_bits: b1 & INT_NO_BITS != 0,
                sparse: b1 & INT_SPARSE != 0,
                fixed_k,
            }
        }
        _ => return Err(corrupt(0, format!("unknown value encoding {b0:#04x}"))),
    };
    let at = pos;
    let count = get_uvarint(bytes, &mut pos).map_err(|_| corrupt(at, "bad sample count"))?;
    let count =
        u16::try_from(count).map_err(|_| corrupt(at, format!("sample count {count} too large")))?;
    let at = pos;
    let body_len = get_uvarint(bytes, &mut pos).map_err(|_| corrupt(at, "bad body length"))?;
    let body_end = usize::try_from(body_len)
        .ok()
        .and_then(|l| pos.checked_add(l))
        .ok_or_else(|| corrupt(at, format!("body length {body_len} too large")))?;
    let total = body_end
        .checked_add(4)
        .ok_or_else(|| corrupt(at, "body length too large"))?;
    if total > bytes.len() {
        return Err(corrupt(
            at,
            format!("chunk of {total} bytes truncated to {} bytes", bytes.len()),
        ));
    }
    if count == 0 && body_end != pos {
        return Err(corrupt(at, "empty chunk with a body"));
    }
    Ok(Parsed {
        time,
        value,
        count,
        body_start: pos,
        body_end,
        total,
    })
}

/// The length in bytes of the chunk at the start of `bytes` (header, body and checksum), from
/// its header alone; the checksum is not verified.
pub fn encoded_len(bytes: &[u8]) -> Result<usize, Error> {
    parse_header(bytes).map(|p| p.total)
}

/// The header of the chunk at the start of `bytes`, after verifying its checksum.
pub fn header(bytes: &[u8]) -> Result<ChunkHeader, Error> {
    let p = parse_header(bytes)?;
    verify_crc(bytes, &p)?;
    Ok(ChunkHeader {
        time: p.time,
        value: p.value,
        num_samples: p.count,
        len: p.total,
    })
}

#[inline]
fn verify_crc(bytes: &[u8], p: &Parsed) -> Result<(), Error> {
    let (data, rest) = bytes.split_at(p.body_end.min(bytes.len()));
    let stored = rest
        .get(..4)
        .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
        .ok_or_else(|| corrupt(p.body_end, "missing checksum"))?;
    let actual = crc32fast::hash(data);
    if stored != actual {
        return Err(corrupt(
            p.body_end,
            format!("checksum mismatch: stored {stored:#010x}, computed {actual:#010x}"),
        ));
    }
    Ok(())
}

/// Opens the chunk at the start of `bytes` (which may extend past it) for iteration, after
/// verifying header and checksum. Errors in the bit stream itself (only possible if the
/// checksum matched by chance) end the iteration and are reported by [`SampleIter::err`].
#[inline]
pub fn decode(bytes: &[u8]) -> Result<SampleIter<'_>, Error> {
    let p = parse_header(bytes)?;
    verify_crc(bytes, &p)?;
    open_body(bytes, &p)
}

/// Like [`decode`] but without verifying the checksum: exercises the bit-stream decoder on
/// arbitrary input (fuzzing). Never panics.
#[doc(hidden)]
pub fn decode_unverified(bytes: &[u8]) -> Result<SampleIter<'_>, Error> {
    let p = parse_header(bytes)?;
    open_body(bytes, &p)
}

/// The body of the `chunk_decode` fuzz target, shared with the corpus replay test:
/// `data` goes through [`encoded_len`], [`meta`], [`decode`] and [`decode_unverified`] (each
/// iterated to the end), which must return errors, never panic; then `data` is read as
/// samples (12 bytes each: a little-endian `u32` gap, forced positive, and `u64` value bits)
/// that must round-trip bit-exactly through [`ChunkWriter`] in every coding (panics if not:
/// that is a bug the fuzzer reports).
#[doc(hidden)]
pub fn fuzz_decode(data: &[u8]) {
    let _ = encoded_len(data);
    let _ = meta(data);
    if let Ok(mut it) = decode(data) {
        for _ in it.by_ref() {}
    }
    if let Ok(mut it) = decode_unverified(data) {
        let mut prev = i64::MIN;
        let mut first = true;
        for (t, _) in it.by_ref() {
            assert!(
                first || t > prev,
                "decoder yielded non-increasing timestamps"
            );
            first = false;
            prev = t;
        }
        let _ = it.seek(i64::MAX);
    }
    // bulk decoding yields exactly what iteration yields, errors included
    if let (Ok(mut a), Ok(mut b)) = (decode_unverified(data), decode_unverified(data)) {
        let want: Vec<(i64, u64)> = a.by_ref().map(|(t, v)| (t, v.to_bits())).collect();
        let (mut ts, mut vs) = (Vec::new(), Vec::new());
        let n = b.decode_into(&mut ts, &mut vs);
        let got: Vec<(i64, u64)> = ts.iter().zip(&vs).map(|(&t, v)| (t, v.to_bits())).collect();
        assert_eq!(n, got.len());
        assert_eq!(got, want, "decode_into differs from iteration");
        assert_eq!(
            a.err().map(|e| e.to_string()),
            b.err().map(|e| e.to_string()),
            "decode_into reports another error"
        );
    }
    // round trip of the bytes read as samples
    let mut w = ChunkWriter::new();
    let mut t: i64 = 1_796_198_400_000;
    let mut want = [(0i64, 0u64); MAX_SAMPLES_PER_CHUNK];
    let mut n = 0;
    for rec in data.chunks_exact(12).take(MAX_SAMPLES_PER_CHUNK) {
        let gap = u32::from_le_bytes([rec[0], rec[1], rec[2], rec[3]]);
        let bits = u64::from_le_bytes([
            rec[4], rec[5], rec[6], rec[7], rec[8], rec[9], rec[10], rec[11],
        ]);
        t = match t.checked_add(i64::from(gap.max(1))) {
            Some(t) => t,
            None => break,
        };
        w.append(t, f64::from_bits(bits));
        want[n] = (t, bits);
        n += 1;
    }
    let want = &want[..n];
    let same = |it: &mut SampleIter<'_>| {
        let mut i = 0;
        for (t, v) in it.by_ref() {
            assert_eq!(Some(&(t, v.to_bits())), want.get(i), "sample {i} differs");
            i += 1;
        }
        assert!(it.err().is_none(), "{:?}", it.err());
        assert_eq!(i, want.len());
    };
    same(&mut w.iter());
    for policy in [
        EncodePolicy::Auto,
        EncodePolicy::Xor,
        EncodePolicy::Int,
        EncodePolicy::IntFixedRice,
    ] {
        if let Some(bytes) = w.finish_with(policy) {
            match decode(&bytes) {
                Ok(mut it) => same(&mut it),
                Err(e) => panic!("own chunk does not decode: {e}"),
            }
        }
    }
}

#[inline]
fn open_body<'a>(bytes: &'a [u8], p: &Parsed) -> Result<SampleIter<'a>, Error> {
    let body = bytes
        .get(p.body_start..p.body_end)
        .ok_or_else(|| corrupt(p.body_start, "truncated body"))?;
    let mut pos = 0;
    let (mut t0, mut delta1, mut first) = (0i64, 0i64, 0u64);
    if p.count > 0 {
        t0 = get_uvarint(body, &mut pos)
            .map(unzigzag)
            .map_err(|_| corrupt(p.body_start + pos, "bad first timestamp"))?;
        if p.count >= 2 {
            delta1 = get_uvarint(body, &mut pos)
                .map(unzigzag)
                .map_err(|_| corrupt(p.body_start + pos, "bad first delta"))?;
            if delta1 <= 0 {
                return Err(corrupt(
                    p.body_start + pos,
                    format!("first delta {delta1} not positive"),
                ));
            }
        }
        first = get_uvarint(body, &mut pos)
            .map_err(|_| corrupt(p.body_start + pos, "bad first value"))?;
    }
    let bits = &body[pos.min(body.len())..];
    Ok(SampleIter::new(
        p.time,
        p.value,
        p.count,
        t0,
        delta1,
        first,
        BitReader::new(bits, (bits.len() as u64).saturating_mul(8)),
        (p.body_start + pos) as u64,
    ))
}

/// Time range and sample count of the chunk at the start of `bytes` (verifies the checksum and
/// decodes the chunk).
pub fn meta(bytes: &[u8]) -> Result<ChunkMeta, Error> {
    let mut it = decode(bytes)?;
    let num_samples = it.count;
    let mut min_time = i64::MAX;
    let mut max_time = i64::MIN;
    if let Some((t, _)) = it.next() {
        min_time = t;
        max_time = t;
    }
    if it.time == TimeEncoding::Regular && num_samples >= 2 {
        // no need to decode: t0 + (n - 1) * delta
        max_time = i64::from(num_samples - 1)
            .checked_mul(it.delta1)
            .and_then(|x| x.checked_add(min_time))
            .ok_or_else(|| corrupt(0, "timestamps overflow"))?;
    } else {
        for (t, _) in it.by_ref() {
            max_time = t;
        }
        if let Some(e) = it.err.take() {
            return Err(e);
        }
    }
    Ok(ChunkMeta {
        min_time,
        max_time,
        num_samples,
    })
}

/// Iterator over a chunk's samples `(timestamp ms, value)`, decoding as it goes without
/// allocating. Corrupt data ends the iteration early; check [`err`](SampleIter::err).
#[derive(Debug)]
pub struct SampleIter<'a> {
    r: BitReader<'a>,
    time: TimeEncoding,
    value: ValueEncoding,
    count: u16,
    idx: u16,
    t: i64,
    v: f64,
    delta1: i64,
    delta: i64,
    n: i64,
    d: i64,
    t0: i64,
    first: u64,
    ts_coder: ResCoder,
    v_coder: ResCoder,
    xor: XorState,
    base_offset: u64,
    checked_end: bool,
    /// The CPU has `lzcnt`, BMI1 and BMI2 (set by `bulk_dispatch` after checking).
    fast_cpu: bool,
    err: Option<Error>,
}

impl<'a> SampleIter<'a> {
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn new(
        time: TimeEncoding,
        value: ValueEncoding,
        count: u16,
        t0: i64,
        delta1: i64,
        first: u64,
        r: BitReader<'a>,
        base_offset: u64,
    ) -> Self {
        SampleIter {
            r,
            time,
            value,
            count,
            idx: 0,
            t: 0,
            v: 0.0,
            delta1,
            delta: delta1,
            n: 0,
            d: 0,
            t0,
            first,
            ts_coder: ResCoder::new(time_sparse(time), false),
            v_coder: ResCoder::new(value_sparse(value), value_fixed(value)),
            xor: XorState::default(),
            base_offset,
            checked_end: false,
            fast_cpu: false,
            err: None,
        }
    }

    /// The decoding error that ended the iteration early, if any.
    pub fn err(&self) -> Option<&Error> {
        self.err.as_ref()
    }

    /// Takes the decoding error out of the iterator.
    pub fn take_err(&mut self) -> Option<Error> {
        self.err.take()
    }

    /// Number of samples in the chunk.
    pub fn num_samples(&self) -> u16 {
        self.count
    }

    /// The sample returned last by `next` or `seek`.
    pub fn at(&self) -> Option<(i64, f64)> {
        (self.idx > 0 && self.err.is_none()).then_some((self.t, self.v))
    }

    /// Advances to the first sample with timestamp `>= t` and returns it; the following `next`
    /// returns the sample after it. If the sample returned last already satisfies that, it is
    /// returned again without moving (seeking never goes backwards). `None` when no such
    /// sample is left (or the data is corrupt, see [`err`](SampleIter::err)).
    pub fn seek(&mut self, t: i64) -> Option<(i64, f64)> {
        if self.idx > 0 && self.err.is_none() && self.t >= t {
            return Some((self.t, self.v));
        }
        self.by_ref().find(|s| s.0 >= t)
    }

    #[cold]
    fn fail(&mut self, reason: &str) -> Option<(i64, f64)> {
        let offset = self.base_offset + self.r.pos() / 8;
        self.err = Some(Error::corrupt("chunk", "", offset, reason));
        self.idx = self.count;
        self.checked_end = true;
        None
    }

    /// Returns the first sample (`idx == 0`) and moves past it; it takes no bits.
    #[inline]
    fn first_sample(&mut self) -> (i64, f64) {
        self.t = self.t0;
        match self.value {
            ValueEncoding::Int { decimals, .. } => {
                self.n = unzigzag(self.first);
                self.v = int::from_scaled(self.n, decimals);
            }
            _ => {
                let bits = self.first.swap_bytes();
                self.xor = XorState::new(bits);
                self.v = f64::from_bits(bits);
            }
        }
        self.idx = 1;
        (self.t, self.v)
    }

    #[cold]
    fn check_end(&mut self) -> Option<(i64, f64)> {
        if !self.checked_end {
            self.checked_end = true;
            if self.r.overrun() {
                return self.fail("bit stream ends early");
            }
            if self.r.remaining() >= 8 {
                return self.fail("trailing bytes after the last sample");
            }
        }
        None
    }
}

impl Iterator for SampleIter<'_> {
    type Item = (i64, f64);

    #[inline]
    fn next(&mut self) -> Option<(i64, f64)> {
        if self.idx >= self.count {
            return self.check_end();
        }
        if self.idx == 0 {
            return Some(self.first_sample());
        }
        let delta = if self.idx == 1 {
            self.delta1
        } else {
            match self.time {
                TimeEncoding::Regular => self.delta1,
                TimeEncoding::Delta { .. } => self
                    .delta1
                    .wrapping_add(unzigzag(self.ts_coder.decode(&mut self.r))),
                TimeEncoding::DeltaOfDelta { .. } => self
                    .delta
                    .wrapping_add(unzigzag(self.ts_coder.decode(&mut self.r))),
                TimeEncoding::Grid { .. } => {
                    let off = unzigzag(self.ts_coder.decode(&mut self.r));
                    let t = self
                        .t0
                        .wrapping_add(i64::from(self.idx).wrapping_mul(self.delta1))
                        .wrapping_add(off);
                    t.wrapping_sub(self.t)
                }
            }
        };
        self.delta = delta;
        let t = self.t.wrapping_add(delta);
        if t <= self.t {
            return self.fail("timestamps not increasing");
        }
        self.t = t;
        match self.value {
            ValueEncoding::Const => {}
            ValueEncoding::Xor => self.v = f64::from_bits(self.xor.decode(&mut self.r)),
            ValueEncoding::Int {
                decimals,
                delta_of_delta,
                no_bits,
                ..
            } => {
                let z = if no_bits {
                    0
                } else {
                    self.v_coder.decode(&mut self.r)
                };
                if z == EXCEPTION {
                    self.v = f64::from_bits(self.r.read_long(64));
                } else {
                    let r = unzigzag(z);
                    if delta_of_delta {
                        self.d = self.d.wrapping_add(r);
                        self.n = self.n.wrapping_add(self.d);
                    } else {
                        self.n = self.n.wrapping_add(r);
                    }
                    self.v = int::from_scaled(self.n, decimals);
                }
            }
        }
        if self.r.overrun() {
            return self.fail("bit stream ends early");
        }
        self.idx += 1;
        Some((self.t, self.v))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = usize::from(self.count.saturating_sub(self.idx));
        (0, Some(left))
    }
}

/// A residual decoder with a fixed coding (monomorphised bulk decoding).
trait ResDec: Copy {
    fn dec(&mut self, r: &mut BitReader<'_>) -> u64;

    /// Zero residuals that come next without reading bits (run-length coding only).
    #[inline(always)]
    fn zeros(&self) -> u32 {
        0
    }

    /// Consumes `n <= zeros()` of them.
    #[inline(always)]
    fn take_zeros(&mut self, _n: u32) {}

    /// Whether [`dec_word`](ResDec::dec_word) can decode.
    const WORD: bool = false;

    /// Decodes a residual from the top `avail` bits of `word` if its code lies within them:
    /// `(residual, bits used)` (see [`Rice::decode_word`]).
    #[inline(always)]
    fn dec_word(&mut self, _word: u64, _avail: u32) -> Option<(u64, u32)> {
        None
    }

    /// The Rice parameter of a one-parameter coder once it is known (after the first code).
    #[inline(always)]
    fn fixed_k(&self) -> Option<u32> {
        None
    }
}

impl ResDec for Rice {
    #[inline(always)]
    fn dec(&mut self, r: &mut BitReader<'_>) -> u64 {
        self.decode(r)
    }

    const WORD: bool = true;

    #[inline(always)]
    fn dec_word(&mut self, word: u64, avail: u32) -> Option<(u64, u32)> {
        self.decode_word(word, avail)
    }
}

impl ResDec for FixedRice {
    #[inline(always)]
    fn dec(&mut self, r: &mut BitReader<'_>) -> u64 {
        self.decode(r)
    }

    const WORD: bool = true;

    #[inline(always)]
    fn dec_word(&mut self, word: u64, avail: u32) -> Option<(u64, u32)> {
        self.decode_word(word, avail)
    }

    #[inline(always)]
    fn fixed_k(&self) -> Option<u32> {
        self.param()
    }
}

impl ResDec for Sparse {
    #[inline(always)]
    fn dec(&mut self, r: &mut BitReader<'_>) -> u64 {
        self.decode(r)
    }

    #[inline(always)]
    fn zeros(&self) -> u32 {
        self.pending_zeros()
    }

    #[inline(always)]
    fn take_zeros(&mut self, n: u32) {
        Sparse::take_zeros(self, n)
    }
}

/// Timestamp decoding for samples 2.. of a chunk with one coding.
trait TimeDec {
    /// The timestamp of sample `idx`, given the previous one `t`.
    fn step(&mut self, r: &mut BitReader<'_>, t: i64) -> i64;

    /// How many of the next samples have timestamps that take no bits (a run of zero
    /// residuals, or every sample of a regular chunk): with `(first, step) = run_start(t)`
    /// they are `first, first + step, ...` (wrapping).
    #[inline(always)]
    fn run(&self) -> u32 {
        0
    }

    /// The first timestamp of a run after timestamp `t`, and the step.
    #[inline(always)]
    fn run_start(&self, t: i64) -> (i64, i64) {
        (t, 0)
    }

    /// Consumes `n <= run()` samples of the run.
    #[inline(always)]
    fn take_run(&mut self, _n: u32) {}
}

struct TRegular {
    delta1: i64,
}

impl TimeDec for TRegular {
    #[inline(always)]
    fn step(&mut self, _r: &mut BitReader<'_>, t: i64) -> i64 {
        t.wrapping_add(self.delta1)
    }

    #[inline(always)]
    fn run(&self) -> u32 {
        u32::MAX
    }

    #[inline(always)]
    fn run_start(&self, t: i64) -> (i64, i64) {
        (t.wrapping_add(self.delta1), self.delta1)
    }
}

struct TDelta<C> {
    delta1: i64,
    c: C,
}

impl<C: ResDec> TimeDec for TDelta<C> {
    #[inline(always)]
    fn step(&mut self, r: &mut BitReader<'_>, t: i64) -> i64 {
        t.wrapping_add(self.delta1.wrapping_add(unzigzag(self.c.dec(r))))
    }

    #[inline(always)]
    fn run(&self) -> u32 {
        self.c.zeros()
    }

    #[inline(always)]
    fn run_start(&self, t: i64) -> (i64, i64) {
        (t.wrapping_add(self.delta1), self.delta1)
    }

    #[inline(always)]
    fn take_run(&mut self, n: u32) {
        self.c.take_zeros(n)
    }
}

struct TDod<C> {
    delta: i64,
    c: C,
}

impl<C: ResDec> TimeDec for TDod<C> {
    #[inline(always)]
    fn step(&mut self, r: &mut BitReader<'_>, t: i64) -> i64 {
        self.delta = self.delta.wrapping_add(unzigzag(self.c.dec(r)));
        t.wrapping_add(self.delta)
    }

    #[inline(always)]
    fn run(&self) -> u32 {
        self.c.zeros()
    }

    #[inline(always)]
    fn run_start(&self, t: i64) -> (i64, i64) {
        (t.wrapping_add(self.delta), self.delta)
    }

    #[inline(always)]
    fn take_run(&mut self, n: u32) {
        self.c.take_zeros(n)
    }
}

struct TGrid<C> {
    /// The grid point of the next sample.
    grid: i64,
    delta1: i64,
    c: C,
}

impl<C: ResDec> TimeDec for TGrid<C> {
    #[inline(always)]
    fn step(&mut self, r: &mut BitReader<'_>, _t: i64) -> i64 {
        let t = self.grid.wrapping_add(unzigzag(self.c.dec(r)));
        self.grid = self.grid.wrapping_add(self.delta1);
        t
    }

    #[inline(always)]
    fn run(&self) -> u32 {
        self.c.zeros()
    }

    #[inline(always)]
    fn run_start(&self, _t: i64) -> (i64, i64) {
        (self.grid, self.delta1)
    }

    #[inline(always)]
    fn take_run(&mut self, n: u32) {
        self.c.take_zeros(n);
        self.grid = self
            .grid
            .wrapping_add(i64::from(n).wrapping_mul(self.delta1));
    }
}

/// Value decoding for samples 1.. of a chunk with one coding.
trait ValueDec {
    fn step(&mut self, r: &mut BitReader<'_>) -> f64;

    /// Decodes values into `out` until it is full or the stream overruns; returns how many
    /// were decoded (the value that overran not counted; the reader is left after it) and
    /// sets `last` to the last one.
    #[inline(always)]
    fn fill(&mut self, r: &mut BitReader<'_>, out: &mut [f64], last: &mut f64) -> usize {
        for (j, o) in out.iter_mut().enumerate() {
            let v = self.step(r);
            if r.overrun() {
                return j;
            }
            *o = v;
            *last = v;
        }
        out.len()
    }
}

struct VConst(f64);

impl ValueDec for VConst {
    #[inline(always)]
    fn step(&mut self, _r: &mut BitReader<'_>) -> f64 {
        self.0
    }

    #[inline(always)]
    fn fill(&mut self, _r: &mut BitReader<'_>, out: &mut [f64], last: &mut f64) -> usize {
        out.fill(self.0);
        if !out.is_empty() {
            *last = self.0;
        }
        out.len()
    }
}

struct VXor(XorState);

impl ValueDec for VXor {
    #[inline(always)]
    fn step(&mut self, r: &mut BitReader<'_>) -> f64 {
        f64::from_bits(self.0.decode(r))
    }
}

/// The residual "decoder" of integer chunks without value bits: every residual is zero.
#[derive(Clone, Copy)]
struct NoBits;

impl ResDec for NoBits {
    #[inline(always)]
    fn dec(&mut self, _r: &mut BitReader<'_>) -> u64 {
        0
    }
}

/// Scaled integers coded as deltas of deltas (`DOD`) or deltas.
struct VInt<C, const DOD: bool> {
    c: C,
    n: i64,
    d: i64,
    decimals: u8,
    /// Runs of one-parameter codes may use the loop compiled for `lzcnt`/BMI2 (checked).
    fast_cpu: bool,
}

impl<C: ResDec, const DOD: bool> VInt<C, DOD> {
    /// The value after residual `z` (not an exception).
    #[inline(always)]
    fn apply(&mut self, z: u64) -> f64 {
        let x = unzigzag(z);
        if DOD {
            self.d = self.d.wrapping_add(x);
            self.n = self.n.wrapping_add(self.d);
        } else {
            self.n = self.n.wrapping_add(x);
        }
        int::from_scaled(self.n, self.decimals)
    }
}

impl<C: ResDec, const DOD: bool> ValueDec for VInt<C, DOD> {
    #[inline(always)]
    fn step(&mut self, r: &mut BitReader<'_>) -> f64 {
        let z = self.c.dec(r);
        if z == EXCEPTION {
            return f64::from_bits(r.read_long(64));
        }
        self.apply(z)
    }

    /// With a Rice coder: codes are taken from a 64-bit word read ahead, which is shifted
    /// as they are used, so the next code's position does not wait for a memory load; the
    /// word is read again when fewer bits than a typical code are left, and codes that do
    /// not fit it (escapes, exceptions, long codes) go through [`step`](ValueDec::step).
    #[inline(always)]
    fn fill(&mut self, r: &mut BitReader<'_>, out: &mut [f64], last: &mut f64) -> usize {
        if let Some(k) = self.c.fixed_k() {
            let got = self.fill_fixed_dispatch(k, r, out);
            if let Some(&v) = got.checked_sub(1).and_then(|i| out.get(i)) {
                *last = v;
            }
            return got;
        }
        if !C::WORD {
            for (j, o) in out.iter_mut().enumerate() {
                let v = self.step(r);
                if r.overrun() {
                    return j;
                }
                *o = v;
                *last = v;
            }
            return out.len();
        }
        let end = r.end();
        let mut pos = r.pos();
        let mut word = r.peek();
        let mut avail = 57u32;
        for (j, o) in out.iter_mut().enumerate() {
            if avail < 32 {
                r.set_pos(pos);
                word = r.peek();
                avail = 57;
            }
            let v = match self.c.dec_word(word, avail) {
                Some((z, used)) => {
                    word <<= used;
                    avail -= used;
                    pos = pos.wrapping_add(u64::from(used));
                    self.apply(z)
                }
                None => {
                    r.set_pos(pos);
                    let v = self.step(r);
                    pos = r.pos();
                    word = r.peek();
                    avail = 57;
                    v
                }
            };
            if pos > end {
                r.set_pos(pos);
                return j;
            }
            *o = v;
            *last = v;
        }
        r.set_pos(pos);
        out.len()
    }
}

impl<C: ResDec, const DOD: bool> VInt<C, DOD> {
    /// [`fill_fixed`](VInt::fill_fixed) in a function of its own (the loop keeps its state in
    /// registers, away from the register pressure of the whole bulk loop), compiled with
    /// `lzcnt`/BMI2 when the CPU has them and `fast_cpu` allows (as `bulk_dispatch`).
    #[inline(always)]
    fn fill_fixed_dispatch(&mut self, k: u32, r: &mut BitReader<'_>, out: &mut [f64]) -> usize {
        #[cfg(target_arch = "x86_64")]
        {
            if self.fast_cpu {
                // SAFETY: `fast_cpu` is only set after checking that the CPU supports every
                // feature `fill_fixed_lzcnt` is compiled for (`SampleIter::bulk_dispatch`).
                return unsafe { self.fill_fixed_lzcnt(k, r, out) };
            }
        }
        self.fill_fixed_base(k, r, out)
    }

    #[inline(never)]
    fn fill_fixed_base(&mut self, k: u32, r: &mut BitReader<'_>, out: &mut [f64]) -> usize {
        self.fill_fixed(k, r, out)
    }

    /// # Safety
    /// The CPU must support `lzcnt`, `bmi1` and `bmi2`.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "lzcnt,bmi1,bmi2")]
    #[inline(never)]
    unsafe fn fill_fixed_lzcnt(&mut self, k: u32, r: &mut BitReader<'_>, out: &mut [f64]) -> usize {
        self.fill_fixed(k, r, out)
    }

    /// [`fill`](ValueDec::fill) for residuals Rice coded with the one parameter `k`: every
    /// code's length is known from its prefix alone, so the loop's serial chain is the
    /// prefix scan and the shift. Values with decimals are divided by `10^decimals` in a
    /// second pass over each stretch between exceptions (vectorisable: one division per
    /// sample is the bottleneck otherwise); exceptions are read here as raw values.
    #[inline(always)]
    fn fill_fixed(&mut self, k: u32, r: &mut BitReader<'_>, out: &mut [f64]) -> usize {
        let p = int::POW10[usize::from(self.decimals).min(int::POW10.len() - 1)];
        let mut j = 0;
        loop {
            let rest = out.get_mut(j..).unwrap_or_default();
            let (got, exception) = self.fill_fixed_ints(k, r, rest);
            if self.decimals > 0 {
                div_all(rest.get_mut(..got).unwrap_or_default(), p);
            }
            j += got;
            if !exception {
                return j;
            }
            let v = f64::from_bits(r.read_long(64));
            if r.overrun() {
                return j;
            }
            if let Some(o) = out.get_mut(j) {
                *o = v;
            }
            j += 1;
        }
    }

    /// The loop of [`fill_fixed`](VInt::fill_fixed): the integers (as `f64`, not divided by
    /// `10^decimals`) into `out` until it is full, the stream overruns (the value that
    /// overran not counted) or an exception symbol was read (then `true`; its raw value is
    /// next in the stream). State is kept in locals.
    #[inline(always)]
    fn fill_fixed_ints(&mut self, k: u32, r: &mut BitReader<'_>, out: &mut [f64]) -> (usize, bool) {
        let end = r.end();
        let (mut n, mut d) = (self.n, self.d);
        let mut pos = r.pos();
        let mut word = r.peek();
        let mut avail = 57u32;
        let k1 = k + 1;
        let low_shift = 63u32.saturating_sub(k);
        let mut j = 0;
        let mut exception = false;
        while j < out.len() {
            if avail < 32 {
                r.set_pos(pos);
                word = r.peek();
                avail = 57;
            }
            let q = (!word).leading_zeros();
            let total = q + k1;
            let z = if q < RICE_ESCAPE && total <= avail {
                // the zero after the prefix tops the low bits (see `Rice::decode_word`)
                let z = (u64::from(q) << k) | ((word << q) >> low_shift);
                word <<= total;
                avail -= total;
                pos = pos.wrapping_add(u64::from(total));
                z
            } else {
                r.set_pos(pos);
                let z = self.c.dec(r);
                pos = r.pos();
                word = r.peek();
                avail = 57;
                if z == EXCEPTION {
                    exception = true;
                    break;
                }
                z
            };
            if pos > end {
                break;
            }
            let x = unzigzag(z);
            if DOD {
                d = d.wrapping_add(x);
                n = n.wrapping_add(d);
            } else {
                n = n.wrapping_add(x);
            }
            if let Some(o) = out.get_mut(j) {
                *o = n as f64;
            }
            j += 1;
        }
        r.set_pos(pos);
        (self.n, self.d) = (n, d);
        (j, exception)
    }
}

/// Divides every value by `p` (a power of ten): bit for bit what dividing one by one gives,
/// as every IEEE division is correctly rounded; with AVX where the CPU has it.
#[inline]
fn div_all(vs: &mut [f64], p: f64) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx") {
            // SAFETY: the CPU supports AVX (checked just above), the only requirement of
            // `div_all_avx`.
            unsafe { div_all_avx(vs, p) };
            return;
        }
    }
    for v in vs {
        *v /= p;
    }
}

/// [`div_all`] compiled with AVX (four divisions per instruction).
///
/// # Safety
/// The CPU must support AVX.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn div_all_avx(vs: &mut [f64], p: f64) {
    for v in vs {
        *v /= p;
    }
}

/// Decodes one sample after timestamp `t` (the per-sample path of the bulk loop).
#[inline(always)]
fn bulk_one<T: TimeDec, V: ValueDec>(
    td: &mut T,
    vd: &mut V,
    r: &mut BitReader<'_>,
    t: i64,
) -> Result<(i64, f64), &'static str> {
    let nt = td.step(r, t);
    if nt <= t {
        return Err("timestamps not increasing");
    }
    let nv = vd.step(r);
    if r.overrun() {
        return Err("bit stream ends early");
    }
    Ok((nt, nv))
}

impl SampleIter<'_> {
    /// Decodes every remaining sample, appending timestamps to `ts` and values to `vs`
    /// (the same samples `next` would return, in one tight loop per coding: the fast way
    /// to read whole chunks). Returns the number of samples appended; corrupt data ends
    /// the decoding early as it ends iteration (see [`err`](SampleIter::err)).
    pub fn decode_into(&mut self, ts: &mut Vec<i64>, vs: &mut Vec<f64>) -> usize {
        self.decode_into_with(ts, vs, true)
    }

    /// [`decode_into`](SampleIter::decode_into); `cpu_features: false` forces the loop
    /// compiled for the baseline CPU (tests compare both).
    fn decode_into_with(
        &mut self,
        ts: &mut Vec<i64>,
        vs: &mut Vec<f64>,
        cpu_features: bool,
    ) -> usize {
        let left = usize::from(self.count.saturating_sub(self.idx));
        if left == 0 {
            self.check_end();
            return 0;
        }
        let start = ts.len();
        ts.resize(start + left, 0);
        vs.resize(start + left, 0.0);
        let mut done = 0;
        if self.idx == 0 {
            (ts[start], vs[start]) = self.first_sample();
            done = 1;
        }
        if done < left {
            let (ot, ov) = (&mut ts[start + done..], &mut vs[start + done..]);
            done += if cpu_features {
                self.bulk_dispatch(ot, ov)
            } else {
                self.bulk_time(ot, ov)
            };
        }
        ts.truncate(start + done);
        vs.truncate(start + done);
        if self.err.is_none() {
            self.check_end();
        }
        done
    }

    /// [`bulk_time`](SampleIter::bulk_time), compiled for CPUs with `lzcnt` and BMI2 when this
    /// one has them (x86-64): the Rice and XOR decoders' bit scans and shifts are on the
    /// critical path, and `lzcnt` takes 1 cycle where the baseline `bsr` takes 3-4.
    fn bulk_dispatch(&mut self, ot: &mut [i64], ov: &mut [f64]) -> usize {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("lzcnt")
                && std::arch::is_x86_feature_detected!("bmi1")
                && std::arch::is_x86_feature_detected!("bmi2")
            {
                self.fast_cpu = true;
                // SAFETY: the CPU supports every feature `bulk_time_lzcnt` is compiled for
                // (checked just above), which is the only requirement of calling it.
                return unsafe { self.bulk_time_lzcnt(ot, ov) };
            }
        }
        self.bulk_time(ot, ov)
    }

    /// [`bulk_time`](SampleIter::bulk_time) with `lzcnt`, BMI1 and BMI2 instructions.
    ///
    /// # Safety
    /// The CPU must support `lzcnt`, `bmi1` and `bmi2` (an `unsafe fn` rather than a safe
    /// `#[target_feature]` fn, which needs Rust 1.86, above the workspace's `rust-version`).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "lzcnt,bmi1,bmi2")]
    unsafe fn bulk_time_lzcnt(&mut self, ot: &mut [i64], ov: &mut [f64]) -> usize {
        self.bulk_time(ot, ov)
    }

    /// Decodes samples `idx >= 1` into `ot` / `ov` (as many as remain); returns how many.
    // inlined into the loop compiled per CPU level; not in debug builds, whose frames of
    // every coding's locals together would take ~1 MB of stack
    #[cfg_attr(not(debug_assertions), inline(always))]
    fn bulk_time(&mut self, ot: &mut [i64], ov: &mut [f64]) -> usize {
        match (self.time, self.ts_coder) {
            (TimeEncoding::Regular, _) => self.bulk_value(
                TRegular {
                    delta1: self.delta1,
                },
                ot,
                ov,
            ),
            (TimeEncoding::Delta { .. }, ResCoder::Rice(c)) => self.bulk_value(
                TDelta {
                    delta1: self.delta1,
                    c,
                },
                ot,
                ov,
            ),
            (TimeEncoding::Delta { .. }, ResCoder::Sparse(c)) => self.bulk_value(
                TDelta {
                    delta1: self.delta1,
                    c,
                },
                ot,
                ov,
            ),
            (TimeEncoding::DeltaOfDelta { .. }, ResCoder::Rice(c)) => self.bulk_value(
                TDod {
                    delta: self.delta,
                    c,
                },
                ot,
                ov,
            ),
            (TimeEncoding::DeltaOfDelta { .. }, ResCoder::Sparse(c)) => self.bulk_value(
                TDod {
                    delta: self.delta,
                    c,
                },
                ot,
                ov,
            ),
            (TimeEncoding::Grid { .. }, ResCoder::Rice(c)) => {
                let grid = self.grid_point();
                self.bulk_value(
                    TGrid {
                        grid,
                        delta1: self.delta1,
                        c,
                    },
                    ot,
                    ov,
                )
            }
            (TimeEncoding::Grid { .. }, ResCoder::Sparse(c)) => {
                let grid = self.grid_point();
                self.bulk_value(
                    TGrid {
                        grid,
                        delta1: self.delta1,
                        c,
                    },
                    ot,
                    ov,
                )
            }
            // timestamps never use one parameter; decode as iteration does
            (_, ResCoder::Fixed(_)) => self.by_sample(ot, ov),
        }
    }

    /// Decodes samples into `ot` / `ov` with `next` (codings without a bulk loop).
    fn by_sample(&mut self, ot: &mut [i64], ov: &mut [f64]) -> usize {
        let mut i = 0;
        for (t, v) in ot.iter_mut().zip(ov.iter_mut()) {
            let Some(s) = self.next() else { break };
            (*t, *v) = s;
            i += 1;
        }
        i
    }

    /// The grid point `t0 + i * delta1` of the first sample whose timestamp is coded as a
    /// grid offset (`i = idx`, at least 2: the second sample's is the first delta).
    fn grid_point(&self) -> i64 {
        self.t0
            .wrapping_add(i64::from(self.idx.max(2)).wrapping_mul(self.delta1))
    }

    // inlined into the loop compiled per CPU level; not in debug builds, whose frames of
    // every coding's locals together would take ~1 MB of stack
    #[cfg_attr(not(debug_assertions), inline(always))]
    fn bulk_value<T: TimeDec>(&mut self, td: T, ot: &mut [i64], ov: &mut [f64]) -> usize {
        match self.value {
            ValueEncoding::Const => {
                let v = VConst(self.v);
                self.bulk(td, v, ot, ov).1
            }
            ValueEncoding::Xor => {
                let v = VXor(self.xor);
                let (v, n) = self.bulk(td, v, ot, ov);
                self.xor = v.0;
                n
            }
            ValueEncoding::Int {
                decimals,
                delta_of_delta,
                no_bits,
                ..
            } => {
                let (n, d) = (self.n, self.d);
                macro_rules! int_loop {
                    ($c:expr, $dod:literal, $wrap:expr) => {{
                        let v = VInt::<_, $dod> {
                            c: $c,
                            n,
                            d,
                            decimals,
                            fast_cpu: self.fast_cpu,
                        };
                        let (v, k) = self.bulk(td, v, ot, ov);
                        (self.n, self.d) = (v.n, v.d);
                        if let Some(c) = $wrap(v.c) {
                            self.v_coder = c;
                        }
                        k
                    }};
                }
                match (self.v_coder, no_bits, delta_of_delta) {
                    // all residuals zero: deltas and deltas of deltas alike keep `n`
                    (_, true, _) => int_loop!(NoBits, false, |_| None),
                    (ResCoder::Rice(c), false, true) => {
                        int_loop!(c, true, |c| Some(ResCoder::Rice(c)))
                    }
                    (ResCoder::Rice(c), false, false) => {
                        int_loop!(c, false, |c| Some(ResCoder::Rice(c)))
                    }
                    (ResCoder::Sparse(c), false, true) => {
                        int_loop!(c, true, |c| Some(ResCoder::Sparse(c)))
                    }
                    (ResCoder::Sparse(c), false, false) => {
                        int_loop!(c, false, |c| Some(ResCoder::Sparse(c)))
                    }
                    (ResCoder::Fixed(c), false, true) => {
                        int_loop!(c, true, |c| Some(ResCoder::Fixed(c)))
                    }
                    (ResCoder::Fixed(c), false, false) => {
                        int_loop!(c, false, |c| Some(ResCoder::Fixed(c)))
                    }
                }
            }
        }
    }

    /// The loop over samples `idx >= 1`, into `ot` / `ov` (at most their length). Runs of
    /// timestamps that take no bits (zero residuals of a run-length coded stream, regular
    /// chunks) are filled without reading bits, their values decoded in a loop of their own.
    /// Leaves `t`, `v`, `idx` (and the error) as `next` would; returns the value decoder (its
    /// state) and the number of samples decoded. The timestamp state is not kept: it is only
    /// needed for the second sample, which is decoded here without it.
    // inlined into the loop compiled per CPU level; not in debug builds, whose frames of
    // every coding's locals together would take ~1 MB of stack
    #[cfg_attr(not(debug_assertions), inline(always))]
    fn bulk<T: TimeDec, V: ValueDec>(
        &mut self,
        mut td: T,
        mut vd: V,
        ot: &mut [i64],
        ov: &mut [f64],
    ) -> (V, usize) {
        let mut r = self.r.clone();
        let mut t = self.t;
        let mut v = self.v;
        let n = ot.len().min(ov.len());
        let mut i = 0usize;
        let mut bad = None;
        if self.idx == 1 && n > 0 {
            // the second sample's delta is the first delta, whatever the coding
            let mut first = TRegular {
                delta1: self.delta1,
            };
            match bulk_one(&mut first, &mut vd, &mut r, t) {
                Ok((nt, nv)) => {
                    (t, v) = (nt, nv);
                    (ot[0], ov[0]) = (t, v);
                    i = 1;
                }
                Err(e) => bad = Some(e),
            }
        }
        while bad.is_none() && i < n {
            let run = td.run();
            if run == 0 {
                match bulk_one(&mut td, &mut vd, &mut r, t) {
                    Ok((nt, nv)) => {
                        (t, v) = (nt, nv);
                        (ot[i], ov[i]) = (t, v);
                        i += 1;
                    }
                    Err(e) => bad = Some(e),
                }
                continue;
            }
            let len = (n - i).min(run as usize);
            let (first, step) = td.run_start(t);
            let last = i64::try_from(len - 1)
                .ok()
                .and_then(|k| k.checked_mul(step))
                .and_then(|d| first.checked_add(d));
            if first > t && (len == 1 || step > 0) && last.is_some() {
                // the run's timestamps increase: fill them, then decode its values
                let mut x = first;
                for o in &mut ot[i..i + len] {
                    *o = x;
                    x = x.wrapping_add(step);
                }
                let got = vd.fill(&mut r, &mut ov[i..i + len], &mut v);
                td.take_run(got as u32);
                if got > 0 {
                    // no overflow: checked above for the whole run
                    t = first.wrapping_add((got as i64 - 1).wrapping_mul(step));
                }
                i += got;
                if got < len {
                    bad = Some("bit stream ends early");
                }
                continue;
            }
            // corrupt: sample by sample, failing where iteration fails
            for _ in 0..len {
                match bulk_one(&mut td, &mut vd, &mut r, t) {
                    Ok((nt, nv)) => {
                        (t, v) = (nt, nv);
                        (ot[i], ov[i]) = (t, v);
                        i += 1;
                    }
                    Err(e) => {
                        bad = Some(e);
                        break;
                    }
                }
            }
        }
        self.r = r;
        self.t = t;
        self.v = v;
        self.idx += i as u16;
        if let Some(reason) = bad {
            self.fail(reason);
        }
        (vd, i)
    }
}

/// Decodes the chunk at the start of `bytes` (after verifying header and checksum), appending
/// its timestamps to `ts` and values to `vs`; returns the number of samples appended.
pub fn decode_into(bytes: &[u8], ts: &mut Vec<i64>, vs: &mut Vec<f64>) -> Result<usize, Error> {
    let mut it = decode(bytes)?;
    let n = it.decode_into(ts, vs);
    match it.take_err() {
        Some(e) => Err(e),
        None => Ok(n),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(bytes: &[u8]) -> Vec<(i64, u64)> {
        let mut it = decode(bytes).expect("decode");
        let out: Vec<_> = it.by_ref().map(|(t, v)| (t, v.to_bits())).collect();
        assert!(it.err().is_none(), "{:?}", it.err());
        out
    }

    fn check(samples: &[(i64, f64)]) -> Vec<u8> {
        let mut w = ChunkWriter::new();
        for &(t, v) in samples {
            w.append(t, v);
        }
        let want: Vec<_> = samples.iter().map(|&(t, v)| (t, v.to_bits())).collect();
        let open: Vec<_> = w.iter().map(|(t, v)| (t, v.to_bits())).collect();
        assert_eq!(open, want);
        let bytes = w.finish();
        assert_eq!(collect(&bytes), want);
        let (mut ts, mut vs) = (vec![7], vec![7.0]);
        assert_eq!(decode_into(&bytes, &mut ts, &mut vs).unwrap(), want.len());
        let bulk: Vec<_> = ts[1..]
            .iter()
            .zip(&vs[1..])
            .map(|(&t, v)| (t, v.to_bits()))
            .collect();
        assert_eq!(bulk, want);
        // bulk after a few samples were iterated
        let mut it = decode(&bytes).unwrap();
        let mut mixed: Vec<_> = it.by_ref().take(3).map(|(t, v)| (t, v.to_bits())).collect();
        let (mut ts, mut vs) = (Vec::new(), Vec::new());
        it.decode_into(&mut ts, &mut vs);
        mixed.extend(ts.iter().zip(&vs).map(|(&t, v)| (t, v.to_bits())));
        assert_eq!(mixed, want);
        assert!(it.err().is_none());
        assert_eq!(encoded_len(&bytes).unwrap(), bytes.len());
        for p in [EncodePolicy::Xor, EncodePolicy::Auto] {
            let b = w.finish_with(p).unwrap();
            assert_eq!(collect(&b), want);
        }
        bytes
    }

    #[test]
    fn empty_chunk() {
        let w = ChunkWriter::new();
        let b = w.finish();
        assert!(collect(&b).is_empty());
        let m = meta(&b).unwrap();
        assert_eq!(m.num_samples, 0);
        assert_eq!(w.min_time(), i64::MAX);
        assert_eq!(w.max_time(), i64::MIN);
    }

    #[test]
    fn constant_regular_chunk_is_tiny() {
        let s: Vec<_> = (0..120)
            .map(|i| (1_796_198_400_000 + i * 15_000, 0.0))
            .collect();
        let b = check(&s);
        assert!(b.len() <= 20, "{} bytes", b.len());
        let h = header(&b).unwrap();
        assert_eq!(h.time, TimeEncoding::Regular);
        assert_eq!(h.value, ValueEncoding::Const);
        let m = meta(&b).unwrap();
        assert_eq!(m.min_time, 1_796_198_400_000);
        assert_eq!(m.max_time, 1_796_198_400_000 + 119 * 15_000);
        assert_eq!(m.num_samples, 120);
    }

    #[test]
    fn integer_counter_uses_int() {
        let mut v = 1000.0;
        let s: Vec<_> = (0..120)
            .map(|i| {
                v += f64::from((i * 37 % 11) as u32) * 100.0;
                (1_000 + i * 15_000 + (i * 7 % 3), v)
            })
            .collect();
        let b = check(&s);
        let h = header(&b).unwrap();
        assert!(matches!(h.value, ValueEncoding::Int { decimals: 0, .. }));
    }

    #[test]
    fn switches_decimals_then_xor() {
        let s = vec![
            (1, 3.0),
            (2, 4.5),
            (3, 412.736),
            (4, -0.0),
            (5, f64::NAN),
            (6, crate::stale_nan()),
            (7, f64::INFINITY),
            (8, 7.0),
        ];
        let mut w = ChunkWriter::new();
        w.append(1, 3.0);
        assert!(matches!(
            w.value_encoding(),
            ValueEncoding::Int { decimals: 0, .. }
        ));
        w.append(2, 4.5);
        assert!(matches!(
            w.value_encoding(),
            ValueEncoding::Int { decimals: 1, .. }
        ));
        w.append(3, 412.736);
        assert!(matches!(
            w.value_encoding(),
            ValueEncoding::Int { decimals: 3, .. }
        ));
        w.append(4, -0.0);
        assert_eq!(w.value_encoding(), ValueEncoding::Xor);
        check(&s);
    }

    #[test]
    fn ignores_out_of_order() {
        let mut w = ChunkWriter::new();
        w.append(10, 1.0);
        w.append(10, 2.0);
        w.append(5, 3.0);
        w.append(11, 4.0);
        let got: Vec<_> = w.iter().collect();
        assert_eq!(got, vec![(10, 1.0), (11, 4.0)]);
        assert_eq!(w.last(), Some((11, 4.0)));
    }

    /// The bulk loop compiled for the baseline CPU and the one with `lzcnt` / BMI2 (used
    /// where the CPU has them) decode alike, damaged chunks included.
    #[test]
    fn bulk_loops_for_both_cpu_levels_agree() {
        let mut chunks = Vec::new();
        let mut w = ChunkWriter::new();
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for shape in 0..12u64 {
            w = ChunkWriter::new();
            let mut t = 1_796_198_400_000i64;
            let mut n = 1000i64;
            for i in 0..120u64 {
                t += 15_000
                    + if rnd() % 8 == 0 {
                        (rnd() % 300) as i64
                    } else {
                        0
                    };
                n += (rnd() % (1 << (shape * 4 % 40))) as i64;
                let v = match shape % 4 {
                    0 => n as f64,
                    1 => n as f64 / 1000.0,
                    2 => f64::from_bits(rnd()),
                    _ => (i / 30) as f64,
                };
                w.append(t, v);
            }
            for p in [
                EncodePolicy::Auto,
                EncodePolicy::Xor,
                EncodePolicy::Int,
                EncodePolicy::IntFixedRice,
            ] {
                chunks.extend(w.finish_with(p));
            }
        }
        let mut damaged = Vec::new();
        for c in &chunks {
            for _ in 0..20 {
                let mut d = c.clone();
                let i = (rnd() as usize) % d.len();
                d[i] ^= (rnd() % 255 + 1) as u8;
                d.truncate(d.len() - (rnd() as usize) % 8);
                damaged.push(d);
            }
        }
        assert!(!w.is_empty());
        for c in chunks.iter().chain(&damaged) {
            let (Ok(mut a), Ok(mut b)) = (decode_unverified(c), decode_unverified(c)) else {
                continue;
            };
            let (mut ta, mut va, mut tb, mut vb) = (vec![], vec![], vec![], vec![]);
            let na = a.decode_into_with(&mut ta, &mut va, true);
            let nb = b.decode_into_with(&mut tb, &mut vb, false);
            assert_eq!((na, &ta), (nb, &tb));
            let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&va), bits(&vb));
            assert_eq!(
                a.err().map(|e| e.to_string()),
                b.err().map(|e| e.to_string())
            );
        }
    }

    #[test]
    fn seek_semantics() {
        let s: Vec<_> = (0..50).map(|i| (i * 10, i as f64)).collect();
        let b = check(&s);
        let mut it = decode(&b).unwrap();
        assert_eq!(it.seek(-5), Some((0, 0.0)));
        assert_eq!(it.seek(0), Some((0, 0.0)));
        assert_eq!(it.seek(95), Some((100, 10.0)));
        assert_eq!(it.seek(100), Some((100, 10.0)));
        assert_eq!(it.next(), Some((110, 11.0)));
        assert_eq!(it.seek(50), Some((110, 11.0)));
        assert_eq!(it.seek(490), Some((490, 49.0)));
        assert_eq!(it.seek(491), None);
        assert!(it.err().is_none());
    }
}
