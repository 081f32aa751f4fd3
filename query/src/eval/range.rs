//! Range queries evaluated column by column instead of step by step.
//!
//! For the expressions dashboards send most — range functions over a selector, the simple
//! aggregations and `topk`/`bottomk`, arithmetic and comparisons between vectors and
//! scalars with one-to-one matching, `histogram_quantile` — a range query is evaluated per
//! node over a block of steps at once: each series' window slides over its loaded points
//! with two forward cursors, aggregations and binary operators work on one column of
//! values per series, and labels (group keys, matching signatures, result labels, `le`
//! parsing) are computed once per series instead of once per step.
//!
//! The arithmetic is the per-step evaluator's own (the same functions, applied to the
//! same values in the same order), or provably equal to it where a window is not summed
//! again at every step (`min`/`max`/`quantile_over_time` over a sliding order, and
//! `sum`/`avg_over_time` as a running sum over integers whose sums are exact), so results
//! are bit-identical. Whenever the per-step
//! evaluator might fail or diverge (an error such as duplicate label sets, many-to-many
//! matching or the sample limit, or a shape not handled here) the column evaluation gives
//! up and the caller evaluates step by step, which then produces the exact error.

use std::collections::{HashMap, HashSet};

use inferdb_storage::is_stale_nan;
use inferdb_storage::labels::METRIC_NAME;

use super::aggregate::{group_key, group_labels, Acc, GoHeap};
use super::binary::{
    btos, changes_metric_schema, elem_binop, result_metric, scalar_binop, signature,
};
use super::functions::histogram::{
    bad_le_message, bucket_group_key, bucket_quantile, monotonicity_annotation, parse_le, Bucket,
};
use super::functions::math::kahan_inc;
use super::functions::rate::{extrapolate, extrapolated_rate};
use super::functions::{labels, math, matrix_function, unwrap_paren, RATE_COUNTER_SUFFIXES};
use super::{drop_metadata, EvalResult, Evaluator, Matrix, Metric, Series};
use crate::ast::{
    AggregateExpr, AggregateOp, BinaryExpr, BinaryOp, Call, Cardinality, Expr, ExprKind,
    MatrixSelector, UnaryOp, VectorMatching, VectorSelector,
};
use crate::engine::RangeEvaluation;
use crate::parser::go_quote;
use crate::value::{fmt_g, Annotation, AnnotationKind, FPoint};

/// Most steps evaluated in one block.
const MAX_BLOCK_STEPS: usize = 2048;
/// Most values (series x steps) of one selector held in one block.
const MAX_BLOCK_CELLS: usize = 1 << 22;

/// Range functions of one range-vector argument handled column-wise.
const COLUMN_FUNCTIONS: &[&str] = &[
    "rate",
    "increase",
    "delta",
    "irate",
    "idelta",
    "deriv",
    "resets",
    "changes",
    "avg_over_time",
    "sum_over_time",
    "count_over_time",
    "min_over_time",
    "max_over_time",
    "last_over_time",
    "first_over_time",
    "present_over_time",
    "stddev_over_time",
    "stdvar_over_time",
    "mad_over_time",
    "ts_of_min_over_time",
    "ts_of_max_over_time",
    "ts_of_last_over_time",
    "ts_of_first_over_time",
];

/// One series over the steps of a block.
struct Col {
    metric: Metric,
    drop_name: bool,
    vals: Vec<f64>,
    present: Vec<bool>,
}

/// A node's value over the steps of a block.
enum Rv {
    Scalar(f64),
    Vector(Vec<Col>),
}

/// `Ok(None)`: hand the query to the per-step evaluator.
type R<T> = EvalResult<Option<T>>;

macro_rules! tri {
    ($e:expr) => {
        match $e? {
            Some(v) => v,
            None => return Ok(None),
        }
    };
}

/// Whether `e` can be evaluated column-wise (checked before any work is done).
fn supported(e: &Expr) -> bool {
    crate::stack::grow(|| supported_node(e))
}

fn supported_node(e: &Expr) -> bool {
    match &e.kind {
        ExprKind::Number(_) => true,
        ExprKind::Paren(i) | ExprKind::StepInvariant(i) | ExprKind::Unary(_, i) => supported(i),
        ExprKind::VectorSelector(vs) => vs.at.is_none(),
        ExprKind::Call(c) => match c.func.as_str() {
            "histogram_quantile" => {
                c.args.len() == 2
                    && matches!(unwrap_paren(&c.args[0]).kind, ExprKind::Number(_))
                    && supported(&c.args[1])
            }
            "vector" => c.args.len() == 1 && supported(&c.args[0]),
            "quantile_over_time" | "predict_linear" => param_call(c).is_some(),
            "label_replace" | "label_join" => {
                c.args.len() >= 3
                    && supported(&c.args[0])
                    && c.args[1..].iter().all(|a| string_literal(a).is_some())
            }
            f if COLUMN_FUNCTIONS.contains(&f) => {
                c.args.len() == 1
                    && matches!(&unwrap_paren(&c.args[0]).kind,
                        ExprKind::MatrixSelector(ms) if ms.selector.at.is_none())
            }
            _ => false,
        },
        ExprKind::Aggregate(a) => {
            let simple = a.param.is_none()
                && matches!(
                    a.op,
                    AggregateOp::Sum
                        | AggregateOp::Avg
                        | AggregateOp::Min
                        | AggregateOp::Max
                        | AggregateOp::Count
                        | AggregateOp::Group
                        | AggregateOp::Stddev
                        | AggregateOp::Stdvar
                );
            (simple || topk_param(a).is_some())
                && (a.without
                    || !a
                        .grouping
                        .iter()
                        .any(|g| g == "__name__" || g == "__type__" || g == "__unit__"))
                && supported(&a.expr)
        }
        ExprKind::Binary(b) if b.op.is_set() => {
            b.matching.as_ref().is_none_or(|m| m.include.is_empty())
                && supported(&b.lhs)
                && supported(&b.rhs)
        }
        ExprKind::Binary(b) => {
            !b.op.is_set()
                && b.matching
                    .as_ref()
                    .is_none_or(|m| m.card == Cardinality::OneToOne && m.include.is_empty())
                && supported(&b.lhs)
                && supported(&b.rhs)
        }
        _ => false,
    }
}

/// The range selector and the number literal of `quantile_over_time(φ, m)` (φ within
/// [0, 1]: other values warn, which the per-step evaluator does) or
/// `predict_linear(m, t)`.
fn param_call(c: &Call) -> Option<(&Expr, f64)> {
    if c.args.len() != 2 {
        return None;
    }
    let (m, p) = if c.func == "quantile_over_time" {
        (&c.args[1], &c.args[0])
    } else {
        (&c.args[0], &c.args[1])
    };
    let ExprKind::Number(n) = &unwrap_paren(p).kind else {
        return None;
    };
    if c.func == "quantile_over_time" && !(0.0..=1.0).contains(&n.value) {
        return None;
    }
    matches!(&unwrap_paren(m).kind,
        ExprKind::MatrixSelector(ms) if ms.selector.at.is_none())
    .then_some((unwrap_paren(m), n.value))
}

