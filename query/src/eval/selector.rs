//! Instant and range selectors over the loaded series.

use inferdb_storage::is_stale_nan;

use super::{EvalResult, Evaluator};
use super::{Matrix, Sample, Series, Vector};
use crate::ast::{MatrixSelector, VectorSelector};
use crate::value::FPoint;

/// The reference time of a selector evaluated at `ts`: its `@` time or `ts`, minus its offset.
pub(crate) fn ref_time(ev: &Evaluator<'_>, vs: &VectorSelector, ts: i64) -> EvalResult<i64> {
    let base = match &vs.at {
        Some(a) => ev.resolve_at(a),
        None => ts,
    };
    Ok(base - ev.offset_ms(&vs.offset)?)
}

/// An instant vector selector at `ts`: per series the newest sample in
/// `(ref - lookback, ref]`, unless it is a staleness marker. Samples keep their own timestamp.
pub(crate) fn instant_vector(
    ev: &mut Evaluator<'_>,
    vs: &VectorSelector,
    ts: i64,
) -> EvalResult<Vector> {
    let reft = ref_time(ev, vs, ts)?;
    let lookback = ev.opts.lookback_delta_ms;
    let mut out = Vec::new();
    for s in ev.loaded(vs) {
        let idx = s.points.partition_point(|p| p.t <= reft);
        if idx == 0 {
            continue;
        }
        let p = s.points[idx - 1];
        if p.t <= reft - lookback || is_stale_nan(p.f) {
            continue;
        }
        out.push(Sample {
            metric: s.metric.clone(),
            t: p.t,
            f: p.f,
            drop_name: false,
        });
    }
    ev.add_samples(out.len())?;
    Ok(out)
}

/// A range selector at `ts`: per series the samples in `(ref - range, ref]` without staleness
/// markers. Returns the series and the window `(start, end]`.
pub(crate) fn matrix(
    ev: &mut Evaluator<'_>,
    ms: &MatrixSelector,
    ts: i64,
) -> EvalResult<(Matrix, i64, i64)> {
    let reft = ref_time(ev, &ms.selector, ts)?;
    let range = ev.duration_ms(&ms.range)?;
    let start = reft - range;
    let mut out = Vec::new();
    let mut n = 0;
    for s in ev.loaded(&ms.selector) {
        let lo = s.points.partition_point(|p| p.t <= start);
        let hi = s.points.partition_point(|p| p.t <= reft);
        if lo >= hi {
            continue;
        }
        let floats: Vec<FPoint> = s.points[lo..hi]
            .iter()
            .filter(|p| !is_stale_nan(p.f))
            .copied()
            .collect();
        if floats.is_empty() {
            continue;
        }
        n += floats.len();
        out.push(Series {
            metric: s.metric.clone(),
            floats,
            drop_name: false,
        });
    }
    ev.add_samples(n)?;
    Ok((out, start, reft))
}
