//! `rate`, `increase`, `delta` (with Prometheus' extrapolation), `irate`, `idelta`, `deriv`,
//! `predict_linear`, `resets` and `changes` over one series' points in a window.

use super::math::kahan_inc;
use crate::value::FPoint;

/// `rate` (`is_counter && is_rate`), `increase` (`is_counter`) or `delta` over the points in
/// the window `(range_start, range_end]`, extrapolated towards the window's edges as
/// Prometheus does. `None` with fewer than two points.
pub fn extrapolated_rate(
    pts: &[FPoint],
    range_start: i64,
    range_end: i64,
    range_ms: i64,
    is_counter: bool,
    is_rate: bool,
) -> Option<f64> {
    if pts.len() < 2 {
        return None;
    }
    let first = pts[0];
    let last = pts[pts.len() - 1];
    let mut result = last.f - first.f;
    if is_counter {
        for w in pts.windows(2) {
            if w[1].f < w[0].f {
                result += w[0].f;
            }
        }
    }
    Some(extrapolate(
        first,
        last,
        pts.len(),
        result,
        range_start,
        range_end,
        range_ms,
        is_counter,
        is_rate,
    ))
}

/// The extrapolation of [`extrapolated_rate`] once the raw difference `result` (counter
/// resets included) of the `n >= 2` points from `first` to `last` is known.
#[allow(clippy::too_many_arguments)]
#[inline]
pub fn extrapolate(
    first: FPoint,
    last: FPoint,
    n: usize,
    result: f64,
    range_start: i64,
    range_end: i64,
    range_ms: i64,
    is_counter: bool,
    is_rate: bool,
) -> f64 {
    let n_minus_one = (n - 1) as f64;
    let mut duration_to_start = (first.t - range_start) as f64 / 1000.0;
    let mut duration_to_end = (range_end - last.t) as f64 / 1000.0;
    let sampled_interval = (last.t - first.t) as f64 / 1000.0;
    let avg_between = sampled_interval / n_minus_one;
    let threshold = avg_between * 1.1;
    if duration_to_start >= threshold {
        duration_to_start = avg_between / 2.0;
    }
    if is_counter {
        let mut duration_to_zero = duration_to_start;
        if result > 0.0 && first.f >= 0.0 {
            duration_to_zero = sampled_interval * (first.f / result);
        }
        if duration_to_zero < duration_to_start {
            duration_to_start = duration_to_zero;
        }
    }
    if duration_to_end >= threshold {
        duration_to_end = avg_between / 2.0;
    }
    let mut factor = 1.0;
    if sampled_interval != 0.0 {
        factor = (sampled_interval + duration_to_start + duration_to_end) / sampled_interval;
    }
    if is_rate {
        factor /= range_ms as f64 / 1000.0;
    }
    result * factor
}

/// `irate` (`is_rate`) or `idelta` from the last two points.
pub fn instant_value(pts: &[FPoint], is_rate: bool) -> Option<f64> {
    if pts.len() < 2 {
        return None;
    }
    let a = pts[pts.len() - 2];
    let b = pts[pts.len() - 1];
    let interval = b.t - a.t;
    if interval == 0 {
        return None;
    }
    let mut v = if is_rate && b.f < a.f { b.f } else { b.f - a.f };
    if is_rate {
        v /= interval as f64 / 1000.0;
    }
    Some(v)
}

/// Least-squares slope and intercept at `intercept_time` (ms), with Kahan sums.
pub fn linear_regression(pts: &[FPoint], intercept_time: i64) -> (f64, f64) {
    linear_regression_whole_seconds(pts, intercept_time)
        .unwrap_or_else(|| linear_regression_kahan(pts, intercept_time))
}

