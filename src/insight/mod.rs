//! `inferdb advise` and `GET /inferdb/v1/insights`, `inferdb compare` and
//! `GET /inferdb/v1/compare` ([`compare`]): what is wrong with a vLLM fleet over a
//! window and what to change, found by PromQL over any Prometheus API (inferdb's engine on a
//! data folder, a running inferdb, or a Prometheus).
//!
//! Every detector (one file each) runs range queries on a step grid over the window, finds the
//! spans where its condition holds per instance and model, and returns [`Finding`]s with the
//! queries that show them. Range functions look back at most one step from each evaluation
//! time and evaluation starts one step after the window's start, so what happened before the
//! window is not reported.

pub mod compare;
mod gpu;
mod grid;
mod kv_cache_pressure;
mod operating_point;
mod prefix_cache_collapse;
mod queueing;
mod restart;
mod slo_breach;
mod source;
mod target_down;
mod underutilized;

use std::collections::BTreeMap;

pub use gpu::host_of;
pub use grid::Scope;
pub use slo_breach::{parse_slos, Slo};
pub use source::{BackendSource, PromSource, RemoteSource};

/// Why the insights cannot be computed.
#[derive(Debug, thiserror::Error)]
pub enum InsightError {
    /// A query failed.
    #[error("query {query:?}: {msg}")]
    Query {
        /// The PromQL.
        query: String,
        /// The error.
        msg: String,
    },
    /// Bad arguments (window, SLO, thresholds).
    #[error("{0}")]
    Invalid(String),
}

/// Severity of a finding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Worth knowing.
    Info,
    /// Costs performance or breaks an objective.
    Warning,
    /// Work is being thrown away.
    Critical,
}

/// One finding. Times in Unix seconds, inside the window.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Finding {
    /// One of the fixed kinds (`kv_cache_pressure`, `prefix_cache_collapse`, `queueing`,
    /// `underutilized`, `slo_breach`, `restart`, `target_down`, `operating_point`).
    pub kind: &'static str,
    /// Severity.
    pub severity: Severity,
    /// `instance` and/or `model_name`.
    pub scope: BTreeMap<String, String>,
    /// Start of the span, Unix seconds.
    pub start: f64,
    /// End of the span, Unix seconds.
    pub end: f64,
    /// One sentence.
    pub summary: String,
    /// The numbers behind it.
    pub evidence: BTreeMap<String, f64>,
    /// What to change.
    pub recommendation: String,
    /// PromQL that shows it on a graph.
    pub queries: Vec<String>,
}

/// The answer: the window and the findings.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    /// `{"start":S,"end":E}`, Unix seconds.
    pub window: Window,
    /// Findings, most severe first, then by start.
    pub findings: Vec<Finding>,
}

/// A time window in Unix seconds.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Window {
    /// Start.
    pub start: f64,
    /// End.
    pub end: f64,
}

/// Detector thresholds (the defaults are stated in `inferdb advise --help`).
#[derive(Debug, Clone, clap::Args)]
pub struct Thresholds {
    /// KV-cache usage (0-1) at or above which the cache counts as full.
    #[arg(long = "kv.threshold", default_value_t = 0.9, value_name = "FRACTION")]
    pub kv_full: f64,
    /// How long the KV cache must stay full while preemptions occur for kv_cache_pressure.
    #[arg(long = "kv.for", default_value = "5m", value_name = "DURATION")]
    pub kv_for: String,
    /// A prefix-cache hit rate below this fraction of its earlier level in the window (while
    /// the KV cache is full) is a prefix_cache_collapse.
    #[arg(long = "prefix.drop", default_value_t = 0.5, value_name = "FRACTION")]
    pub prefix_drop: f64,
    /// How long requests must wait (waiting > 0 at every step) for queueing.
    #[arg(long = "queue.for", default_value = "5m", value_name = "DURATION")]
    pub queue_for: String,
    /// KV-cache usage under which a queueing server has headroom (raise max_num_seqs) rather
    /// than needing a replica.
    #[arg(
        long = "queue.headroom-kv",
        default_value_t = 0.8,
        value_name = "FRACTION"
    )]
    pub headroom_kv: f64,
    /// Mean requests in flight under which a server without queue is underutilized.
    #[arg(
        long = "underutilized.running",
        default_value_t = 4.0,
        value_name = "N"
    )]
    pub idle_running: f64,
    /// KV-cache usage under which a server counts as idle.
    #[arg(
        long = "underutilized.kv",
        default_value_t = 0.1,
        value_name = "FRACTION"
    )]
    pub idle_kv: f64,
    /// GPU utilisation (percent, DCGM_FI_DEV_GPU_UTIL of the GPUs on the instance's host)
    /// under which a server's GPUs count as mostly idle; where no GPU series join the
    /// instance, the KV-cache usage of --underutilized.kv decides instead.
    #[arg(
        long = "underutilized.gpu",
        default_value_t = 30.0,
        value_name = "PERCENT"
    )]
    pub idle_gpu: f64,
    /// How long a server must be idle for underutilized.
    #[arg(
        long = "underutilized.for",
        default_value = "30m",
        value_name = "DURATION"
    )]
    pub idle_for: String,
    /// How long `up` must be 0 for target_down.
    #[arg(long = "down.for", default_value = "1m", value_name = "DURATION")]
    pub down_for: String,
    /// Bins of requests in flight for operating_point.
    #[arg(long = "operating-point.bins", default_value_t = 10, value_name = "N")]
    pub op_bins: usize,
    /// Evaluation step (default: window / 720, at least 15 s).
    #[arg(long = "step", value_name = "DURATION")]
    pub step: Option<String>,
}

