//! The evaluator: walks the AST once per evaluation step.
//!
//! Series data of every selector is loaded once per query (over the exact time range the
//! selector can reach, Prometheus-style) and kept sorted, so each step finds its window by
//! binary search. Range queries evaluate step after step and assemble series at the end.

pub(crate) mod aggregate;
pub(crate) mod binary;
pub mod functions;
pub(crate) mod range;
pub(crate) mod selector;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use inferdb_storage::labels::METRIC_NAME;
use inferdb_storage::Labels;

use crate::ast::{AtModifier, Duration, Expr, ExprKind, Subquery, UnaryOp, VectorSelector};
use crate::engine::{EngineOptions, QueryError};
use crate::storage::Queryable;
use crate::value::{Annotations, FPoint, Value};

/// A series' labels, shared between steps.
pub(crate) type Metric = std::sync::Arc<Labels>;

/// One element of an instant vector during evaluation (labels shared, see
/// [`crate::value::Sample`] for the public form).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Sample {
    pub(crate) metric: Metric,
    pub(crate) t: i64,
    pub(crate) f: f64,
    pub(crate) drop_name: bool,
}

/// One series of a range vector during evaluation.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Series {
    pub(crate) metric: Metric,
    pub(crate) floats: Vec<FPoint>,
    pub(crate) drop_name: bool,
}

pub(crate) type Vector = Vec<Sample>;
pub(crate) type Matrix = Vec<Series>;

fn owned(m: Metric) -> Labels {
    std::sync::Arc::try_unwrap(m).unwrap_or_else(|a| (*a).clone())
}

fn public_vector(v: Vector) -> crate::value::Vector {
    v.into_iter()
        .map(|s| crate::value::Sample {
            metric: owned(s.metric),
            t: s.t,
            f: s.f,
            drop_name: s.drop_name,
        })
        .collect()
}

fn public_matrix(m: Matrix) -> crate::value::Matrix {
    m.into_iter()
        .map(|s| crate::value::Series {
            metric: owned(s.metric),
            floats: s.floats,
            drop_name: s.drop_name,
        })
        .collect()
}

/// The value of an expression at one evaluation step.
#[derive(Debug, Clone)]
pub(crate) enum Val {
    Scalar(f64),
    Str(String),
    Vector(Vector),
    Matrix(Matrix),
}

impl Val {
    pub(crate) fn type_name(&self) -> &'static str {
        match self {
            Val::Scalar(_) => "scalar",
            Val::Str(_) => "string",
            Val::Vector(_) => "instant vector",
            Val::Matrix(_) => "range vector",
        }
    }
}

/// Loaded data of one selector: series sorted by labels, points sorted by time (staleness
/// markers included).
#[derive(Debug, Clone)]
pub(crate) struct Loaded {
    pub(crate) metric: Metric,
    pub(crate) points: Vec<FPoint>,
}

pub(crate) type EvalResult<T> = Result<T, QueryError>;

/// Shorthand for an evaluation error with a message.
pub(crate) fn err<T>(msg: impl Into<String>) -> EvalResult<T> {
    Err(QueryError::Eval(msg.into()))
}

/// The state of one query's evaluation.
pub(crate) struct Evaluator<'a> {
    pub(crate) opts: &'a EngineOptions,
    /// Query start (ms), what `@ start()` means.
    pub(crate) start: i64,
    /// Query end (ms), what `@ end()` means.
    pub(crate) end: i64,
    /// Query step (ms), 0 for instant queries.
    pub(crate) interval: i64,
    deadline: Option<Instant>,
    cancel: Option<&'a AtomicBool>,
    data: HashMap<usize, std::sync::Arc<Vec<Loaded>>>,
    pub(crate) annos: Annotations,
    ticks: u32,
    /// Samples held by the step being evaluated.
    pub(crate) cur_samples: usize,
    /// Memo of subquery results per (node, inner time).
    subq_cache: HashMap<(usize, i64), Val>,
    /// Whether the current evaluation spans several steps (a range query, or inside a
    /// subquery of several steps), as Prometheus' evaluator sees it.
    pub(crate) multi_step: bool,
    /// Memo of aggregation groups: (aggregation node, input labels' address) -> (input
    /// labels, group key, group labels).
    pub(crate) group_cache: HashMap<(usize, usize), (Metric, u64, Metric)>,
    /// Time spent sorting a range query's result (Prometheus' `result_sort` slice).
    pub(crate) sort_time: std::time::Duration,
    /// `label_replace` regexes compiled by this query, by pattern: compiled once, not per
    /// step.
    regexes: HashMap<String, std::sync::Arc<regex::Regex>>,
    /// Selections shared with other queries at the same time (a rule group's evaluation).
    pub(crate) selections: Option<&'a mut crate::selection_cache::SelectionCache>,
}

