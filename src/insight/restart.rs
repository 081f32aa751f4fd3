//! `restart` (info): a vLLM server's counters reset or its `process_start_time_seconds`
//! changed. Each step's range reaches back one step plus a minute (so a reset between two
//! windows is seen); a restart seen by two neighbouring steps is reported once, and one seen
//! only at the first step (which reaches before the window) is not.

use std::collections::{BTreeMap, BTreeSet};

use super::grid::runs;
use super::{scope_map, Ctx, Finding, InsightError, Scope, Severity};

pub(crate) fn detect(ctx: &Ctx<'_>) -> Result<Vec<Finding>, InsightError> {
    let w = format!("{}s", (ctx.step + 60_000) / 1000);
    let q_reset =
        format!("max by (instance, model_name) (resets(vllm:generation_tokens_total[{w}]))");
    let q_start = format!("max by (instance) (changes(process_start_time_seconds[{w}]))");
    let resets = ctx.grid(&q_reset)?;
    let starts = ctx.grid(&q_start)?;
    let mut by_instance: BTreeMap<String, (BTreeSet<String>, Vec<bool>)> = BTreeMap::new();
    for (g, model) in [(&resets, true), (&starts, false)] {
        for (scope, r) in &g.series {
            let e = by_instance
                .entry(scope.instance.clone())
                .or_insert_with(|| (BTreeSet::new(), vec![false; ctx.n()]));
            if model && !scope.model.is_empty() {
                e.0.insert(scope.model.clone());
            }
            for (i, v) in r.iter().enumerate() {
                if v.is_some_and(|x| x > 0.0) {
                    e.1[i] = true;
                }
            }
        }
    }
    let mut out = Vec::new();
    for (instance, (models, mask)) in by_instance {
        for (i, j) in runs(&mask, 1) {
            if i == 0 {
                continue;
            }
            let s = Scope {
                instance: instance.clone(),
                model: if models.len() == 1 {
                    models.iter().next().cloned().unwrap_or_default()
                } else {
                    String::new()
                },
            };
            let mut ev = BTreeMap::new();
            ev.insert("restarts".into(), 1.0);
            out.push(Finding {
                kind: "restart",
                severity: Severity::Info,
                scope: scope_map(&s),
                start: ctx.t(i) - ctx.step as f64 / 1000.0,
                end: ctx.t(j),
                summary: format!("{instance} restarted: its counters reset (rates stay right: PromQL's rate() allows for resets, plain subtraction does not)"),
                evidence: ev,
                recommendation: "If it was not a deploy, look for a crash or OOM kill in the server's log; requests in flight at the restart were lost.".into(),
                queries: vec![
                    format!("resets(vllm:generation_tokens_total{{instance={instance:?}}}[{w}])"),
                    format!("process_start_time_seconds{{instance={instance:?}}}"),
                ],
            });
        }
    }
    Ok(out)
}