/// [`linear_regression`] with all four sums Kahan-summed (any timestamps).
fn linear_regression_kahan(pts: &[FPoint], intercept_time: i64) -> (f64, f64) {
    let (mut n, mut sum_x, mut c_x, mut sum_y, mut c_y) = (0.0, 0.0, 0.0, 0.0, 0.0);
    let (mut sum_xy, mut c_xy, mut sum_x2, mut c_x2) = (0.0, 0.0, 0.0, 0.0);
    let init_y = pts[0].f;
    let mut const_y = true;
    for (i, p) in pts.iter().enumerate() {
        if const_y && i > 0 && p.f != init_y {
            const_y = false;
        }
        n += 1.0;
        let x = (p.t - intercept_time) as f64 / 1e3;
        (sum_x, c_x) = kahan_inc(x, sum_x, c_x);
        (sum_y, c_y) = kahan_inc(p.f, sum_y, c_y);
        (sum_xy, c_xy) = kahan_inc(x * p.f, sum_xy, c_xy);
        (sum_x2, c_x2) = kahan_inc(x * x, sum_x2, c_x2);
    }
    if const_y {
        if init_y.is_infinite() {
            return (f64::NAN, f64::NAN);
        }
        return (0.0, init_y);
    }
    sum_x += c_x;
    sum_y += c_y;
    sum_xy += c_xy;
    sum_x2 += c_x2;
    let cov_xy = sum_xy - sum_x * sum_y / n;
    let var_x = sum_x2 - sum_x * sum_x / n;
    let slope = cov_xy / var_x;
    let intercept = sum_y / n - slope * sum_x / n;
    (slope, intercept)
}

/// [`linear_regression`] when every point lies a whole number of seconds from
/// `intercept_time` (regular scrapes and `deriv`, whose intercept is the window's first
/// point) and `n * max |x|^2 < 2^53`: then every x is an integer, every partial sum of x and
/// of x^2 is exact, their Kahan corrections stay +0, and the two sums are the integer sums,
/// computed here as such; y and xy are Kahan-summed as there. The same result to the bit.
fn linear_regression_whole_seconds(pts: &[FPoint], intercept_time: i64) -> Option<(f64, f64)> {
    // One pass; the integer sums are used only once every x has been seen to be whole and
    // small enough (wrapping arithmetic until then: a discarded sum may overflow).
    let (mut sum_x, mut sum_x2, mut max_abs) = (0i64, 0i64, 0i64);
    let (mut sum_y, mut c_y, mut sum_xy, mut c_xy) = (0.0, 0.0, 0.0, 0.0);
    let init_y = pts[0].f;
    let mut const_y = true;
    for (i, p) in pts.iter().enumerate() {
        let d = p.t.checked_sub(intercept_time)?;
        if d % 1000 != 0 {
            return None;
        }
        let xi = d / 1000;
        max_abs = max_abs.max(xi.abs());
        if const_y && i > 0 && p.f != init_y {
            const_y = false;
        }
        let x = xi as f64;
        sum_x = sum_x.wrapping_add(xi);
        sum_x2 = sum_x2.wrapping_add(xi.wrapping_mul(xi));
        (sum_y, c_y) = kahan_inc(p.f, sum_y, c_y);
        (sum_xy, c_xy) = kahan_inc(x * p.f, sum_xy, c_xy);
    }
    if (max_abs as i128) * (max_abs as i128) * (pts.len() as i128) >= 1 << 53 {
        return None;
    }
    if const_y {
        if init_y.is_infinite() {
            return Some((f64::NAN, f64::NAN));
        }
        return Some((0.0, init_y));
    }
    let n = pts.len() as f64;
    let (sum_x, sum_x2) = (sum_x as f64, sum_x2 as f64);
    sum_y += c_y;
    sum_xy += c_xy;
    let cov_xy = sum_xy - sum_x * sum_y / n;
    let var_x = sum_x2 - sum_x * sum_x / n;
    let slope = cov_xy / var_x;
    let intercept = sum_y / n - slope * sum_x / n;
    Some((slope, intercept))
}

/// `deriv`: the per-second slope of the least-squares line.
pub fn deriv(pts: &[FPoint]) -> Option<f64> {
    if pts.len() < 2 {
        return None;
    }
    Some(linear_regression(pts, pts[0].t).0)
}

/// `predict_linear`: the least-squares line's value `duration` seconds after `ts`.
pub fn predict_linear(pts: &[FPoint], duration: f64, ts: i64) -> Option<f64> {
    if pts.len() < 2 {
        return None;
    }
    let (slope, intercept) = linear_regression(pts, ts);
    Some(slope * duration + intercept)
}

/// `resets`: how many times the value decreased.
pub fn resets(pts: &[FPoint]) -> f64 {
    pts.windows(2).filter(|w| w[1].f < w[0].f).count() as f64
}

