//! `underutilized` (info): few requests in flight (under `--underutilized.running`), the GPUs
//! mostly idle and no queue for at least `--underutilized.for`: decode batches are thin, or the
//! fleet has a replica too many. The GPUs are those on the instance's host (see
//! [`super::gpu`]), idle under `--underutilized.gpu` percent; where no GPU series join the
//! instance, a nearly empty KV cache (under `--underutilized.kv`) stands for idle GPUs.

use std::collections::BTreeMap;

use super::gpu::{host_of, util_by_host};
use super::grid::{max, mean, runs};
use super::{filter, scope_map, Ctx, Finding, InsightError, Severity};

pub(crate) fn detect(ctx: &Ctx<'_>) -> Result<Vec<Finding>, InsightError> {
    let w = ctx.win(120);
    let running = ctx.grid("sum by (instance, model_name) (vllm:num_requests_running)")?;
    let waiting = ctx.grid("sum by (instance, model_name) (vllm:num_requests_waiting)")?;
    let kv = ctx.grid("max by (instance, model_name) (vllm:kv_cache_usage_perc)")?;
    let gen = ctx.grid(&format!(
        "sum by (instance, model_name) (rate(vllm:generation_tokens_total[{w}]))"
    ))?;
    let gpu = util_by_host(ctx.src, ctx.first(), ctx.step, ctx.n())?;
    let mut out = Vec::new();
    for (scope, rr) in &running.series {
        let g = gpu.get(host_of(&scope.instance));
        let mask: Vec<bool> = (0..ctx.n())
            .map(|i| {
                let idle = match g {
                    Some(g) => g[i].is_some_and(|u| u < ctx.th.idle_gpu),
                    None => kv.at(scope, i).is_some_and(|k| k < ctx.th.idle_kv),
                };
                rr[i].is_some_and(|r| r < ctx.th.idle_running)
                    && waiting.at(scope, i).is_some_and(|w| w < 0.5)
                    && idle
            })
            .collect();
        for (i, j) in runs(&mask, ctx.steps(ctx.d.idle_for)) {
            let secs = (j - i + 1) as f64 * ctx.step as f64 / 1000.0;
            let mut ev = BTreeMap::new();
            ev.insert("running_mean".into(), mean(Some(rr), i, j));
            ev.insert("running_max".into(), max(Some(rr), i, j));
            ev.insert("kv_cache_usage_mean".into(), mean(kv.row(scope), i, j));
            ev.insert(
                "generation_tokens_per_second".into(),
                mean(gen.row(scope), i, j),
            );
            ev.insert("duration_seconds".into(), secs);
            if g.is_some() {
                ev.insert("gpu_utilization_mean".into(), mean(g, i, j));
            }
            let f = filter(scope);
            out.push(Finding {
                kind: "underutilized",
                severity: Severity::Info,
                scope: scope_map(scope),
                start: ctx.t(i) - ctx.step as f64 / 1000.0,
                end: ctx.t(j),
                summary: format!(
                    "{:.1} requests in flight on average for {:.0} min, KV cache {:.0} %{}, no queue: decode batches are thin",
                    ev["running_mean"], secs / 60.0, 100.0 * ev["kv_cache_usage_mean"],
                    ev.get("gpu_utilization_mean").map(|u| format!(", GPUs {u:.0} % busy")).unwrap_or_default()
                ),
                evidence: ev,
                recommendation: "Send more requests at once (raise the client's concurrency) to fill decode batches, or remove a replica and move its load to the others.".into(),
                queries: {
                    let mut q = vec![
                        format!("vllm:num_requests_running{f}"),
                        format!("rate(vllm:generation_tokens_total{f}[{w}])"),
                    ];
                    if g.is_some() {
                        let h = host_of(&scope.instance);
                        q.push(format!(
                            "avg(DCGM_FI_DEV_GPU_UTIL{{Hostname={h:?}}} or DCGM_FI_DEV_GPU_UTIL{{instance=~{:?}}})",
                            format!("{}(:[0-9]+)?", regex::escape(h))
                        ));
                    }
                    q
                },
            });
        }
    }
    Ok(out)
}