/// `k` of `topk(k, ...)` or `bottomk(k, ...)` when it is a number literal and valid (the
/// per-step evaluator gives the errors of NaN and of values beyond int64).
fn topk_param(a: &AggregateExpr) -> Option<f64> {
    if !matches!(a.op, AggregateOp::Topk | AggregateOp::Bottomk) {
        return None;
    }
    let ExprKind::Number(n) = &unwrap_paren(a.param.as_ref()?).kind else {
        return None;
    };
    (!n.value.is_nan() && n.value < 9.223372036854776e18).then_some(n.value)
}

/// The text of a string literal argument (in parentheses or not).
fn string_literal(e: &Expr) -> Option<&str> {
    match &unwrap_paren(e).kind {
        ExprKind::String(s) => Some(s),
        _ => None,
    }
}

/// The largest number of series any selector of `e` loaded.
fn max_loaded(ev: &Evaluator<'_>) -> usize {
    ev.data.values().map(|v| v.len()).max().unwrap_or(0)
}

/// Evaluates the steps `from, from + interval, ... <= to` of `expr` column-wise; `None`
/// when the per-step evaluator has to do it. Series in first-seen order, as
/// [`Evaluator::range_steps`] gives them.
pub(crate) fn try_range(
    ev: &mut Evaluator<'_>,
    expr: &Expr,
    from: i64,
    to: i64,
) -> EvalResult<Option<Matrix>> {
    if ev.opts.range_evaluation == RangeEvaluation::StepWise {
        return Ok(None);
    }
    if ev.interval <= 0 || to < from || !supported(expr) {
        return Ok(None);
    }
    let interval = ev.interval;
    let total_steps = ((to - from) / interval + 1) as usize;
    let block_steps = (MAX_BLOCK_CELLS / max_loaded(ev).max(1)).clamp(64, MAX_BLOCK_STEPS);
    let mut out: Matrix = Vec::new();
    let mut index: HashMap<Metric, usize> = HashMap::new();
    let mut last_block: Vec<usize> = Vec::new();
    let mut annos: Vec<Annotation> = Vec::new();
    let mut total = 0usize;
    let mut b0 = 0usize;
    let mut block_no = 0usize;
    while b0 < total_steps {
        let n = block_steps.min(total_steps - b0);
        let bfrom = from + b0 as i64 * interval;
        let mut blk = Block {
            ev: &mut *ev,
            from: bfrom,
            steps: n,
            held: vec![0; n],
            pending: Vec::new(),
            seq: 0,
        };
        let v = match blk.eval(expr)? {
            Some(v) => v,
            None => return Ok(None),
        };
        let Block { held, pending, .. } = blk;
        // Points of the result per step, to check the sample limit as the per-step
        // evaluator does (conservatively: any doubt goes to the per-step evaluator).
        let mut outputs = vec![0usize; n];
        match v {
            Rv::Scalar(f) => {
                let i = *index.entry(Metric::default()).or_insert_with(|| {
                    out.push(Series {
                        metric: Metric::default(),
                        floats: Vec::new(),
                        drop_name: false,
                    });
                    last_block.push(usize::MAX);
                    out.len() - 1
                });
                let s = &mut out[i];
                for (k, o) in outputs.iter_mut().enumerate() {
                    s.floats.push(FPoint {
                        t: bfrom + k as i64 * interval,
                        f,
                    });
                    *o += 1;
                }
            }
            Rv::Vector(cols) => {
                for c in cols {
                    if !c.present.iter().any(|&p| p) {
                        continue;
                    }
                    let m: Metric = if c.drop_name {
                        drop_metadata(&c.metric).into()
                    } else {
                        c.metric
                    };
                    let i = match index.get(&m) {
                        Some(&i) => {
                            if last_block[i] == block_no {
                                // Two series with the same labels: per step decides.
                                return Ok(None);
                            }
                            i
                        }
                        None => {
                            out.push(Series {
                                metric: m.clone(),
                                floats: Vec::new(),
                                drop_name: false,
                            });
                            last_block.push(block_no);
                            index.insert(m, out.len() - 1);
                            out.len() - 1
                        }
                    };
                    last_block[i] = block_no;
                    let s = &mut out[i];
                    for (k, o) in outputs.iter_mut().enumerate() {
                        if c.present[k] {
                            s.floats.push(FPoint {
                                t: bfrom + k as i64 * interval,
                                f: c.vals[k],
                            });
                            *o += 1;
                        }
                    }
                }
            }
        }
        let max = ev.opts.max_samples;
        for k in 0..n {
            if total + held[k] + outputs[k] > max {
                return Ok(None);
            }
            total += outputs[k];
        }
        let mut pending = pending;
        pending.sort_by_key(|(k, seq, _)| (*k, *seq));
        annos.extend(pending.into_iter().map(|(_, _, a)| a));
        b0 += n;
        block_no += 1;
    }
    for a in annos {
        ev.annos.add(a);
    }
    #[cfg(test)]
    tests::USED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Ok(Some(out))
}

fn warning(msg: String, pos: usize) -> Annotation {
    Annotation {
        kind: AnnotationKind::Warning,
        message: format!("PromQL warning: {msg}"),
        pos: Some(pos),
        monotonicity: None,
    }
}

fn info(msg: String, pos: usize) -> Annotation {
    Annotation {
        kind: AnnotationKind::Info,
        message: format!("PromQL info: {msg}"),
        pos: Some(pos),
        monotonicity: None,
    }
}

/// The evaluation of one block of steps.
struct Block<'e, 'a> {
    ev: &'e mut Evaluator<'a>,
    /// The first step (ms).
    from: i64,
    steps: usize,
    /// Samples held per step by the nodes evaluated so far (windows and outputs).
    held: Vec<usize>,
    /// Annotations with the step and the node (numbered in evaluation order) that raised
    /// them, to be added in the order the per-step evaluator adds them.
    pending: Vec<(usize, u32, Annotation)>,
    seq: u32,
}

impl Block<'_, '_> {
    fn next_seq(&mut self) -> u32 {
        self.seq += 1;
        self.seq
    }

    fn ts(&self, k: usize) -> i64 {
        self.from + k as i64 * self.ev.interval
    }

    fn new_col(&self, metric: Metric, drop_name: bool) -> Col {
        Col {
            metric,
            drop_name,
            vals: vec![0.0; self.steps],
            present: vec![false; self.steps],
        }
    }

    fn eval(&mut self, e: &Expr) -> R<Rv> {
        crate::stack::grow(|| self.eval_node(e))
    }