impl Default for Thresholds {
    /// The flags' defaults (one home: the `#[arg]` attributes above).
    fn default() -> Self {
        #[derive(clap::Parser)]
        struct Flags {
            #[command(flatten)]
            thresholds: Thresholds,
        }
        <Flags as clap::Parser>::parse_from(["advise"]).thresholds
    }
}

/// Durations of [`Thresholds`] in milliseconds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Durations {
    pub kv_for: i64,
    pub queue_for: i64,
    pub idle_for: i64,
    pub down_for: i64,
}

fn dur(flag: &str, s: &str) -> Result<i64, InsightError> {
    inferdb_query::parser::parse_model_duration_ms(s)
        .ok()
        .filter(|d| *d > 0)
        .ok_or_else(|| {
            InsightError::Invalid(format!("--{flag}: {s:?} is not a duration (e.g. 5m)"))
        })
}

impl Thresholds {
    pub(crate) fn durations(&self) -> Result<Durations, InsightError> {
        for (f, v) in [
            ("kv.threshold", self.kv_full),
            ("prefix.drop", self.prefix_drop),
            ("queue.headroom-kv", self.headroom_kv),
            ("underutilized.kv", self.idle_kv),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return Err(InsightError::Invalid(format!(
                    "--{f}: {v} is not a fraction in [0, 1]"
                )));
            }
        }
        if !(0.0..=100.0).contains(&self.idle_gpu) {
            return Err(InsightError::Invalid(format!(
                "--underutilized.gpu: {} is not a percentage in [0, 100]",
                self.idle_gpu
            )));
        }
        if self.op_bins < 3 {
            return Err(InsightError::Invalid(
                "--operating-point.bins: at least 3".into(),
            ));
        }
        Ok(Durations {
            kv_for: dur("kv.for", &self.kv_for)?,
            queue_for: dur("queue.for", &self.queue_for)?,
            idle_for: dur("underutilized.for", &self.idle_for)?,
            down_for: dur("down.for", &self.down_for)?,
        })
    }
}

/// What one detector reads: the source, the window and its grid, the thresholds.
pub(crate) struct Ctx<'a> {
    pub src: &'a dyn PromSource,
    /// Window, ms.
    pub start: i64,
    pub end: i64,
    /// Grid step, ms; evaluation at `start + k*step`, k ≥ 1.
    pub step: i64,
    pub th: &'a Thresholds,
    pub d: Durations,
}

impl Ctx<'_> {
    /// The step as a PromQL duration (`60s`).
    pub fn step_str(&self) -> String {
        format!("{}s", self.step / 1000)
    }
    /// A rate window of at least `min_s` seconds and at least one step.
    pub fn win(&self, min_s: i64) -> String {
        format!("{}s", (self.step / 1000).max(min_s))
    }
    /// Unix seconds of grid index `i`.
    pub fn t(&self, i: usize) -> f64 {
        (self.first() + i as i64 * self.step) as f64 / 1000.0
    }
    /// First evaluation time (one step after the start).
    pub fn first(&self) -> i64 {
        self.start + self.step
    }
    /// Number of grid points.
    pub fn n(&self) -> usize {
        if self.end < self.first() {
            0
        } else {
            ((self.end - self.first()) / self.step) as usize + 1
        }
    }
    /// Steps in `ms` (at least 1).
    pub fn steps(&self, ms: i64) -> usize {
        ((ms + self.step - 1) / self.step).max(1) as usize
    }
    /// Evaluates `q` on the grid, by scope.
    pub fn grid(&self, q: &str) -> Result<grid::Grid, InsightError> {
        grid::Grid::eval(self, q)
    }
}

/// The default step for a window: a 720th of it, at least 15 s, whole seconds.
pub fn default_step_ms(start_ms: i64, end_ms: i64) -> i64 {
    (((end_ms - start_ms) / 720).max(15_000) / 1000) * 1000
}

