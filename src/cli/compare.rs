//! `inferdb compare`: the golden signals of two windows side by side, and which changed
//! (see [`crate::insight::compare`]).

use std::process::ExitCode;

use anyhow::anyhow;

use crate::cli::advise::timeout;
use crate::cli::parse_time as parse_cli_time;
use crate::insight::compare::{self, GroupBy, Span};

/// Output format of `compare`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CompareFormat {
    /// Text.
    Table,
    /// `{"signals":[...],"load_change":REL,"notes":[...]}`, as `/inferdb/v1/compare` answers.
    Json,
}

/// Arguments of `inferdb compare`.
#[derive(Debug, Clone, clap::Args)]
#[command(
    after_help = "Signals (per window; groups: the whole fleet, always, and --by):
  generation_tokens_per_second, prompt_tokens_per_second, requests_per_second   mean rates
  ttft_p50_seconds, ttft_p95_seconds, itl_p50_seconds, itl_p95_seconds, e2e_p95_seconds
                                  quantiles of the window's summed histogram buckets
  kv_cache_usage_mean             mean of avg(vllm:kv_cache_usage_perc)
  prefix_cache_hit_rate           prefix-cache hits / queries over the window
  preemptions_per_minute          mean rate x 60
  waiting_mean, running_mean      mean of the group's sum of waiting / running requests
  gpu_utilization_mean            mean DCGM_FI_DEV_GPU_UTIL (percent) of the GPUs on the hosts of
                                  the group's vLLM instances: a GPU series joins a vLLM instance
                                  by its Hostname label (dcgm-exporter's) or the host part of its
                                  instance, matched to the host part of the vLLM instance
Significance: each signal is evaluated every step (default: the shorter window / 240, at least
15s; rates over max(step, 2m), evaluated from that long after each window's start). A
circular moving-block bootstrap over the steps (400 resamples per window, blocks of
max(cbrt(n), rate window / step) steps) gives the standard error of b - a; a change is
significant when the normal interval of b - a excludes 0 at family-wise 95 % with the
Holm-Bonferroni correction over the 14 signals of each group, and |change| >= 10 %. A window
with fewer than 30 steps with data is not enough data: shown, never significant. The fleet's
change in completed requests/s is load_change (a note when >= 10 %); it never clears
significant.

Examples:
  inferdb compare --data-dir data --a -2h..-1h --b -1h..now
  inferdb compare --url http://localhost:9090 --a 2026-12-01T00:00:00Z..2026-12-01T06:00:00Z \\
      --b 2026-12-02T00:00:00Z..2026-12-02T06:00:00Z --by model_name --format json"
)]
pub struct CompareArgs {
    /// Where the data comes from.
    #[command(flatten)]
    pub source: crate::cli::SourceArgs,
    /// Window A: START..END, each RFC 3339, Unix seconds, now, -1h, now-30m.
    #[arg(long, value_name = "START..END", allow_hyphen_values = true)]
    pub a: String,
    /// Window B (same forms).
    #[arg(long, value_name = "START..END", allow_hyphen_values = true)]
    pub b: String,
    /// Also compare by this label (the whole fleet is always compared).
    #[arg(long, value_enum)]
    pub by: Option<GroupBy>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = CompareFormat::Table)]
    pub format: CompareFormat,
    /// Evaluation step (default: the shorter window / 240, at least 15s).
    #[arg(long, value_name = "DURATION")]
    pub step: Option<String>,
    /// Per-query time limit.
    #[arg(long, default_value = "2m", value_name = "DURATION")]
    pub timeout: String,
    /// Metric-rename bridging (with --data-dir).
    #[command(flatten)]
    pub aliases: crate::metric_aliases::AliasArgs,
}

/// Parses `START..END` (times as `inferdb query` takes them) into milliseconds.
pub fn parse_span(flag: &str, s: &str, now: i64) -> anyhow::Result<Span> {
    let (a, b) = s
        .split_once("..")
        .ok_or_else(|| anyhow!("--{flag}: {s:?} is not START..END (e.g. -2h..-1h)"))?;
    let start = parse_cli_time(a, now).map_err(|e| anyhow!("--{flag}: start: {e}"))?;
    let end = parse_cli_time(b, now).map_err(|e| anyhow!("--{flag}: end: {e}"))?;
    if end <= start {
        return Err(anyhow!("--{flag}: the end must be after the start"));
    }
    Ok(Span { start, end })
}

impl CompareArgs {
    /// Prints the comparison; exit code 0.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let now = chrono::Utc::now().timestamp_millis();
        let a = parse_span("a", &self.a, now)?;
        let b = parse_span("b", &self.b, now)?;
        let step = self
            .step
            .as_deref()
            .map(|s| crate::cli::duration_ms("step", s))
            .transpose()?;
        let timeout = timeout(&self.timeout)?;
        let src = self.source.open(timeout, &self.aliases)?;
        let c = compare::compare(src.as_ref(), a, b, self.by, step)?;
        match self.format {
            CompareFormat::Json => println!("{}", serde_json::to_string(&c)?),
            CompareFormat::Table => print!("{}", compare::table(&c)),
        }
        Ok(ExitCode::SUCCESS)
    }
}

#[cfg(test)]
mod tests {
    use super::parse_span;

    #[test]
    fn spans_parse_and_refuse() {
        let now = 1_800_000_000_000;
        let s = parse_span("a", "-2h..-1h", now).unwrap();
        assert_eq!((s.start, s.end), (now - 7_200_000, now - 3_600_000));
        let s = parse_span("a", "1796083200.5..1796086800", now).unwrap();
        assert_eq!((s.start, s.end), (1_796_083_200_500, 1_796_086_800_000));
        let s = parse_span("b", "2026-12-01T00:00:00Z..now", now).unwrap();
        assert_eq!((s.start, s.end), (1_796_083_200_000, now));
        for bad in ["-1h", "-1h..-2h", "x..now", "-1h.."] {
            assert!(parse_span("a", bad, now).is_err(), "{bad}");
        }
    }
}
