//! `kv_cache_pressure` (critical): the KV cache stays full (≥ `--kv.threshold`) for at least
//! `--kv.for` while requests are preempted, so running requests are evicted and their prompts
//! computed again.

use std::collections::BTreeMap;

use super::grid::{max, mean, runs};
use super::{filter, scope_map, Ctx, Finding, InsightError, Severity};

pub(crate) fn detect(ctx: &Ctx<'_>) -> Result<Vec<Finding>, InsightError> {
    let w = ctx.win(120);
    let kv = ctx.grid("max by (instance, model_name) (vllm:kv_cache_usage_perc)")?;
    let pre = ctx.grid(&format!(
        "sum by (instance, model_name) (rate(vllm:num_preemptions_total[{w}]))"
    ))?;
    let prompt_per_req = ctx.grid(&format!(
        "sum by (instance, model_name) (rate(vllm:prompt_tokens_total[{w}])) / sum by (instance, model_name) (rate(vllm:request_success_total[{w}]))"
    ))?;
    let tokens = ctx.grid(&format!(
        "sum by (instance, model_name) (rate(vllm:prompt_tokens_total[{w}])) + sum by (instance, model_name) (rate(vllm:generation_tokens_total[{w}]))"
    ))?;
    let mut out = Vec::new();
    for (scope, kvr) in &kv.series {
        let mask: Vec<bool> = (0..ctx.n())
            .map(|i| {
                kvr[i].is_some_and(|v| v >= ctx.th.kv_full)
                    && pre.at(scope, i).is_some_and(|p| p > 0.0)
            })
            .collect();
        for (i, j) in runs(&mask, ctx.steps(ctx.d.kv_for)) {
            let secs = (j - i) as f64 * ctx.step as f64 / 1000.0 + ctx.step as f64 / 1000.0;
            let pre_rate = mean(pre.row(scope), i, j);
            let preemptions = pre_rate * secs;
            let recomputed = preemptions * mean(prompt_per_req.row(scope), i, j);
            let processed = mean(tokens.row(scope), i, j) * secs;
            let mut ev = BTreeMap::new();
            ev.insert("kv_cache_usage_mean".into(), mean(Some(kvr), i, j));
            ev.insert("kv_cache_usage_max".into(), max(Some(kvr), i, j));
            ev.insert("preemptions_per_second".into(), pre_rate);
            ev.insert("preemptions".into(), preemptions.round());
            ev.insert(
                "recomputed_prompt_tokens_estimate".into(),
                recomputed.round(),
            );
            ev.insert(
                "throughput_lost_share".into(),
                if processed > 0.0 {
                    recomputed / processed
                } else {
                    f64::NAN
                },
            );
            ev.insert("duration_seconds".into(), secs);
            let f = filter(scope);
            out.push(Finding {
                kind: "kv_cache_pressure",
                severity: Severity::Critical,
                scope: scope_map(scope),
                start: ctx.t(i) - ctx.step as f64 / 1000.0,
                end: ctx.t(j),
                summary: format!(
                    "KV cache at {:.0} % for {:.0} min with {:.2} preemptions/s: about {:.0} prompt tokens recomputed ({:.1} % of the tokens processed)",
                    100.0 * ev["kv_cache_usage_mean"], secs / 60.0, pre_rate, recomputed,
                    100.0 * ev.get("throughput_lost_share").copied().unwrap_or(0.0)
                ),
                evidence: ev,
                recommendation: "Fewer requests in flight (lower --max-num-seqs or the client's concurrency) or more KV-cache room (--gpu-memory-utilization, a smaller --max-model-len, more GPUs / tensor parallelism): every preemption throws away a request's KV cache and pays its prefill again.".into(),
                queries: vec![
                    format!("vllm:kv_cache_usage_perc{f}"),
                    format!("rate(vllm:num_preemptions_total{f}[{w}])"),
                ],
            });
        }
    }
    Ok(out)
}