    fn eval_node(&mut self, e: &Expr) -> R<Rv> {
        match &e.kind {
            ExprKind::Number(n) => Ok(Some(Rv::Scalar(n.value))),
            ExprKind::Paren(i) | ExprKind::StepInvariant(i) => self.eval(i),
            ExprKind::Unary(op, i) => {
                let v = tri!(self.eval(i));
                if *op == UnaryOp::Pos {
                    return Ok(Some(v));
                }
                Ok(Some(match v {
                    Rv::Scalar(f) => Rv::Scalar(-f),
                    Rv::Vector(mut cols) => {
                        for c in cols.iter_mut() {
                            for v in c.vals.iter_mut() {
                                *v = -*v;
                            }
                            c.drop_name = true;
                        }
                        Rv::Vector(cols)
                    }
                }))
            }
            ExprKind::VectorSelector(vs) => self.instant_selector(vs),
            ExprKind::Call(c) => self.call(c),
            ExprKind::Aggregate(a) => self.aggregate(a),
            ExprKind::Binary(b) => self.binary(b),
            _ => Ok(None),
        }
    }

    fn instant_selector(&mut self, vs: &VectorSelector) -> R<Rv> {
        let offset = self.ev.offset_ms(&vs.offset)?;
        let lookback = self.ev.opts.lookback_delta_ms;
        let loaded = self.ev.loaded_arc(vs);
        self.next_seq();
        let mut out = Vec::new();
        let first_ref = self.from - offset;
        for l in loaded.iter() {
            self.ev.check_limits_now()?;
            let pts = &l.points;
            let mut hi = pts.partition_point(|p| p.t <= first_ref);
            let mut col = self.new_col(l.metric.clone(), false);
            let mut any = false;
            for k in 0..self.steps {
                let reft = self.ts(k) - offset;
                while hi < pts.len() && pts[hi].t <= reft {
                    hi += 1;
                }
                if hi == 0 {
                    continue;
                }
                let p = pts[hi - 1];
                if p.t <= reft - lookback || is_stale_nan(p.f) {
                    continue;
                }
                col.vals[k] = p.f;
                col.present[k] = true;
                self.held[k] += 1;
                any = true;
            }
            if any {
                out.push(col);
            }
        }
        Ok(Some(Rv::Vector(out)))
    }

    fn call(&mut self, c: &Call) -> R<Rv> {
        match c.func.as_str() {
            "histogram_quantile" => return self.histogram_quantile(c),
            "vector" => return self.vector(c),
            "label_replace" | "label_join" => return self.relabel(c),
            "quantile_over_time" | "predict_linear" => {
                let Some((arg, p)) = param_call(c) else {
                    return Ok(None);
                };
                let ExprKind::MatrixSelector(ms) = &arg.kind else {
                    return Ok(None);
                };
                return self.range_function(&c.func, ms, arg.span.start, &[p]);
            }
            _ => {}
        }
        let arg = unwrap_paren(&c.args[0]);
        let ExprKind::MatrixSelector(ms) = &arg.kind else {
            return Ok(None);
        };
        self.range_function(&c.func, ms, arg.span.start, &[])
    }

    /// `vector(s)`: one series without labels, present at every step.
    fn vector(&mut self, c: &Call) -> R<Rv> {
        let Rv::Scalar(f) = tri!(self.eval(&c.args[0])) else {
            return Ok(None);
        };
        self.next_seq();
        let mut col = self.new_col(Metric::default(), false);
        col.vals.fill(f);
        col.present.fill(true);
        for h in self.held.iter_mut() {
            *h += 1;
        }
        Ok(Some(Rv::Vector(vec![col])))
    }

    /// `label_replace` and `label_join`: each series' labels are rewritten once for all
    /// steps (the regex compiled once). Any error, and series that end up with the same
    /// labels, go to the per-step evaluator, which gives the exact error.
    fn relabel(&mut self, c: &Call) -> R<Rv> {
        let Rv::Vector(mut cols) = tri!(self.eval(&c.args[0])) else {
            return Ok(None);
        };
        self.next_seq();
        let strs: Vec<&str> = c.args[1..].iter().filter_map(string_literal).collect();
        let dst = strs[0];
        let replace = if c.func == "label_replace" {
            let [_, repl, src, re] = strs[..] else {
                return Ok(None);
            };
            if labels::check_replace_dst(dst).is_err() {
                return Ok(None);
            }
            let Ok(re) = self.ev.label_replace_regex(re) else {
                return Ok(None);
            };
            Some((re, repl, src))
        } else {
            None
        };
        let srcs: Vec<String> = strs.iter().skip(2).map(|s| s.to_string()).collect();
        if replace.is_none() && labels::check_join_names(dst, &srcs).is_err() {
            return Ok(None);
        }
        let mut seen: HashSet<Metric> = HashSet::with_capacity(cols.len());
        for col in cols.iter_mut() {
            self.ev.check_limits_now()?;
            let new = match &replace {
                Some((re, repl, src)) => labels::replace_labels(&col.metric, re, dst, repl, src),
                None => Some(labels::join_labels(&col.metric, dst, strs[1], &srcs)),
            };
            if let Some(l) = new {
                col.metric = l.into();
                if dst == METRIC_NAME {
                    col.drop_name = false;
                }
            }
            if !seen.insert(col.metric.clone()) {
                return Ok(None);
            }
            for (h, &p) in self.held.iter_mut().zip(&col.present) {
                *h += p as usize;
            }
        }
        Ok(Some(Rv::Vector(cols)))
    }

    /// `max_over_time` (`is_max`) or `min_over_time` of one series' points `pts[base..end]`
    /// at every step, with a monotonic deque of the window's candidates: each point enters
    /// and leaves once, instead of a scan of the whole window per step. The result is
    /// [`matrix_function`]'s: the first of equal extremes, NaNs ignored unless the window
    /// holds nothing else (then its newest NaN), staleness markers skipped.
    fn sliding_extreme(
        &mut self,
        pts: &[FPoint],
        base: usize,
        end: usize,
        offset: i64,
        range: i64,
        is_max: bool,
    ) -> Col {
        let mut col = self.new_col(Default::default(), true);
        let mut dq: std::collections::VecDeque<usize> = std::collections::VecDeque::new();
        let (mut lo, mut hi) = (base, base);
        // points in the window that are not staleness markers, and the newest of them
        let (mut live, mut newest) = (0usize, 0usize);
        for k in 0..self.steps {
            let reft = self.ts(k) - offset;
            let wstart = reft - range;
            while hi < end && pts[hi].t <= reft {
                let f = pts[hi].f;
                if !is_stale_nan(f) {
                    live += 1;
                    newest = hi;
                    if !f.is_nan() {
                        while let Some(&b) = dq.back() {
                            let bf = pts[b].f;
                            if (is_max && bf < f) || (!is_max && bf > f) {
                                dq.pop_back();
                            } else {
                                break;
                            }
                        }
                        dq.push_back(hi);
                    }
                }
                hi += 1;
            }
            while lo < hi && pts[lo].t <= wstart {
                if !is_stale_nan(pts[lo].f) {
                    live -= 1;
                }
                lo += 1;
            }
            while dq.front().is_some_and(|&i| i < lo) {
                dq.pop_front();
            }
            if live == 0 {
                continue;
            }
            self.held[k] += live + 1;
            col.vals[k] = match dq.front() {
                Some(&i) => pts[i].f,
                None => pts[newest].f,
            };
            col.present[k] = true;
        }
        col
    }

