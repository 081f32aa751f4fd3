//! `inferdb compare` and `GET /inferdb/v1/compare`: the golden signals of two windows side
//! by side, for the whole fleet and by `model_name` or `instance`, with a judgement of which
//! changed.
//!
//! Each signal is evaluated on a step grid over each window (range queries; rates over
//! `max(step, 2m)`, evaluation from that long after the window's start, so nothing before it
//! counts). A window's value is a statistic of the per-step values: the mean (throughputs,
//! gauges), a ratio of sums (prefix-cache hit rate) or the quantile of the summed bucket rates
//! (latency percentiles). Significance: a circular moving-block bootstrap over the evaluation
//! steps (blocks of `max(⌈∛n⌉, rate window / step)` steps, so that overlapping rate windows
//! stay together) gives the standard error of the difference b − a; the normal interval of the
//! difference at the Holm–Bonferroni-corrected level over the 14 signals of a group (family-wise
//! 95 %) must exclude 0, and the relative change must be at least 10 %. A window with fewer
//! than [`MIN_STEPS`] evaluation steps with data is "not enough data": its signals are shown and
//! never significant. The load (requests completed per second, fleet-wide) is compared too and
//! reported in `load_change` and a note; it never clears `significant`.

use std::collections::{BTreeMap, BTreeSet};

use inferdb_query::eval::functions::histogram::{bucket_quantile, Bucket};

use super::gpu::{host_of, util_by_host};
use super::{InsightError, PromSource};

/// Evaluation steps with data a window needs for its signals to be judged.
pub const MIN_STEPS: usize = 30;
/// Smallest relative change called significant.
pub const MIN_CHANGE: f64 = 0.10;
/// Family-wise error rate of a group's signals.
pub const ALPHA: f64 = 0.05;
/// Bootstrap resamples per window and signal.
const RESAMPLES: usize = 400;

/// The signals, in the order of the answer.
pub const SIGNALS: [&str; 14] = [
    "generation_tokens_per_second",
    "prompt_tokens_per_second",
    "requests_per_second",
    "ttft_p50_seconds",
    "ttft_p95_seconds",
    "itl_p50_seconds",
    "itl_p95_seconds",
    "e2e_p95_seconds",
    "kv_cache_usage_mean",
    "prefix_cache_hit_rate",
    "preemptions_per_minute",
    "waiting_mean",
    "running_mean",
    "gpu_utilization_mean",
];

/// How the rows are grouped besides the whole fleet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum GroupBy {
    /// By the `model_name` label.
    #[value(name = "model_name")]
    ModelName,
    /// By the `instance` label.
    Instance,
}

impl GroupBy {
    /// The label.
    pub fn label(self) -> &'static str {
        match self {
            GroupBy::ModelName => "model_name",
            GroupBy::Instance => "instance",
        }
    }

    /// `model_name` or `instance`; empty is none.
    pub fn parse(s: &str) -> Result<Option<GroupBy>, InsightError> {
        match s {
            "" => Ok(None),
            "model_name" => Ok(Some(GroupBy::ModelName)),
            "instance" => Ok(Some(GroupBy::Instance)),
            _ => Err(InsightError::Invalid(format!(
                "by: {s:?} is not model_name or instance"
            ))),
        }
    }
}

/// A window, Unix milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// Start.
    pub start: i64,
    /// End.
    pub end: i64,
}

/// One signal of one group in both windows.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SignalRow {
    /// One of [`SIGNALS`].
    pub signal: &'static str,
    /// `{}` for the whole fleet, else the grouping label.
    pub group: BTreeMap<String, String>,
    /// Value in window A (`null` without data).
    pub a: Option<f64>,
    /// Value in window B.
    pub b: Option<f64>,
    /// (b − a) / |a|; `null` where a is 0 or either is missing.
    pub change: Option<f64>,
    /// The change is real (see the module doc) and at least 10 %.
    pub significant: bool,
}

