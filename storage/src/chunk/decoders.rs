//! Decoders for one fixed coding each (residual, timestamp and value), monomorphised so the
//! bulk loop has no per-sample dispatch.

use super::*;

/// A residual decoder with a fixed coding (monomorphised bulk decoding).
pub(super) trait ResDec: Copy {
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
pub(super) trait TimeDec {
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

pub(super) struct TRegular {
    pub(super) delta1: i64,
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

pub(super) struct TDelta<C> {
    pub(super) delta1: i64,
    pub(super) c: C,
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

pub(super) struct TDod<C> {
    pub(super) delta: i64,
    pub(super) c: C,
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

pub(super) struct TGrid<C> {
    /// The grid point of the next sample.
    pub(super) grid: i64,
    pub(super) delta1: i64,
    pub(super) c: C,
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
pub(super) trait ValueDec {
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

pub(super) struct VConst(pub(super) f64);

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

pub(super) struct VXor(pub(super) XorState);

impl ValueDec for VXor {
    #[inline(always)]
    fn step(&mut self, r: &mut BitReader<'_>) -> f64 {
        f64::from_bits(self.0.decode(r))
    }
}

/// Steps in units of the last place ([`ulp`]): `k` (or, with `DOD`, `k` minus the previous
/// `k`), exceptions raw.
pub(super) struct VUlp<C, const DOD: bool> {
    pub(super) c: C,
    /// The last value.
    pub(super) v: f64,
    /// The last step.
    pub(super) k: i64,
    /// Trailing zero bits of every step, not stored.
    pub(super) shift: u32,
}

impl<C: ResDec, const DOD: bool> ValueDec for VUlp<C, DOD> {
    #[inline(always)]
    fn step(&mut self, r: &mut BitReader<'_>) -> f64 {
        let z = self.c.dec(r);
        if z == EXCEPTION {
            self.k = 0;
            self.v = f64::from_bits(r.read_long(64));
            return self.v;
        }
        let r = unzigzag(z).wrapping_shl(self.shift);
        let k = if DOD { self.k.wrapping_add(r) } else { r };
        self.k = k;
        self.v = ulp::apply(self.v, k);
        self.v
    }
}

/// The residual "decoder" of integer chunks without value bits: every residual is zero.
#[derive(Clone, Copy)]
pub(super) struct NoBits;

impl ResDec for NoBits {
    #[inline(always)]
    fn dec(&mut self, _r: &mut BitReader<'_>) -> u64 {
        0
    }
}

/// Scaled integers coded as deltas of deltas (`DOD`) or deltas.
pub(super) struct VInt<C, const DOD: bool> {
    pub(super) c: C,
    pub(super) n: i64,
    pub(super) d: i64,
    pub(super) decimals: u8,
    /// Runs of one-parameter codes may use the loop compiled for `lzcnt`/BMI2 (checked).
    pub(super) fast_cpu: bool,
}

impl<C: ResDec, const DOD: bool> VInt<C, DOD> {
    /// The value after residual `z` (not an exception).
    #[inline(always)]
    pub(super) fn apply(&mut self, z: u64) -> f64 {
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
    pub(super) fn fill_fixed_dispatch(
        &mut self,
        k: u32,
        r: &mut BitReader<'_>,
        out: &mut [f64],
    ) -> usize {
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
    pub(super) fn fill_fixed_base(
        &mut self,
        k: u32,
        r: &mut BitReader<'_>,
        out: &mut [f64],
    ) -> usize {
        self.fill_fixed(k, r, out)
    }

    /// # Safety
    /// The CPU must support `lzcnt`, `bmi1` and `bmi2`.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "lzcnt,bmi1,bmi2")]
    #[inline(never)]
    pub(super) unsafe fn fill_fixed_lzcnt(
        &mut self,
        k: u32,
        r: &mut BitReader<'_>,
        out: &mut [f64],
    ) -> usize {
        self.fill_fixed(k, r, out)
    }

    /// [`fill`](ValueDec::fill) for residuals Rice coded with the one parameter `k`: every
    /// code's length is known from its prefix alone, so the loop's serial chain is the
    /// prefix scan and the shift. Values with decimals are divided by `10^decimals` in a
    /// second pass over each stretch between exceptions (vectorisable: one division per
    /// sample is the bottleneck otherwise); exceptions are read here as raw values.
    #[inline(always)]
    pub(super) fn fill_fixed(&mut self, k: u32, r: &mut BitReader<'_>, out: &mut [f64]) -> usize {
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
    pub(super) fn fill_fixed_ints(
        &mut self,
        k: u32,
        r: &mut BitReader<'_>,
        out: &mut [f64],
    ) -> (usize, bool) {
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
pub(super) fn div_all(vs: &mut [f64], p: f64) {
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
pub(super) unsafe fn div_all_avx(vs: &mut [f64], p: f64) {
    for v in vs {
        *v /= p;
    }
}