    /// `sum_over_time` (or `avg_over_time` when `avg`) of one series' points
    /// `pts[base..end]` at every step with a running sum, when every point (staleness
    /// markers aside) is an integer other than -0 small enough that every sum of them is
    /// exact in an f64; `None` otherwise. With exact sums the Kahan sum of
    /// [`matrix_function`] never compensates (its correction stays +0), so its result is
    /// the exact sum, which the running sum gives too, to the bit; the mean is that sum
    /// divided by the count, plus the +0 correction divided by the count, as there.
    fn sliding_sum(
        &mut self,
        pts: &[FPoint],
        base: usize,
        end: usize,
        offset: i64,
        range: i64,
        avg: bool,
    ) -> Option<Col> {
        // |sum| <= max |value| * points < 2^53: every running sum is an exact integer.
        const EXACT: f64 = 9_007_199_254_740_992.0;
        let mut max_abs = 0.0f64;
        for p in &pts[base..end] {
            let f = p.f;
            if is_stale_nan(f) {
                continue;
            }
            if f != f.trunc() || f.to_bits() == (-0.0f64).to_bits() || f.abs() >= EXACT {
                return None;
            }
            max_abs = max_abs.max(f.abs());
        }
        if max_abs * (end - base) as f64 >= EXACT {
            return None;
        }
        let mut col = self.new_col(Default::default(), true);
        let (mut lo, mut hi) = (base, base);
        let (mut sum, mut live) = (0i64, 0usize);
        for k in 0..self.steps {
            let reft = self.ts(k) - offset;
            let wstart = reft - range;
            while hi < end && pts[hi].t <= reft {
                let f = pts[hi].f;
                if !is_stale_nan(f) {
                    sum += f as i64;
                    live += 1;
                }
                hi += 1;
            }
            while lo < hi && pts[lo].t <= wstart {
                let f = pts[lo].f;
                if !is_stale_nan(f) {
                    sum -= f as i64;
                    live -= 1;
                }
                lo += 1;
            }
            if live == 0 {
                continue;
            }
            self.held[k] += live + 1;
            let s = sum as f64;
            col.vals[k] = if avg {
                let n = live as f64;
                s / n + 0.0 / n
            } else {
                s
            };
            col.present[k] = true;
        }
        Some(col)
    }

    /// `quantile_over_time(q, ...)` (q within [0, 1]) of one series' points
    /// `pts[base..end]` at every step, over the window's values kept sorted as the window
    /// slides (each point inserted and removed once, by binary search) instead of a sort of
    /// the whole window per step. Equal values stay in time order, as the stable sort of
    /// [`math::quantile`] leaves them, so the result is the same to the bit.
    fn sliding_quantile(
        &mut self,
        pts: &[FPoint],
        base: usize,
        end: usize,
        offset: i64,
        range: i64,
        q: f64,
    ) -> Col {
        use std::cmp::Ordering::{Greater, Less};
        let mut col = self.new_col(Default::default(), true);
        let mut sorted: Vec<f64> = Vec::new();
        let (mut lo, mut hi) = (base, base);
        for k in 0..self.steps {
            let reft = self.ts(k) - offset;
            let wstart = reft - range;
            while hi < end && pts[hi].t <= reft {
                let f = pts[hi].f;
                if !is_stale_nan(f) {
                    // after the equal values already there (older)
                    let i = sorted.partition_point(|x| math::quantile_order(x, &f) != Greater);
                    sorted.insert(i, f);
                }
                hi += 1;
            }
            while lo < hi && pts[lo].t <= wstart {
                let f = pts[lo].f;
                if !is_stale_nan(f) {
                    // the oldest point of the window is the first of its equals
                    let i = sorted.partition_point(|x| math::quantile_order(x, &f) == Less);
                    sorted.remove(i);
                }
                lo += 1;
            }
            if sorted.is_empty() {
                continue;
            }
            self.held[k] += sorted.len() + 1;
            col.vals[k] = math::quantile_sorted(q, &sorted);
            col.present[k] = true;
        }
        col
    }

    /// `name(ms)`: each series' window slides over its points with two cursors.
    fn range_function(
        &mut self,
        name: &str,
        ms: &MatrixSelector,
        pos: usize,
        scalars: &[f64],
    ) -> R<Rv> {
        let offset = self.ev.offset_ms(&ms.selector.offset)?;
        let range = self.ev.duration_ms(&ms.range)?;
        let loaded = self.ev.loaded_arc(&ms.selector);
        let seq = self.next_seq();
        let keep_name = name == "last_over_time" || name == "first_over_time";
        let (extrapolated, is_counter, is_rate) = match name {
            "rate" => (true, true, true),
            "increase" => (true, true, false),
            "delta" => (true, false, false),
            _ => (false, false, false),
        };
        let check_counter = name == "rate" || name == "increase";
        let extreme = match name {
            "max_over_time" => Some(true),
            "min_over_time" => Some(false),
            _ => None,
        };
        let first_ref = self.from - offset;
        let last_ref = self.ts(self.steps - 1) - offset;
        let mut out = Vec::new();
        let mut buf: Vec<FPoint> = Vec::new();
        for l in loaded.iter() {
            self.ev.check_limits_now()?;
            let pts = &l.points;
            let base = pts.partition_point(|p| p.t <= first_ref - range);
            let end = pts.partition_point(|p| p.t <= last_ref);
            if base >= end {
                continue;
            }
            if name == "quantile_over_time" {
                let mut col =
                    self.sliding_quantile(&l.points, base, end, offset, range, scalars[0]);
                col.metric = l.metric.clone();
                if col.present.iter().any(|&p| p) {
                    out.push(col);
                }
                continue;
            }
            if name == "sum_over_time" || name == "avg_over_time" {
                let avg = name == "avg_over_time";
                if let Some(mut col) = self.sliding_sum(&l.points, base, end, offset, range, avg) {
                    col.metric = l.metric.clone();
                    if col.present.iter().any(|&p| p) {
                        out.push(col);
                    }
                    continue;
                }
            }
            if let Some(is_max) = extreme {
                let mut col = self.sliding_extreme(&l.points, base, end, offset, range, is_max);
                col.metric = l.metric.clone();
                if col.present.iter().any(|&p| p) {
                    out.push(col);
                }
                continue;
            }
            let (mut lo, mut hi) = (base, base);
            // As `hi` advances: the newest point below it that is lower than the one
            // before it (a counter reset; 0 for none yet) and one past the newest
            // staleness marker below it (0 for none), so that a window `[lo, hi)` knows in
            // O(1) whether it holds either: a window without needs no scan for
            // `rate`/`increase`/`delta`.
            let (mut last_reset, mut stale_end) = (0usize, 0usize);
            // the points up to the last window's end (bounds known to the loops below)
            let pts = &pts[..end];
            // the value before `hi` (NaN before `base`: no reset there)
            let mut prev = f64::NAN;
            let mut col = self.new_col(l.metric.clone(), !keep_name);
            let mut first_present = None;
            for k in 0..self.steps {
                let ts = self.ts(k);
                let reft = ts - offset;
                let wstart = reft - range;
                while hi < pts.len() && pts[hi].t <= reft {
                    let f = pts[hi].f;
                    if f < prev {
                        last_reset = hi;
                    }
                    if is_stale_nan(f) {
                        stale_end = hi + 1;
                    }
                    prev = f;
                    hi += 1;
                }
                while lo < hi && pts[lo].t <= wstart {
                    lo += 1;
                }
                if lo >= hi {
                    continue;
                }
                let stale = stale_end > lo;
                let v = if extrapolated && !stale {
                    let window = &pts[lo..hi];
                    self.held[k] += window.len();
                    if window.len() < 2 {
                        None
                    } else if is_counter && last_reset > lo {
                        extrapolated_rate(window, wstart, reft, range, is_counter, is_rate)
                    } else {
                        let first = window[0];
                        let last = window[window.len() - 1];
                        Some(extrapolate(
                            first,
                            last,
                            window.len(),
                            last.f - first.f,
                            wstart,
                            reft,
                            range,
                            is_counter,
                            is_rate,
                        ))
                    }
                } else {
                    let mut window = &pts[lo..hi];
                    if stale {
                        buf.clear();
                        buf.extend(window.iter().filter(|p| !is_stale_nan(p.f)));
                        window = &buf;
                    }
                    if window.is_empty() {
                        continue;
                    }
                    self.held[k] += window.len();
                    matrix_function(name, window, scalars, wstart, reft, range, ts)?
                };
                if let Some(v) = v {
                    col.vals[k] = v;
                    col.present[k] = true;
                    self.held[k] += 1;
                    first_present.get_or_insert(k);
                }
            }
            let Some(first) = first_present else {
                continue;
            };
            if check_counter {
                if let Some(n) = l.metric.metric_name() {
                    if !RATE_COUNTER_SUFFIXES.iter().any(|s| n.ends_with(s)) {
                        self.pending.push((
                            first,
                            seq,
                            info(
                                format!(
                                    "metric might not be a counter, name does not end in _total/_sum/_count/_bucket: {}",
                                    go_quote(n)
                                ),
                                pos,
                            ),
                        ));
                    }
                }
            }
            out.push(col);
        }
        Ok(Some(Rv::Vector(out)))
    }