/// The answer of `compare`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Comparison {
    /// Every signal of the fleet, then of each group.
    pub signals: Vec<SignalRow>,
    /// Relative change of the fleet's completed requests per second (`null` without data).
    pub load_change: Option<f64>,
    /// Caveats: the load, windows too short, signals without data, the method.
    pub notes: Vec<String>,
}

#[derive(Debug, Clone)]
enum Kind {
    /// Mean of the per-step values of a query, times a factor.
    Mean(String, f64),
    /// Sum of the first query's values over the sum of the second's.
    Ratio(String, String),
    /// φ-quantile of the summed per-step bucket rates of a `_bucket` query (by `le`).
    Quantile(f64, String),
    /// GPU utilisation of the group's hosts (see [`super::gpu`]).
    Gpu,
}

fn kinds(by: Option<GroupBy>, w: &str) -> Vec<(&'static str, Kind)> {
    let g = by.map(|b| b.label()).unwrap_or("");
    let sum = |e: String| format!("sum by ({g}) ({e})");
    let rate = |m: &str| sum(format!("rate({m}[{w}])"));
    let buckets = |m: &str| {
        let l = if g.is_empty() {
            "le".to_string()
        } else {
            format!("{g}, le")
        };
        format!("sum by ({l}) (rate({m}_bucket[{w}]))")
    };
    use Kind::*;
    vec![
        (SIGNALS[0], Mean(rate("vllm:generation_tokens_total"), 1.0)),
        (SIGNALS[1], Mean(rate("vllm:prompt_tokens_total"), 1.0)),
        (SIGNALS[2], Mean(rate("vllm:request_success_total"), 1.0)),
        (
            SIGNALS[3],
            Quantile(0.5, buckets("vllm:time_to_first_token_seconds")),
        ),
        (
            SIGNALS[4],
            Quantile(0.95, buckets("vllm:time_to_first_token_seconds")),
        ),
        (
            SIGNALS[5],
            Quantile(0.5, buckets("vllm:inter_token_latency_seconds")),
        ),
        (
            SIGNALS[6],
            Quantile(0.95, buckets("vllm:inter_token_latency_seconds")),
        ),
        (
            SIGNALS[7],
            Quantile(0.95, buckets("vllm:e2e_request_latency_seconds")),
        ),
        (
            SIGNALS[8],
            Mean(format!("avg by ({g}) (vllm:kv_cache_usage_perc)"), 1.0),
        ),
        (
            SIGNALS[9],
            Ratio(
                rate("vllm:prefix_cache_hits_total"),
                rate("vllm:prefix_cache_queries_total"),
            ),
        ),
        (SIGNALS[10], Mean(rate("vllm:num_preemptions_total"), 60.0)),
        (
            SIGNALS[11],
            Mean(sum("vllm:num_requests_waiting".into()), 1.0),
        ),
        (
            SIGNALS[12],
            Mean(sum("vllm:num_requests_running".into()), 1.0),
        ),
        (SIGNALS[13], Gpu),
    ]
}

type Group = BTreeMap<String, String>;

/// A window's evaluation grid.
#[derive(Debug, Clone, Copy)]
struct Grid {
    first: i64,
    step: i64,
    n: usize,
}

impl Grid {
    fn new(s: Span, step: i64, w: i64) -> Grid {
        let first = s.start + w;
        let n = if s.end < first {
            0
        } else {
            ((s.end - first) / step) as usize + 1
        };
        Grid { first, step, n }
    }
    fn last(&self) -> i64 {
        self.first + (self.n as i64 - 1) * self.step
    }
}

/// A query's per-step values for a group and `le` (buckets only).
type FetchedRow = ((Group, Option<f64>), Vec<Option<f64>>);

