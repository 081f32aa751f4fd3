//! PromQL functions: dispatch and evaluation of arguments. The math of each family lives in
//! its own module as pure functions.

pub mod histogram;
pub mod labels;
pub mod math;
pub mod over_time;
pub mod rate;
pub mod time;

use inferdb_storage::labels::METRIC_NAME;
use inferdb_storage::{Label, Labels, MatchOp};

use super::{err, selector, EvalResult, Evaluator, Val};
use super::{Matrix, Sample, Vector};
use crate::ast::{Call, Expr, ExprKind};
use crate::value::FPoint;

pub(crate) fn unwrap_paren(mut e: &Expr) -> &Expr {
    loop {
        match &e.kind {
            ExprKind::Paren(inner) | ExprKind::StepInvariant(inner) => e = inner,
            _ => return e,
        }
    }
}

fn is_matrix_arg(e: &Expr) -> bool {
    matches!(
        unwrap_paren(e).kind,
        ExprKind::MatrixSelector(_) | ExprKind::Subquery(_)
    )
}

/// Evaluates a range-vector argument at `ts`: series and window `(start, end]`.
fn eval_matrix_arg(ev: &mut Evaluator<'_>, e: &Expr, ts: i64) -> EvalResult<(Matrix, i64, i64)> {
    match &unwrap_paren(e).kind {
        ExprKind::MatrixSelector(ms) => {
            ev.check_limits()?;
            selector::matrix(ev, ms, ts)
        }
        ExprKind::Subquery(sq) => ev.subquery(sq, ts),
        _ => err("expected a range vector argument"),
    }
}

fn eval_vector(ev: &mut Evaluator<'_>, e: &Expr, ts: i64) -> EvalResult<Vector> {
    match ev.eval(e, ts)? {
        Val::Vector(v) => Ok(v),
        other => err(format!(
            "expected instant vector, got {}",
            other.type_name()
        )),
    }
}

fn eval_scalar(ev: &mut Evaluator<'_>, e: &Expr, ts: i64) -> EvalResult<f64> {
    match ev.eval(e, ts)? {
        Val::Scalar(f) => Ok(f),
        other => err(format!("expected scalar, got {}", other.type_name())),
    }
}

fn eval_string(ev: &mut Evaluator<'_>, e: &Expr, ts: i64) -> EvalResult<String> {
    match ev.eval(e, ts)? {
        Val::Str(s) => Ok(s),
        other => err(format!("expected string, got {}", other.type_name())),
    }
}

/// Applies `f` to every sample's value; the name is dropped (delayed).
fn map_values(vec: Vector, ts: i64, f: impl Fn(f64) -> f64) -> Vector {
    vec.into_iter()
        .map(|mut s| {
            s.f = f(s.f);
            s.t = ts;
            s.drop_name = true;
            s
        })
        .collect()
}

/// The labels `absent()`/`absent_over_time()` give: the selector's equality matchers.
fn absent_labels(e: &Expr) -> Labels {
    let vs = match &unwrap_paren(e).kind {
        ExprKind::VectorSelector(vs) => vs,
        ExprKind::MatrixSelector(ms) => &ms.selector,
        _ => return Labels::default(),
    };
    let mut out: Vec<Label> = Vec::new();
    let mut has: Vec<&str> = Vec::new();
    for m in &vs.matchers {
        if m.name == METRIC_NAME {
            continue;
        }
        if m.op == MatchOp::Equal && !has.contains(&m.name.as_str()) {
            out.retain(|l| l.name != m.name);
            out.push(Label::new(m.name.clone(), m.value.clone()));
            has.push(&m.name);
        } else {
            out.retain(|l| l.name != m.name);
        }
    }
    Labels::new(out)
}

pub(crate) const RATE_COUNTER_SUFFIXES: [&str; 4] = ["_total", "_sum", "_count", "_bucket"];