    fn aggregate(&mut self, a: &AggregateExpr) -> R<Rv> {
        let Rv::Vector(input) = tri!(self.eval(&a.expr)) else {
            return Ok(None);
        };
        self.next_seq();
        if let Some(k) = topk_param(a) {
            return Ok(Some(self.topk(a, k, input)));
        }
        let Some(first) = input.first() else {
            return Ok(Some(Rv::Vector(Vec::new())));
        };
        // A group's name removal follows its members': only uniform inputs here.
        let drop_name = first.drop_name;
        if input.iter().any(|c| c.drop_name != drop_name) {
            return Ok(None);
        }
        let mut grouping = a.grouping.clone();
        grouping.sort();
        let op = a.op;
        if op == AggregateOp::Sum {
            return Ok(Some(self.sum(a, &grouping, drop_name, &input)?));
        }
        let mut index: HashMap<u64, usize> = HashMap::new();
        let mut groups: Vec<(Metric, Vec<Acc>, Vec<bool>)> = Vec::new();
        for c in &input {
            self.ev.check_limits_now()?;
            let key = group_key(&c.metric, &grouping, a.without);
            let gi = match index.get(&key) {
                Some(&i) => i,
                None => {
                    index.insert(key, groups.len());
                    groups.push((
                        group_labels(&c.metric, &grouping, a.without).into(),
                        vec![Acc::default(); self.steps],
                        vec![false; self.steps],
                    ));
                    groups.len() - 1
                }
            };
            let (_, accs, init) = &mut groups[gi];
            for k in 0..self.steps {
                if !c.present[k] {
                    continue;
                }
                let f = c.vals[k];
                if init[k] {
                    accs[k].add(op, f);
                } else {
                    accs[k] = Acc::first(op, f);
                    init[k] = true;
                }
            }
        }
        let mut out = Vec::with_capacity(groups.len());
        for (metric, accs, init) in groups {
            let mut col = self.new_col(metric, drop_name);
            for k in 0..self.steps {
                if init[k] {
                    col.vals[k] = accs[k].finish(op);
                    col.present[k] = true;
                    self.held[k] += 1;
                }
            }
            out.push(col);
        }
        Ok(Some(Rv::Vector(out)))
    }

    /// `sum`: [`Acc`]'s Kahan sum (the group's first value, then `kahan_inc` of each next
    /// one, the correction added at the end), kept as two columns of f64 per group.
    fn sum(
        &mut self,
        a: &AggregateExpr,
        grouping: &[String],
        drop_name: bool,
        input: &[Col],
    ) -> EvalResult<Rv> {
        struct SumGroup {
            metric: Metric,
            sum: Vec<f64>,
            c: Vec<f64>,
            init: Vec<bool>,
        }
        let steps = self.steps;
        let mut index: HashMap<u64, usize> = HashMap::new();
        let mut groups: Vec<SumGroup> = Vec::new();
        for col in input {
            self.ev.check_limits_now()?;
            let key = group_key(&col.metric, grouping, a.without);
            let gi = *index.entry(key).or_insert_with(|| {
                groups.push(SumGroup {
                    metric: group_labels(&col.metric, grouping, a.without).into(),
                    sum: vec![0.0; steps],
                    c: vec![0.0; steps],
                    init: vec![false; steps],
                });
                groups.len() - 1
            });
            let g = &mut groups[gi];
            let cells = g.sum.iter_mut().zip(g.c.iter_mut()).zip(g.init.iter_mut());
            for (((sum, c), init), (&f, &present)) in cells.zip(col.vals.iter().zip(&col.present)) {
                if !present {
                    continue;
                }
                if *init {
                    (*sum, *c) = kahan_inc(f, *sum, *c);
                } else {
                    (*sum, *c, *init) = (f, 0.0, true);
                }
            }
        }
        let mut out = Vec::with_capacity(groups.len());
        for g in groups {
            let mut col = self.new_col(g.metric, drop_name);
            for k in 0..steps {
                if g.init[k] {
                    col.vals[k] = g.sum[k] + g.c[k];
                    col.present[k] = true;
                    self.held[k] += 1;
                }
            }
            out.push(col);
        }
        Ok(Rv::Vector(out))
    }

