//! `prefix_cache_collapse` (warning): the prefix-cache hit rate falls below `--prefix.drop` of
//! its own earlier level in the window while the KV cache is full: cached prompt prefixes are
//! evicted to make room (the "cache kick") and their prefill is paid again.

use std::collections::BTreeMap;

use super::grid::{mean, runs};
use super::{filter, scope_map, Ctx, Finding, InsightError, Severity};

/// Earlier steps needed for a level to compare with.
const MIN_EARLIER: usize = 10;

pub(crate) fn detect(ctx: &Ctx<'_>) -> Result<Vec<Finding>, InsightError> {
    let w = ctx.win(180);
    let hit_q = format!(
        "sum by (instance, model_name) (rate(vllm:prefix_cache_hits_total[{w}])) / sum by (instance, model_name) (rate(vllm:prefix_cache_queries_total[{w}]))"
    );
    let hit = ctx.grid(&hit_q)?;
    let kv = ctx.grid("max by (instance, model_name) (vllm:kv_cache_usage_perc)")?;
    let ttft = ctx.grid(&format!(
        "histogram_quantile(0.95, sum by (instance, model_name, le) (rate(vllm:time_to_first_token_seconds_bucket[{w}])))"
    ))?;
    let mut out = Vec::new();
    for (scope, hr) in &hit.series {
        let n = ctx.n();
        let mut baseline = vec![f64::NAN; n];
        let mut earlier: Vec<f64> = Vec::new();
        for i in 0..n {
            if earlier.len() >= MIN_EARLIER {
                let mut e = earlier.clone();
                e.sort_by(f64::total_cmp);
                baseline[i] = e[(e.len() * 9 / 10).min(e.len() - 1)];
            }
            if let Some(v) = hr[i] {
                earlier.push(v);
            }
        }
        let mask: Vec<bool> = (0..n)
            .map(|i| {
                hr[i].is_some_and(|v| baseline[i] > 0.0 && v < ctx.th.prefix_drop * baseline[i])
                    && kv.at(scope, i).is_some_and(|k| k >= ctx.th.kv_full)
            })
            .collect();
        for (i, j) in runs(&mask, ctx.steps(ctx.d.kv_for)) {
            let before = baseline[i];
            let during = mean(Some(hr), i, j);
            let mut ev = BTreeMap::new();
            ev.insert("prefix_cache_hit_rate_before".into(), before);
            ev.insert("prefix_cache_hit_rate".into(), during);
            ev.insert("kv_cache_usage_mean".into(), mean(kv.row(scope), i, j));
            ev.insert("ttft_p95_seconds".into(), mean(ttft.row(scope), i, j));
            ev.insert(
                "duration_seconds".into(),
                (j - i + 1) as f64 * ctx.step as f64 / 1000.0,
            );
            let f = filter(scope);
            out.push(Finding {
                kind: "prefix_cache_collapse",
                severity: Severity::Warning,
                scope: scope_map(scope),
                start: ctx.t(i) - ctx.step as f64 / 1000.0,
                end: ctx.t(j),
                summary: format!(
                    "prefix-cache hit rate fell from {:.0} % to {:.0} % while the KV cache was full ({:.0} %): cached prefixes are being evicted and their prefill paid again",
                    100.0 * before, 100.0 * during, 100.0 * ev["kv_cache_usage_mean"]
                ),
                evidence: ev,
                recommendation: "Keep fewer requests in flight (lower --max-num-seqs or the client's concurrency) so the shared prefixes stay cached, or give the cache more room (--gpu-memory-utilization, a smaller --max-model-len); group requests that share a prefix.".into(),
                queries: vec![
                    format!("sum(rate(vllm:prefix_cache_hits_total{f}[{w}])) / sum(rate(vllm:prefix_cache_queries_total{f}[{w}]))"),
                    format!("vllm:kv_cache_usage_perc{f}"),
                ],
            });
        }
    }
    Ok(out)
}
