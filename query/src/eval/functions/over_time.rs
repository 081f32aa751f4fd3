//! The `*_over_time` family over one series' points in a window.

use super::math::{kahan_inc, quantile};
use crate::value::FPoint;

/// `avg_over_time`: Kahan-summed mean, switching to an incremental mean on overflow.
pub fn avg(pts: &[FPoint]) -> f64 {
    let mut sum = pts[0].f;
    let mut count = 1.0;
    let (mut mean, mut c) = (0.0, 0.0);
    let mut incremental = false;
    for (i, p) in pts[1..].iter().enumerate() {
        count = (i + 2) as f64;
        if !incremental {
            let (ns, nc) = kahan_inc(p.f, sum, c);
            if !ns.is_infinite() {
                sum = ns;
                c = nc;
                continue;
            }
            incremental = true;
            mean = sum / (count - 1.0);
            c /= count - 1.0;
        }
        let q = (count - 1.0) / count;
        (mean, c) = kahan_inc(p.f / count, q * mean, q * c);
    }
    if incremental {
        mean + c
    } else {
        sum / count + c / count
    }
}

/// `sum_over_time`, Kahan-summed.
pub fn sum(pts: &[FPoint]) -> f64 {
    let (mut s, mut c) = (0.0, 0.0);
    for p in pts {
        (s, c) = kahan_inc(p.f, s, c);
    }
    if s.is_infinite() {
        s
    } else {
        s + c
    }
}

/// Scans for the extreme value by `better(cur, best)`: returns it and its time in seconds.
pub fn compare(pts: &[FPoint], better: impl Fn(f64, f64) -> bool) -> (f64, f64) {
    let mut best = pts[0].f;
    let mut t = pts[0].t;
    for p in pts {
        if better(p.f, best) {
            best = p.f;
            t = p.t;
        }
    }
    (best, t as f64 / 1000.0)
}

/// Population variance (`stdvar_over_time`), Welford with Kahan compensation.
pub fn variance(pts: &[FPoint]) -> f64 {
    let (mut count, mut mean, mut c_mean, mut aux, mut c_aux) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for p in pts {
        count += 1.0;
        let delta = p.f - (mean + c_mean);
        (mean, c_mean) = kahan_inc(delta / count, mean, c_mean);
        (aux, c_aux) = kahan_inc(delta * (p.f - (mean + c_mean)), aux, c_aux);
    }
    (aux + c_aux) / count
}

/// `mad_over_time`: median absolute deviation from the median.
pub fn mad(pts: &[FPoint]) -> f64 {
    if pts.iter().any(|p| p.f.is_nan()) {
        return f64::NAN;
    }
    let mut vals: Vec<f64> = pts.iter().map(|p| p.f).collect();
    let median = quantile(0.5, &mut vals);
    for v in vals.iter_mut() {
        *v = (*v - median).abs();
    }
    quantile(0.5, &mut vals)
}

/// `double_exponential_smoothing` (Holt linear) with smoothing factor `sf` and trend factor
/// `tf`; `None` with fewer than two points.
pub fn double_exponential_smoothing(pts: &[FPoint], sf: f64, tf: f64) -> Option<f64> {
    if pts.len() < 2 {
        return None;
    }
    let (mut s0, mut s1) = (0.0, pts[0].f);
    let mut b = pts[1].f - pts[0].f;
    for (i, p) in pts.iter().enumerate().skip(1) {
        let x = sf * p.f;
        if i > 1 {
            b = tf * (s1 - s0) + (1.0 - tf) * b;
        }
        let y = (1.0 - sf) * (s1 + b);
        s0 = s1;
        s1 = x + y;
    }
    Some(s1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pts(v: &[f64]) -> Vec<FPoint> {
        v.iter()
            .enumerate()
            .map(|(i, &f)| FPoint {
                t: i as i64 * 1000,
                f,
            })
            .collect()
    }

    #[test]
    fn basic_aggregates() {
        let p = pts(&[1.0, 2.0, 3.0, 4.0]);
        assert_eq!(avg(&p), 2.5);
        assert_eq!(sum(&p), 10.0);
        assert_eq!(variance(&p), 1.25);
        assert_eq!(compare(&p, |c, m| c > m), (4.0, 3.0));
        assert_eq!(compare(&p, |c, m| c < m), (1.0, 0.0));
        assert_eq!(mad(&pts(&[1.0, 1.0, 2.0, 2.0, 4.0, 6.0, 9.0])), 1.0);
    }

    #[test]
    fn avg_survives_overflow() {
        let p = pts(&[f64::MAX, f64::MAX]);
        assert_eq!(avg(&p), f64::MAX);
    }

    #[test]
    fn holt_linear() {
        let p = pts(&[1.0, 2.0, 3.0]);
        // A straight line is predicted exactly.
        assert!((double_exponential_smoothing(&p, 0.5, 0.5).unwrap() - 3.0).abs() < 1e-12);
        assert!(double_exponential_smoothing(&p[..1], 0.5, 0.5).is_none());
    }
}