    /// `topk(k, ...)`/`bottomk(k, ...)`: at each step the values of each group's series go
    /// through the per-step evaluator's heap in the same order, so the same series of equal
    /// values are kept; groups are found once per series. The kept series keep their labels.
    fn topk(&mut self, a: &AggregateExpr, k: f64, input: Vec<Col>) -> Rv {
        if k < 1.0 || input.is_empty() {
            return Rv::Vector(Vec::new());
        }
        let k = (k as i64).min(input.len() as i64) as usize;
        let bottom = a.op == AggregateOp::Bottomk;
        let mut grouping = a.grouping.clone();
        grouping.sort();
        let mut index: HashMap<u64, usize> = HashMap::new();
        let group_of: Vec<usize> = input
            .iter()
            .map(|c| {
                let n = index.len();
                *index
                    .entry(group_key(&c.metric, &grouping, a.without))
                    .or_insert(n)
            })
            .collect();
        let mut heaps: Vec<GoHeap<(f64, usize)>> =
            (0..index.len()).map(|_| GoHeap::new(bottom, k)).collect();
        let steps = self.steps;
        // whether series `ci` is kept at step `k`: `kept[ci * steps + k]`
        let mut kept = vec![false; input.len() * steps];
        for k_step in 0..steps {
            for h in heaps.iter_mut() {
                h.items.clear();
            }
            for (ci, c) in input.iter().enumerate() {
                if c.present[k_step] {
                    heaps[group_of[ci]].offer((c.vals[k_step], ci), k, bottom);
                }
            }
            for h in heaps.iter_mut() {
                h.sort_reverse_in_place();
                for &(_, ci) in &h.items {
                    kept[ci * steps + k_step] = true;
                    self.held[k_step] += 1;
                }
            }
        }
        let mut out = Vec::with_capacity(input.len());
        for (mut c, present) in input.into_iter().zip(kept.chunks_exact(steps)) {
            if present.iter().any(|&p| p) {
                c.present.copy_from_slice(present);
                out.push(c);
            }
        }
        Rv::Vector(out)
    }

    fn binary(&mut self, b: &BinaryExpr) -> R<Rv> {
        let lhs = tri!(self.eval(&b.lhs));
        let rhs = tri!(self.eval(&b.rhs));
        self.next_seq();
        let op = b.op;
        Ok(Some(match (lhs, rhs) {
            (Rv::Scalar(l), Rv::Scalar(r)) => Rv::Scalar(scalar_binop(op, l, r)),
            (Rv::Vector(v), Rv::Scalar(s)) => self.vector_scalar(b, v, s, false),
            (Rv::Scalar(s), Rv::Vector(v)) => self.vector_scalar(b, v, s, true),
            (Rv::Vector(l), Rv::Vector(r)) if op.is_set() => self.set_op(b, l, r),
            (Rv::Vector(l), Rv::Vector(r)) => tri!(self.vector_vector(b, l, r)),
        }))
    }

    fn vector_scalar(&mut self, b: &BinaryExpr, cols: Vec<Col>, scalar: f64, swap: bool) -> Rv {
        let op = b.op;
        let mut out = Vec::with_capacity(cols.len());
        for mut c in cols {
            for k in 0..self.steps {
                if !c.present[k] {
                    continue;
                }
                let (l, r) = if swap {
                    (scalar, c.vals[k])
                } else {
                    (c.vals[k], scalar)
                };
                let (mut v, mut keep) = elem_binop(op, l, r);
                if op.is_comparison() && swap {
                    v = r;
                }
                if b.return_bool {
                    v = btos(keep);
                    keep = true;
                }
                if keep {
                    c.vals[k] = v;
                    self.held[k] += 1;
                } else {
                    c.present[k] = false;
                }
            }
            if changes_metric_schema(op) || b.return_bool {
                c.drop_name = true;
            }
            out.push(c);
        }
        Rv::Vector(out)
    }

    /// `and`, `or`, `unless`: which series of each side are kept is decided per step by
    /// the signatures present on the other side at that step (computed once per series).
    fn set_op(&mut self, b: &BinaryExpr, lhs: Vec<Col>, rhs: Vec<Col>) -> Rv {
        let default = VectorMatching {
            card: Cardinality::ManyToMany,
            labels: vec![],
            on: false,
            include: vec![],
        };
        let m = b.matching.as_ref().unwrap_or(&default);
        // per signature, at which steps the other side has a series
        let presence = |cols: &[Col]| {
            let mut by_sig: HashMap<u64, Vec<bool>> = HashMap::new();
            let sigs: Vec<u64> = cols.iter().map(|c| signature(&c.metric, m)).collect();
            for (c, &sig) in cols.iter().zip(&sigs) {
                let p = by_sig
                    .entry(sig)
                    .or_insert_with(|| vec![false; c.present.len()]);
                for (a, &b) in p.iter_mut().zip(&c.present) {
                    *a |= b;
                }
            }
            (sigs, by_sig)
        };
        let none = vec![false; self.steps];
        let mut out = Vec::with_capacity(lhs.len() + rhs.len());
        match b.op {
            BinaryOp::Or => {
                let (_, left) = presence(&lhs);
                let (sigs, _) = presence(&rhs);
                out.extend(lhs);
                for (mut c, sig) in rhs.into_iter().zip(sigs) {
                    let l = left.get(&sig).unwrap_or(&none);
                    for (p, &taken) in c.present.iter_mut().zip(l) {
                        *p &= !taken;
                    }
                    out.push(c);
                }
            }
            _ => {
                let keep_matched = b.op == BinaryOp::And;
                let (_, right) = presence(&rhs);
                let (sigs, _) = presence(&lhs);
                for (mut c, sig) in lhs.into_iter().zip(sigs) {
                    let r = right.get(&sig).unwrap_or(&none);
                    for (p, &there) in c.present.iter_mut().zip(r) {
                        *p &= there == keep_matched;
                    }
                    out.push(c);
                }
            }
        }
        for c in &out {
            for (h, &p) in self.held.iter_mut().zip(&c.present) {
                *h += p as usize;
            }
        }
        Rv::Vector(out)
    }

    fn vector_vector(&mut self, b: &BinaryExpr, lhs: Vec<Col>, rhs: Vec<Col>) -> R<Rv> {
        let default = VectorMatching {
            card: Cardinality::OneToOne,
            labels: vec![],
            on: false,
            include: vec![],
        };
        let m = b.matching.as_ref().unwrap_or(&default);
        let op = b.op;
        // Matching signatures once per series; a signature shared by two series on one
        // side is an error at the steps where both have a value: per step decides.
        let mut right: HashMap<u64, usize> = HashMap::with_capacity(rhs.len());
        for (i, c) in rhs.iter().enumerate() {
            if right.insert(signature(&c.metric, m), i).is_some() {
                return Ok(None);
            }
        }
        let mut matched: HashSet<u64> = HashSet::new();
        let mut out = Vec::new();
        for l in &lhs {
            self.ev.check_limits_now()?;
            let sig = signature(&l.metric, m);
            let Some(&ri) = right.get(&sig) else {
                continue;
            };
            if !matched.insert(sig) {
                return Ok(None);
            }
            let r = &rhs[ri];
            let metric: Metric = result_metric(&l.metric, &r.metric, op, m).into();
            let mut col = self.new_col(metric, b.return_bool);
            for k in 0..self.steps {
                if !(l.present[k] && r.present[k]) {
                    continue;
                }
                let (mut v, keep) = elem_binop(op, l.vals[k], r.vals[k]);
                if b.return_bool {
                    v = btos(keep);
                }
                if keep || b.return_bool {
                    col.vals[k] = v;
                    col.present[k] = true;
                    self.held[k] += 1;
                }
            }
            out.push(col);
        }
        Ok(Some(Rv::Vector(out)))
    }

