//! Aggregation operators: `sum avg min max count group stddev stdvar quantile topk bottomk
//! count_values limitk limit_ratio` with `by`/`without`.

use std::collections::HashMap;

use inferdb_storage::labels::METRIC_NAME;
use inferdb_storage::{Label, Labels};

use super::functions::math::{kahan_inc, quantile};
use super::{err, EvalResult, Evaluator, Val};
use super::{Sample, Vector};
use crate::ast::{AggregateExpr, AggregateOp, Expr, ExprKind};
use crate::value::fmt_g;

fn unwrap_paren(mut e: &Expr) -> &Expr {
    while let ExprKind::Paren(inner) = &e.kind {
        e = inner;
    }
    e
}

/// The grouping key and output labels of a series.
pub(crate) fn group_labels(metric: &Labels, grouping: &[String], without: bool) -> Labels {
    if without {
        Labels::from_sorted_unchecked(
            metric
                .iter()
                .filter(|l| l.name != METRIC_NAME && !grouping.iter().any(|g| g == &l.name))
                .cloned()
                .collect(),
        )
    } else if grouping.is_empty() {
        Labels::default()
    } else {
        Labels::from_sorted_unchecked(
            metric
                .iter()
                .filter(|l| grouping.iter().any(|g| g == &l.name))
                .cloned()
                .collect(),
        )
    }
}

/// A hash of the labels that decide a series' group (as Prometheus groups by a hash).
pub(crate) fn group_key(metric: &Labels, grouping: &[String], without: bool) -> u64 {
    hash_labels_where(metric, |name| {
        let listed = grouping.iter().any(|g| g == name);
        if without {
            !listed && name != METRIC_NAME
        } else {
            listed
        }
    })
}

thread_local! {
    static HASH_BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// xxHash64 of the labels of `metric` whose name passes `include`, each written as
/// `name 0xff value 0xff` (as Prometheus' `HashForLabels`; 0xff never occurs in UTF-8, so
/// different label sets give different bytes).
pub(crate) fn hash_labels_where(metric: &Labels, include: impl Fn(&str) -> bool) -> u64 {
    HASH_BUF.with_borrow_mut(|b| {
        b.clear();
        for l in metric.iter() {
            if include(&l.name) {
                b.extend_from_slice(l.name.as_bytes());
                b.push(0xff);
                b.extend_from_slice(l.value.as_bytes());
                b.push(0xff);
            }
        }
        twox_hash::XxHash64::oneshot(0, b)
    })
}

/// The running state of one group of `sum avg min max count group stddev stdvar` (the
/// same arithmetic whether a step's vector or a column of steps is aggregated).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Acc {
    value: f64,
    mean: f64,
    kahan_c: f64,
    count: f64,
    incremental_mean: bool,
}

impl Acc {
    /// The state after a group's first value `f`.
    pub(crate) fn first(op: AggregateOp, f: f64) -> Acc {
        let mut g = Acc {
            value: f,
            mean: f,
            count: 1.0,
            ..Default::default()
        };
        match op {
            AggregateOp::Stdvar | AggregateOp::Stddev => {
                g.value = if f.is_nan() || f.is_infinite() {
                    f64::NAN
                } else {
                    0.0
                };
            }
            AggregateOp::Group => g.value = 1.0,
            _ => {}
        }
        g
    }