/// Runs every detector over `[start_ms, end_ms]` and returns the findings, most severe first.
pub fn advise(
    src: &dyn PromSource,
    start_ms: i64,
    end_ms: i64,
    th: &Thresholds,
    slos: &[Slo],
) -> Result<Report, InsightError> {
    if end_ms <= start_ms {
        return Err(InsightError::Invalid(
            "the window's end must be after its start".into(),
        ));
    }
    let d = th.durations()?;
    let step = match &th.step {
        Some(s) => dur("step", s)?.max(1000) / 1000 * 1000,
        None => default_step_ms(start_ms, end_ms),
    };
    let ctx = Ctx {
        src,
        start: start_ms,
        end: end_ms,
        step,
        th,
        d,
    };
    let mut findings = Vec::new();
    findings.extend(kv_cache_pressure::detect(&ctx)?);
    findings.extend(prefix_cache_collapse::detect(&ctx)?);
    findings.extend(queueing::detect(&ctx)?);
    findings.extend(underutilized::detect(&ctx)?);
    findings.extend(slo_breach::detect(&ctx, slos)?);
    findings.extend(restart::detect(&ctx)?);
    findings.extend(target_down::detect(&ctx)?);
    findings.extend(operating_point::detect(&ctx)?);
    for f in &mut findings {
        f.evidence.retain(|_, v| v.is_finite());
        f.start = f
            .start
            .clamp(start_ms as f64 / 1000.0, end_ms as f64 / 1000.0);
        f.end = f.end.clamp(f.start, end_ms as f64 / 1000.0);
    }
    findings.sort_by(|a, b| {
        b.severity
            .cmp(&a.severity)
            .then(a.start.total_cmp(&b.start))
            .then(a.kind.cmp(b.kind))
            .then(a.scope.cmp(&b.scope))
    });
    Ok(Report {
        window: Window {
            start: start_ms as f64 / 1000.0,
            end: end_ms as f64 / 1000.0,
        },
        findings,
    })
}

/// The report as an aligned text table.
pub fn table(r: &Report) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let t = |s: f64| {
        chrono::DateTime::from_timestamp(s as i64, 0)
            .map(|d| d.format("%Y-%m-%d %H:%M:%S").to_string())
            .unwrap_or_default()
    };
    let _ = writeln!(
        out,
        "window {} .. {} UTC: {} findings",
        t(r.window.start),
        t(r.window.end),
        r.findings.len()
    );
    for f in &r.findings {
        let scope = f
            .scope
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ");
        let sev = format!("{:?}", f.severity).to_uppercase();
        let _ = writeln!(
            out,
            "\n{sev:<8} {:<22} {scope}\n         {} .. {}",
            f.kind,
            t(f.start),
            t(f.end)
        );
        let _ = writeln!(out, "         {}", f.summary);
        let ev = f
            .evidence
            .iter()
            .map(|(k, v)| format!("{k}={}", fmt_num(*v)))
            .collect::<Vec<_>>()
            .join(" ");
        let _ = writeln!(out, "         evidence: {ev}");
        let _ = writeln!(out, "         do: {}", f.recommendation);
        for q in &f.queries {
            let _ = writeln!(out, "         query: {q}");
        }
    }
    out
}

/// A number for text: 4 significant digits.
pub(crate) fn fmt_num(v: f64) -> String {
    if v == v.trunc() && v.abs() < 1e12 {
        format!("{v}")
    } else if v.abs() >= 100.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.4}")
    }
}

/// A scope map of `instance` and `model_name` (those present).
pub(crate) fn scope_map(s: &Scope) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    if !s.instance.is_empty() {
        m.insert("instance".into(), s.instance.clone());
    }
    if !s.model.is_empty() {
        m.insert("model_name".into(), s.model.clone());
    }
    m
}

/// A PromQL label filter for a scope: `{instance="...",model_name="..."}`.
pub(crate) fn filter(s: &Scope) -> String {
    let mut parts = Vec::new();
    if !s.instance.is_empty() {
        parts.push(format!("instance={:?}", s.instance));
    }
    if !s.model.is_empty() {
        parts.push(format!("model_name={:?}", s.model));
    }
    format!("{{{}}}", parts.join(","))
}

#[cfg(test)]
mod tests {
    use super::Thresholds;

    /// The defaults come from the flags' attributes, as `inferdb advise` without flags has them.
    #[test]
    fn default_thresholds_are_the_flags_defaults() {
        let t = Thresholds::default();
        assert_eq!(t.kv_full, 0.9);
        assert_eq!(t.kv_for, "5m");
        assert_eq!(t.idle_gpu, 30.0);
        assert_eq!(t.idle_for, "30m");
        assert_eq!(t.op_bins, 10);
        assert_eq!(t.step, None);
    }
}
