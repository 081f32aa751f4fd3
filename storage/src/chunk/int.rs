//! Scaled-integer value coding: a value `v` is stored as the integer `n` with
//! `v == n / 10^k` bit-exactly, for a per-chunk number of decimals `k`.
//!
//! Whole numbers (token and request counters, bucket counts, temperatures) use `k = 0`; values
//! scraped from text with a few decimals (power in W with 3 decimals, ratios with 6) use a small
//! `k`. Integers are then coded as residuals of order 1 (delta) or 2 (delta of delta), zigzag
//! mapped and Rice coded. A value that is not exactly `n / 10^k` with `|n| <= 2^53` (fractions,
//! `-0.0`, NaNs, infinities) cannot use this coding; the writer switches to XOR.

/// Largest number of decimals the integer coding uses.
pub(crate) const MAX_DECIMALS: u8 = 9;

/// Largest magnitude of the integer `n` (so that `n as f64` is exact).
pub(crate) const MAX_INT: i64 = 1 << 53;

/// `10^k` for `k <= MAX_DECIMALS`; all exact in `f64`.
pub(crate) const POW10: [f64; 10] = [1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9];

/// `10^k` as an integer.
pub(crate) const POW10_I: [i64; 10] = [
    1,
    10,
    100,
    1_000,
    10_000,
    100_000,
    1_000_000,
    10_000_000,
    100_000_000,
    1_000_000_000,
];

/// The integer `n` with `n / 10^k == v` bit-exactly, if there is one with `|n| <= 2^53`.
#[inline]
pub(crate) fn to_scaled(v: f64, k: u8) -> Option<i64> {
    let p = *POW10.get(usize::from(k))?;
    let s = v * p;
    // also rejects NaN and infinities
    if s.is_nan() || s.abs() > MAX_INT as f64 {
        return None;
    }
    // round half away from zero without a libm call: `s - trunc(s)` is exact here
    let t = s as i64;
    let frac = s - t as f64;
    let n = if frac >= 0.5 {
        t + 1
    } else if frac <= -0.5 {
        t - 1
    } else {
        t
    };
    if from_scaled(n, k).to_bits() == v.to_bits() {
        return Some(n);
    }
    None
}

/// The value `n / 10^k`.
#[inline]
pub(crate) fn from_scaled(n: i64, k: u8) -> f64 {
    if k == 0 {
        n as f64
    } else {
        n as f64 / POW10[usize::from(k).min(POW10.len() - 1)]
    }
}

/// The smallest number of decimals `k >= from` that represents `v`.
pub(crate) fn min_decimals(v: f64, from: u8) -> Option<u8> {
    (from..=MAX_DECIMALS).find(|&k| to_scaled(v, k).is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaled_values() {
        assert_eq!(to_scaled(3.0, 0), Some(3));
        assert_eq!(to_scaled(-7.0, 0), Some(-7));
        assert_eq!(to_scaled(0.0, 0), Some(0));
        assert_eq!(to_scaled(-0.0, 0), None);
        assert_eq!(to_scaled(f64::NAN, 0), None);
        assert_eq!(to_scaled(f64::INFINITY, 3), None);
        assert_eq!(to_scaled(412.736, 0), None);
        assert_eq!(to_scaled(412.736, 3), Some(412_736));
        assert_eq!(min_decimals(412.736, 0), Some(3));
        assert_eq!(min_decimals(0.873412, 0), Some(6));
        assert_eq!(min_decimals(1487.31, 0), Some(2));
        assert_eq!(min_decimals(0.07627118644067797, 0), None);
        assert_eq!(min_decimals(1e300, 0), None);
        assert_eq!(to_scaled(9007199254740992.0, 0), Some(MAX_INT));
        assert_eq!(to_scaled(18446744073709551616.0, 0), None);
        for k in 0..=MAX_DECIMALS {
            assert_eq!(POW10[usize::from(k)], POW10_I[usize::from(k)] as f64);
        }
    }
}