impl<'a> Evaluator<'a> {
    pub(crate) fn new(
        opts: &'a EngineOptions,
        start: i64,
        end: i64,
        interval: i64,
        deadline: Option<Instant>,
        cancel: Option<&'a AtomicBool>,
    ) -> Self {
        Evaluator {
            opts,
            start,
            end,
            interval,
            deadline,
            cancel,
            data: HashMap::new(),
            annos: Annotations::new(),
            ticks: 0,
            cur_samples: 0,
            subq_cache: HashMap::new(),
            multi_step: start != end,
            group_cache: HashMap::new(),
            sort_time: std::time::Duration::ZERO,
            regexes: HashMap::new(),
            selections: None,
        }
    }

    /// The compiled `label_replace` regex of `pattern` (compiled on first use by this
    /// query), or Prometheus' error for it.
    pub(crate) fn label_replace_regex(
        &mut self,
        pattern: &str,
    ) -> EvalResult<std::sync::Arc<regex::Regex>> {
        if let Some(r) = self.regexes.get(pattern) {
            return Ok(r.clone());
        }
        let r = std::sync::Arc::new(functions::labels::label_replace_regex(pattern)?);
        self.regexes.insert(pattern.to_string(), r.clone());
        Ok(r)
    }

    pub(crate) fn take_annotations(&mut self) -> Annotations {
        std::mem::take(&mut self.annos)
    }

    /// Checks the timeout and cancellation.
    pub(crate) fn check_limits(&mut self) -> EvalResult<()> {
        self.ticks = self.ticks.wrapping_add(1);
        if let Some(c) = self.cancel {
            if c.load(Ordering::Relaxed) {
                return Err(QueryError::Canceled);
            }
        }
        if self.ticks & 63 == 0 {
            if let Some(d) = self.deadline {
                if Instant::now() > d {
                    return Err(QueryError::Timeout);
                }
            }
        }
        Ok(())
    }

    /// Checks the timeout and cancellation now (for loops that do a lot of work between
    /// checks, such as the column-wise evaluation of a whole series).
    pub(crate) fn check_limits_now(&mut self) -> EvalResult<()> {
        self.ticks = 63;
        self.check_limits()
    }

    /// Accounts `n` more samples held in memory for the current step.
    pub(crate) fn add_samples(&mut self, n: usize) -> EvalResult<()> {
        self.cur_samples += n;
        if self.cur_samples > self.opts.max_samples {
            return Err(QueryError::TooManySamples);
        }
        Ok(())
    }

    // ----- loading -----

    /// Loads the data of every selector of `expr` from `storage`.
    pub(crate) fn load<S: Queryable + ?Sized>(
        &mut self,
        storage: &S,
        expr: &Expr,
    ) -> EvalResult<()> {
        let (lo, hi) = (self.start, self.end);
        self.load_walk(storage, expr, lo, hi)
    }

    fn load_walk<S: Queryable + ?Sized>(
        &mut self,
        storage: &S,
        expr: &Expr,
        lo: i64,
        hi: i64,
    ) -> EvalResult<()> {
        crate::stack::grow(|| self.load_node(storage, expr, lo, hi))
    }

    fn load_node<S: Queryable + ?Sized>(
        &mut self,
        storage: &S,
        expr: &Expr,
        lo: i64,
        hi: i64,
    ) -> EvalResult<()> {
        match &expr.kind {
            ExprKind::Number(_) | ExprKind::String(_) => Ok(()),
            ExprKind::VectorSelector(vs) => {
                let lb = self.opts.lookback_delta_ms;
                self.load_selector(storage, vs, lo, hi, lb, expr.span.start)
            }
            ExprKind::MatrixSelector(ms) => {
                let range = self.duration_ms(&ms.range)?;
                self.load_selector(storage, &ms.selector, lo, hi, range, expr.span.start)
            }
            ExprKind::Subquery(sq) => {
                let range = self.duration_ms(&sq.range)?;
                let offset = self.offset_ms(&sq.offset)?;
                let (blo, bhi) = match &sq.at {
                    Some(a) => {
                        let t = self.resolve_at(a);
                        (t, t)
                    }
                    None => (lo, hi),
                };
                self.load_walk(storage, &sq.expr, blo - offset - range, bhi - offset)
            }
            ExprKind::Paren(e) | ExprKind::Unary(_, e) | ExprKind::StepInvariant(e) => {
                self.load_walk(storage, e, lo, hi)
            }
            ExprKind::Binary(b) => {
                self.load_walk(storage, &b.lhs, lo, hi)?;
                self.load_walk(storage, &b.rhs, lo, hi)
            }
            ExprKind::Aggregate(a) => {
                if let Some(p) = &a.param {
                    self.load_walk(storage, p, lo, hi)?;
                }
                self.load_walk(storage, &a.expr, lo, hi)
            }
            ExprKind::Call(c) => {
                for a in &c.args {
                    self.load_walk(storage, a, lo, hi)?;
                }
                Ok(())
            }
        }
    }

