//! `slo_breach` (warning): an objective given with `--slo` (`ttft_p95=500ms`) is missed over
//! the window. Attainment (the share of requests within the threshold) comes from the
//! histogram's buckets, interpolated linearly inside the bucket that holds the threshold (as
//! `histogram_quantile` does), with a note when the threshold is not a bucket boundary.

use std::collections::BTreeMap;

use super::{filter, Ctx, Finding, InsightError, Scope, Severity};

/// One objective: `quantile` of `metric` at most `threshold_s`.
#[derive(Debug, Clone, PartialEq)]
pub struct Slo {
    /// As written (`ttft_p95`).
    pub name: String,
    /// The histogram (`vllm:time_to_first_token_seconds`).
    pub metric: &'static str,
    /// 0.95 for p95.
    pub quantile: f64,
    /// Seconds.
    pub threshold_s: f64,
}

/// Parses `ttft_p95=500ms,itl_p95=50ms,e2e_p95=30s` (signals ttft, itl, e2e, queue; any
/// percentile p1..p99.9).
pub fn parse_slos(s: &str) -> Result<Vec<Slo>, InsightError> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let bad = |why: &str| {
            InsightError::Invalid(format!(
                "--slo {part:?}: {why} (e.g. ttft_p95=500ms,itl_p95=50ms,e2e_p95=30s)"
            ))
        };
        let (name, thr) = part
            .split_once('=')
            .ok_or_else(|| bad("expected NAME=DURATION"))?;
        let (sig, p) = name
            .split_once("_p")
            .ok_or_else(|| bad("expected SIGNAL_pNN"))?;
        let metric = match sig {
            "ttft" => "vllm:time_to_first_token_seconds",
            "itl" => "vllm:inter_token_latency_seconds",
            "e2e" => "vllm:e2e_request_latency_seconds",
            "queue" => "vllm:request_queue_time_seconds",
            _ => return Err(bad("signal must be ttft, itl, e2e or queue")),
        };
        let q: f64 = p.parse().map_err(|_| bad("percentile must be a number"))?;
        if !(q > 0.0 && q < 100.0) {
            return Err(bad("percentile must be in (0, 100)"));
        }
        let ms = inferdb_query::parser::parse_model_duration_ms(thr.trim())
            .ok()
            .filter(|m| *m > 0)
            .ok_or_else(|| bad("threshold must be a duration"))?;
        out.push(Slo {
            name: name.to_string(),
            metric,
            quantile: q / 100.0,
            threshold_s: ms as f64 / 1000.0,
        });
    }
    Ok(out)
}

/// Share of observations ≤ `x` from cumulative buckets `(le, count)` sorted by `le` (the last
/// `+Inf`), interpolating linearly within a bucket; and whether `x` is a boundary.
pub(crate) fn attainment(buckets: &[(f64, f64)], x: f64) -> Option<(f64, bool)> {
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let boundary = buckets
        .iter()
        .any(|(le, _)| (le - x).abs() <= 1e-12 * x.abs().max(1.0));
    let mut prev = (0.0, 0.0);
    for &(le, c) in buckets {
        if x <= le {
            if le.is_infinite() {
                return Some((prev.1 / total, boundary));
            }
            let frac = if le > prev.0 {
                (x - prev.0) / (le - prev.0)
            } else {
                1.0
            };
            return Some(((prev.1 + frac * (c - prev.1)) / total, boundary));
        }
        prev = (le, c);
    }
    Some((1.0, boundary))
}

