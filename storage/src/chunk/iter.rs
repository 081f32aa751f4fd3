//! [`SampleIter`]: decoding one sample at a time, with `seek`.

use super::*;

/// Iterator over a chunk's samples `(timestamp ms, value)`, decoding as it goes without
/// allocating. Corrupt data ends the iteration early; check [`err`](SampleIter::err).
#[derive(Debug)]
pub struct SampleIter<'a> {
    pub(super) r: BitReader<'a>,
    pub(super) time: TimeEncoding,
    pub(super) value: ValueEncoding,
    pub(super) count: u16,
    pub(super) idx: u16,
    pub(super) t: i64,
    pub(super) v: f64,
    pub(super) delta1: i64,
    pub(super) delta: i64,
    pub(super) n: i64,
    pub(super) d: i64,
    pub(super) t0: i64,
    pub(super) first: u64,
    pub(super) ts_coder: ResCoder,
    pub(super) v_coder: ResCoder,
    pub(super) xor: XorState,
    pub(super) base_offset: u64,
    pub(super) checked_end: bool,
    /// The CPU has `lzcnt`, BMI1 and BMI2 (set by `bulk_dispatch` after checking).
    pub(super) fast_cpu: bool,
    pub(super) err: Option<Error>,
    /// The samples of a histogram group member, decoded when it was opened (`None` for an
    /// ordinary chunk, decoded as it goes).
    pub(super) decoded: Option<Box<Decoded>>,
}

/// Samples decoded ahead (a histogram group member).
#[derive(Debug)]
pub(super) struct Decoded {
    pub(super) ts: Vec<i64>,
    pub(super) vs: Vec<f64>,
}

impl<'a> SampleIter<'a> {
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub(super) fn new(
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
            decoded: None,
        }
    }

    /// An iterator over samples already decoded (`ts` and `vs` of equal length, at most
    /// [`MAX_ENCODED_SAMPLES`]).
    pub(super) fn materialized(ts: Vec<i64>, vs: Vec<f64>) -> SampleIter<'static> {
        let count = u16::try_from(ts.len().min(vs.len())).unwrap_or(u16::MAX);
        let mut it = SampleIter::new(
            TimeEncoding::DeltaOfDelta { sparse: false },
            ValueEncoding::Xor,
            count,
            0,
            0,
            0,
            BitReader::new(&[], 0),
            0,
        );
        it.decoded = Some(Box::new(Decoded { ts, vs }));
        it
    }

    /// The next sample of a materialized iterator.
    #[inline]
    fn next_decoded(&mut self) -> Option<(i64, f64)> {
        let d = self.decoded.as_deref()?;
        let i = usize::from(self.idx);
        if self.idx >= self.count {
            return None;
        }
        let s = (*d.ts.get(i)?, *d.vs.get(i)?);
        (self.t, self.v) = s;
        self.idx += 1;
        Some(s)
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
    pub(super) fn fail(&mut self, reason: &str) -> Option<(i64, f64)> {
        let offset = self.base_offset + self.r.pos() / 8;
        self.err = Some(Error::corrupt("chunk", "", offset, reason));
        self.idx = self.count;
        self.checked_end = true;
        None
    }

    /// Returns the first sample (`idx == 0`) and moves past it; it takes no bits.
    #[inline]
    pub(super) fn first_sample(&mut self) -> (i64, f64) {
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
    pub(super) fn check_end(&mut self) -> Option<(i64, f64)> {
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
        if self.decoded.is_some() {
            return self.next_decoded();
        }
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
            ValueEncoding::Ulp {
                delta_of_delta,
                shift,
            } => {
                let z = self.v_coder.decode(&mut self.r);
                if z == EXCEPTION {
                    self.v = f64::from_bits(self.r.read_long(64));
                    self.d = 0;
                } else {
                    let r = unzigzag(z).wrapping_shl(u32::from(shift));
                    let k = if delta_of_delta {
                        self.d.wrapping_add(r)
                    } else {
                        r
                    };
                    self.v = ulp::apply(self.v, k);
                    self.d = k;
                }
            }
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