    fn load_selector<S: Queryable + ?Sized>(
        &mut self,
        storage: &S,
        vs: &VectorSelector,
        lo: i64,
        hi: i64,
        back: i64,
        pos: usize,
    ) -> EvalResult<()> {
        let offset = self.offset_ms(&vs.offset)?;
        let (blo, bhi) = match &vs.at {
            Some(a) => {
                let t = self.resolve_at(a);
                (t, t)
            }
            None => (lo, hi),
        };
        let mint = blo - offset - back;
        let maxt = bhi - offset;
        let key = vs as *const VectorSelector as usize;
        if let Some(c) = self.selections.as_deref_mut() {
            if let Some(d) = c.get(&vs.matchers, mint, maxt) {
                self.data.insert(key, d);
                return Ok(());
            }
        }
        let mut out = self.read_series(storage, &vs.matchers, mint, maxt)?;
        let mut aliased = false;
        let mut alias_names = Vec::new();
        if let Some(aliases) = self.opts.metric_aliases.as_deref() {
            aliased = self.read_aliased(storage, aliases, vs, mint, maxt, pos, &mut out)?;
            if let Some(m) = vs
                .matchers
                .iter()
                .find(|m| m.name == METRIC_NAME && m.op == inferdb_storage::matcher::MatchOp::Equal)
            {
                alias_names = aliases.old_names(&m.value).to_vec();
            }
        }
        out.sort_by(|a, b| a.metric.cmp(&b.metric));
        let out = std::sync::Arc::new(out);
        // a selection that read renamed series carries an info: read afresh each time
        if let (Some(c), false) = (self.selections.as_deref_mut(), aliased) {
            c.insert(&vs.matchers, alias_names, mint, maxt, out.clone());
        }
        self.data.insert(key, out);
        Ok(())
    }

    /// The series matching `matchers` with their points in `[mint, maxt]` (those without any
    /// left out), in the storage's order.
    fn read_series<S: Queryable + ?Sized>(
        &mut self,
        storage: &S,
        matchers: &[inferdb_storage::Matcher],
        mint: i64,
        maxt: i64,
    ) -> EvalResult<Vec<Loaded>> {
        let series = storage.select(matchers, mint, maxt)?;
        let mut out: Vec<Loaded> = Vec::with_capacity(series.len());
        for mut s in series {
            self.check_limits()?;
            let mut points: Vec<FPoint> = Vec::new();
            s.samples.read_range(mint, maxt, &mut points);
            if let Some(e) = s.samples.err() {
                return Err(QueryError::Storage(crate::storage::StorageError::Other(e)));
            }
            if !points.is_empty() {
                out.push(Loaded {
                    metric: std::sync::Arc::new(s.labels),
                    points,
                });
            }
        }
        Ok(out)
    }

    /// Metric-alias bridging: when `vs` selects a name by equality and the catalogue knows
    /// older names of it, reads their series with the same other matchers, renamed to the
    /// selected name, into `out`. A renamed series whose labels equal a series already in
    /// `out` contributes only its points before that series' first point (the new name wins
    /// where both were exposed). Adds an info naming the old names read, and says whether
    /// there were any.
    #[allow(clippy::too_many_arguments)]
    fn read_aliased<S: Queryable + ?Sized>(
        &mut self,
        storage: &S,
        aliases: &crate::aliases::MetricAliases,
        vs: &VectorSelector,
        mint: i64,
        maxt: i64,
        pos: usize,
        out: &mut Vec<Loaded>,
    ) -> EvalResult<bool> {
        let Some(name_idx) = vs
            .matchers
            .iter()
            .position(|m| m.name == "__name__" && m.op == inferdb_storage::matcher::MatchOp::Equal)
        else {
            return Ok(false);
        };
        let new_name = vs.matchers[name_idx].value.clone();
        let olds = aliases.old_names(&new_name);
        if olds.is_empty() {
            return Ok(false);
        }
        let mut read = Vec::new();
        for old in olds {
            let mut matchers = vs.matchers.clone();
            matchers[name_idx] = inferdb_storage::Matcher::equal("__name__", old.as_str());
            let found = self.read_series(storage, &matchers, mint, maxt)?;
            if found.is_empty() {
                continue;
            }
            read.push(old.clone());
            for mut s in found {
                let renamed = s.metric.with("__name__", &new_name);
                match out.iter_mut().find(|l| *l.metric == renamed) {
                    Some(l) => {
                        let first = l.points[0].t;
                        let cut = s.points.partition_point(|p| p.t < first);
                        if cut > 0 {
                            s.points.truncate(cut);
                            s.points.append(&mut l.points);
                            l.points = s.points;
                        }
                    }
                    None => {
                        s.metric = std::sync::Arc::new(renamed);
                        out.push(s);
                    }
                }
            }
        }
        if !read.is_empty() {
            let names = read
                .iter()
                .map(|n| format!("{n:?}"))
                .collect::<Vec<_>>()
                .join(", ");
            self.annos.info(
                format_args!("metric alias: series of {names} read as {new_name:?} (renamed metric; --query.no-metric-aliases turns this off)"),
                Some(pos),
            );
        }
        Ok(!read.is_empty())
    }

