//! `histogram_quantile`, `histogram_quantiles` and `histogram_fraction` over classic
//! (`le`-bucketed) histograms, with Prometheus' monotonicity fix and annotations.

use std::collections::HashMap;

use inferdb_storage::{Label, Labels};

use crate::eval::{Evaluator, Sample, Vector};
use crate::parser::go_quote;
use crate::value::{fmt_g, Annotation, AnnotationKind, MonotonicityDetails};

/// One classic bucket: upper bound and cumulative count.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bucket {
    /// `le`.
    pub upper_bound: f64,
    /// Cumulative count.
    pub count: f64,
}

/// What [`bucket_quantile`] found besides the quantile.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct QuantileFix {
    /// Whether counts had to be forced to be monotonic.
    pub forced_monotonic: bool,
    /// Smallest bound fixed.
    pub min_bucket: f64,
    /// Largest bound fixed.
    pub max_bucket: f64,
    /// Largest decrease fixed.
    pub max_diff: f64,
}

fn sort_buckets(b: &mut [Bucket]) {
    b.sort_by(|x, y| {
        x.upper_bound
            .partial_cmp(&y.upper_bound)
            .unwrap_or(std::cmp::Ordering::Equal)
    });
}

fn coalesce(b: &mut Vec<Bucket>) {
    let mut out: Vec<Bucket> = Vec::with_capacity(b.len());
    for x in b.iter() {
        match out.last_mut() {
            Some(last) if last.upper_bound == x.upper_bound => last.count += x.count,
            _ => out.push(*x),
        }
    }
    *b = out;
}

fn almost_equal(a: f64, b: f64, eps: f64) -> bool {
    if a.is_nan() && b.is_nan() {
        return true;
    }
    if a == b {
        return true;
    }
    let min_normal = f64::from_bits(0x0010_0000_0000_0000);
    let abs_sum = a.abs() + b.abs();
    let diff = (a - b).abs();
    if a == 0.0 || b == 0.0 || abs_sum < min_normal {
        return diff < eps * min_normal;
    }
    diff / abs_sum.min(f64::MAX) < eps
}

fn ensure_monotonic(b: &mut [Bucket]) -> QuantileFix {
    let mut fix = QuantileFix {
        forced_monotonic: false,
        min_bucket: f64::INFINITY,
        max_bucket: f64::NEG_INFINITY,
        max_diff: 0.0,
    };
    let mut prev = b[0].count;
    for x in b.iter_mut().skip(1) {
        let curr = x.count;
        if curr == prev {
            continue;
        }
        if almost_equal(prev, curr, 1e-12) {
            x.count = prev;
            continue;
        }
        if curr < prev {
            x.count = prev;
            fix.forced_monotonic = true;
            fix.min_bucket = fix.min_bucket.min(x.upper_bound);
            fix.max_bucket = fix.max_bucket.max(x.upper_bound);
            if prev - curr > fix.max_diff {
                fix.max_diff = prev - curr;
            }
            continue;
        }
        prev = curr;
    }
    fix
}

/// The φ-quantile of classic buckets, interpolating linearly within the bucket.
pub fn bucket_quantile(q: f64, mut buckets: Vec<Bucket>) -> (f64, QuantileFix) {
    let none = QuantileFix::default();
    if q.is_nan() {
        return (f64::NAN, none);
    }
    if q < 0.0 {
        return (f64::NEG_INFINITY, none);
    }
    if q > 1.0 {
        return (f64::INFINITY, none);
    }
    sort_buckets(&mut buckets);
    if !buckets
        .last()
        .is_some_and(|b| b.upper_bound == f64::INFINITY)
    {
        return (f64::NAN, none);
    }
    coalesce(&mut buckets);
    let fix = ensure_monotonic(&mut buckets);
    if buckets.len() < 2 {
        return (f64::NAN, fix);
    }
    let observations = buckets[buckets.len() - 1].count;
    if observations == 0.0 {
        return (f64::NAN, fix);
    }
    let mut rank = q * observations;
    let n = buckets.len() - 1;
    let b = buckets[..n].partition_point(|x| x.count < rank);
    let v = if b == n {
        buckets[n - 1].upper_bound
    } else if b == 0 && buckets[0].upper_bound <= 0.0 {
        buckets[0].upper_bound
    } else {
        let mut start = 0.0;
        let end = buckets[b].upper_bound;
        let mut count = buckets[b].count;
        if b > 0 {
            start = buckets[b - 1].upper_bound;
            count -= buckets[b - 1].count;
            rank -= buckets[b - 1].count;
        }
        start + (end - start) * (rank / count)
    };
    (v, fix)
}