pub(crate) fn eval_call(ev: &mut Evaluator<'_>, expr: &Expr, c: &Call, ts: i64) -> EvalResult<Val> {
    let name = c.func.as_str();
    let args: Vec<&Expr> = c.args.iter().map(unwrap_paren).collect();

    // Functions over a range vector.
    if let Some(mi) = args.iter().position(|a| is_matrix_arg(a)) {
        return eval_matrix_call(ev, expr, name, &args, mi, ts);
    }

    match name {
        "time" => return Ok(Val::Scalar(ts as f64 / 1000.0)),
        "pi" => return Ok(Val::Scalar(std::f64::consts::PI)),
        "step" => return Ok(Val::Scalar(ev.interval as f64 / 1000.0)),
        "start" => return Ok(Val::Scalar(ev.start as f64 / 1000.0)),
        "end" => return Ok(Val::Scalar(ev.end as f64 / 1000.0)),
        "range" => return Ok(Val::Scalar((ev.end - ev.start) as f64 / 1000.0)),
        "min_of" | "max_of" => {
            let a = eval_scalar(ev, args[0], ts)?;
            let b = eval_scalar(ev, args[1], ts)?;
            return Ok(Val::Scalar(if name == "min_of" {
                math::go_min(a, b)
            } else {
                math::go_max(a, b)
            }));
        }
        "vector" => {
            let f = eval_scalar(ev, args[0], ts)?;
            return Ok(Val::Vector(vec![Sample {
                metric: Labels::default().into(),
                t: ts,
                f,
                drop_name: false,
            }]));
        }
        "scalar" => {
            let v = eval_vector(ev, args[0], ts)?;
            return Ok(Val::Scalar(if v.len() == 1 { v[0].f } else { f64::NAN }));
        }
        "label_replace" => {
            let v = eval_vector(ev, args[0], ts)?;
            let dst = eval_string(ev, args[1], ts)?;
            let repl = eval_string(ev, args[2], ts)?;
            let src = eval_string(ev, args[3], ts)?;
            let re = eval_string(ev, args[4], ts)?;
            let re = ev.label_replace_regex(&re)?;
            return labels::label_replace(v, &dst, &repl, &src, &re).map(Val::Vector);
        }
        "label_join" => {
            let v = eval_vector(ev, args[0], ts)?;
            let dst = eval_string(ev, args[1], ts)?;
            let sep = eval_string(ev, args[2], ts)?;
            let mut srcs = Vec::new();
            for a in &args[3..] {
                srcs.push(eval_string(ev, a, ts)?);
            }
            return labels::label_join(v, &dst, &sep, &srcs).map(Val::Vector);
        }
        "absent" => {
            let v = eval_vector(ev, args[0], ts)?;
            if !v.is_empty() {
                return Ok(Val::Vector(vec![]));
            }
            return Ok(Val::Vector(vec![Sample {
                metric: absent_labels(args[0]).into(),
                t: ts,
                f: 1.0,
                drop_name: false,
            }]));
        }
        "timestamp" => {
            let is_selector = matches!(args[0].kind, ExprKind::VectorSelector(_));
            let v = eval_vector(ev, args[0], ts)?;
            return Ok(Val::Vector(
                v.into_iter()
                    .map(|mut s| {
                        s.f = if is_selector { s.t } else { ts } as f64 / 1000.0;
                        s.t = ts;
                        s.drop_name = true;
                        s
                    })
                    .collect(),
            ));
        }
        "sort" | "sort_desc" | "sort_by_label" | "sort_by_label_desc" => {
            if ev.multi_step {
                ev.annos.warn(
                    "sort is ineffective for range queries since results are always ordered by labels",
                    Some(expr.span.start),
                );
            }
            let mut v = eval_vector(ev, args[0], ts)?;
            match name {
                "sort" => labels::sort_by_value(&mut v, false),
                "sort_desc" => labels::sort_by_value(&mut v, true),
                _ => {
                    let mut ls = Vec::new();
                    for a in &args[1..] {
                        ls.push(eval_string(ev, a, ts)?);
                    }
                    labels::sort_by_label(&mut v, &ls, name == "sort_by_label_desc");
                }
            }
            return Ok(Val::Vector(v));
        }
        "histogram_quantile" => {
            let q = eval_scalar(ev, args[0], ts)?;
            let v = eval_vector(ev, args[1], ts)?;
            let out =
                histogram::histogram_quantile(ev, q, v, args[0].span.start, args[1].span.start, ts);
            return Ok(Val::Vector(out));
        }
        "histogram_quantiles" => {
            let v = eval_vector(ev, args[0], ts)?;
            let label = eval_string(ev, args[1], ts)?;
            let mut qs = Vec::new();
            for a in &args[2..] {
                qs.push((eval_scalar(ev, a, ts)?, a.span.start));
            }
            let out = histogram::histogram_quantiles(ev, v, &label, &qs, args[0].span.start, ts);
            return Ok(Val::Vector(out));
        }
        "histogram_fraction" => {
            let lo = eval_scalar(ev, args[0], ts)?;
            let hi = eval_scalar(ev, args[1], ts)?;
            let v = eval_vector(ev, args[2], ts)?;
            let out = histogram::histogram_fraction(ev, lo, hi, v, args[2].span.start, ts);
            return Ok(Val::Vector(out));
        }
        "histogram_avg" | "histogram_count" | "histogram_sum" | "histogram_stddev"
        | "histogram_stdvar" => {
            // Only native histograms have these; float samples give nothing.
            let _ = eval_vector(ev, args[0], ts)?;
            return Ok(Val::Vector(vec![]));
        }
        "info" => {
            let v = eval_vector(ev, args[0], ts)?;
            return Ok(Val::Vector(v));
        }
        _ => {}
    }

    // Date functions: of the argument's values, or of the evaluation time without one.
    if let Some(f) = time::date_function(name) {
        if args.is_empty() {
            return Ok(Val::Vector(vec![Sample {
                metric: Labels::default().into(),
                t: ts,
                f: f(ts.div_euclid(1000)),
                drop_name: false,
            }]));
        }
        let v = eval_vector(ev, args[0], ts)?;
        return Ok(Val::Vector(map_values(v, ts, |x| {
            if x.is_nan() || x.is_infinite() {
                // Go converts out-of-range floats to the minimum int64.
                f(i64::MIN)
            } else {
                f(x as i64)
            }
        })));
    }

    // Functions of an instant vector and optional scalars.
    let v = eval_vector(ev, args[0], ts)?;
    let mut scalars = Vec::new();
    for a in &args[1..] {
        scalars.push(eval_scalar(ev, a, ts)?);
    }
    let out = match name {
        "clamp" => {
            let (lo, hi) = (scalars[0], scalars[1]);
            if hi < lo {
                vec![]
            } else {
                map_values(v, ts, |x| lo.max(hi.min(x)))
            }
        }
        "clamp_min" => {
            let lo = scalars[0];
            map_values(v, ts, |x| lo.max(f64::INFINITY.min(x)))
        }
        "clamp_max" => {
            let hi = scalars[0];
            map_values(v, ts, |x| f64::NEG_INFINITY.max(hi.min(x)))
        }
        "round" => {
            let to = scalars.first().copied().unwrap_or(1.0);
            let inv = 1.0 / to;
            map_values(v, ts, |x| (x * inv + 0.5).floor() / inv)
        }
        _ => match math::simple_function(name) {
            Some(f) => map_values(v, ts, f),
            None => return err(format!("unknown function {name}")),
        },
    };
    Ok(Val::Vector(out))
}

