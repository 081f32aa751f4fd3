//! `target_down` (warning): a scrape target's `up` is 0 for at least `--down.for`.

use std::collections::BTreeMap;

use super::grid::runs;
use super::{scope_map, Ctx, Finding, InsightError, Scope, Severity};

pub(crate) fn detect(ctx: &Ctx<'_>) -> Result<Vec<Finding>, InsightError> {
    let up = ctx.grid("min by (instance) (up)")?;
    let mut out = Vec::new();
    for (scope, ur) in &up.series {
        let mask: Vec<bool> = ur.iter().map(|v| *v == Some(0.0)).collect();
        for (i, j) in runs(&mask, ctx.steps(ctx.d.down_for)) {
            let secs = (j - i + 1) as f64 * ctx.step as f64 / 1000.0;
            let s = Scope {
                instance: scope.instance.clone(),
                model: String::new(),
            };
            let mut ev = BTreeMap::new();
            ev.insert("down_seconds".into(), secs);
            out.push(Finding {
                kind: "target_down",
                severity: Severity::Warning,
                scope: scope_map(&s),
                start: ctx.t(i) - ctx.step as f64 / 1000.0,
                end: ctx.t(j),
                summary: format!("{} did not answer its scrapes for {:.0} min", scope.instance, secs / 60.0),
                evidence: ev,
                recommendation: "Check the server process and its /metrics endpoint (crash, OOM, network); while it is down its requests go elsewhere or fail.".into(),
                queries: vec![format!("up{{instance={:?}}}", scope.instance)],
            });
        }
    }
    Ok(out)
}
