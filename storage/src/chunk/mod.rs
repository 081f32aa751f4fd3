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
//! chunk   := kind [intparams | ulpparams] count:uvarint body_len:uvarint body crc32:u32le
//! kind    := u8: bits 0-1 value coding (0 steps in units of the last place, 1 XOR,
//!                2 integer, 3 constant),
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
//! ulpparams := u8 (only for steps): bit 0 residual is k - previous k (else k), bits 1-6
//!                the shift s (residuals stored as zigzag(r >> s)), bit 7 zero; residuals
//!                Rice coded with one parameter as above (6 bits first)
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
//! codes follow the Gorilla paper (see [`xor`]). Float values that grow by small steps
//! (cumulative sums) may be coded as those steps in units of the last place ([`ulp`]), with
//! one Rice parameter and raw exceptions; `finish` picks that coding where it is smaller
//! than XOR.
//!
//! # Files
//!
//! Writing: `writer.rs` ([`ChunkWriter`], the open chunk and `finish`), `encoder.rs` (one chunk
//! with fixed codings), `rescoder.rs` (the residual coder it uses), `cost.rs` (pricing the
//! codings before `finish` chooses). Reading: `header.rs` (header, checksum, [`decode`],
//! [`meta`]), `iter.rs` ([`SampleIter`], one sample at a time with `seek`), `decoders.rs`
//! (one decoder per fixed coding), `bulk.rs` ([`decode_into`]: one loop per coding, compiled
//! for the baseline CPU and for lzcnt/BMI2). Bits: `bitstream.rs`, `xor.rs`, `int.rs`.
//! Histogram groups (a classic histogram's buckets and count in one chunk of blocks; their
//! members start with a marker byte, bit 7 set, which the entry points above recognise):
//! `group.rs`. `fuzz.rs` holds the bodies of the `chunk_decode` and `chunk_group` fuzz
//! targets.

pub(crate) mod bitstream;
pub(crate) mod int;
pub(crate) mod ulp;
pub(crate) mod xor;

#[allow(unsafe_code)] // decoders compiled for lzcnt/BMI2, called after a CPU check
mod bulk;
mod cost;
#[allow(unsafe_code)] // decoders compiled for lzcnt/BMI2 and AVX, called after a CPU check
mod decoders;
mod encoder;
#[cfg(any(test, feature = "fuzzing"))]
mod fuzz;
mod group;
mod header;
mod iter;
mod rescoder;
#[cfg(test)]
mod tests;
mod writer;

pub use bulk::decode_into;
use cost::*;
use decoders::*;
use encoder::*;
#[cfg(any(test, feature = "fuzzing"))]
pub use fuzz::{fuzz_decode, fuzz_group};
pub use group::{
    encode_group, group_member, groupable, member_index, GroupDecoder, GroupSlot, MAX_GROUP_MEMBERS,
};
pub use header::{decode, decode_unverified, encoded_len, header, meta};
pub use iter::SampleIter;
use rescoder::*;
pub use writer::ChunkWriter;

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
const KIND_ULP: u8 = 0;
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
const ULP_DOD: u8 = 1;
/// Step parameters: bits 1-6 hold the steps' dropped trailing zero bits.
const ULP_SHIFT_AT: u8 = 1;
const ULP_SHIFT_MASK: u8 = 0x7e;

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
    /// Each value as the step `k` from the previous one in units of its last place
    /// ([`ulp`]), Rice coded with one parameter for the chunk; values no step reaches are
    /// exceptions (raw bits).
    Ulp {
        /// Residuals are `k` minus the previous value's `k` (else `k`).
        delta_of_delta: bool,
        /// Trailing zero bits of every step, not stored (steps of sums of clock differences
        /// or of whole numbers are multiples of a power of two).
        shift: u8,
    },
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
    matches!(
        v,
        ValueEncoding::Int { fixed_k: true, .. } | ValueEncoding::Ulp { .. }
    )
}
