//! Elementwise math functions and the numeric helpers shared by aggregations and functions.

/// One step of Kahan–Neumaier summation: adds `inc` to `sum` with compensation `c`.
pub fn kahan_inc(inc: f64, sum: f64, c: f64) -> (f64, f64) {
    let t = sum + inc;
    let c = if t.is_infinite() {
        0.0
    } else if sum.abs() >= inc.abs() {
        c + ((sum - t) + inc)
    } else {
        c + ((inc - t) + sum)
    };
    (t, c)
}

/// The φ-quantile of `values` (sorted in place) with linear interpolation between closest
/// ranks, as PromQL's `quantile` computes it; NaN for no values or a NaN φ, ±Inf outside
/// [0, 1].
pub fn quantile(q: f64, values: &mut [f64]) -> f64 {
    if values.is_empty() || q.is_nan() {
        return f64::NAN;
    }
    if q < 0.0 {
        return f64::NEG_INFINITY;
    }
    if q > 1.0 {
        return f64::INFINITY;
    }
    values.sort_by(quantile_order);
    quantile_sorted(q, values)
}

/// The order [`quantile`] sorts values in: NaNs first, as Prometheus' value heap orders
/// them; -0 and +0 equal (a stable sort keeps them in input order).
pub fn quantile_order(a: &f64, b: &f64) -> std::cmp::Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => std::cmp::Ordering::Equal,
        (true, false) => std::cmp::Ordering::Less,
        (false, true) => std::cmp::Ordering::Greater,
        _ => a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal),
    }
}

/// [`quantile`] of values already sorted by [`quantile_order`] (not empty, `q` within
/// [0, 1]).
pub fn quantile_sorted(q: f64, values: &[f64]) -> f64 {
    let n = values.len() as f64;
    let rank = q * (n - 1.0);
    let lower = rank.floor().max(0.0);
    let upper = (lower + 1.0).min(n - 1.0);
    let weight = rank - rank.floor();
    values[lower as usize] * (1.0 - weight) + values[upper as usize] * weight
}

/// Go's `math.Max`: NaN if either is NaN, +Inf wins, +0 beats -0.
pub fn go_max(a: f64, b: f64) -> f64 {
    if a == f64::INFINITY || b == f64::INFINITY {
        return f64::INFINITY;
    }
    if a.is_nan() || b.is_nan() {
        return f64::NAN;
    }
    if a == 0.0 && b == 0.0 {
        return if a.is_sign_negative() { b } else { a };
    }
    if a > b {
        a
    } else {
        b
    }
}

/// Go's `math.Min`: NaN if either is NaN, -Inf wins, -0 beats +0.
pub fn go_min(a: f64, b: f64) -> f64 {
    if a == f64::NEG_INFINITY || b == f64::NEG_INFINITY {
        return f64::NEG_INFINITY;
    }
    if a.is_nan() || b.is_nan() {
        return f64::NAN;
    }
    if a == 0.0 && b == 0.0 {
        return if a.is_sign_negative() { a } else { b };
    }
    if a < b {
        a
    } else {
        b
    }
}

fn sgn(v: f64) -> f64 {
    if v < 0.0 {
        -1.0
    } else if v > 0.0 {
        1.0
    } else {
        v
    }
}

/// The elementwise function called `name`, if there is one.
pub fn simple_function(name: &str) -> Option<fn(f64) -> f64> {
    Some(match name {
        "abs" => f64::abs,
        "ceil" => f64::ceil,
        "floor" => f64::floor,
        "exp" => f64::exp,
        "sqrt" => f64::sqrt,
        "ln" => f64::ln,
        "log2" => f64::log2,
        "log10" => f64::log10,
        "sin" => f64::sin,
        "cos" => f64::cos,
        "tan" => f64::tan,
        "asin" => f64::asin,
        "acos" => f64::acos,
        "atan" => f64::atan,
        "sinh" => f64::sinh,
        "cosh" => f64::cosh,
        "tanh" => f64::tanh,
        "asinh" => f64::asinh,
        "acosh" => f64::acosh,
        "atanh" => f64::atanh,
        "rad" => |v| v * std::f64::consts::PI / 180.0,
        "deg" => |v| v * 180.0 / std::f64::consts::PI,
        "sgn" => sgn,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles() {
        let mut v = vec![4.0, 1.0, 3.0, 2.0];
        assert_eq!(quantile(0.5, &mut v), 2.5);
        assert_eq!(quantile(0.0, &mut v), 1.0);
        assert_eq!(quantile(1.0, &mut v), 4.0);
        assert_eq!(quantile(1.5, &mut v), f64::INFINITY);
        assert!(quantile(0.5, &mut []).is_nan());
    }

    #[test]
    fn kahan_compensates() {
        let (mut s, mut c) = (0.0, 0.0);
        for x in [1e100, 1.0, -1e100] {
            (s, c) = kahan_inc(x, s, c);
        }
        assert_eq!(s + c, 1.0);
    }

    #[test]
    fn simple_functions() {
        assert_eq!(simple_function("sgn").unwrap()(-3.0), -1.0);
        assert_eq!(simple_function("deg").unwrap()(std::f64::consts::PI), 180.0);
        assert!(simple_function("nope").is_none());
    }
}