/// The fraction of observations between `lower` and `upper`, interpolated within buckets.
pub fn bucket_fraction(lower: f64, upper: f64, mut buckets: Vec<Bucket>) -> f64 {
    sort_buckets(&mut buckets);
    if !buckets
        .last()
        .is_some_and(|b| b.upper_bound == f64::INFINITY)
    {
        return f64::NAN;
    }
    coalesce(&mut buckets);
    let count = buckets[buckets.len() - 1].count;
    if count == 0.0 || lower.is_nan() || upper.is_nan() {
        return f64::NAN;
    }
    if lower >= upper {
        return 0.0;
    }
    let (mut rank, mut lower_rank, mut upper_rank) = (0.0, 0.0, 0.0);
    let (mut lower_set, mut upper_set) = (false, false);
    let mut lower_bound = if buckets[0].upper_bound <= 0.0 {
        f64::NEG_INFINITY
    } else {
        0.0
    };
    for (i, b) in buckets.iter().enumerate() {
        if i > 0 {
            lower_bound = buckets[i - 1].upper_bound;
        }
        let upper_bound = b.upper_bound;
        let interp = |v: f64, rank: f64| -> f64 {
            if lower_bound == f64::NEG_INFINITY {
                return b.count;
            }
            rank + (b.count - rank) * (v - lower_bound) / (upper_bound - lower_bound)
        };
        if !lower_set && lower_bound >= lower {
            lower_rank = rank;
            lower_set = true;
        }
        if !upper_set && lower_bound >= upper {
            upper_rank = rank;
            upper_set = true;
        }
        if lower_set && upper_set {
            break;
        }
        if !lower_set && lower_bound < lower && upper_bound > lower {
            lower_rank = interp(lower, rank);
            lower_set = true;
        }
        if !upper_set && lower_bound < upper && upper_bound > upper {
            upper_rank = interp(upper, rank);
            upper_set = true;
        }
        if lower_set && upper_set {
            break;
        }
        rank = b.count;
    }
    if !lower_set || lower_rank > count {
        lower_rank = count;
    }
    if !upper_set || upper_rank > count {
        upper_rank = count;
    }
    (upper_rank - lower_rank) / count
}

/// Go's `strconv.ParseFloat` for `le` values.
pub(crate) fn parse_le(s: &str) -> Option<f64> {
    if s.is_empty() || s.contains('_') {
        return None;
    }
    s.parse::<f64>().ok()
}

/// Groups classic bucket samples by their labels without `le` (keeping insertion order).
fn group_buckets(ev: &mut Evaluator<'_>, v: Vector, pos: usize) -> Vec<(Labels, Vec<Bucket>)> {
    let mut index: HashMap<u64, usize> = HashMap::new();
    let mut groups: Vec<(Labels, Vec<Bucket>)> = Vec::new();
    for s in v {
        let le = s.metric.get("le").unwrap_or("");
        let Some(ub) = parse_le(le) else {
            ev.annos.warn(bad_le_message(&s.metric), Some(pos));
            continue;
        };
        let key = bucket_group_key(&s.metric);
        let i = match index.get(&key) {
            Some(&i) => i,
            None => {
                index.insert(key, groups.len());
                groups.push((s.metric.without("le"), Vec::new()));
                groups.len() - 1
            }
        };
        groups[i].1.push(Bucket {
            upper_bound: ub,
            count: s.f,
        });
    }
    groups
}

fn check_quantile(ev: &mut Evaluator<'_>, q: f64, pos: usize) {
    if q.is_nan() || !(0.0..=1.0).contains(&q) {
        ev.annos.warn(
            format!("quantile value should be between 0 and 1, got {}", fmt_g(q)),
            Some(pos),
        );
    }
}

fn monotonicity_info(
    ev: &mut Evaluator<'_>,
    metric: &Labels,
    fix: &QuantileFix,
    pos: usize,
    ts: i64,
) {
    ev.annos.add(monotonicity_annotation(metric, fix, pos, ts));
}

/// The info that `histogram_quantile` had to fix bucket counts of `metric` at `ts`.
pub(crate) fn monotonicity_annotation(
    metric: &Labels,
    fix: &QuantileFix,
    pos: usize,
    ts: i64,
) -> Annotation {
    let mut msg = "PromQL info: input to histogram_quantile needed to be fixed for monotonicity (see https://prometheus.io/docs/prometheus/latest/querying/functions/#histogram_quantile)".to_string();
    if let Some(n) = metric.metric_name() {
        msg.push_str(&format!(" for metric name {}", go_quote(n)));
    }
    Annotation {
        kind: AnnotationKind::Info,
        message: msg,
        pos: Some(pos),
        monotonicity: Some(MonotonicityDetails {
            min_ts: ts,
            max_ts: ts,
            min_bucket: fix.min_bucket,
            max_bucket: fix.max_bucket,
            max_diff: fix.max_diff,
            count: 1,
        }),
    }
}

/// The warning for a malformed or missing `le` of a bucket series.
pub(crate) fn bad_le_message(metric: &Labels) -> String {
    let le = metric.get("le").unwrap_or("");
    let mut msg = format!(
        "bucket label \"le\" is missing or has a malformed value of {}",
        go_quote(le)
    );
    if let Some(n) = metric.metric_name() {
        msg.push_str(&format!(" for metric name {}", go_quote(n)));
    }
    msg
}

/// The hash that groups bucket series: their labels without `le`.
pub(crate) fn bucket_group_key(metric: &Labels) -> u64 {
    crate::eval::aggregate::hash_labels_where(metric, |name| name != "le")
}

