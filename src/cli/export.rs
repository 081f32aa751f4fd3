//! `inferdb export parquet|csv`: writes samples in long format for pandas, DuckDB or Spark.

use std::path::PathBuf;
use std::process::ExitCode;

use inferdb_storage::{Db, Options};

use super::parse_time;
use crate::export::{export, ExportFormat, ExportOptions, Partition};

/// `inferdb export ...`
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  inferdb export parquet --match '{__name__=~\"vllm:.*\"}' --start -24h --out ./vllm\n  inferdb export csv --match vllm:num_requests_running --start -1h --out -"
)]
pub struct ExportArgs {
    /// The output format.
    #[command(subcommand)]
    pub command: ExportCommand,
}

/// The `export` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum ExportCommand {
    /// Writes Parquet: timestamp (ms, UTC), value (float64), __name__ and one
    /// dictionary-encoded string column per label; zstd; ~1 M rows per row group.
    #[command(
        after_help = "Examples:\n  inferdb export parquet --data-dir ./data --match '{__name__=~\"vllm:.*\"}' --start -24h --end now --out ./vllm\n  inferdb export parquet --match 'vllm:num_requests_running' --start 2026-12-01T00:00:00Z --end 2026-12-02T00:00:00Z --out running.parquet\n  inferdb export parquet --match '{job=\"vllm\"}' --start -7d --partition-by day --out ./by-day\n\n--out ending in .parquet writes one file; otherwise a folder with <metric>.parquet per metric\n(or date=YYYY-MM-DD/<metric>.parquet with --partition-by day)."
    )]
    Parquet(ExportCommonArgs),
    /// Writes CSV with a header: timestamp (ms), value, __name__, one column per label.
    #[command(
        after_help = "Example:\n  inferdb export csv --match 'vllm:num_requests_running' --start -1h --out -"
    )]
    Csv(ExportCommonArgs),
}

/// Arguments shared by `export parquet` and `export csv`.
#[derive(Debug, clap::Args)]
pub struct ExportCommonArgs {
    /// Series selector (PromQL, e.g. `vllm:num_requests_running{model="m"}`); repeat to
    /// export the union.
    #[arg(long = "match", required = true)]
    pub selectors: Vec<String>,
    /// First timestamp: RFC 3339, Unix seconds, `now`, or relative like `-6h`.
    #[arg(long, allow_hyphen_values = true)]
    pub start: String,
    /// Last timestamp (inclusive); same forms as --start.
    #[arg(long, default_value = "now", allow_hyphen_values = true)]
    pub end: String,
    /// Output file (ending in .parquet/.csv, or - for CSV on stdout) or folder.
    #[arg(long)]
    pub out: PathBuf,
    /// How a folder output is split: one file per metric, or per UTC day and metric.
    #[arg(long, value_enum, default_value = "metric")]
    pub partition_by: PartitionArg,
    /// Overrides the format chosen by the subcommand.
    #[arg(long, value_enum)]
    pub format: Option<FormatArg>,
    /// Rows per Parquet row group.
    #[arg(long, default_value_t = 1 << 20)]
    pub row_group_rows: usize,
    /// zstd compression level (1-22).
    #[arg(long, default_value_t = 1)]
    pub zstd_level: i32,
    /// Replace existing output files.
    #[arg(long)]
    pub overwrite: bool,
    /// Files written at once when --out is a folder (0: one per core, at most 4).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// The data folder.
    #[arg(long, default_value = "data")]
    pub data_dir: PathBuf,
    /// No progress bar.
    #[arg(long, short)]
    pub quiet: bool,
}

/// `--partition-by`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum PartitionArg {
    /// One file per metric.
    Metric,
    /// One folder per UTC day, one file per metric in it.
    Day,
}

/// `--format`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum FormatArg {
    /// Apache Parquet.
    Parquet,
    /// CSV.
    Csv,
}

/// Refuses an `--out` file name whose extension names the other format.
fn refuse_mismatched_name(out: &std::path::Path, format: ExportFormat) -> anyhow::Result<()> {
    let ext = out
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase());
    let (wrong, right, cmd) = match format {
        ExportFormat::Parquet => ("csv", "parquet", "export csv"),
        ExportFormat::Csv => ("parquet", "csv", "export parquet"),
    };
    if ext.as_deref() == Some(wrong) {
        anyhow::bail!(
            "--out {}: a .{wrong} name for {right} output; name it .{right} (or a folder), or use \
             `inferdb {cmd}`",
            out.display()
        );
    }
    Ok(())
}

impl ExportArgs {
    /// Runs the command: exit code 0 on success, 1 on failure.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let (mut format, a) = match self.command {
            ExportCommand::Parquet(a) => (ExportFormat::Parquet, a),
            ExportCommand::Csv(a) => (ExportFormat::Csv, a),
        };
        match a.format {
            Some(FormatArg::Parquet) => format = ExportFormat::Parquet,
            Some(FormatArg::Csv) => format = ExportFormat::Csv,
            None => {}
        }
        refuse_mismatched_name(&a.out, format)?;
        let now = crate::model::time::now_ms();
        let start = parse_time(&a.start, now).map_err(|e| anyhow::anyhow!("--start: {e}"))?;
        let end = parse_time(&a.end, now).map_err(|e| anyhow::anyhow!("--end: {e}"))?;
        let mut selectors = Vec::new();
        for m in &a.selectors {
            let ms = inferdb_query::parser::parse_matchers(m)
                .map_err(|e| anyhow::anyhow!("--match {m:?}: {e}"))?;
            selectors.push(ms);
        }
        let db = Db::open(
            &a.data_dir,
            Options {
                read_only: true,
                ..Options::default()
            },
        )
        .map_err(|e| super::store_error(&a.data_dir, e))?;
        let mut opts = ExportOptions::new(selectors, start, end, a.out.clone());
        opts.format = format;
        opts.partition = match a.partition_by {
            PartitionArg::Metric => Partition::Metric,
            PartitionArg::Day => Partition::Day,
        };
        opts.row_group_rows = a.row_group_rows;
        opts.zstd_level = a.zstd_level;
        opts.overwrite = a.overwrite;
        opts.progress = !a.quiet;
        if a.threads > 0 {
            opts.threads = a.threads;
        }
        let started = std::time::Instant::now();
        match export(&db, &opts) {
            Ok(st) if st.rows == 0 => {
                eprintln!(
                    "warning: no samples match {} between {} and {}; the output holds no rows",
                    a.selectors.join(" or "),
                    crate::export::day_time(start),
                    crate::export::day_time(end)
                );
                Ok(ExitCode::SUCCESS)
            }
            Ok(st) => {
                let secs = started.elapsed().as_secs_f64();
                eprintln!(
                    "exported {} rows of {} series into {} file(s) in {:.2}s ({:.0} rows/s)",
                    st.rows,
                    st.series,
                    st.files.len(),
                    secs,
                    st.rows as f64 / secs.max(1e-9)
                );
                if a.out != std::path::Path::new("-") {
                    for (f, n) in &st.files {
                        eprintln!("  {} ({n} rows)", f.display());
                    }
                }
                Ok(ExitCode::SUCCESS)
            }
            Err(e) => {
                eprintln!("inferdb export: {e}");
                Ok(ExitCode::from(1))
            }
        }
    }
}
