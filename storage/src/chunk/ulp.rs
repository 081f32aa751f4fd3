//! Float values as steps in units of the last place: value `v` after `prev` is stored as the
//! integer `k` with `prev + k * unit(prev) == v` bit for bit, where `unit(prev)` is the
//! spacing of the floats in `prev`'s binade (its ulp).
//!
//! A cumulative float counter (a histogram's `_sum`) grows by increments much smaller than
//! itself: `v - prev` is then a multiple of `unit(prev)` (both values are multiples of it
//! while `v` is not in a lower binade), and `k` needs about `log2((v - prev) / unit(prev))`
//! bits where the XOR of the two values' bits costs the mantissa below their first
//! differing bit plus the window bookkeeping. A value that no `k` reaches exactly (a counter
//! reset into a lower binade, NaN, infinities) is stored raw, as an exception.

/// The spacing of the floats around `prev` (for zero and subnormals the smallest subnormal;
/// for infinities and NaN `2^972`, which no finite step reaches exactly).
#[inline(always)]
pub(crate) fn unit(prev: f64) -> f64 {
    let e = (prev.to_bits() >> 52) & 0x7ff;
    if e > 52 {
        f64::from_bits((e - 52) << 52)
    } else {
        f64::from_bits(1u64 << (e.max(1) - 1))
    }
}

/// The value `k` units of the last place after `prev` (what the decoder computes).
#[inline(always)]
pub(crate) fn apply(prev: f64, k: i64) -> f64 {
    prev + (k as f64) * unit(prev)
}

/// The largest step coded: `|k| <= 2^53`, so that `k as f64` is exact.
const MAX_STEP: f64 = 9_007_199_254_740_992.0;

/// The step `k` with [`apply`]`(prev, k)` having exactly the bits of `v`, if there is one.
#[inline]
pub(crate) fn step(prev: f64, v: f64) -> Option<i64> {
    if !prev.is_finite() || !v.is_finite() {
        return None;
    }
    // finite (or infinite when `v - prev` overflows), never NaN: both values are finite
    let k = ((v - prev) / unit(prev)).round();
    if k.abs() > MAX_STEP {
        return None;
    }
    let k = k as i64;
    (apply(prev, k).to_bits() == v.to_bits()).then_some(k)
}

/// The most trailing zero bits a chunk drops from its steps (6 bits in the header; a step
/// has at most 53 significant bits).
pub(crate) const MAX_SHIFT: u8 = 63;

/// The trailing zero bits every non-zero step in `steps` has (0 when all are zero): steps of
/// a sum of clock differences are multiples of the clock's spacing, and of whole numbers
/// multiples of one, so their low bits are zero and need not be stored.
pub(crate) fn common_shift(steps: impl IntoIterator<Item = i64>) -> u8 {
    let tz = steps
        .into_iter()
        .filter(|&k| k != 0)
        .map(i64::trailing_zeros)
        .min()
        .unwrap_or(0);
    // a non-zero i64 has at most 63 (`MAX_SHIFT`) trailing zeros
    tz as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_round_trip_and_refuse_what_they_cannot_reach() {
        assert_eq!(unit(1.0), f64::EPSILON);
        assert_eq!(unit(1.5), f64::EPSILON);
        assert_eq!(unit(0.0), f64::from_bits(1));
        assert_eq!(unit(f64::MIN_POSITIVE), f64::from_bits(1));
        assert_eq!(step(1.0, 1.0), Some(0));
        assert_eq!(step(1.0, 1.0 + f64::EPSILON), Some(1));
        // into the next binade: the unit is still the lower one's
        assert_eq!(step(1.5, 2.5), Some(1 << 52));
        // a sum growing by a float increment
        let (s, d) = (4590.338931844688f64, 0.07627118644067797f64);
        let k = step(s, s + d).unwrap();
        assert_eq!(apply(s, k).to_bits(), (s + d).to_bits());
        assert!(k.unsigned_abs() < 1 << 40);
        // a reset into a lower binade with bits below the old unit
        assert_eq!(step(4590.338931844688, 0.1), None);
        for (p, v) in [
            (1.0, f64::NAN),
            (f64::NAN, 1.0),
            (1.0, f64::INFINITY),
            (f64::INFINITY, f64::INFINITY),
            (1e300, -1e300),
        ] {
            assert_eq!(step(p, v), None, "{p} -> {v}");
        }
        // -0.0 after 0.0 differs in its bits only
        assert_eq!(step(0.0, -0.0), None);
        assert_eq!(step(-0.0, 0.0), Some(0));
        assert_eq!(step(-0.0, -0.0), None);
        for k in [-5i64, -1, 0, 1, 7, 1 << 40] {
            let v = apply(-2.75, k);
            assert_eq!(step(-2.75, v), Some(k));
        }
    }
}
