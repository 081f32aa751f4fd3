//! `inferdb import openmetrics FILE...`: backfills history from OpenMetrics text files.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::import::{import_files, ImportError, ImportOptions};
use crate::model::exposition::Format;

/// `inferdb import ...`
#[derive(Debug, clap::Args)]
#[command(after_help = "Example:\n  inferdb import openmetrics --data-dir ./data history.om")]
pub struct ImportArgs {
    /// What to import.
    #[command(subcommand)]
    pub command: ImportCommand,
}

/// The `import` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum ImportCommand {
    /// Imports OpenMetrics text files (every sample with a timestamp) into 2 h blocks, older
    /// than the head or not. Every file is parsed and validated first: a bad line is reported
    /// with its file and line number and nothing is imported. Stop a running `inferdb serve`
    /// on the same data folder first; it loads the new blocks when it starts again.
    #[command(
        after_help = "Examples:\n  inferdb import openmetrics --data-dir ./data history-*.om\n  inferdb import openmetrics --dry-run dump.txt"
    )]
    Openmetrics(OpenmetricsArgs),
}

/// Arguments of `inferdb import openmetrics`.
#[derive(Debug, clap::Args)]
pub struct OpenmetricsArgs {
    /// The files to import.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// The data folder.
    #[arg(long, default_value = "data")]
    pub data_dir: PathBuf,
    /// Only parse, validate and count; write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Block range (a Prometheus duration such as 2h); blocks are aligned to it.
    #[arg(long, default_value = "2h")]
    pub block_duration: String,
    /// The files are Prometheus text 0.0.4 (integer millisecond timestamps, no `# EOF`)
    /// rather than OpenMetrics.
    #[arg(long)]
    pub prometheus_text: bool,
    /// No progress bar.
    #[arg(long, short)]
    pub quiet: bool,
    /// Import timestamps from the year 5138 on, which are refused by default as plausibly
    /// milliseconds given where OpenMetrics expects seconds.
    #[arg(long)]
    pub allow_far_future: bool,
}

/// The time range the store in `dir` already holds (blocks and head), if any.
fn held_range(dir: &std::path::Path) -> Option<(i64, i64)> {
    if !dir.is_dir() {
        return None;
    }
    let db = inferdb_storage::Db::open(
        dir,
        inferdb_storage::Options {
            read_only: true,
            background: false,
            ..Default::default()
        },
    )
    .ok()?;
    let st = db.stats();
    let mut lo = st.head_min_time;
    let mut hi = st.head_max_time;
    if lo > hi {
        (lo, hi) = (i64::MAX, i64::MIN);
    }
    for b in db.blocks() {
        lo = lo.min(b.min_time);
        hi = hi.max(b.max_time - 1);
    }
    (lo <= hi).then_some((lo, hi))
}

impl ImportArgs {
    /// Runs the command: exit code 0 on success, 1 when the input is invalid or writing failed.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let ImportCommand::Openmetrics(a) = self.command;
        let bd = inferdb_query::parser::parse_duration(&a.block_duration)
            .map_err(|e| anyhow::anyhow!("--block-duration: {e}"))?;
        if bd <= 0 {
            anyhow::bail!("--block-duration must be positive");
        }
        let opts = ImportOptions {
            dry_run: a.dry_run,
            block_duration_ms: bd,
            progress: !a.quiet,
            format: if a.prometheus_text {
                Format::PromText
            } else {
                Format::OpenMetrics
            },
            allow_far_future: a.allow_far_future,
            ..ImportOptions::default()
        };
        let held = if a.dry_run {
            None
        } else {
            held_range(&a.data_dir)
        };
        let started = std::time::Instant::now();
        match import_files(&a.data_dir, &a.files, &opts) {
            Ok(st) => {
                let secs = started.elapsed().as_secs_f64();
                let range = if st.samples > 0 && st.min_time <= st.max_time {
                    format!(
                        ", {} .. {}",
                        crate::export::day_time(st.min_time),
                        crate::export::day_time(st.max_time)
                    )
                } else {
                    String::new()
                };
                println!(
                    "{}{} file(s), {} bytes: {} samples ({} duplicates dropped) in {} series{}, {} block range(s); {:.2}s, {:.0} samples/s",
                    if a.dry_run { "dry run, valid: " } else { "imported " },
                    st.files,
                    st.bytes,
                    st.samples,
                    st.duplicates,
                    st.series,
                    range,
                    st.block_ranges,
                    secs,
                    st.samples as f64 / secs.max(1e-9)
                );
                if let Some((lo, hi)) = held {
                    if st.samples > 0 && st.min_time <= hi && lo <= st.max_time {
                        eprintln!(
                            "warning: the imported samples ({} .. {}) overlap what {} already \
                             held ({} .. {}): queries read a repeated sample once, but `tsdb \
                             stats` counts it twice",
                            crate::export::day_time(st.min_time),
                            crate::export::day_time(st.max_time),
                            a.data_dir.display(),
                            crate::export::day_time(lo),
                            crate::export::day_time(hi)
                        );
                    }
                }
                st.blocks.iter().for_each(print_block);
                if let Some(e) = &st.compaction_error {
                    eprintln!("warning: compacting the blocks after the import failed: {e}");
                } else if !st.compacted.is_empty() {
                    println!(
                        "compacted: the data folder holds {} blocks",
                        st.compacted.len()
                    );
                    st.compacted.iter().for_each(print_block);
                }
                Ok(ExitCode::SUCCESS)
            }
            Err(ImportError::Invalid(problems)) => {
                for p in &problems {
                    eprintln!("{p}");
                }
                if problems.len() >= crate::import::MAX_REPORTED_PROBLEMS {
                    eprintln!("(stopped after {} problems)", problems.len());
                }
                eprintln!("inferdb import: invalid input, nothing imported");
                Ok(ExitCode::from(1))
            }
            Err(e) => {
                eprintln!("inferdb import: {e}; nothing imported");
                Ok(ExitCode::from(1))
            }
        }
    }
}

/// One line for a block written by the import.
fn print_block(b: &inferdb_storage::block::BlockMeta) {
    println!(
        "  block {} [{} .. {}) {} series {} samples",
        b.id,
        crate::export::day_time(b.min_time),
        crate::export::day_time(b.max_time),
        b.num_series,
        b.num_samples
    );
}