    /// Adds the group's next value `f`.
    #[inline]
    pub(crate) fn add(&mut self, op: AggregateOp, f: f64) {
        let g = self;
        match op {
            AggregateOp::Sum => {
                let (v, c) = kahan_inc(f, g.value, g.kahan_c);
                g.value = v;
                g.kahan_c = c;
            }
            AggregateOp::Avg => {
                g.count += 1.0;
                if !g.incremental_mean {
                    let (v, c) = kahan_inc(f, g.value, g.kahan_c);
                    if !v.is_infinite() {
                        g.value = v;
                        g.kahan_c = c;
                        return;
                    }
                    g.incremental_mean = true;
                    g.mean = g.value / (g.count - 1.0);
                    g.kahan_c /= g.count - 1.0;
                }
                let qq = (g.count - 1.0) / g.count;
                let (m, c) = kahan_inc(f / g.count, qq * g.mean, qq * g.kahan_c);
                g.mean = m;
                g.kahan_c = c;
            }
            AggregateOp::Group => {}
            AggregateOp::Max if g.value < f || g.value.is_nan() => g.value = f,
            AggregateOp::Min if g.value > f || g.value.is_nan() => g.value = f,
            AggregateOp::Count => g.count += 1.0,
            AggregateOp::Stdvar | AggregateOp::Stddev => {
                g.count += 1.0;
                let delta = f - g.mean;
                g.mean += delta / g.count;
                g.value += delta * (f - g.mean);
            }
            _ => {}
        }
    }

    /// The group's result (not for `quantile`, which keeps its values).
    pub(crate) fn finish(&self, op: AggregateOp) -> f64 {
        let g = self;
        match op {
            AggregateOp::Avg => {
                if g.incremental_mean {
                    g.mean + g.kahan_c
                } else {
                    g.value / g.count + g.kahan_c / g.count
                }
            }
            AggregateOp::Count => g.count,
            AggregateOp::Stdvar => g.value / g.count,
            AggregateOp::Stddev => (g.value / g.count).sqrt(),
            AggregateOp::Sum => g.value + g.kahan_c,
            _ => g.value,
        }
    }
}

#[derive(Default)]
struct Group {
    labels: super::Metric,
    acc: Acc,
    drop_name: bool,
    values: Vec<f64>,
}

pub(crate) fn eval_aggregate(
    ev: &mut Evaluator<'_>,
    a: &AggregateExpr,
    ts: i64,
) -> EvalResult<Val> {
    let param = match &a.param {
        Some(p) => Some((ev.eval(unwrap_paren(p), ts)?, p.span.start)),
        None => None,
    };
    let input = match ev.eval(&a.expr, ts)? {
        Val::Vector(v) => v,
        other => {
            return err(format!(
                "expected type instant vector in aggregation expression, got {}",
                other.type_name()
            ))
        }
    };
    let mut grouping = a.grouping.clone();
    grouping.sort();
    let scalar_param = |p: &Option<(Val, usize)>| -> f64 {
        match p {
            Some((Val::Scalar(f), _)) => *f,
            _ => f64::NAN,
        }
    };
    let param_pos = param.as_ref().map(|p| p.1);
    let out = match a.op {
        AggregateOp::CountValues => {
            let label = match &param {
                Some((Val::Str(s), _)) => s.clone(),
                _ => return err("count_values requires a string parameter"),
            };
            if label.is_empty() || !crate::parser::is_valid_utf8(&label) {
                return err(format!(
                    "invalid label name {}",
                    crate::parser::go_quote(&label)
                ));
            }
            if !a.without {
                grouping.push(label.clone());
                grouping.sort();
            }
            count_values(&input, &label, &grouping, a.without, ts)
        }
        AggregateOp::Topk | AggregateOp::Bottomk | AggregateOp::Limitk => {
            let k = scalar_param(&param);
            if k.is_nan() {
                return err("Parameter value is NaN");
            }
            if k < 1.0 {
                return Ok(Val::Vector(vec![]));
            }
            if k >= 9.223372036854776e18 {
                return err(format!("Scalar value {} overflows int64", fmt_g(k)));
            }
            let k = (k as i64).min(input.len() as i64) as usize;
            topk(a.op, input, k, &grouping, a.without, ts)
        }
        AggregateOp::LimitRatio => {
            let r = scalar_param(&param);
            if r == 0.0 {
                return Ok(Val::Vector(vec![]));
            }
            if r.is_nan() {
                return err("Ratio value is NaN");
            }
            let r = if r > 1.0 {
                ev.annos.warn(
                    format!(
                        "ratio value should be between -1 and 1, got {}, capping to 1",
                        fmt_g(r)
                    ),
                    param_pos,
                );
                1.0
            } else if r < -1.0 {
                ev.annos.warn(
                    format!(
                        "ratio value should be between -1 and 1, got {}, capping to -1",
                        fmt_g(r)
                    ),
                    param_pos,
                );
                -1.0
            } else {
                r
            };
            input
                .into_iter()
                .filter(|s| add_ratio_sample(r, &s.metric))
                .map(|mut s| {
                    s.t = ts;
                    s
                })
                .collect()
        }
        op => {
            let q = scalar_param(&param);
            if op == AggregateOp::Quantile && (q.is_nan() || !(0.0..=1.0).contains(&q)) {
                ev.annos.warn(
                    format!("quantile value should be between 0 and 1, got {}", fmt_g(q)),
                    param_pos,
                );
            }
            let node = a as *const AggregateExpr as usize;
            let without = a.without;
            if ev.multi_step {
                simple_aggregate_by(op, q, input, &grouping, without, ts, &mut |m| {
                    let (k, l) = cached_group(ev, node, m, &grouping, without);
                    (k, Some(l))
                })
            } else {
                // one step: each input series is seen once, so nothing is memoized, and a
                // group's labels are built only for its first series
                simple_aggregate_by(op, q, input, &grouping, without, ts, &mut |m| {
                    (group_key(m, &grouping, without), None)
                })
            }
        }
    };
    ev.add_samples(out.len())?;
    Ok(Val::Vector(out))
}