    fn histogram_quantile(&mut self, c: &Call) -> R<Rv> {
        let ExprKind::Number(n) = &unwrap_paren(&c.args[0]).kind else {
            return Ok(None);
        };
        let q = n.value;
        let q_pos = unwrap_paren(&c.args[0]).span.start;
        let v_pos = unwrap_paren(&c.args[1]).span.start;
        let Rv::Vector(input) = tri!(self.eval(&c.args[1])) else {
            return Ok(None);
        };
        let seq = self.next_seq();
        if q.is_nan() || !(0.0..=1.0).contains(&q) {
            self.pending.push((
                0,
                seq,
                warning(
                    format!("quantile value should be between 0 and 1, got {}", fmt_g(q)),
                    q_pos,
                ),
            ));
        }
        // Groups of bucket series by their labels without `le`, members sorted by bound
        // (stably, so the per-step sort keeps the same order of equal bounds).
        let mut index: HashMap<u64, usize> = HashMap::new();
        let mut groups: Vec<(Metric, Vec<(f64, usize)>)> = Vec::new();
        for (ci, col) in input.iter().enumerate() {
            let Some(ub) = parse_le(col.metric.get("le").unwrap_or("")) else {
                if let Some(k) = col.present.iter().position(|&p| p) {
                    self.pending
                        .push((k, seq, warning(bad_le_message(&col.metric), v_pos)));
                }
                continue;
            };
            let key = bucket_group_key(&col.metric);
            let gi = match index.get(&key) {
                Some(&i) => i,
                None => {
                    index.insert(key, groups.len());
                    groups.push((col.metric.without("le").into(), Vec::new()));
                    groups.len() - 1
                }
            };
            groups[gi].1.push((ub, ci));
        }
        let mut out = Vec::with_capacity(groups.len());
        for (metric, mut members) in groups {
            self.ev.check_limits_now()?;
            members.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap_or(std::cmp::Ordering::Equal));
            let mut col = self.new_col(metric, true);
            for k in 0..self.steps {
                let mut buckets: Vec<Bucket> = Vec::with_capacity(members.len());
                for &(ub, ci) in &members {
                    if input[ci].present[k] {
                        buckets.push(Bucket {
                            upper_bound: ub,
                            count: input[ci].vals[k],
                        });
                    }
                }
                if buckets.is_empty() {
                    continue;
                }
                let (val, fix) = bucket_quantile(q, buckets);
                if fix.forced_monotonic {
                    let a = monotonicity_annotation(&col.metric, &fix, v_pos, self.ts(k));
                    self.pending.push((k, seq, a));
                }
                col.vals[k] = val;
                col.present[k] = true;
                self.held[k] += 1;
            }
            out.push(col);
        }
        Ok(Some(Rv::Vector(out)))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use inferdb_storage::{stale_nan, Labels};

    use crate::storage::MemStorage;
    use crate::{Engine, EngineOptions, QueryResult, RangeEvaluation, Value};

    /// Serializes the tests that count column-wise evaluations.
    static SWITCH: std::sync::Mutex<()> = std::sync::Mutex::new(());
    /// How many range evaluations were done column-wise.
    pub(crate) static USED: AtomicUsize = AtomicUsize::new(0);

    /// Counters with resets, churn and a staleness marker, gauges, classic histograms
    /// (one bucket non-monotonic, one `le` malformed), a counter without a counter name.
    fn store() -> MemStorage {
        let mut s = MemStorage::new();
        let t0 = 1_000_000_007;
        for (j, job) in ["a", "b", "c", "d"].iter().enumerate() {
            let c = Labels::from_pairs([("__name__", "req_total"), ("job", job), ("m", "x")]);
            let g = Labels::from_pairs([("__name__", "temp"), ("job", job), ("m", "x")]);
            let n = Labels::from_pairs([("__name__", "reqs"), ("job", job)]);
            let mut v = 0.0;
            for i in 0..400i64 {
                // churn: job c starts late, job d ends early
                if (j == 2 && i < 100) || (j == 3 && i > 300) {
                    continue;
                }
                let t = t0 + i * 15_000 + (j as i64) * 1_000;
                v += (i % 7) as f64 * 0.37 + j as f64;
                if j == 1 && i % 90 == 89 {
                    v = 0.5; // counter reset
                }
                if j == 0 && i == 200 {
                    s.add(&c, t, stale_nan());
                    continue;
                }
                s.add(&c, t, v);
                s.add(&g, t, ((i * 31 + j as i64 * 7) % 23) as f64 / 3.0 - 2.0);
                s.add(&n, t, v * 2.0);
                // NaNs, sometimes for whole windows, and equal values of both signs of 0
                let w = Labels::from_pairs([("__name__", "wobbly"), ("job", job)]);
                let wv = match i % 10 {
                    0..=2 => f64::NAN,
                    3 | 7 => 0.0,
                    4 => -0.0,
                    _ => ((i * 13) % 5) as f64 - 2.0,
                };
                s.add(&w, t, wv);
                // integer gauges (summed exactly: a running sum), with staleness markers,
                // and integers too large for that
                let iv = Labels::from_pairs([("__name__", "ints"), ("job", job)]);
                if j == 2 && i % 50 == 7 {
                    s.add(&iv, t, stale_nan());
                } else {
                    s.add(&iv, t, ((i * 13 + j as i64) % 9) as f64 - 3.0);
                }
                let big = Labels::from_pairs([("__name__", "ints_big"), ("job", job)]);
                s.add(&big, t, 2f64.powi(50) + (i % 3) as f64);
                for (k, le) in ["0.1", "0.5", "1", "+Inf", "bad"].iter().enumerate() {
                    let b =
                        Labels::from_pairs([("__name__", "lat_bucket"), ("job", job), ("le", le)]);
                    let mut bv = v * (k as f64 + 1.0) * 0.3;
                    if j == 1 && k == 1 && i % 50 > 40 {
                        bv = 0.0; // non-monotonic buckets
                    }
                    s.add(&b, t, bv);
                }
            }
        }
        s
    }