    pub(crate) fn loaded(&self, vs: &VectorSelector) -> &[Loaded] {
        self.data
            .get(&(vs as *const VectorSelector as usize))
            .map(|v| v.as_slice())
            .unwrap_or(&[])
    }

    /// The loaded series of a selector, shared (so the evaluator can be borrowed mutably
    /// while they are read).
    pub(crate) fn loaded_arc(&self, vs: &VectorSelector) -> std::sync::Arc<Vec<Loaded>> {
        self.data
            .get(&(vs as *const VectorSelector as usize))
            .cloned()
            .unwrap_or_default()
    }

    // ----- times and durations -----

    pub(crate) fn resolve_at(&self, a: &AtModifier) -> i64 {
        match a {
            AtModifier::Timestamp(t) => *t,
            AtModifier::Start => self.start,
            AtModifier::End => self.end,
        }
    }

    /// A duration in milliseconds; expressions are evaluated against the query's start,
    /// end and step.
    pub(crate) fn duration_ms(&self, d: &Duration) -> EvalResult<i64> {
        match d {
            Duration::Millis(ms) => Ok(*ms),
            Duration::Expr(e) => {
                let secs = self.duration_expr(e)?;
                Ok((secs * 1000.0).round() as i64)
            }
        }
    }

    pub(crate) fn offset_ms(&self, d: &Option<Duration>) -> EvalResult<i64> {
        match d {
            Some(d) => self.duration_ms(d),
            None => Ok(0),
        }
    }

    fn duration_expr(&self, e: &Expr) -> EvalResult<f64> {
        crate::stack::grow(|| self.duration_node(e))
    }

    fn duration_node(&self, e: &Expr) -> EvalResult<f64> {
        use crate::ast::BinaryOp::*;
        match &e.kind {
            ExprKind::Number(n) => Ok(n.value),
            ExprKind::Paren(e) | ExprKind::StepInvariant(e) => self.duration_expr(e),
            ExprKind::Unary(op, e) => {
                let v = self.duration_expr(e)?;
                Ok(if *op == UnaryOp::Neg { -v } else { v })
            }
            ExprKind::Binary(b) => {
                let l = self.duration_expr(&b.lhs)?;
                let r = self.duration_expr(&b.rhs)?;
                Ok(match b.op {
                    Add => l + r,
                    Sub => l - r,
                    Mul => l * r,
                    Div => l / r,
                    Mod => l % r,
                    Pow => l.powf(r),
                    _ => return err(format!("invalid duration operator {}", b.op.as_str())),
                })
            }
            ExprKind::Call(c) => match c.func.as_str() {
                "step" => Ok(self.interval as f64 / 1000.0),
                "range" => Ok((self.end - self.start) as f64 / 1000.0),
                "min" | "max" | "min_of" | "max_of" if c.args.len() == 2 => {
                    let a = self.duration_expr(&c.args[0])?;
                    let b = self.duration_expr(&c.args[1])?;
                    Ok(if c.func.starts_with("min") {
                        functions::math::go_min(a, b)
                    } else {
                        functions::math::go_max(a, b)
                    })
                }
                f => err(format!("function {f} not allowed in a duration")),
            },
            _ => err("invalid duration expression"),
        }
    }

    // ----- top level -----

    pub(crate) fn run_instant(&mut self, expr: &Expr) -> EvalResult<Value> {
        let ts = self.start;
        self.cur_samples = 0;
        let v = self.eval(expr, ts)?;
        Ok(match v {
            Val::Scalar(f) => Value::Scalar { t: ts, v: f },
            Val::Str(s) => Value::String { t: ts, v: s },
            Val::Vector(mut vec) => {
                finish_vector(&mut vec)?;
                for s in vec.iter_mut() {
                    s.t = ts;
                }
                Value::Vector(public_vector(vec))
            }
            Val::Matrix(mut m) => {
                for s in m.iter_mut() {
                    if s.drop_name {
                        s.metric = drop_metadata(&s.metric).into();
                        s.drop_name = false;
                    }
                }
                let mut m = merge_same_labelsets(m)?;
                m.sort_by(|a, b| a.metric.cmp(&b.metric));
                Value::Matrix(public_matrix(m))
            }
        })
    }