/// `changes`: how many times the value changed (NaN to NaN is no change).
pub fn changes(pts: &[FPoint]) -> f64 {
    pts.windows(2)
        .filter(|w| w[1].f != w[0].f && !(w[1].f.is_nan() && w[0].f.is_nan()))
        .count() as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pts(v: &[(i64, f64)]) -> Vec<FPoint> {
        v.iter().map(|&(t, f)| FPoint { t, f }).collect()
    }

    #[test]
    fn rate_extrapolates_to_window_edges() {
        // Samples every 15 s over a 60 s window ending at 135 s.
        let p = pts(&[
            (90_000, 180.0),
            (105_000, 210.0),
            (120_000, 240.0),
            (135_000, 270.0),
        ]);
        let r = extrapolated_rate(&p, 75_000, 135_000, 60_000, true, true).unwrap();
        assert!((r - 2.0).abs() < 1e-12);
        let inc = extrapolated_rate(&p, 75_000, 135_000, 60_000, true, false).unwrap();
        assert!((inc - 120.0).abs() < 1e-9);
    }

    #[test]
    fn rate_handles_counter_resets_and_zero_point() {
        let p = pts(&[(10_000, 5.0), (20_000, 10.0), (30_000, 2.0), (40_000, 7.0)]);
        // increase = 7 - 5 + 10 = 12 over 30 s sampled, extrapolated 10 s to the start (the
        // zero point, 12.5 s back, is further away).
        let inc = extrapolated_rate(&p, 0, 40_000, 40_000, true, false).unwrap();
        assert!((inc - 12.0 * 40.0 / 30.0).abs() < 1e-9);
        assert_eq!(resets(&p), 1.0);
        assert_eq!(changes(&p), 3.0);
    }

    #[test]
    fn delta_is_not_a_counter() {
        let p = pts(&[(0, 10.0), (60_000, 4.0)]);
        let d = extrapolated_rate(&p, -60_000, 60_000, 120_000, false, false).unwrap();
        // sampled 60 s, start gap 60 s >= 66 s? no: threshold 66, so extrapolate fully.
        assert!((d - (-6.0 * 2.0)).abs() < 1e-9);
        assert!(extrapolated_rate(&p[..1], 0, 1, 1, false, false).is_none());
    }

    #[test]
    fn whole_seconds_regression_equals_kahan_regression() {
        // xorshift: values of all magnitudes and signs (where Kahan's correction matters),
        // repeated values, whole-second offsets with gaps, intercepts before and inside
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut fast = 0;
        for case in 0..5000 {
            let n = 2 + (next() % 60) as usize;
            let mut t = 1_700_000_000_000i64 + (next() % 100) as i64 * 1000;
            let mut p = Vec::with_capacity(n);
            for _ in 0..n {
                let r = next();
                let f = match r % 5 {
                    0 => (r >> 8) as f64 / 1e3,
                    1 => ((r >> 8) % 7) as f64,
                    2 => -((r >> 11) as f64) * 1e-9,
                    3 => f64::from_bits(0x4000_0000_0000_0000 | (r >> 12)) * 1e12,
                    _ => 0.1 * (r % 1000) as f64,
                };
                p.push(FPoint { t, f });
                t += 1000 * (1 + (next() % 30) as i64);
            }
            let intercept = if case % 2 == 0 { p[0].t } else { p[n / 2].t };
            if linear_regression_whole_seconds(&p, intercept).is_some() {
                fast += 1;
            }
            let (a, b) = linear_regression(&p, intercept);
            let (x, y) = linear_regression_kahan(&p, intercept);
            assert_eq!(a.to_bits(), x.to_bits(), "slope, case {case}: {p:?}");
            assert_eq!(b.to_bits(), y.to_bits(), "intercept, case {case}: {p:?}");
        }
        assert_eq!(fast, 5000);
        // not whole seconds apart: the Kahan sums
        let p = pts(&[(0, 1.0), (1500, 2.0), (3000, 4.0)]);
        assert!(linear_regression_whole_seconds(&p, 0).is_none());
    }

    #[test]
    fn irate_and_regression() {
        let p = pts(&[(0, 1.0), (10_000, 5.0), (20_000, 2.0)]);
        assert_eq!(instant_value(&p, true), Some(0.2));
        assert_eq!(instant_value(&p, false), Some(-3.0));
        let line = pts(&[(0, 1.0), (10_000, 2.0), (20_000, 3.0)]);
        assert!((deriv(&line).unwrap() - 0.1).abs() < 1e-12);
        assert!((predict_linear(&line, 10.0, 20_000).unwrap() - 4.0).abs() < 1e-12);
    }
}