    fn run(e: &Engine, s: &MemStorage, q: &str, columns: bool) -> Result<QueryResult, String> {
        let step_wise;
        let e = if columns {
            e
        } else {
            step_wise = Engine::new(EngineOptions {
                range_evaluation: RangeEvaluation::StepWise,
                ..e.options().clone()
            });
            &step_wise
        };
        e.range(s, q, 1_000_000_000, 1_000_000_000 + 6_500_000, 15_000)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn column_evaluation_equals_step_evaluation() {
        let _switch = SWITCH.lock().unwrap_or_else(|e| e.into_inner());
        let s = store();
        let e = Engine::new(EngineOptions::default());
        let queries = [
            "rate(req_total[5m])",
            "increase(req_total[1m])",
            "delta(temp[2m])",
            "irate(req_total[1m])",
            "idelta(temp[1m])",
            "deriv(temp[3m])",
            "resets(req_total[10m])",
            "changes(temp[5m])",
            "avg_over_time(temp[5m])",
            "sum_over_time(temp[5m])",
            "sum_over_time(ints[5m])",
            "sum_over_time(ints[30s])",
            "avg_over_time(ints[2m])",
            "avg_over_time(ints[10m] offset 1m)",
            "sum_over_time(ints_big[5m])",
            "avg_over_time(ints_big[5m])",
            r#"sum_over_time({__name__=~"ints|temp"}[3m])"#,
            "count_over_time(req_total[5m])",
            "min_over_time(temp[5m])",
            "max_over_time(temp[5m])",
            "max_over_time(req_total[3m])",
            "min_over_time(req_total[2m] offset 1m)",
            "max_over_time(wobbly[30s])",
            "min_over_time(wobbly[45s])",
            "max_over_time(wobbly[2m])",
            "last_over_time(req_total[5m])",
            "first_over_time(temp[5m])",
            "stddev_over_time(temp[5m])",
            "mad_over_time(temp[5m])",
            "ts_of_max_over_time(temp[5m])",
            "quantile_over_time(0.9, temp[10m])",
            "quantile_over_time(0, temp[10m])",
            "quantile_over_time(0.5, wobbly[2m])",
            "quantile_over_time(0.25, wobbly[45s])",
            "quantile_over_time(1, req_total[3m])",
            "quantile_over_time(0.7, req_total[1m] offset 30s)",
            "predict_linear(temp[10m], 600)",
            "rate(reqs[5m])",
            "rate(req_total[5m] offset 2m)",
            "req_total",
            "-temp",
            "sum by (m) (rate(req_total[5m]))",
            "avg without (job) (temp)",
            "sum(wobbly)",
            "sum by (job) (ints_big * 1e300)",
            "max by (job) (temp)",
            "stddev(temp)",
            "count(rate(req_total[5m]))",
            "group by (m) (temp)",
            "sum(rate(req_total[5m])) by (job) / 2",
            "rate(req_total[5m]) / rate(req_total[5m] offset 1m)",
            "rate(req_total[5m]) / ignoring(m) rate(reqs[5m])",
            "temp > on(job, m) temp * 0.5",
            "temp > bool 1",
            "1 - temp",
            "2 < temp",
            "2 * 3",
            "topk(2, rate(req_total[5m]))",
            "bottomk(2, temp)",
            "topk by (m) (1, wobbly)",
            "bottomk without (job) (3, wobbly)",
            "topk(1, changes(temp[1m]))",
            "topk(20, temp)",
            "histogram_quantile(0.9, sum by (le) (rate(lat_bucket[5m])))",
            "histogram_quantile(0.5, rate(lat_bucket[5m]))",
            "histogram_quantile(1.5, sum by (le, job) (rate(lat_bucket[5m])))",
            "sum by (job) (rate(lat_bucket[5m]))",
            "temp + temp",
            "rate(req_total[5m]) * on(job) group_left temp",
            "vector(1)",
            "sum(temp) + vector(2 * 3)",
            "rate(req_total[5m]) or temp",
            "temp or rate(req_total[5m])",
            "sum by (job) (temp) or vector(0)",
            r#"sum(temp{job="none"}) or vector(0)"#,
            "temp and on(job) (temp > 3)",
            "temp unless on(m) (temp > 3)",
            "(temp > 2) or ignoring(m) (reqs < 40)",
            "rate(req_total[5m]) and ignoring(m) rate(reqs[5m])",
            r#"label_replace(sum by (m) (rate(req_total[5m])), "model", "$1", "m", "(.*)")"#,
            r#"label_replace(temp, "__name__", "x_$1", "job", "(.+)")"#,
            r#"label_replace(rate(req_total[5m]), "job", "", "job", ".*")"#,
            r#"label_join(temp, "both", "/", "job", "m")"#,
            r#"label_join(rate(req_total[5m]), "__name__", "", "job")"#,
        ];
        for q in queries {
            let slow = run(&e, &s, q, false);
            let used = USED.load(Ordering::Relaxed);
            let fast = run(&e, &s, q, true);
            // group_left is not handled column-wise; a relabelling that makes two series
            // alike is left to the per-step evaluator's error
            if !q.contains("group_left") && !q.contains(r#""job", "", "job""#) {
                assert!(USED.load(Ordering::Relaxed) > used, "{q}: not column-wise");
            }
            match (slow, fast) {
                (Ok(a), Ok(b)) => {
                    let (Value::Matrix(ma), Value::Matrix(mb)) = (&a.value, &b.value) else {
                        panic!("{q}: not matrices");
                    };
                    assert!(!ma.is_empty(), "{q}: empty result");
                    assert_eq!(ma.len(), mb.len(), "{q}: series");
                    for (x, y) in ma.iter().zip(mb) {
                        assert_eq!(x.metric, y.metric, "{q}");
                        assert_eq!(x.floats.len(), y.floats.len(), "{q} {:?}", x.metric);
                        for (p, r) in x.floats.iter().zip(&y.floats) {
                            assert_eq!(p.t, r.t, "{q}");
                            assert_eq!(p.f.to_bits(), r.f.to_bits(), "{q} at {}", p.t);
                        }
                    }
                    assert_eq!(a.warnings, b.warnings, "{q}");
                    assert_eq!(a.infos, b.infos, "{q}");
                    assert_eq!(a.annotations, b.annotations, "{q}");
                }
                (Err(a), Err(b)) => assert_eq!(a, b, "{q}"),
                (a, b) => panic!("{q}: {a:?} vs {b:?}"),
            }
        }
    }

    #[test]
    fn errors_and_limits_come_from_the_step_evaluator() {
        let _switch = SWITCH.lock().unwrap_or_else(|e| e.into_inner());
        let mut s = store();
        // Same labels once the name is dropped, at overlapping times.
        let l = Labels::from_pairs([("__name__", "other_total"), ("job", "a"), ("m", "x")]);
        for i in 0..100 {
            s.add(&l, 1_000_000_000 + i * 15_000, i as f64);
        }
        let e = Engine::new(EngineOptions::default());
        for q in [
            "rate({__name__=~\"req_total|other_total\"}[5m])",
            "temp + on(m) temp",
            "sum by (job) (temp) / on() sum(temp)",
        ] {
            let slow = run(&e, &s, q, false).map(|_| ());
            let fast = run(&e, &s, q, true).map(|_| ());
            assert!(slow.is_err(), "{q}");
            assert_eq!(slow, fast, "{q}");
        }
        let e = Engine::new(EngineOptions {
            max_samples: 150,
            ..Default::default()
        });
        let q = "sum(rate(req_total[5m]))";
        let slow = run(&e, &s, q, false).map(|_| ());
        let fast = run(&e, &s, q, true).map(|_| ());
        assert_eq!(slow, fast);
        assert_eq!(
            fast.unwrap_err(),
            "query processing would load too many samples into memory in query execution"
        );
    }
}