    /// A copy for evaluating other steps of the same query on another thread: shares the
    /// loaded series, starts with no annotations and an empty subquery memo.
    fn fork(&self) -> Evaluator<'a> {
        Evaluator {
            opts: self.opts,
            start: self.start,
            end: self.end,
            interval: self.interval,
            deadline: self.deadline,
            cancel: self.cancel,
            data: self.data.clone(),
            annos: Annotations::new(),
            ticks: 0,
            cur_samples: 0,
            subq_cache: HashMap::new(),
            multi_step: self.multi_step,
            group_cache: HashMap::new(),
            sort_time: std::time::Duration::ZERO,
            regexes: self.regexes.clone(),
            selections: None,
        }
    }

    /// A range query: column-wise where [`range::try_range`] can, otherwise step by step,
    /// the steps split into contiguous chunks evaluated in parallel when there are enough of
    /// them, then the chunks' series joined in time order.
    pub(crate) fn run_range(&mut self, expr: &Expr) -> EvalResult<Value> {
        // Column-wise on this thread when the expression allows: it costs little per step,
        // so threads (each loading its own windows' setup) would cost more CPU than they
        // save.
        if let Some(mut out) = range::try_range(self, expr, self.start, self.end)? {
            let t = std::time::Instant::now();
            out.sort_by(|a, b| a.metric.cmp(&b.metric));
            self.sort_time = t.elapsed();
            return Ok(Value::Matrix(public_matrix(out)));
        }
        let steps = ((self.end - self.start) / self.interval + 1) as usize;
        let threads = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
            .min(steps / 64)
            .min(16);
        let mut out = if threads <= 1 {
            self.range_steps(expr, self.start, self.end)?
        } else {
            let per = steps.div_ceil(threads) as i64;
            let chunks: Vec<(i64, i64)> = (0..threads as i64)
                .map(|k| {
                    let from = self.start + k * per * self.interval;
                    let to = (from + (per - 1) * self.interval).min(self.end);
                    (from, to)
                })
                .filter(|(from, _)| *from <= self.end)
                .collect();
            let results: Vec<(EvalResult<Matrix>, Annotations)> = std::thread::scope(|sc| {
                let handles: Vec<_> = chunks
                    .iter()
                    .map(|&(from, to)| {
                        let mut ev = self.fork();
                        sc.spawn(move || {
                            let r = ev.range_steps(expr, from, to);
                            (r, ev.annos)
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| {
                        h.join().unwrap_or_else(|_| {
                            (err("evaluation thread panicked"), Annotations::new())
                        })
                    })
                    .collect()
            });
            let mut index: HashMap<Metric, usize> = HashMap::new();
            let mut out: Matrix = Vec::new();
            let mut total = 0usize;
            for (r, annos) in results {
                self.annos.merge(annos);
                for s in r? {
                    total += s.floats.len();
                    match index.get(&s.metric) {
                        Some(&i) => out[i].floats.extend(s.floats),
                        None => {
                            index.insert(s.metric.clone(), out.len());
                            out.push(s);
                        }
                    }
                }
            }
            if total > self.opts.max_samples {
                return Err(QueryError::TooManySamples);
            }
            out
        };
        let t = std::time::Instant::now();
        out.sort_by(|a, b| a.metric.cmp(&b.metric));
        self.sort_time = t.elapsed();
        Ok(Value::Matrix(public_matrix(out)))
    }

    /// Evaluates the steps `from, from + interval, ... <= to`; series in first-seen order.
    fn range_steps(&mut self, expr: &Expr, from: i64, to: i64) -> EvalResult<Matrix> {
        let mut index: HashMap<Metric, usize> = HashMap::new();
        let mut out: Matrix = Vec::new();
        let mut last_order: Vec<(Metric, bool, usize)> = Vec::new();
        let mut ts = from;
        let mut total = 0usize;
        while ts <= to {
            self.check_limits()?;
            self.cur_samples = total;
            let v = self.eval(expr, ts)?;
            match v {
                Val::Scalar(f) => {
                    let i = *index.entry(Metric::default()).or_insert_with(|| {
                        out.push(Series {
                            metric: Metric::default(),
                            floats: Vec::new(),
                            drop_name: false,
                        });
                        out.len() - 1
                    });
                    out[i].floats.push(FPoint { t: ts, f });
                    total += 1;
                }
                Val::Vector(vec) => {
                    total += vec.len();
                    let mut this_order = Vec::with_capacity(vec.len());
                    for (j, s) in vec.into_iter().enumerate() {
                        // Series usually come in the same order every step: reuse the
                        // previous step's result for the same labels before dropping the
                        // name and hashing.
                        let cached = last_order.get(j).and_then(|(src, drop, i)| {
                            (*drop == s.drop_name && std::sync::Arc::ptr_eq(src, &s.metric))
                                .then_some(*i)
                        });
                        let i = match cached {
                            Some(i) => i,
                            None => {
                                let m: Metric = if s.drop_name {
                                    drop_metadata(&s.metric).into()
                                } else {
                                    s.metric.clone()
                                };
                                match index.get(&m) {
                                    Some(&i) => i,
                                    None => {
                                        out.push(Series {
                                            metric: m.clone(),
                                            floats: Vec::new(),
                                            drop_name: false,
                                        });
                                        index.insert(m, out.len() - 1);
                                        out.len() - 1
                                    }
                                }
                            }
                        };
                        let series = &mut out[i];
                        if series.floats.last().is_some_and(|p| p.t == ts) {
                            return err("vector cannot contain metrics with the same labelset");
                        }
                        series.floats.push(FPoint { t: ts, f: s.f });
                        this_order.push((s.metric, s.drop_name, i));
                    }
                    last_order = this_order;
                }
                other => {
                    return err(format!(
                        "invalid expression type \"{}\" for range query, must be Scalar or instant Vector",
                        other.type_name()
                    ))
                }
            }
            if total > self.opts.max_samples {
                return Err(QueryError::TooManySamples);
            }
            ts += self.interval;
        }
        Ok(out)
    }

    // ----- the recursive evaluation -----

    pub(crate) fn eval(&mut self, expr: &Expr, ts: i64) -> EvalResult<Val> {
        crate::stack::grow(|| self.eval_node(expr, ts))
    }

    fn eval_node(&mut self, expr: &Expr, ts: i64) -> EvalResult<Val> {
        match &expr.kind {
            ExprKind::Number(n) => Ok(Val::Scalar(n.value)),
            ExprKind::String(s) => Ok(Val::Str(s.clone())),
            ExprKind::Paren(e) | ExprKind::StepInvariant(e) => self.eval(e, ts),
            ExprKind::Unary(op, e) => {
                let v = self.eval(e, ts)?;
                if *op == UnaryOp::Pos {
                    return Ok(v);
                }
                Ok(match v {
                    Val::Scalar(f) => Val::Scalar(-f),
                    Val::Vector(mut vec) => {
                        for s in vec.iter_mut() {
                            s.f = -s.f;
                            s.drop_name = true;
                            s.t = ts;
                        }
                        Val::Vector(vec)
                    }
                    other => return err(format!("unary minus on {}", other.type_name())),
                })
            }
            ExprKind::VectorSelector(vs) => {
                self.check_limits()?;
                let v = selector::instant_vector(self, vs, ts)?;
                Ok(Val::Vector(v))
            }
            ExprKind::MatrixSelector(ms) => {
                self.check_limits()?;
                let (m, _, _) = selector::matrix(self, ms, ts)?;
                Ok(Val::Matrix(m))
            }
            ExprKind::Subquery(sq) => {
                let (m, _, _) = self.subquery(sq, ts)?;
                Ok(Val::Matrix(m))
            }
            ExprKind::Binary(b) => binary::eval_binary(self, expr, b, ts),
            ExprKind::Aggregate(a) => aggregate::eval_aggregate(self, a, ts),
            ExprKind::Call(c) => functions::eval_call(self, expr, c, ts),
        }
    }

    /// Evaluates a subquery at `ts`: the inner expression at every multiple of the step in
    /// the left-open window. Returns the series and the window `(start, end]`.
    pub(crate) fn subquery(&mut self, sq: &Subquery, ts: i64) -> EvalResult<(Matrix, i64, i64)> {
        let range = self.duration_ms(&sq.range)?;
        let offset = self.offset_ms(&sq.offset)?;
        let step = match &sq.step {
            Some(s) => self.duration_ms(s)?,
            None => 0,
        };
        let step = if step > 0 {
            step
        } else {
            self.opts.default_subquery_step_ms.max(1)
        };
        let reft = match &sq.at {
            Some(a) => self.resolve_at(a),
            None => ts,
        } - offset;
        let wstart = reft - range;
        let mut t = step * (wstart / step);
        if t <= wstart {
            t += step;
        }
        let key = sq as *const Subquery as usize;
        let mut index: HashMap<Metric, usize> = HashMap::new();
        let mut out: Matrix = Vec::new();
        let saved_multi = self.multi_step;
        self.multi_step = t + step <= reft;
        let r = self.subquery_steps(sq, key, t, reft, step, &mut index, &mut out);
        self.multi_step = saved_multi;
        r?;
        let n: usize = out.iter().map(|s| s.floats.len()).sum();
        self.add_samples(n)?;
        Ok((out, reft - range, reft))
    }

    #[allow(clippy::too_many_arguments)]
    fn subquery_steps(
        &mut self,
        sq: &Subquery,
        key: usize,
        mut t: i64,
        reft: i64,
        step: i64,
        index: &mut HashMap<Metric, usize>,
        out: &mut Matrix,
    ) -> EvalResult<()> {
        while t <= reft {
            self.check_limits()?;
            let v = match self.subq_cache.get(&(key, t)) {
                Some(v) => v.clone(),
                None => {
                    let saved = self.cur_samples;
                    let v = self.eval(&sq.expr, t)?;
                    self.cur_samples = saved;
                    if self.subq_cache.len() < 100_000 {
                        self.subq_cache.insert((key, t), v.clone());
                    }
                    v
                }
            };
            match v {
                Val::Scalar(f) => {
                    let i = *index.entry(Metric::default()).or_insert_with(|| {
                        out.push(Series {
                            metric: Labels::default().into(),
                            floats: Vec::new(),
                            drop_name: false,
                        });
                        out.len() - 1
                    });
                    out[i].floats.push(FPoint { t, f });
                }
                Val::Vector(vec) => {
                    for s in vec {
                        let i = match index.get(&s.metric) {
                            Some(i) => *i,
                            None => {
                                out.push(Series {
                                    metric: s.metric.clone(),
                                    floats: Vec::new(),
                                    drop_name: s.drop_name,
                                });
                                index.insert(s.metric, out.len() - 1);
                                out.len() - 1
                            }
                        };
                        let series = &mut out[i];
                        if series.floats.last().is_some_and(|p| p.t == t) {
                            return err("vector cannot contain metrics with the same labelset");
                        }
                        series.floats.push(FPoint { t, f: s.f });
                    }
                }
                other => {
                    return err(format!(
                        "subquery is only allowed on instant vector, got {}",
                        other.type_name()
                    ))
                }
            }
            t += step;
        }
        Ok(())
    }
}

/// Removes `__name__` (and the other metadata labels `__type__`, `__unit__`).
pub(crate) fn drop_metadata(l: &Labels) -> Labels {
    if !l
        .iter()
        .any(|x| x.name == METRIC_NAME || x.name == "__type__" || x.name == "__unit__")
    {
        return l.clone();
    }
    Labels::from_sorted_unchecked(
        l.iter()
            .filter(|x| x.name != METRIC_NAME && x.name != "__type__" && x.name != "__unit__")
            .cloned()
            .collect(),
    )
}

/// Applies delayed name removal to a final vector and checks for duplicate label sets.
pub(crate) fn finish_vector(vec: &mut Vector) -> EvalResult<()> {
    for s in vec.iter_mut() {
        if s.drop_name {
            s.metric = drop_metadata(&s.metric).into();
            s.drop_name = false;
        }
    }
    check_duplicates(vec)
}

/// Fails with Prometheus' error when two samples have the same labels.
pub(crate) fn check_duplicates(vec: &[Sample]) -> EvalResult<()> {
    if vec.len() < 2 {
        return Ok(());
    }
    let mut seen = std::collections::HashSet::with_capacity(vec.len());
    for s in vec {
        if !seen.insert(&s.metric) {
            return err("vector cannot contain metrics with the same labelset");
        }
    }
    Ok(())
}

/// Merges series that ended up with the same labels (after name removal); an overlap in
/// timestamps is Prometheus' duplicate-labelset error.
pub(crate) fn merge_same_labelsets(m: Matrix) -> EvalResult<Matrix> {
    let mut index: HashMap<Metric, usize> = HashMap::new();
    let mut out: Matrix = Vec::with_capacity(m.len());
    let mut merged = false;
    for s in m {
        match index.get(&s.metric) {
            Some(&i) => {
                merged = true;
                out[i].floats.extend(s.floats);
            }
            None => {
                index.insert(s.metric.clone(), out.len());
                out.push(s);
            }
        }
    }
    if merged {
        for s in out.iter_mut() {
            s.floats.sort_by_key(|p| p.t);
            if s.floats.windows(2).any(|w| w[0].t == w[1].t) {
                return err("vector cannot contain metrics with the same labelset");
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use crate::ast::*;
    use crate::storage::MemStorage;
    use crate::{Engine, EngineOptions, QueryError, Value};
    use inferdb_storage::{stale_nan, Labels, Matcher};

    fn sel(name: &str) -> VectorSelector {
        VectorSelector {
            name: Some(name.into()),
            matchers: vec![Matcher::equal("__name__", name)],
            offset: None,
            at: None,
        }
    }

    fn vs(name: &str) -> Expr {
        Expr::new(ExprKind::VectorSelector(sel(name)))
    }

    fn ms(name: &str, range_ms: i64) -> Expr {
        Expr::new(ExprKind::MatrixSelector(MatrixSelector {
            selector: sel(name),
            range: Duration::Millis(range_ms),
        }))
    }

    fn call(f: &str, args: Vec<Expr>) -> Expr {
        Expr::new(ExprKind::Call(Call {
            func: f.into(),
            args,
        }))
    }

    fn store() -> MemStorage {
        let mut s = MemStorage::new();
        for (job, mult) in [("a", 1.0), ("b", 2.0)] {
            let l = Labels::from_pairs([("__name__", "x_total"), ("job", job)]);
            for i in 0..=10 {
                s.add(&l, i * 60_000, i as f64 * 60.0 * mult);
            }
        }
        let g = Labels::from_pairs([("__name__", "g"), ("job", "a")]);
        s.add(&g, 0, 1.0);
        s.add(&g, 60_000, stale_nan());
        s
    }

    fn vector(v: Value) -> Vec<(Labels, f64)> {
        match v {
            Value::Vector(v) => v.into_iter().map(|s| (s.metric, s.f)).collect(),
            other => panic!("expected vector, got {other:?}"),
        }
    }

    #[test]
    fn selector_lookback_and_staleness() {
        let e = Engine::new(EngineOptions::default());
        let s = store();
        let r = vector(e.instant_expr(&s, &vs("x_total"), 90_000).unwrap().value);
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].1, 60.0);
        // 5 minutes after the last sample, left-open: nothing.
        let r = vector(e.instant_expr(&s, &vs("x_total"), 900_000).unwrap().value);
        assert!(r.is_empty());
        let r = vector(e.instant_expr(&s, &vs("x_total"), 899_999).unwrap().value);
        assert_eq!(r.len(), 2);
        // The staleness marker ends the gauge.
        assert_eq!(
            vector(e.instant_expr(&s, &vs("g"), 30_000).unwrap().value).len(),
            1
        );
        assert!(vector(e.instant_expr(&s, &vs("g"), 90_000).unwrap().value).is_empty());
    }

    #[test]
    fn rate_and_sum() {
        let e = Engine::new(EngineOptions::default());
        let s = store();
        let rate = call("rate", vec![ms("x_total", 300_000)]);
        let sum = Expr::new(ExprKind::Aggregate(AggregateExpr {
            op: AggregateOp::Sum,
            expr: Box::new(rate.clone()),
            param: None,
            grouping: vec![],
            without: false,
        }));
        let r = vector(e.instant_expr(&s, &rate, 600_000).unwrap().value);
        assert_eq!(r[0].0, Labels::from_pairs([("job", "a")]));
        assert!((r[0].1 - 1.0).abs() < 1e-12);
        let r = vector(e.instant_expr(&s, &sum, 600_000).unwrap().value);
        assert!((r[0].1 - 3.0).abs() < 1e-12);
        let m = e.range_expr(&s, &sum, 300_000, 600_000, 60_000).unwrap();
        match m.value {
            Value::Matrix(m) => assert_eq!(m[0].floats.len(), 6),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn duplicate_labelsets_fail() {
        let e = Engine::new(EngineOptions::default());
        let mut s = store();
        let l = Labels::from_pairs([("__name__", "y_total"), ("job", "a")]);
        s.add(&l, 0, 1.0);
        let any = Expr::new(ExprKind::VectorSelector(VectorSelector {
            name: None,
            matchers: vec![
                Matcher::new(
                    inferdb_storage::MatchOp::RegexMatch,
                    "__name__",
                    "x_total|y_total",
                )
                .unwrap(),
                Matcher::equal("job", "a"),
            ],
            offset: None,
            at: None,
        }));
        let neg = Expr::new(ExprKind::Unary(UnaryOp::Neg, Box::new(any)));
        let err = e.instant_expr(&s, &neg, 0).unwrap_err();
        assert!(
            matches!(err, QueryError::Eval(ref m) if m == "vector cannot contain metrics with the same labelset")
        );
    }

    #[test]
    fn sample_limit() {
        let opts = EngineOptions {
            max_samples: 3,
            ..Default::default()
        };
        let e = Engine::new(opts);
        let err = e
            .instant_expr(&store(), &ms("x_total", 600_000), 600_000)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "query processing would load too many samples into memory in query execution"
        );
    }

    #[test]
    fn cancel_and_timeout() {
        let s = store();
        let e = Engine::new(EngineOptions::default());
        let token = crate::engine::CancelToken::new();
        token.cancel();
        let rate = call("rate", vec![ms("x_total", 300_000)]);
        let err = e
            .run(&s, &rate, "", 0, 600_000, 1_000, Some(&token))
            .unwrap_err();
        assert!(matches!(err, QueryError::Canceled));
        let e = Engine::new(EngineOptions {
            timeout: std::time::Duration::ZERO,
            ..Default::default()
        });
        // 601 steps check the deadline well over 64 times.
        let err = e.range_expr(&s, &rate, 0, 600_000, 1_000).unwrap_err();
        assert!(matches!(err, QueryError::Timeout));
        assert_eq!(err.to_string(), "query timed out in expression evaluation");
    }

    #[test]
    fn long_range_queries_match_instant_queries() {
        // Enough steps for the range to be split across threads where there are several.
        let s = store();
        let e = Engine::new(EngineOptions::default());
        let q = Expr::new(ExprKind::Aggregate(AggregateExpr {
            op: AggregateOp::Sum,
            expr: Box::new(call("rate", vec![ms("x_total", 120_000)])),
            param: None,
            grouping: vec!["job".into()],
            without: false,
        }));
        let r = e.range_expr(&s, &q, 0, 900_000, 500).unwrap();
        let Value::Matrix(m) = r.value else {
            panic!("matrix expected")
        };
        assert_eq!(m.len(), 2);
        for series in &m {
            // Every step has a point while rate has two samples in the window.
            let n = series.floats.len();
            assert!(n > 1000, "{n} points");
            assert!(series.floats.windows(2).all(|w| w[0].t < w[1].t));
            for p in series.floats.iter().step_by(97) {
                let inst = vector(e.instant_expr(&s, &q, p.t).unwrap().value);
                let v = inst.iter().find(|(l, _)| *l == series.metric).unwrap().1;
                assert_eq!(v, p.f, "at {}", p.t);
            }
        }
    }
}