/// The group key and output labels of an input series, memoized per aggregation node and
/// input labels (series keep their labels' allocation from step to step, so a range query
/// hashes and copies each series' grouping labels once instead of at every step, and the
/// groups keep one labels allocation across steps).
fn cached_group(
    ev: &mut Evaluator<'_>,
    node: usize,
    metric: &super::Metric,
    grouping: &[String],
    without: bool,
) -> (u64, super::Metric) {
    let k = (node, std::sync::Arc::as_ptr(metric) as usize);
    if let Some((_, key, labels)) = ev.group_cache.get(&k) {
        return (*key, labels.clone());
    }
    let key = group_key(metric, grouping, without);
    let labels: super::Metric = group_labels(metric, grouping, without).into();
    if ev.group_cache.len() >= 100_000 {
        ev.group_cache.clear();
    }
    // The entry holds the input labels, so their address is not reused while cached.
    ev.group_cache
        .insert(k, (metric.clone(), key, labels.clone()));
    (key, labels)
}

#[cfg(test)]
fn simple_aggregate(
    op: AggregateOp,
    q: f64,
    input: Vector,
    grouping: &[String],
    without: bool,
    ts: i64,
) -> Vector {
    simple_aggregate_by(op, q, input, grouping, without, ts, &mut |m| {
        (
            group_key(m, grouping, without),
            Some(group_labels(m, grouping, without).into()),
        )
    })
}

/// `sum avg min max count group stddev stdvar quantile`; `group_of` gives a series' group key
/// and, where it has them at hand, the group's output labels (else they are built from the
/// group's first series by `group_labels`).
fn simple_aggregate_by(
    op: AggregateOp,
    q: f64,
    input: Vector,
    grouping: &[String],
    without: bool,
    ts: i64,
    group_of: &mut dyn FnMut(&super::Metric) -> (u64, Option<super::Metric>),
) -> Vector {
    let mut index: HashMap<u64, usize> = HashMap::new();
    let mut groups: Vec<Group> = Vec::new();
    for s in input {
        let (key, labels) = group_of(&s.metric);
        let f = s.f;
        let gi = match index.get(&key) {
            Some(&i) => i,
            None => {
                index.insert(key, groups.len());
                let labels =
                    labels.unwrap_or_else(|| group_labels(&s.metric, grouping, without).into());
                let mut g = Group {
                    labels,
                    acc: Acc::first(op, f),
                    drop_name: s.drop_name,
                    ..Default::default()
                };
                if op == AggregateOp::Quantile {
                    g.values.push(f);
                }
                groups.push(g);
                continue;
            }
        };
        let g = &mut groups[gi];
        if s.drop_name {
            g.drop_name = true;
        }
        if op == AggregateOp::Quantile {
            g.values.push(f);
        } else {
            g.acc.add(op, f);
        }
    }
    groups
        .into_iter()
        .map(|g| {
            let v = match op {
                AggregateOp::Quantile => {
                    let mut vals = g.values;
                    quantile(q, &mut vals)
                }
                _ => g.acc.finish(op),
            };
            Sample {
                metric: g.labels,
                t: ts,
                f: v,
                drop_name: g.drop_name,
            }
        })
        .collect()
}

