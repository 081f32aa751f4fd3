//! [`ChunkWriter`]: the open chunk, coded as samples arrive, re-coded at `finish` in the
//! smallest variant.

use super::*;

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
    pub(super) enc: Encoder,
    /// Values coded as exceptions.
    pub(super) exceptions: u8,
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

    pub(super) fn with_value_encoding(value: ValueEncoding) -> Self {
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
    pub(super) fn recode(&mut self, value: ValueEncoding) {
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
    pub(super) fn push(&mut self, t: i64, v: f64, n: Option<i64>) {
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
    pub(super) fn max_abs_scaled(&self, k: u8) -> i64 {
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
        let (time, mut value, mut param) = self.cheapest(&ts, &vs);
        // steps in units of the last place, priced only where XOR spends many bits per value
        // (long mantissas, as cumulative float sums have; not the short ones of gauges)
        let n = vs.len() as u64;
        if value == ValueEncoding::Xor && n > 2 && self.enc.w.bit_len() > ULP_MIN_BITS * n {
            let c = ulp_cost(&vs);
            if c.bits + 8 < xor_bits(&vs) {
                value = ValueEncoding::Ulp {
                    delta_of_delta: c.delta_of_delta,
                    shift: c.shift,
                };
                param = Some(c.rice_k);
            }
        }
        self.encode_from(&ts, &vs, time, value, param)
    }

    /// The encoded chunk as coded so far, without re-coding (cheap; for readers of the open
    /// chunk). [`finish`](ChunkWriter::finish) is usually smaller.
    pub fn snapshot(&self) -> Vec<u8> {
        self.enc.to_bytes()
    }

    /// The samples so far, decoded in bulk.
    pub(super) fn decode_all(&self) -> (Vec<i64>, Vec<f64>) {
        let n = self.len();
        let (mut ts, mut vs) = (Vec::with_capacity(n), Vec::with_capacity(n));
        self.iter().decode_into(&mut ts, &mut vs);
        (ts, vs)
    }

    /// The smallest coding of the samples `ts`, `vs` (this chunk's, decoded): every
    /// timestamp and value coding is priced over the whole chunk at once (pricing while
    /// appending would cost every open chunk ~140 bytes of trackers).
    /// With one Rice parameter for the values, its value comes along.
    pub(super) fn cheapest(
        &self,
        ts: &[i64],
        vs: &[f64],
    ) -> (TimeEncoding, ValueEncoding, Option<u32>) {
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

    pub(super) fn encode_as(&self, time: TimeEncoding, value: ValueEncoding) -> Vec<u8> {
        if time == self.enc.time && value == self.enc.value {
            return self.enc.to_bytes();
        }
        let (ts, vs) = self.decode_all();
        self.encode_from(&ts, &vs, time, value, None)
    }

    /// Codes this chunk's samples `ts`, `vs` (decoded) with the given codings; `param` is the
    /// one Rice parameter of the values when already chosen.
    pub(super) fn encode_from(
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
        self.encoder_from(ts, vs, time, value, param).to_bytes()
    }

    /// [`encode_from`](ChunkWriter::encode_from) as the coder holding the chunk (for the
    /// columns of histogram groups, which are stored without a chunk's header).
    pub(super) fn encoder_from(
        &self,
        ts: &[i64],
        vs: &[f64],
        time: TimeEncoding,
        value: ValueEncoding,
        param: Option<u32>,
    ) -> Encoder {
        if time == self.enc.time && value == self.enc.value {
            return self.enc.clone();
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
        e
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

/// Bits per sample of the open chunk above which [`ChunkWriter::finish`] prices the step
/// coding ([`ulp`]) against XOR: it only wins on values whose XOR codes are long.
const ULP_MIN_BITS: u64 = 24;

/// How many values an integer-coded chunk may hold as raw exceptions before it turns to XOR.
pub(super) const MAX_EXCEPTIONS: u8 = 4;

pub(super) fn int_encoding(decimals: u8) -> ValueEncoding {
    ValueEncoding::Int {
        decimals,
        delta_of_delta: true,
        no_bits: false,
        sparse: false,
        fixed_k: false,
    }
}

pub(super) fn decimals_of(v: ValueEncoding) -> u8 {
    match v {
        ValueEncoding::Int { decimals, .. } => decimals,
        _ => 0,
    }
}
