//! `operating_point` (info), one per model with enough data: generation tokens/s, inter-token
//! latency p95, KV-cache usage and preemptions by number of requests in flight (pooled over the
//! model's instances, in `--operating-point.bins` equal bins of running requests), and the
//! knee: the first bin past which one more request in flight adds less than 30 % of the
//! tokens/s one request adds at light load, while latency, KV usage or preemptions climb.

use std::collections::BTreeMap;

use super::{Ctx, Finding, InsightError, Severity};

/// Points a bin needs to count.
const MIN_PER_BIN: usize = 3;
/// Bins with data a model needs.
const MIN_BINS: usize = 4;
/// Marginal gain, relative to light load, below which throughput "stops rising".
const FLAT: f64 = 0.3;

#[derive(Debug, Clone, Copy, Default)]
struct Bin {
    n: usize,
    running: f64,
    tput: f64,
    itl: f64,
    itl_n: usize,
    kv: f64,
    kv_n: usize,
    pre: f64,
}

pub(crate) fn detect(ctx: &Ctx<'_>) -> Result<Vec<Finding>, InsightError> {
    let w = ctx.win(120);
    let st = ctx.step_str();
    let q_run =
        format!("sum by (instance, model_name) (avg_over_time(vllm:num_requests_running[{st}]))");
    let q_tput = format!("sum by (instance, model_name) (rate(vllm:generation_tokens_total[{w}]))");
    let q_itl = format!("histogram_quantile(0.95, sum by (instance, model_name, le) (rate(vllm:inter_token_latency_seconds_bucket[{w}])))");
    let running = ctx.grid(&q_run)?;
    let tput = ctx.grid(&q_tput)?;
    let itl = ctx.grid(&q_itl)?;
    let kv = ctx.grid("max by (instance, model_name) (vllm:kv_cache_usage_perc)")?;
    let pre = ctx.grid(&format!(
        "sum by (instance, model_name) (rate(vllm:num_preemptions_total[{w}]))"
    ))?;
    // (running, tput, itl, kv, pre) by model
    type Pt = (f64, f64, Option<f64>, Option<f64>, f64);
    let mut by_model: BTreeMap<String, Vec<Pt>> = BTreeMap::new();
    for (scope, rr) in &running.series {
        if scope.model.is_empty() {
            continue;
        }
        for (i, r) in rr.iter().enumerate() {
            let (Some(r), Some(t)) = (*r, tput.at(scope, i)) else {
                continue;
            };
            by_model.entry(scope.model.clone()).or_default().push((
                r,
                t,
                itl.at(scope, i),
                kv.at(scope, i),
                pre.at(scope, i).unwrap_or(0.0),
            ));
        }
    }
    let nb = ctx.th.op_bins;
    let mut out = Vec::new();
    for (model, pts) in by_model {
        let lo = pts.iter().map(|p| p.0).fold(f64::INFINITY, f64::min);
        let hi = pts.iter().map(|p| p.0).fold(f64::NEG_INFINITY, f64::max);
        if hi - lo < 1.0 {
            continue;
        }
        let width = (hi - lo) / nb as f64;
        let mut bins = vec![Bin::default(); nb];
        for &(r, t, l, k, p) in &pts {
            let b = (((r - lo) / width) as usize).min(nb - 1);
            let x = &mut bins[b];
            x.n += 1;
            x.running += r;
            x.tput += t;
            x.pre += p;
            if let Some(l) = l {
                x.itl += l;
                x.itl_n += 1;
            }
            if let Some(k) = k {
                x.kv += k;
                x.kv_n += 1;
            }
        }
        // (bin index, means)
        let bins: Vec<(usize, Bin)> = bins
            .into_iter()
            .enumerate()
            .filter(|(_, b)| b.n >= MIN_PER_BIN)
            .map(|(i, b)| {
                let n = b.n as f64;
                (
                    i,
                    Bin {
                        running: b.running / n,
                        tput: b.tput / n,
                        itl: if b.itl_n > 0 {
                            b.itl / b.itl_n as f64
                        } else {
                            f64::NAN
                        },
                        kv: if b.kv_n > 0 {
                            b.kv / b.kv_n as f64
                        } else {
                            f64::NAN
                        },
                        pre: b.pre / n,
                        ..b
                    },
                )
            })
            .collect();
        if bins.len() < MIN_BINS || bins[0].1.running <= 0.0 {
            continue;
        }
        let s0 = bins[0].1.tput / bins[0].1.running;
        let knee = (0..bins.len() - 1)
            .find(|&k| {
                let (a, b) = (bins[k].1, bins[k + 1].1);
                (b.tput - a.tput) / (b.running - a.running) < FLAT * s0
            })
            .unwrap_or(bins.len() - 1);
        let (kb, k) = bins[knee];
        let last = bins[bins.len() - 1].1;
        let max_tput = bins.iter().map(|b| b.1.tput).fold(0.0, f64::max);
        let mut ev = BTreeMap::new();
        ev.insert("knee_running".into(), k.running);
        ev.insert("knee_running_low".into(), lo + kb as f64 * width);
        ev.insert("knee_running_high".into(), lo + (kb + 1) as f64 * width);
        ev.insert("bin_width".into(), width);
        ev.insert("tokens_per_second_at_knee".into(), k.tput);
        ev.insert("tokens_per_second_max".into(), max_tput);
        ev.insert("itl_p95_seconds_at_knee".into(), k.itl);
        ev.insert("itl_p95_seconds_at_most_running".into(), last.itl);
        ev.insert("kv_cache_usage_at_knee".into(), k.kv);
        ev.insert("kv_cache_usage_at_most_running".into(), last.kv);
        ev.insert("preemptions_per_second_at_most_running".into(), last.pre);
        ev.insert("bins".into(), bins.len() as f64);
        for (i, (_, b)) in bins.iter().enumerate() {
            ev.insert(format!("bin{i:02}_running"), b.running);
            ev.insert(format!("bin{i:02}_tokens_per_second"), b.tput);
            ev.insert(format!("bin{i:02}_itl_p95_seconds"), b.itl);
        }
        let mut scope = BTreeMap::new();
        scope.insert("model_name".to_string(), model.clone());
        let f = format!("{{model_name={model:?}}}");
        out.push(Finding {
            kind: "operating_point",
            severity: Severity::Info,
            scope,
            start: ctx.start as f64 / 1000.0,
            end: ctx.end as f64 / 1000.0,
            summary: format!(
                "{model}: tokens/s per server stops rising past about {:.0} requests in flight ({:.0}-{:.0}): {:.0} tokens/s there, {:.0} at most; ITL p95 {:.3} s there, {:.3} s at {:.0} in flight",
                k.running, lo + kb as f64 * width, lo + (kb + 1) as f64 * width, k.tput, max_tput, k.itl, last.itl, last.running
            ),
            evidence: ev,
            recommendation: format!(
                "Run about {:.0} requests in flight per server (client concurrency or --max-num-seqs): more adds latency{} for little throughput.",
                k.running,
                if last.kv >= ctx.th.kv_full || last.pre > 0.0 { ", KV-cache pressure and preemptions" } else { "" }
            ),
            queries: vec![
                format!("sum by (instance) (vllm:num_requests_running{f})"),
                format!("sum by (instance) (rate(vllm:generation_tokens_total{f}[{w}]))"),
                format!("histogram_quantile(0.95, sum by (instance, le) (rate(vllm:inter_token_latency_seconds_bucket{f}[{w}])))"),
            ],
        });
    }
    Ok(out)
}