fn count_values(
    input: &Vector,
    label: &str,
    grouping: &[String],
    without: bool,
    ts: i64,
) -> Vector {
    let mut index: HashMap<Labels, usize> = HashMap::new();
    let mut out: Vector = Vec::new();
    for s in input {
        let mut v: Vec<Label> = s
            .metric
            .iter()
            .filter(|l| l.name != label)
            .cloned()
            .collect();
        v.push(Label::new(
            label,
            crate::go_format::format_float(s.f, crate::go_format::FloatFormat::F),
        ));
        let metric = Labels::new(v);
        let key = group_labels(&metric, grouping, without);
        match index.get(&key) {
            Some(&i) => out[i].f += 1.0,
            None => {
                index.insert(key.clone(), out.len());
                out.push(Sample {
                    metric: key.into(),
                    t: ts,
                    f: 1.0,
                    drop_name: false,
                });
            }
        }
    }
    out
}

// ----- a replica of Go's container/heap over PromQL's value orderings -----

fn less_by_value(a: f64, b: f64) -> bool {
    if a.is_nan() {
        return true;
    }
    a < b
}

fn less_by_reverse_value(a: f64, b: f64) -> bool {
    if a.is_nan() {
        return true;
    }
    a > b
}

/// An item of a [`GoHeap`]: ordered by its value alone.
pub(crate) trait HeapItem {
    fn value(&self) -> f64;
}

impl HeapItem for Sample {
    fn value(&self) -> f64 {
        self.f
    }
}

/// A value and the index of the series it belongs to (column-wise `topk`).
impl HeapItem for (f64, usize) {
    fn value(&self) -> f64 {
        self.0
    }
}

/// Go's `container/heap` as Prometheus' `topk`/`bottomk` use it: which of equal values are
/// kept, and their output order, follow from these exact moves.
pub(crate) struct GoHeap<T> {
    pub(crate) items: Vec<T>,
    less: fn(f64, f64) -> bool,
}

impl<T: HeapItem> GoHeap<T> {
    /// An empty heap for `topk` (`bottomk` when `bottom`) holding up to `k` items.
    pub(crate) fn new(bottom: bool, k: usize) -> Self {
        GoHeap {
            items: Vec::with_capacity(k),
            less: if bottom {
                less_by_reverse_value
            } else {
                less_by_value
            },
        }
    }
    fn less(&self, i: usize, j: usize) -> bool {
        (self.less)(self.items[i].value(), self.items[j].value())
    }
    fn push(&mut self, s: T) {
        self.items.push(s);
        let n = self.items.len();
        self.up(n - 1);
    }
    fn up(&mut self, mut j: usize) {
        while j > 0 {
            let i = (j - 1) / 2;
            if !self.less(j, i) {
                break;
            }
            self.items.swap(i, j);
            j = i;
        }
    }
    fn down(&mut self, i0: usize) -> bool {
        let n = self.items.len();
        let mut i = i0;
        loop {
            let j1 = 2 * i + 1;
            if j1 >= n {
                break;
            }
            let mut j = j1;
            let j2 = j1 + 1;
            if j2 < n && self.less(j2, j1) {
                j = j2;
            }
            if !self.less(j, i) {
                break;
            }
            self.items.swap(i, j);
            i = j;
        }
        i > i0
    }
    fn fix0(&mut self) {
        if !self.down(0) {
            self.up(0);
        }
    }
    /// Offers `s` to a `topk` (`bottomk` when `bottom`) heap of at most `k` items: pushed
    /// while there is room, otherwise it replaces the root when it beats it.
    pub(crate) fn offer(&mut self, s: T, k: usize, bottom: bool) {
        if self.items.len() < k {
            self.push(s);
            return;
        }
        let (root, f) = (self.items[0].value(), s.value());
        let beats = if bottom { root > f } else { root < f };
        if beats || (root.is_nan() && !f.is_nan()) {
            self.items[0] = s;
            if k > 1 {
                self.fix0();
            }
        }
    }
    /// `sort.Sort(sort.Reverse(heap))` as Go's insertion sort does it for short inputs, in
    /// place.
    pub(crate) fn sort_reverse_in_place(&mut self) {
        let n = self.items.len();
        for i in 1..n {
            let mut j = i;
            // Reverse: less(j, j-1) of the reversed order is heap.less(j-1, j).
            while j > 0 && self.less(j - 1, j) {
                self.items.swap(j, j - 1);
                j -= 1;
            }
        }
    }
    fn sort_reverse(mut self) -> Vec<T> {
        self.sort_reverse_in_place();
        self.items
    }
}

