//! `queueing` (warning): requests wait (waiting > 0 at every step for at least `--queue.for`),
//! with arrival and completion rates and the time in the system by Little's law; the
//! recommendation says whether the server has KV-cache headroom (admit more) or a replica is
//! needed.

use std::collections::BTreeMap;

use super::grid::{max, mean, runs};
use super::{filter, scope_map, Ctx, Finding, InsightError, Severity};

pub(crate) fn detect(ctx: &Ctx<'_>) -> Result<Vec<Finding>, InsightError> {
    let w = ctx.win(120);
    let waiting = ctx.grid("sum by (instance, model_name) (vllm:num_requests_waiting)")?;
    let running = ctx.grid("sum by (instance, model_name) (vllm:num_requests_running)")?;
    let done = ctx.grid(&format!(
        "sum by (instance, model_name) (rate(vllm:request_success_total[{w}]))"
    ))?;
    let kv = ctx.grid("max by (instance, model_name) (vllm:kv_cache_usage_perc)")?;
    let qt = ctx.grid(&format!(
        "histogram_quantile(0.95, sum by (instance, model_name, le) (rate(vllm:request_queue_time_seconds_bucket[{w}])))"
    ))?;
    let mut out = Vec::new();
    for (scope, wr) in &waiting.series {
        let mask: Vec<bool> = wr.iter().map(|v| v.is_some_and(|x| x >= 0.5)).collect();
        for (i, j) in runs(&mask, ctx.steps(ctx.d.queue_for)) {
            let secs = (j - i + 1) as f64 * ctx.step as f64 / 1000.0;
            let completion = mean(done.row(scope), i, j);
            let w0 = if i > 0 { wr[i - 1].unwrap_or(0.0) } else { 0.0 };
            let w1 = wr[j].unwrap_or(0.0);
            let arrival = completion + (w1 - w0) / secs;
            let wait_mean = mean(Some(wr), i, j);
            let run_mean = mean(running.row(scope), i, j);
            let kv_mean = mean(kv.row(scope), i, j);
            let in_system = if completion > 0.0 {
                (wait_mean + run_mean) / completion
            } else {
                f64::NAN
            };
            let mut ev = BTreeMap::new();
            ev.insert("waiting_mean".into(), wait_mean);
            ev.insert("waiting_max".into(), max(Some(wr), i, j));
            ev.insert("running_mean".into(), run_mean);
            ev.insert("arrival_rate_per_second".into(), arrival);
            ev.insert("completion_rate_per_second".into(), completion);
            ev.insert("time_in_system_seconds".into(), in_system);
            ev.insert("queue_time_p95_seconds".into(), max(qt.row(scope), i, j));
            ev.insert("kv_cache_usage_mean".into(), kv_mean);
            ev.insert("duration_seconds".into(), secs);
            let headroom = kv_mean < ctx.th.headroom_kv;
            let recommendation = if headroom {
                format!("The KV cache is only {:.0} % used: the server has room for more requests in flight; raise --max-num-seqs (running ≈ {:.0} now) before adding a replica.", 100.0 * kv_mean, run_mean)
            } else {
                format!("The KV cache is full ({:.0} %): this server cannot take more in flight; add a replica (arrivals {:.2}/s vs {:.2}/s completed) or shed load.", 100.0 * kv_mean, arrival, completion)
            };
            let f = filter(scope);
            out.push(Finding {
                kind: "queueing",
                severity: Severity::Warning,
                scope: scope_map(scope),
                start: ctx.t(i) - ctx.step as f64 / 1000.0,
                end: ctx.t(j),
                summary: format!(
                    "{wait_mean:.0} requests waiting on average for {:.0} min: {arrival:.2} arrive/s vs {completion:.2} complete/s; a request spends {in_system:.1} s in the system (Little's law)",
                    secs / 60.0
                ),
                evidence: ev,
                recommendation,
                queries: vec![
                    format!("vllm:num_requests_waiting{f}"),
                    format!("histogram_quantile(0.95, sum by (le) (rate(vllm:request_queue_time_seconds_bucket{f}[{w}])))"),
                    format!("vllm:kv_cache_usage_perc{f}"),
                ],
            });
        }
    }
    Ok(out)
}
