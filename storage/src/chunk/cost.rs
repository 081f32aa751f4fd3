//! What each coding would cost: the writer prices timestamp and integer residual streams
//! over the decoded chunk before choosing.

use super::*;

/// Prices the timestamp residual streams of `ts`: deltas against the first delta, deltas of
/// deltas, offsets from the grid (the residuals of samples 2..).
pub(super) fn time_costs(ts: &[i64]) -> (StreamCost, StreamCost, StreamCost) {
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
pub(super) struct IntCosts {
    /// Deltas, adaptive Rice and run-length coded.
    pub(super) delta: StreamCost,
    /// Deltas of deltas, adaptive Rice and run-length coded.
    pub(super) dod: StreamCost,
    /// The XOR coding's bits.
    pub(super) xor_bits: u32,
    /// The residuals: deltas, deltas of deltas ([`EXCEPTION`] for exceptions).
    pub(super) zd: Vec<u64>,
    pub(super) zdd: Vec<u64>,
    pub(super) exceptions: u64,
}

impl IntCosts {
    /// The parameter and bits of the deltas (or, with `dod`, the deltas of deltas) Rice coded
    /// with one parameter ([`FixedRice`]), exceptions' raw values included.
    pub(super) fn fixed(&self, dod: bool) -> (u32, u64) {
        let (k, bits) = FixedRice::choose(if dod { &self.zdd } else { &self.zd });
        (k, bits + 64 * self.exceptions)
    }
}

/// Prices the value streams of `vs` for an integer coding with `k` decimals (values it cannot
/// represent are exceptions): deltas and deltas of deltas in every residual coding, and the
/// XOR coding's bits.
pub(super) fn int_costs(vs: &[f64], k: u8) -> IntCosts {
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

/// The XOR coding's bits for the values `vs` (after the first).
pub(super) fn xor_bits(vs: &[f64]) -> u64 {
    let Some((&first, rest)) = vs.split_first() else {
        return 0;
    };
    let mut xor = XorState::new(first.to_bits());
    let mut c = bitstream::BitCounter(0);
    rest.iter()
        .map(|v| u64::from(xor.encode(v.to_bits(), &mut c)))
        .sum()
}

/// Prices the step coding ([`ulp`]) of `vs`: the cheaper residual order (`true`: `k` minus
/// the previous `k`), the steps' common trailing zero bits (dropped from every residual), its
/// Rice parameter and its bits, exceptions' raw values included.
pub(super) fn ulp_cost(vs: &[f64]) -> UlpCost {
    let steps: Vec<Option<i64>> = vs.windows(2).map(|w| ulp::step(w[0], w[1])).collect();
    let shift = ulp::common_shift(steps.iter().flatten().copied());
    let n = steps.len();
    let (mut zk, mut zd) = (Vec::with_capacity(n), Vec::with_capacity(n));
    let mut exceptions = 0u64;
    let mut prev_k = 0i64;
    for step in steps {
        match step {
            Some(k) => {
                zk.push(zigzag(k >> shift));
                zd.push(zigzag(k.wrapping_sub(prev_k) >> shift));
                prev_k = k;
            }
            None => {
                zk.push(EXCEPTION);
                zd.push(EXCEPTION);
                exceptions += 1;
                prev_k = 0;
            }
        }
    }
    let (k1, b1) = FixedRice::choose(&zk);
    let (k2, b2) = FixedRice::choose(&zd);
    let raw = 64 * exceptions;
    let (delta_of_delta, rice_k, bits) = if b2 < b1 {
        (true, k2, b2 + raw)
    } else {
        (false, k1, b1 + raw)
    };
    UlpCost {
        delta_of_delta,
        shift,
        rice_k,
        bits,
    }
}

/// What [`ulp_cost`] found: the step coding's parameters and its price.
#[derive(Debug, Clone, Copy)]
pub(super) struct UlpCost {
    /// Residuals are `k` minus the previous `k`.
    pub(super) delta_of_delta: bool,
    /// Trailing zero bits every step has.
    pub(super) shift: u8,
    /// The one Rice parameter of the residuals.
    pub(super) rice_k: u32,
    /// Value bits of the chunk in this coding.
    pub(super) bits: u64,
}