fn eval_matrix_call(
    ev: &mut Evaluator<'_>,
    _expr: &Expr,
    name: &str,
    args: &[&Expr],
    mi: usize,
    ts: i64,
) -> EvalResult<Val> {
    // Scalar arguments first, as Prometheus evaluates them.
    let mut scalars = Vec::new();
    for (i, a) in args.iter().enumerate() {
        if i != mi {
            scalars.push(eval_scalar(ev, a, ts)?);
        }
    }
    let matrix_pos = args[mi].span.start;
    let keep_name = name == "last_over_time" || name == "first_over_time";

    // (labels, drop name, result) per series with points in the window.
    let mut results: Vec<(super::Metric, bool, Option<f64>)> = Vec::new();
    let mut any_points = false;
    let (wstart, wend);
    if let ExprKind::MatrixSelector(ms) = &args[mi].kind {
        // Straight from the loaded series: no copy of the window unless it holds
        // staleness markers.
        ev.check_limits()?;
        let reft = selector::ref_time(ev, &ms.selector, ts)?;
        let range = ev.duration_ms(&ms.range)?;
        wstart = reft - range;
        wend = reft;
        let loaded = ev.loaded_arc(&ms.selector);
        let mut buf: Vec<FPoint> = Vec::new();
        let mut n = 0;
        for l in loaded.iter() {
            let lo = l.points.partition_point(|p| p.t <= wstart);
            let hi = l.points.partition_point(|p| p.t <= wend);
            if lo >= hi {
                continue;
            }
            let mut window = &l.points[lo..hi];
            if window.iter().any(|p| inferdb_storage::is_stale_nan(p.f)) {
                buf.clear();
                buf.extend(
                    window
                        .iter()
                        .filter(|p| !inferdb_storage::is_stale_nan(p.f)),
                );
                window = &buf;
            }
            if window.is_empty() {
                continue;
            }
            any_points = true;
            n += window.len();
            let v = if name == "absent_over_time" {
                None
            } else {
                matrix_function(name, window, &scalars, wstart, wend, range, ts)?
            };
            if v.is_some() {
                results.push((l.metric.clone(), !keep_name, v));
            }
        }
        ev.add_samples(n)?;
    } else {
        let (m, ws, we) = eval_matrix_arg(ev, args[mi], ts)?;
        wstart = ws;
        wend = we;
        for s in m {
            if s.floats.is_empty() {
                continue;
            }
            any_points = true;
            let v = if name == "absent_over_time" {
                None
            } else {
                matrix_function(name, &s.floats, &scalars, wstart, wend, we - ws, ts)?
            };
            if v.is_some() {
                results.push((s.metric, s.drop_name || !keep_name, v));
            }
        }
    }

    if name == "absent_over_time" {
        if any_points {
            return Ok(Val::Vector(vec![]));
        }
        return Ok(Val::Vector(vec![Sample {
            metric: absent_labels(args[mi]).into(),
            t: ts,
            f: 1.0,
            drop_name: true,
        }]));
    }
    if name == "quantile_over_time" {
        let q = scalars[0];
        if (q.is_nan() || !(0.0..=1.0).contains(&q)) && any_points {
            ev.annos.warn(
                format!(
                    "quantile value should be between 0 and 1, got {}",
                    crate::value::fmt_g(q)
                ),
                Some(args[0].span.start),
            );
        }
    }
    if name == "double_exponential_smoothing" && any_points {
        let (sf, tf) = (scalars[0], scalars[1]);
        if sf <= 0.0 || sf >= 1.0 {
            return err(format!(
                "invalid smoothing factor. Expected: 0 < sf < 1, got: {sf:.6}"
            ));
        }
        if tf <= 0.0 || tf >= 1.0 {
            return err(format!(
                "invalid trend factor. Expected: 0 < tf < 1, got: {tf:.6}"
            ));
        }
    }

    let mut out = Vec::with_capacity(results.len());
    for (metric, drop_name, v) in results {
        let Some(v) = v else { continue };
        if name == "rate" || name == "increase" {
            if let Some(n) = metric.metric_name() {
                if !RATE_COUNTER_SUFFIXES.iter().any(|s| n.ends_with(s)) {
                    ev.annos.info(
                        format!(
                            "metric might not be a counter, name does not end in _total/_sum/_count/_bucket: {}",
                            crate::parser::go_quote(n)
                        ),
                        Some(matrix_pos),
                    );
                }
            }
        }
        out.push(Sample {
            metric,
            t: ts,
            f: v,
            drop_name,
        });
    }
    ev.add_samples(out.len())?;
    Ok(Val::Vector(out))
}