pub(crate) fn detect(ctx: &Ctx<'_>, slos: &[Slo]) -> Result<Vec<Finding>, InsightError> {
    let mut out = Vec::new();
    let w = format!("{}s", (ctx.end - ctx.start) / 1000);
    for slo in slos {
        let q = format!(
            "sum by (instance, model_name, le) (increase({}_bucket[{w}]))",
            slo.metric
        );
        let res = ctx.src.instant(&q, ctx.end)?;
        let mut by: BTreeMap<Scope, Vec<(f64, f64)>> = BTreeMap::new();
        for s in res {
            let Some(le) = s
                .labels
                .get("le")
                .and_then(crate::model::exposition::parse_value)
            else {
                continue;
            };
            let Some(&(_, v)) = s.samples.last() else {
                continue;
            };
            let scope = Scope {
                instance: s.labels.get("instance").unwrap_or("").to_string(),
                model: s.labels.get("model_name").unwrap_or("").to_string(),
            };
            by.entry(scope).or_default().push((le, v));
        }
        for (scope, mut b) in by {
            b.sort_by(|a, c| a.0.total_cmp(&c.0));
            // cumulative counts may dip by extrapolation noise: make them monotonic
            for k in 1..b.len() {
                if b[k].1 < b[k - 1].1 {
                    b[k].1 = b[k - 1].1;
                }
            }
            let Some((att, boundary)) = attainment(&b, slo.threshold_s) else {
                continue;
            };
            if att >= slo.quantile {
                continue;
            }
            let total = b.last().map(|x| x.1).unwrap_or(0.0);
            let mut ev = BTreeMap::new();
            ev.insert("attainment".into(), att);
            ev.insert("target".into(), slo.quantile);
            ev.insert("threshold_seconds".into(), slo.threshold_s);
            ev.insert("requests".into(), total.round());
            let f = filter(&scope);
            let note = if boundary {
                String::new()
            } else {
                format!(
                    " (the threshold {} s is not a bucket boundary of {}: attainment interpolated within its bucket)",
                    slo.threshold_s, slo.metric
                )
            };
            out.push(Finding {
                kind: "slo_breach",
                severity: Severity::Warning,
                scope: super::scope_map(&scope),
                start: ctx.start as f64 / 1000.0,
                end: ctx.end as f64 / 1000.0,
                summary: format!(
                    "{}: {:.1} % of requests within {} s, objective {:.1} %{note}",
                    slo.name, 100.0 * att, slo.threshold_s, 100.0 * slo.quantile
                ),
                evidence: ev,
                recommendation: "See the other findings for the cause (queueing, KV-cache pressure, prefix-cache collapse); if none, the server is at capacity for this objective: add a replica or lower the load.".into(),
                queries: vec![format!(
                    "histogram_quantile({}, sum by (le) (rate({}_bucket{f}[5m])))",
                    slo.quantile, slo.metric
                )],
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slos_parse_and_refuse() {
        let s = parse_slos("ttft_p95=500ms, itl_p99=50ms,e2e_p95=30s").unwrap();
        assert_eq!(s.len(), 3);
        assert_eq!(s[0].metric, "vllm:time_to_first_token_seconds");
        assert!((s[0].threshold_s - 0.5).abs() < 1e-12);
        assert!((s[1].quantile - 0.99).abs() < 1e-12);
        for bad in [
            "ttft",
            "ttft_p95",
            "foo_p95=1s",
            "ttft_p0=1s",
            "ttft_p95=x",
            "ttft_pxx=1s",
        ] {
            assert!(parse_slos(bad).is_err(), "{bad}");
        }
        assert!(parse_slos("").unwrap().is_empty());
    }

    #[test]
    fn attainment_interpolates_inside_a_bucket() {
        let b = [
            (0.1, 50.0),
            (0.5, 90.0),
            (1.0, 100.0),
            (f64::INFINITY, 100.0),
        ];
        assert_eq!(attainment(&b, 0.5), Some((0.9, true)));
        let (a, boundary) = attainment(&b, 0.3).unwrap();
        assert!((a - 0.7).abs() < 1e-12 && !boundary);
        assert_eq!(attainment(&b, 5.0), Some((1.0, false)));
        assert_eq!(attainment(&[(f64::INFINITY, 0.0)], 1.0), None);
    }
}