fn topk(
    op: AggregateOp,
    input: Vector,
    k: usize,
    grouping: &[String],
    without: bool,
    ts: i64,
) -> Vector {
    let mut index: HashMap<u64, usize> = HashMap::new();
    let mut heaps: Vec<GoHeap<Sample>> = Vec::new();
    let bottom = op == AggregateOp::Bottomk;
    for mut s in input {
        s.t = ts;
        let key = group_key(&s.metric, grouping, without);
        let gi = match index.get(&key) {
            Some(&i) => i,
            None => {
                index.insert(key, heaps.len());
                let mut h = GoHeap::new(bottom, k);
                h.push(s);
                heaps.push(h);
                continue;
            }
        };
        let h = &mut heaps[gi];
        match op {
            AggregateOp::Topk | AggregateOp::Bottomk => h.offer(s, k, bottom),
            _ => {
                if h.items.len() < k {
                    h.push(s);
                }
            }
        }
    }
    let mut out = Vec::new();
    for h in heaps {
        match op {
            AggregateOp::Topk | AggregateOp::Bottomk => out.extend(h.sort_reverse()),
            _ => out.extend(h.items),
        }
    }
    out
}

// ----- limit_ratio's hash sampling -----

/// Whether a series is in the `ratio` sample, by the position of its label hash in [0, 1).
fn add_ratio_sample(ratio: f64, metric: &Labels) -> bool {
    let offset = labels_hash(metric) as f64 / u64::MAX as f64;
    (ratio >= 0.0 && offset < ratio) || (ratio < 0.0 && offset >= 1.0 + ratio)
}

/// Prometheus' `Labels.Hash()`: xxHash64 of `name 0xff value 0xff ...`.
pub(crate) fn labels_hash(l: &Labels) -> u64 {
    let mut b = Vec::with_capacity(256);
    for lab in l.iter() {
        b.extend_from_slice(lab.name.as_bytes());
        b.push(0xff);
        b.extend_from_slice(lab.value.as_bytes());
        b.push(0xff);
    }
    xxh64(&b)
}

const P1: u64 = 0x9E37_79B1_85EB_CA87;
const P2: u64 = 0xC2B2_AE3D_27D4_EB4F;
const P3: u64 = 0x1656_67B1_9E37_79F9;
const P4: u64 = 0x85EB_CA77_C2B2_AE63;
const P5: u64 = 0x27D4_EB2F_1656_67C5;

fn xx_round(acc: u64, lane: u64) -> u64 {
    acc.wrapping_add(lane.wrapping_mul(P2))
        .rotate_left(31)
        .wrapping_mul(P1)
}

fn xx_merge(h: u64, v: u64) -> u64 {
    (h ^ xx_round(0, v)).wrapping_mul(P1).wrapping_add(P4)
}

fn read_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_le_bytes(a)
}