/// One range-vector function over one series' points in the window `(wstart, wend]`.
pub(crate) fn matrix_function(
    name: &str,
    pts: &[FPoint],
    scalars: &[f64],
    wstart: i64,
    wend: i64,
    range_ms: i64,
    ts: i64,
) -> EvalResult<Option<f64>> {
    if pts.is_empty() {
        return Ok(None);
    }
    Ok(match name {
        "rate" => rate::extrapolated_rate(pts, wstart, wend, range_ms, true, true),
        "increase" => rate::extrapolated_rate(pts, wstart, wend, range_ms, true, false),
        "delta" => rate::extrapolated_rate(pts, wstart, wend, range_ms, false, false),
        "irate" => rate::instant_value(pts, true),
        "idelta" => rate::instant_value(pts, false),
        "deriv" => rate::deriv(pts),
        "predict_linear" => rate::predict_linear(pts, scalars[0], ts),
        "resets" => Some(rate::resets(pts)),
        "changes" => Some(rate::changes(pts)),
        "avg_over_time" => Some(over_time::avg(pts)),
        "sum_over_time" => Some(over_time::sum(pts)),
        "count_over_time" => Some(pts.len() as f64),
        "min_over_time" => Some(over_time::compare(pts, |cur, m| cur < m || m.is_nan()).0),
        "max_over_time" => Some(over_time::compare(pts, |cur, m| cur > m || m.is_nan()).0),
        "ts_of_min_over_time" => Some(over_time::compare(pts, |cur, m| cur <= m || m.is_nan()).1),
        "ts_of_max_over_time" => Some(over_time::compare(pts, |cur, m| cur >= m || m.is_nan()).1),
        "last_over_time" => pts.last().map(|p| p.f),
        "first_over_time" => pts.first().map(|p| p.f),
        "ts_of_last_over_time" => pts.last().map(|p| p.t as f64 / 1000.0),
        "ts_of_first_over_time" => pts.first().map(|p| p.t as f64 / 1000.0),
        "present_over_time" => Some(1.0),
        "stddev_over_time" => Some(over_time::variance(pts).sqrt()),
        "stdvar_over_time" => Some(over_time::variance(pts)),
        "quantile_over_time" => {
            let mut vals: Vec<f64> = pts.iter().map(|p| p.f).collect();
            Some(math::quantile(scalars[0], &mut vals))
        }
        "mad_over_time" => Some(over_time::mad(pts)),
        "double_exponential_smoothing" => {
            over_time::double_exponential_smoothing(pts, scalars[0], scalars[1])
        }
        other => return err(format!("function {other} does not take a range vector")),
    })
}
