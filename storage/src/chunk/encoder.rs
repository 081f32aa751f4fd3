//! A coder for one chunk whose codings are fixed: the writer's working part.

use super::*;

/// A coder for one chunk with fixed codings.
#[derive(Debug, Clone)]
pub(super) struct Encoder {
    pub(super) w: BitWriter,
    pub(super) time: TimeEncoding,
    pub(super) value: ValueEncoding,
    pub(super) count: u16,
    pub(super) t0: i64,
    pub(super) delta1: i64,
    pub(super) t_last: i64,
    pub(super) delta_prev: i64,
    pub(super) first_bits: u64,
    pub(super) n_prev: i64,
    pub(super) d_prev: i64,
    pub(super) ts_coder: ResCoder,
    pub(super) v_coder: ResCoder,
    pub(super) xor: XorState,
}

impl Encoder {
    pub(super) fn new(time: TimeEncoding, value: ValueEncoding) -> Self {
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
    pub(super) fn push(&mut self, t: i64, v: f64, n: Option<i64>) -> (u32, u32) {
        self.push_ahead(t, v, n, &[], &[])
    }

    /// [`push`](Encoder::push) for run-length coded streams: `ts_ahead` / `v_ahead` hold all
    /// timestamp / value residuals of the chunk.
    #[inline]
    pub(super) fn push_ahead(
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
            let prev = f64::from_bits(self.xor.prev());
            if !matches!(self.value, ValueEncoding::Xor) {
                // only the XOR coding uses the state; the others keep the last value in it
                self.xor.set_prev(bits);
            }
            match self.value {
                ValueEncoding::Const => {}
                ValueEncoding::Xor => vb = self.xor.encode(bits, &mut self.w),
                ValueEncoding::Ulp {
                    delta_of_delta,
                    shift,
                } => {
                    debug_assert!(shift <= ulp::MAX_SHIFT, "step shift {shift}");
                    let j = usize::from(self.count - 1);
                    // a step without the chunk's trailing zeros is an exception
                    match ulp::step(prev, v).filter(|k| k.trailing_zeros() >= u32::from(shift)) {
                        Some(k) => {
                            let r = if delta_of_delta {
                                k.wrapping_sub(self.d_prev)
                            } else {
                                k
                            };
                            let r = r >> shift;
                            vb = self.v_coder.encode(zigzag(r), j, v_ahead, &mut self.w);
                            self.d_prev = k;
                        }
                        None => {
                            // exception: a raw value, and the next step counts from zero
                            vb = self.v_coder.encode(EXCEPTION, j, v_ahead, &mut self.w);
                            self.w.write(bits, 64);
                            vb += 64;
                            self.d_prev = 0;
                        }
                    }
                }
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

    pub(super) fn kind_bytes(&self) -> ([u8; 2], usize) {
        let mut b0 = match self.value {
            ValueEncoding::Ulp { .. } => KIND_ULP,
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
            ValueEncoding::Ulp {
                delta_of_delta,
                shift,
            } => (
                [
                    b0,
                    (u8::from(delta_of_delta) * ULP_DOD)
                        | ((shift << ULP_SHIFT_AT) & ULP_SHIFT_MASK),
                ],
                2,
            ),
            _ => ([b0, 0], 1),
        }
    }

    pub(super) fn first_value_code(&self) -> u64 {
        match self.value {
            // the first value always fits an integer coding (else the chunk is XOR)
            ValueEncoding::Int { decimals, .. } => {
                zigzag(int::to_scaled(f64::from_bits(self.first_bits), decimals).unwrap_or(0))
            }
            _ => self.first_bits.swap_bytes(),
        }
    }

    /// The encoded chunk: header, body, checksum.
    pub(super) fn to_bytes(&self) -> Vec<u8> {
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

    pub(super) fn iter(&self) -> SampleIter<'_> {
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