fn read_u32(b: &[u8]) -> u64 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[..4]);
    u32::from_le_bytes(a) as u64
}

/// xxHash64 with seed 0.
pub(crate) fn xxh64(data: &[u8]) -> u64 {
    let len = data.len();
    let mut p = data;
    let mut h: u64;
    if len >= 32 {
        let mut v1 = P1.wrapping_add(P2);
        let mut v2 = P2;
        let mut v3 = 0u64;
        let mut v4 = 0u64.wrapping_sub(P1);
        while p.len() >= 32 {
            v1 = xx_round(v1, read_u64(&p[0..]));
            v2 = xx_round(v2, read_u64(&p[8..]));
            v3 = xx_round(v3, read_u64(&p[16..]));
            v4 = xx_round(v4, read_u64(&p[24..]));
            p = &p[32..];
        }
        h = v1
            .rotate_left(1)
            .wrapping_add(v2.rotate_left(7))
            .wrapping_add(v3.rotate_left(12))
            .wrapping_add(v4.rotate_left(18));
        h = xx_merge(h, v1);
        h = xx_merge(h, v2);
        h = xx_merge(h, v3);
        h = xx_merge(h, v4);
    } else {
        h = P5;
    }
    h = h.wrapping_add(len as u64);
    while p.len() >= 8 {
        h ^= xx_round(0, read_u64(p));
        h = h.rotate_left(27).wrapping_mul(P1).wrapping_add(P4);
        p = &p[8..];
    }
    if p.len() >= 4 {
        h ^= read_u32(p).wrapping_mul(P1);
        h = h.rotate_left(23).wrapping_mul(P2).wrapping_add(P3);
        p = &p[4..];
    }
    for &byte in p {
        h ^= (byte as u64).wrapping_mul(P5);
        h = h.rotate_left(11).wrapping_mul(P1);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(P2);
    h ^= h >> 29;
    h = h.wrapping_mul(P3);
    h ^= h >> 32;
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xxhash_known_values() {
        assert_eq!(xxh64(b""), 0xEF46_DB37_51D8_E999);
        assert_eq!(xxh64(b"abc"), 0x44BC_2CF5_AD77_0999);
        assert_eq!(
            xxh64(b"Nobody inspects the spammish repetition"),
            0xFBCE_A83C_8A37_8BF1
        );
    }

    fn s(v: f64, name: &str) -> Sample {
        Sample {
            metric: Labels::from_pairs([("i", name)]).into(),
            t: 0,
            f: v,
            drop_name: false,
        }
    }

    #[test]
    fn topk_and_bottomk_order() {
        let input = vec![s(1.0, "a"), s(5.0, "b"), s(3.0, "c"), s(4.0, "d")];
        let top = topk(AggregateOp::Topk, input.clone(), 2, &[], false, 0);
        assert_eq!(top.iter().map(|x| x.f).collect::<Vec<_>>(), vec![5.0, 4.0]);
        let bottom = topk(AggregateOp::Bottomk, input, 3, &[], false, 0);
        assert_eq!(
            bottom.iter().map(|x| x.f).collect::<Vec<_>>(),
            vec![1.0, 3.0, 4.0]
        );
    }

    #[test]
    fn sums_and_stddev() {
        let input = vec![s(1.0, "a"), s(2.0, "b"), s(3.0, "c"), s(4.0, "d")];
        let sum = simple_aggregate(AggregateOp::Sum, 0.0, input.clone(), &[], false, 0);
        assert_eq!(sum[0].f, 10.0);
        let avg = simple_aggregate(AggregateOp::Avg, 0.0, input.clone(), &[], false, 0);
        assert_eq!(avg[0].f, 2.5);
        let sd = simple_aggregate(AggregateOp::Stdvar, 0.0, input.clone(), &[], false, 0);
        assert!((sd[0].f - 1.25).abs() < 1e-12);
        let by = simple_aggregate(AggregateOp::Count, 0.0, input, &["i".into()], false, 0);
        assert_eq!(by.len(), 4);
    }
}