/// Per-step values of a query by group (and, for buckets, by `le`), sorted by group and `le`.
fn fetch(
    src: &dyn PromSource,
    q: &str,
    g: Grid,
    by: Option<GroupBy>,
) -> Result<Vec<FetchedRow>, InsightError> {
    let mut out: BTreeMap<(Group, OrdF64), Vec<Option<f64>>> = BTreeMap::new();
    if g.n == 0 {
        return Ok(Vec::new());
    }
    for s in src.range(q, g.first, g.last(), g.step)? {
        let mut group = Group::new();
        if let Some(b) = by {
            group.insert(
                b.label().to_string(),
                s.labels.get(b.label()).unwrap_or("").to_string(),
            );
        }
        let le = s
            .labels
            .get("le")
            .and_then(crate::model::exposition::parse_value);
        let row = out
            .entry((group, OrdF64(le)))
            .or_insert_with(|| vec![None; g.n]);
        for (t, v) in s.samples {
            let i = (t - g.first) / g.step;
            if (0..g.n as i64).contains(&i) && v.is_finite() {
                row[i as usize] = Some(v);
            }
        }
    }
    Ok(out.into_iter().map(|((g, le), r)| ((g, le.0), r)).collect())
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct OrdF64(Option<f64>);
impl Eq for OrdF64 {}
impl PartialOrd for OrdF64 {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for OrdF64 {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        match (self.0, o.0) {
            (Some(a), Some(b)) => a.total_cmp(&b),
            (a, b) => a.is_some().cmp(&b.is_some()),
        }
    }
}

/// The steps with data of one signal in one group and window: one row of components each.
#[derive(Debug, Clone, Default)]
struct Steps {
    rows: Vec<Vec<f64>>,
    /// `le` of each component (quantiles).
    les: Vec<f64>,
}

/// How a window's value follows from the summed components of its steps.
#[derive(Debug, Clone, Copy)]
enum Stat {
    Mean(f64),
    Ratio,
    Quantile(f64),
}

fn stat(s: Stat, sums: &[f64], n: usize, les: &[f64]) -> f64 {
    match s {
        Stat::Mean(f) => f * sums[0] / n as f64,
        Stat::Ratio => {
            if sums[1] > 0.0 {
                sums[0] / sums[1]
            } else {
                f64::NAN
            }
        }
        Stat::Quantile(q) => {
            let b = les
                .iter()
                .zip(sums)
                .map(|(&upper_bound, &count)| Bucket { upper_bound, count })
                .collect();
            bucket_quantile(q, b).0
        }
    }
}

impl Steps {
    fn value(&self, s: Stat) -> Option<f64> {
        if self.rows.is_empty() {
            return None;
        }
        let c = self.rows[0].len();
        let mut sums = vec![0.0; c];
        for r in &self.rows {
            for (x, v) in sums.iter_mut().zip(r) {
                *x += v;
            }
        }
        Some(stat(s, &sums, self.rows.len(), &self.les)).filter(|v| v.is_finite())
    }

    /// Values of the statistic on `k` circular moving-block resamples.
    fn bootstrap(&self, s: Stat, block: usize, k: usize, rng: &mut fastrand::Rng) -> Vec<f64> {
        let n = self.rows.len();
        let c = self.rows[0].len();
        let l = block.clamp(1, n);
        // prefix sums over the rows twice, so a block may wrap around
        let mut prefix = vec![vec![0.0; c]; 2 * n + 1];
        for i in 0..2 * n {
            let next: Vec<f64> = prefix[i]
                .iter()
                .zip(&self.rows[i % n])
                .map(|(p, v)| p + v)
                .collect();
            prefix[i + 1] = next;
        }
        let blocks = n.div_ceil(l);
        let mut sums = vec![0.0; c];
        let mut out = Vec::with_capacity(k);
        for _ in 0..k {
            sums.iter_mut().for_each(|x| *x = 0.0);
            for _ in 0..blocks {
                let at = rng.usize(0..n);
                for (j, x) in sums.iter_mut().enumerate() {
                    *x += prefix[at + l][j] - prefix[at][j];
                }
            }
            out.push(stat(s, &sums, blocks * l, &self.les));
        }
        out
    }
}

/// Rows of `(group → steps)` for a signal in a window.
fn steps_of(
    src: &dyn PromSource,
    kind: &Kind,
    g: Grid,
    by: Option<GroupBy>,
    gpu: &GpuJoin,
) -> Result<BTreeMap<Group, Steps>, InsightError> {
    let mut out: BTreeMap<Group, Steps> = BTreeMap::new();
    let single = |m: Vec<FetchedRow>| {
        m.into_iter()
            .map(|((g, _), r)| (g, r))
            .collect::<BTreeMap<_, _>>()
    };
    match kind {
        Kind::Mean(q, _) => {
            for (grp, r) in single(fetch(src, q, g, by)?) {
                out.insert(
                    grp,
                    Steps {
                        rows: r.into_iter().flatten().map(|v| vec![v]).collect(),
                        les: vec![],
                    },
                );
            }
        }
        Kind::Ratio(num, den) => {
            let nums = single(fetch(src, num, g, by)?);
            let dens = single(fetch(src, den, g, by)?);
            for (grp, d) in dens {
                let n = nums.get(&grp);
                let rows = (0..g.n)
                    .filter_map(|i| match (n.and_then(|n| n[i]), d[i]) {
                        (Some(a), Some(b)) => Some(vec![a, b]),
                        _ => None,
                    })
                    .collect();
                out.insert(grp, Steps { rows, les: vec![] });
            }
        }
        Kind::Quantile(_, q) => {
            type Buckets = Vec<(f64, Vec<Option<f64>>)>;
            let mut by_group: BTreeMap<Group, Buckets> = BTreeMap::new();
            for ((grp, le), r) in fetch(src, q, g, by)? {
                if let Some(le) = le {
                    by_group.entry(grp).or_default().push((le, r));
                }
            }
            for (grp, bs) in by_group {
                // sorted by le (the map's order); a step counts when every bucket has a value
                let les: Vec<f64> = bs.iter().map(|b| b.0).collect();
                let rows = (0..g.n)
                    .filter_map(|i| bs.iter().map(|b| b.1[i]).collect::<Option<Vec<f64>>>())
                    .collect();
                out.insert(grp, Steps { rows, les });
            }
        }
        Kind::Gpu => {
            for (grp, hosts) in &gpu.hosts {
                let rows = (0..g.n)
                    .filter_map(|i| {
                        let v: Vec<f64> = hosts
                            .iter()
                            .filter_map(|h| gpu.util.get(h).and_then(|r| r[i]))
                            .collect();
                        (!v.is_empty()).then(|| vec![v.iter().sum::<f64>() / v.len() as f64])
                    })
                    .collect();
                out.insert(grp.clone(), Steps { rows, les: vec![] });
            }
        }
    }
    Ok(out)
}

/// GPU utilisation by host, and the hosts of each group's vLLM instances, in one window.
#[derive(Debug, Default)]
struct GpuJoin {
    util: BTreeMap<String, Vec<Option<f64>>>,
    hosts: BTreeMap<Group, BTreeSet<String>>,
}

fn gpu_join(src: &dyn PromSource, g: Grid, by: Option<GroupBy>) -> Result<GpuJoin, InsightError> {
    if g.n == 0 {
        return Ok(GpuJoin::default());
    }
    let util = util_by_host(src, g.first, g.step, g.n)?;
    let mut hosts: BTreeMap<Group, BTreeSet<String>> = BTreeMap::new();
    let members = src.range(
        "max by (instance, model_name) (vllm:num_requests_running)",
        g.first,
        g.last(),
        g.step,
    )?;
    for s in members {
        let host = host_of(s.labels.get("instance").unwrap_or("")).to_string();
        if !util.contains_key(&host) {
            continue;
        }
        hosts.entry(Group::new()).or_default().insert(host.clone());
        if let Some(b) = by {
            let mut grp = Group::new();
            grp.insert(
                b.label().to_string(),
                s.labels.get(b.label()).unwrap_or("").to_string(),
            );
            hosts.entry(grp).or_default().insert(host);
        }
    }
    Ok(GpuJoin { util, hosts })
}

fn stat_of(k: &Kind) -> Stat {
    match k {
        Kind::Mean(_, f) => Stat::Mean(*f),
        Kind::Ratio(..) => Stat::Ratio,
        Kind::Quantile(q, _) => Stat::Quantile(*q),
        Kind::Gpu => Stat::Mean(1.0),
    }
}

/// The default step: the shorter window / 240, at least 15 s, whole seconds.
pub fn default_step_ms(a: Span, b: Span) -> i64 {
    let len = (a.end - a.start).min(b.end - b.start);
    ((len / 240).max(15_000) / 1000) * 1000
}

/// Upper tail of the standard normal distribution times two: the two-sided p-value of `z`.
fn two_sided_p(z: f64) -> f64 {
    libm::erfc(z.abs() / std::f64::consts::SQRT_2)
}

fn pct(x: f64) -> String {
    format!("{:+.1} %", 100.0 * x)
}

fn span_text(s: Span) -> String {
    let t = |ms: i64| {
        chrono::DateTime::from_timestamp_millis(ms)
            .map(|d| d.format("%Y-%m-%d %H:%M:%S").to_string())
            .unwrap_or_default()
    };
    format!("{} .. {} UTC", t(s.start), t(s.end))
}

/// Compares windows `a` and `b` (see the module doc). `step_ms`: the evaluation step (default
/// [`default_step_ms`]).
pub fn compare(
    src: &dyn PromSource,
    a: Span,
    b: Span,
    by: Option<GroupBy>,
    step_ms: Option<i64>,
) -> Result<Comparison, InsightError> {
    for (n, s) in [("a", a), ("b", b)] {
        if s.end <= s.start {
            return Err(InsightError::Invalid(format!(
                "window {n}: the end must be after the start"
            )));
        }
    }
    let step = match step_ms {
        Some(s) if s >= 1000 => s / 1000 * 1000,
        Some(_) => return Err(InsightError::Invalid("step: at least 1s".into())),
        None => default_step_ms(a, b),
    };
    let w = step.max(120_000);
    let ws = format!("{}s", w / 1000);
    let block = |n: usize| {
        let cbrt = (n as f64).cbrt().ceil() as usize;
        cbrt.max((w / step) as usize).min((n / 4).max(1))
    };
    let grids = [Grid::new(a, step, w), Grid::new(b, step, w)];
    let mut notes = Vec::new();
    for (name, s, g) in [("A", a, grids[0]), ("B", b, grids[1])] {
        if g.n < MIN_STEPS {
            notes.push(format!(
                "not enough data: window {name} ({}) gives {} evaluation steps of {} s after the first {} s (rate window), at least {MIN_STEPS} are needed to judge a change; make it longer or give a smaller --step",
                span_text(s), g.n, step / 1000, w / 1000
            ));
        }
    }
    let gpu = [gpu_join(src, grids[0], by)?, gpu_join(src, grids[1], by)?];
    let mut rng = fastrand::Rng::with_seed(0x1f3d_b5c0_4a11_7e57);
    // per group: (signal index, a, b, p-value if judged)
    type Judged = (usize, Option<f64>, Option<f64>, Option<f64>);
    let mut groups: BTreeMap<Group, Vec<Judged>> = BTreeMap::new();
    groups.insert(Group::new(), Vec::new());
    let mut no_data: Vec<&str> = Vec::new();
    let mut thin: BTreeSet<&str> = BTreeSet::new();
    let fleet_kinds = kinds(None, &ws);
    let by_kinds = kinds(by, &ws);
    for (si, name) in SIGNALS.iter().enumerate() {
        let mut per_window: [BTreeMap<Group, Steps>; 2] = Default::default();
        for (wi, g) in grids.iter().enumerate() {
            let mut m = steps_of(src, &fleet_kinds[si].1, *g, None, &gpu[wi])?;
            if by.is_some() {
                m.extend(steps_of(src, &by_kinds[si].1, *g, by, &gpu[wi])?);
            }
            // a fleet-wide query over no series answers nothing: an empty row
            m.entry(Group::new()).or_default();
            per_window[wi] = m;
        }
        let st = stat_of(&fleet_kinds[si].1);
        let keys: BTreeSet<&Group> = per_window[0].keys().chain(per_window[1].keys()).collect();
        let mut any = false;
        for grp in keys {
            let sa = per_window[0].get(grp);
            let sb = per_window[1].get(grp);
            let va = sa.and_then(|s| s.value(st));
            let vb = sb.and_then(|s| s.value(st));
            any |= va.is_some() || vb.is_some();
            let p = match (sa, sb, va, vb) {
                (Some(sa), Some(sb), Some(va), Some(vb))
                    if sa.rows.len() >= MIN_STEPS && sb.rows.len() >= MIN_STEPS =>
                {
                    let ra = sa.bootstrap(st, block(sa.rows.len()), RESAMPLES, &mut rng);
                    let rb = sb.bootstrap(st, block(sb.rows.len()), RESAMPLES, &mut rng);
                    let d: Vec<f64> = ra
                        .iter()
                        .zip(&rb)
                        .map(|(x, y)| y - x)
                        .filter(|x| x.is_finite())
                        .collect();
                    if d.len() < RESAMPLES * 9 / 10 {
                        thin.insert(name);
                        None
                    } else {
                        let m = d.iter().sum::<f64>() / d.len() as f64;
                        let var =
                            d.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (d.len() - 1) as f64;
                        let se = var.sqrt();
                        Some(if se > 0.0 {
                            two_sided_p((vb - va) / se)
                        } else if vb != va {
                            0.0
                        } else {
                            1.0
                        })
                    }
                }
                (_, _, Some(_), Some(_)) => {
                    thin.insert(name);
                    None
                }
                _ => None,
            };
            groups.entry(grp.clone()).or_default().push((si, va, vb, p));
        }
        if !any {
            no_data.push(name);
        }
    }
    let mut signals = Vec::new();
    let mut load_change = None;
    for (grp, rows) in groups {
        // Holm–Bonferroni over the judged signals of the group
        let mut ps: Vec<(f64, usize)> = rows
            .iter()
            .enumerate()
            .filter_map(|(k, r)| r.3.map(|p| (p, k)))
            .collect();
        ps.sort_by(|x, y| x.0.total_cmp(&y.0));
        let m = ps.len();
        let mut rejected = vec![false; rows.len()];
        for (i, (p, k)) in ps.iter().enumerate() {
            if *p > ALPHA / (m - i) as f64 {
                break;
            }
            rejected[*k] = true;
        }
        for (k, (si, va, vb, _)) in rows.into_iter().enumerate() {
            let change = match (va, vb) {
                (Some(x), Some(y)) if x != 0.0 => Some((y - x) / x.abs()),
                (Some(x), Some(y)) if x == y => Some(0.0),
                _ => None,
            };
            let big = match (va, change) {
                (_, Some(c)) => c.abs() >= MIN_CHANGE,
                // from zero to something (preemptions appear)
                (Some(_), None) => true,
                _ => false,
            };
            if grp.is_empty() && SIGNALS[si] == "requests_per_second" {
                load_change = change;
            }
            signals.push(SignalRow {
                signal: SIGNALS[si],
                group: grp.clone(),
                a: va,
                b: vb,
                change,
                significant: rejected[k] && big,
            });
        }
    }
    if let Some(lc) = load_change {
        if lc.abs() >= MIN_CHANGE {
            notes.push(format!(
                "the load differs: the fleet completed {} requests per second in B than in A; a latency or KV-cache change under a different load may not be a regression",
                pct(lc)
            ));
        }
    }
    if !no_data.is_empty() {
        notes.push(format!(
            "no data in either window for {}{}",
            no_data.join(", "),
            if no_data.contains(&"gpu_utilization_mean") {
                " (GPU utilisation needs DCGM_FI_DEV_GPU_UTIL on the vLLM instances' hosts)"
            } else {
                ""
            }
        ));
    }
    if !thin.is_empty() {
        notes.push(format!(
            "not enough data to judge {} in some groups (fewer than {MIN_STEPS} evaluation steps with data in a window)",
            thin.into_iter().collect::<Vec<_>>().join(", ")
        ));
    }
    notes.push(format!(
        "significant: the {:.0} % interval of b - a (moving-block bootstrap over {} s evaluation steps, Holm-Bonferroni over each group's signals) excludes 0 and the change is at least {:.0} %",
        100.0 * (1.0 - ALPHA),
        step / 1000,
        100.0 * MIN_CHANGE
    ));
    Ok(Comparison {
        signals,
        load_change,
        notes,
    })
}

/// The comparison as an aligned text table.
pub fn table(c: &Comparison) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let num = |v: Option<f64>| v.map(super::fmt_num).unwrap_or_else(|| "-".into());
    let _ = writeln!(
        out,
        "{:<28} {:<40} {:>12} {:>12} {:>9}  significant",
        "signal", "group", "a", "b", "change"
    );
    for r in &c.signals {
        let grp = if r.group.is_empty() {
            "(fleet)".to_string()
        } else {
            r.group
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let _ = writeln!(
            out,
            "{:<28} {:<40} {:>12} {:>12} {:>9}  {}",
            r.signal,
            grp,
            num(r.a),
            num(r.b),
            r.change.map(pct).unwrap_or_else(|| "-".into()),
            if r.significant { "yes" } else { "" }
        );
    }
    if let Some(l) = c.load_change {
        let _ = writeln!(out, "\nload change: {}", pct(l));
    }
    for n in &c.notes {
        let _ = writeln!(out, "note: {n}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statistics_of_summed_steps() {
        let s = Steps {
            rows: vec![vec![1.0, 2.0], vec![3.0, 2.0]],
            les: vec![],
        };
        assert_eq!(s.value(Stat::Mean(60.0)), Some(120.0));
        assert_eq!(s.value(Stat::Ratio), Some(1.0));
        let q = Steps {
            rows: vec![vec![0.0, 10.0, 10.0], vec![10.0, 10.0, 10.0]],
            les: vec![0.1, 0.2, f64::INFINITY],
        };
        // 10 observations under 0.1, 10 in (0.1, 0.2]: the median is at 0.1
        assert_eq!(q.value(Stat::Quantile(0.5)), Some(0.1));
        assert_eq!(Steps::default().value(Stat::Mean(1.0)), None);
    }

    #[test]
    fn bootstrap_of_a_constant_is_the_constant() {
        let s = Steps {
            rows: vec![vec![2.0]; 50],
            les: vec![],
        };
        let mut rng = fastrand::Rng::with_seed(1);
        let r = s.bootstrap(Stat::Mean(1.0), 5, 20, &mut rng);
        assert!(r.iter().all(|x| (x - 2.0).abs() < 1e-12), "{r:?}");
    }

    #[test]
    fn p_values_and_group_by() {
        assert!((two_sided_p(1.959_964) - 0.05).abs() < 1e-6);
        assert!((two_sided_p(0.0) - 1.0).abs() < 1e-12);
        assert_eq!(GroupBy::parse("").unwrap(), None);
        assert_eq!(GroupBy::parse("instance").unwrap(), Some(GroupBy::Instance));
        assert!(GroupBy::parse("job").is_err());
    }
}