/// `histogram_quantile(q, buckets)`.
pub(crate) fn histogram_quantile(
    ev: &mut Evaluator<'_>,
    q: f64,
    v: Vector,
    q_pos: usize,
    v_pos: usize,
    ts: i64,
) -> Vector {
    check_quantile(ev, q, q_pos);
    let mut out = Vec::new();
    for (metric, buckets) in group_buckets(ev, v, v_pos) {
        if buckets.is_empty() {
            continue;
        }
        let (val, fix) = bucket_quantile(q, buckets);
        if fix.forced_monotonic {
            monotonicity_info(ev, &metric, &fix, v_pos, ts);
        }
        out.push(Sample {
            metric: metric.into(),
            t: ts,
            f: val,
            drop_name: true,
        });
    }
    out
}

/// `FormatOpenMetricsFloat`: like `%g` but integral values get a `.0`.
fn openmetrics_float(f: f64) -> String {
    let s = fmt_g(f);
    if f.is_nan() || f.is_infinite() || s.contains('e') || s.contains('.') {
        s
    } else {
        s + ".0"
    }
}

/// `histogram_quantiles(buckets, "label", q1, q2, ...)`.
pub(crate) fn histogram_quantiles(
    ev: &mut Evaluator<'_>,
    v: Vector,
    label: &str,
    qs: &[(f64, usize)],
    v_pos: usize,
    ts: i64,
) -> Vector {
    for &(q, pos) in qs {
        check_quantile(ev, q, pos);
    }
    let groups = group_buckets(ev, v, v_pos);
    let mut out = Vec::new();
    for &(q, _) in qs {
        for (metric, buckets) in &groups {
            if buckets.is_empty() {
                continue;
            }
            let (val, fix) = bucket_quantile(q, buckets.clone());
            if fix.forced_monotonic {
                monotonicity_info(ev, metric, &fix, v_pos, ts);
            }
            let mut l: Vec<Label> = metric.iter().filter(|x| x.name != label).cloned().collect();
            l.push(Label::new(label, openmetrics_float(q)));
            out.push(Sample {
                metric: Labels::new(l).into(),
                t: ts,
                f: val,
                drop_name: true,
            });
        }
    }
    out
}

/// `histogram_fraction(lower, upper, buckets)`.
pub(crate) fn histogram_fraction(
    ev: &mut Evaluator<'_>,
    lower: f64,
    upper: f64,
    v: Vector,
    v_pos: usize,
    ts: i64,
) -> Vector {
    let mut out = Vec::new();
    for (metric, buckets) in group_buckets(ev, v, v_pos) {
        if buckets.is_empty() {
            continue;
        }
        out.push(Sample {
            metric: metric.into(),
            t: ts,
            f: bucket_fraction(lower, upper, buckets),
            drop_name: true,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(v: &[(f64, f64)]) -> Vec<Bucket> {
        v.iter()
            .map(|&(upper_bound, count)| Bucket { upper_bound, count })
            .collect()
    }

    #[test]
    fn quantile_interpolates() {
        let bs = b(&[(0.1, 10.0), (0.5, 30.0), (1.0, 40.0), (f64::INFINITY, 40.0)]);
        let (q, fix) = bucket_quantile(0.5, bs.clone());
        // rank 20 falls in (0.1, 0.5]: 0.1 + 0.4 * (10/20)
        assert!((q - 0.3).abs() < 1e-12);
        assert!(!fix.forced_monotonic);
        assert_eq!(bucket_quantile(1.0, bs.clone()).0, 1.0);
        assert_eq!(bucket_quantile(2.0, bs.clone()).0, f64::INFINITY);
        assert_eq!(bucket_quantile(-1.0, bs.clone()).0, f64::NEG_INFINITY);
        // Missing +Inf bucket.
        assert!(bucket_quantile(0.5, b(&[(1.0, 3.0)])).0.is_nan());
        // Highest bucket is +Inf: the quantile is the largest finite bound.
        let (top, _) = bucket_quantile(0.99, b(&[(1.0, 1.0), (f64::INFINITY, 10.0)]));
        assert_eq!(top, 1.0);
    }

    #[test]
    fn monotonicity_is_fixed() {
        let bs = b(&[(1.0, 10.0), (2.0, 8.0), (f64::INFINITY, 12.0)]);
        let (_, fix) = bucket_quantile(0.5, bs);
        assert!(fix.forced_monotonic);
        assert_eq!(fix.min_bucket, 2.0);
        assert_eq!(fix.max_diff, 2.0);
    }

    #[test]
    fn fractions() {
        let bs = b(&[(1.0, 10.0), (2.0, 20.0), (f64::INFINITY, 20.0)]);
        assert!((bucket_fraction(0.0, 1.0, bs.clone()) - 0.5).abs() < 1e-12);
        assert!((bucket_fraction(1.0, 1.5, bs.clone()) - 0.25).abs() < 1e-12);
        assert_eq!(bucket_fraction(2.0, 1.0, bs), 0.0);
        assert_eq!(openmetrics_float(1.0), "1.0");
        assert_eq!(openmetrics_float(0.5), "0.5");
    }
}
