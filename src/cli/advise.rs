//! `inferdb advise`: what is wrong with a vLLM fleet over a window and what to change
//! (see [`crate::insight`]).

use std::process::ExitCode;
use std::time::Duration;

use anyhow::anyhow;

use crate::cli::parse_time as parse_cli_time;
use crate::insight::{self, Thresholds};

/// Output format of `advise`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AdviseFormat {
    /// Text.
    Table,
    /// `{"window":{...},"findings":[...]}`, as `/inferdb/v1/insights` answers.
    Json,
}

/// Arguments of `inferdb advise`.
#[derive(Debug, Clone, clap::Args)]
#[command(after_help = "Findings (kind, severity, default condition):
  kv_cache_pressure      critical  KV-cache usage >= 0.9 for >= 5m while preemptions occur
  prefix_cache_collapse  warning   prefix-cache hit rate < 0.5 x its earlier level while KV usage >= 0.9, >= 5m
  queueing               warning   waiting > 0 for >= 5m; headroom when KV usage < 0.8, else add a replica
  underutilized          info      running < 4, no queue, GPUs < 30 % busy (without GPU series:
                                   KV usage < 0.1) for >= 30m
  slo_breach             warning   an objective given with --slo missed (attainment from histogram buckets)
  restart                info      counters reset or process_start_time_seconds changed
  target_down            warning   up == 0 for >= 1m
  operating_point        info      per model: tokens/s and ITL p95 by requests in flight, and the knee
Each finding carries the PromQL that shows it. Series are grouped by instance and model_name.
GPU join: GPU series (DCGM_FI_DEV_GPU_UTIL, from dcgm-exporter or inferdb's own GPU sampler)
belong to the vLLM instances on their host: the GPU series' Hostname label (dcgm-exporter's)
or else the host part of its instance, matched to the host part of the vLLM instance
(gpu-node-7:8000 -> gpu-node-7); underutilized reads the GPUs so joined.

Examples:
  inferdb advise --data-dir data --start -6h
  inferdb advise --url http://localhost:9090 --start 2026-12-01T00:00:00Z --end 2026-12-02T00:00:00Z --format json
  inferdb advise --start -1h --slo ttft_p95=500ms,itl_p95=50ms,e2e_p95=30s")]
pub struct AdviseArgs {
    /// Where the data comes from.
    #[command(flatten)]
    pub source: crate::cli::SourceArgs,
    /// Start of the window: RFC 3339, Unix seconds, now, -1h, now-30m.
    #[arg(long, default_value = "-1h", allow_hyphen_values = true)]
    pub start: String,
    /// End of the window (same forms).
    #[arg(long, default_value = "now", allow_hyphen_values = true)]
    pub end: String,
    /// Output format.
    #[arg(long, value_enum, default_value_t = AdviseFormat::Table)]
    pub format: AdviseFormat,
    /// Objectives, e.g. ttft_p95=500ms,itl_p95=50ms,e2e_p95=30s (signals ttft, itl, e2e,
    /// queue); none by default, and then no slo_breach findings.
    #[arg(long, value_name = "LIST", default_value = "")]
    pub slo: String,
    /// Per-query time limit.
    #[arg(long, default_value = "2m", value_name = "DURATION")]
    pub timeout: String,
    /// Thresholds.
    #[command(flatten)]
    pub thresholds: Thresholds,
    /// Metric-rename bridging (with --data-dir).
    #[command(flatten)]
    pub aliases: crate::metric_aliases::AliasArgs,
}

/// Parses the `--timeout` flag.
pub fn timeout(s: &str) -> anyhow::Result<Duration> {
    inferdb_query::parser::parse_model_duration_ms(s)
        .ok()
        .filter(|m| *m > 0)
        .map(|m| Duration::from_millis(m as u64))
        .ok_or_else(|| anyhow!("--timeout: {s:?} is not a duration"))
}

impl AdviseArgs {
    /// Prints the findings; exit code 0.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let now = chrono::Utc::now().timestamp_millis();
        let start = parse_cli_time(&self.start, now).map_err(|e| anyhow!("--start: {e}"))?;
        let end = parse_cli_time(&self.end, now).map_err(|e| anyhow!("--end: {e}"))?;
        let slos = insight::parse_slos(&self.slo)?;
        let timeout = timeout(&self.timeout)?;
        let src = self.source.open(timeout, &self.aliases)?;
        let report = insight::advise(src.as_ref(), start, end, &self.thresholds, &slos)?;
        match self.format {
            AdviseFormat::Json => println!("{}", serde_json::to_string(&report)?),
            AdviseFormat::Table => print!("{}", insight::table(&report)),
        }
        Ok(ExitCode::SUCCESS)
    }
}
