//! `inferdb tsdb stats` and `inferdb tsdb check`: what a store holds, and whether every
//! checksum in it verifies.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use inferdb_storage::block::{self, Block, BlockMeta};
use inferdb_storage::labels::METRIC_NAME;
use inferdb_storage::{Db, Options};

/// `inferdb tsdb ...`
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  inferdb tsdb stats --data-dir ./data\n  inferdb tsdb check --data-dir ./data"
)]
pub struct TsdbArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: TsdbCommand,
}

/// The `tsdb` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum TsdbCommand {
    /// Series, samples, bytes per sample, blocks, and the metrics and labels with the most
    /// series.
    #[command(after_help = "Example:\n  inferdb tsdb stats --data-dir ./data --top 20")]
    Stats(StatsArgs),
    /// Verifies every checksum (block indexes, chunk files, chunks against the index, the WAL)
    /// and exits with 0 when the store is sound, 1 when something is corrupt, 2 when the
    /// store cannot be read at all.
    #[command(after_help = "Example:\n  inferdb tsdb check --data-dir ./data && echo sound")]
    Check(CheckArgs),
}

/// Arguments of `inferdb tsdb stats`.
#[derive(Debug, clap::Args)]
pub struct StatsArgs {
    /// The data folder.
    #[arg(long, default_value = "data")]
    pub data_dir: PathBuf,
    /// How many metrics and labels to list.
    #[arg(long, default_value_t = 10)]
    pub top: usize,
}

/// Arguments of `inferdb tsdb check`.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// The data folder.
    #[arg(long, default_value = "data")]
    pub data_dir: PathBuf,
}

/// Statistics of a store.
#[derive(Debug, Clone, Default)]
pub struct TsdbStats {
    /// Block metadata and size on disk, oldest first.
    pub blocks: Vec<(BlockMeta, u64)>,
    /// Series in the head.
    pub head_series: u64,
    /// Samples replayed from the WAL into the head.
    pub head_samples: u64,
    /// Head time range (`i64::MAX`/`i64::MIN` when empty).
    pub head_min_time: i64,
    /// See `head_min_time`.
    pub head_max_time: i64,
    /// Distinct series over blocks and head.
    pub series: u64,
    /// Samples in blocks plus the head.
    pub samples: u64,
    /// Bytes of all blocks.
    pub block_bytes: u64,
    /// Samples in blocks.
    pub block_samples: u64,
    /// Metrics with the most series: (name, series).
    pub top_metrics: Vec<(String, u64)>,
    /// Label names with the most distinct values: (name, values).
    pub top_label_names: Vec<(String, u64)>,
    /// Label pairs on the most series: (`name="value"`, series).
    pub top_label_pairs: Vec<(String, u64)>,
}

impl TsdbStats {
    /// Block bytes per block sample, if any.
    pub fn bytes_per_sample(&self) -> Option<f64> {
        (self.block_samples > 0).then(|| self.block_bytes as f64 / self.block_samples as f64)
    }
}

fn top(m: HashMap<String, u64>, n: usize) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = m.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v.truncate(n);
    v
}

/// Reads the statistics of the store in `dir` (read-only; safe beside a running server).
pub fn stats(dir: &Path, n: usize) -> Result<TsdbStats, inferdb_storage::Error> {
    let db = Db::open(
        dir,
        Options {
            read_only: true,
            ..Options::default()
        },
    )?;
    let mut st = TsdbStats::default();
    for b in db.open_blocks() {
        st.blocks.push((b.meta().clone(), b.size_bytes()));
        st.block_bytes += b.size_bytes();
        st.block_samples += b.meta().num_samples;
    }
    let ds = db.stats();
    st.head_series = ds.head_series;
    st.head_min_time = ds.head_min_time;
    st.head_max_time = ds.head_max_time;
    // The head's own chunks (a clean close checkpoints chunks, not sample records, so the
    // WAL replay count would miss them).
    st.head_samples = db
        .head()
        .chunks_in_range_iter(i64::MIN, i64::MAX)
        .flat_map(|(_, cs)| cs)
        .filter_map(|c| inferdb_storage::chunk::meta(&c).ok())
        .map(|m| u64::from(m.num_samples))
        .sum();
    st.samples = st.block_samples + st.head_samples;
    let q = db.querier(i64::MIN, i64::MAX)?;
    let all = q.series(&[])?;
    st.series = all.len() as u64;
    let mut metrics: HashMap<String, u64> = HashMap::new();
    let mut pairs: HashMap<String, u64> = HashMap::new();
    let mut values: HashMap<String, std::collections::HashSet<String>> = HashMap::new();
    for l in &all {
        if let Some(m) = l.metric_name() {
            *metrics.entry(m.to_string()).or_default() += 1;
        }
        for x in l.iter() {
            if x.name == METRIC_NAME {
                continue;
            }
            *pairs
                .entry(format!("{}={:?}", x.name, x.value))
                .or_default() += 1;
            values
                .entry(x.name.clone())
                .or_default()
                .insert(x.value.clone());
        }
    }
    st.top_metrics = top(metrics, n);
    st.top_label_pairs = top(pairs, n);
    st.top_label_names = top(
        values
            .into_iter()
            .map(|(k, v)| (k, v.len() as u64))
            .collect(),
        n,
    );
    Ok(st)
}

fn fmt_time(t: i64) -> String {
    chrono::DateTime::from_timestamp_millis(t)
        .map(|d| d.format("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_else(|| t.to_string())
}

/// Prints `st` as text.
pub fn print_stats(st: &TsdbStats, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    writeln!(out, "series:           {}", st.series)?;
    writeln!(out, "samples:          {}", st.samples)?;
    writeln!(out, "blocks:           {}", st.blocks.len())?;
    writeln!(
        out,
        "block bytes:      {} ({} bytes)",
        indicatif::HumanBytes(st.block_bytes),
        st.block_bytes
    )?;
    match st.bytes_per_sample() {
        Some(b) => writeln!(out, "bytes/sample:     {b:.3} (blocks)")?,
        None => writeln!(out, "bytes/sample:     - (no blocks)")?,
    }
    if st.head_series > 0 && st.head_min_time <= st.head_max_time {
        writeln!(
            out,
            "head:             {} series, {} samples, {} .. {}",
            st.head_series,
            st.head_samples,
            fmt_time(st.head_min_time),
            fmt_time(st.head_max_time)
        )?;
    } else {
        writeln!(out, "head:             empty")?;
    }
    if !st.blocks.is_empty() {
        writeln!(out, "\nBLOCK ID                    MIN TIME              MAX TIME              SPAN      SERIES    SAMPLES        SIZE  LEVEL")?;
        for (m, size) in &st.blocks {
            writeln!(
                out,
                "{:<27} {:<21} {:<21} {:<8} {:>7} {:>10} {:>11} {:>6}",
                m.id,
                fmt_time(m.min_time),
                fmt_time(m.max_time),
                inferdb_query::printer::format_duration_ms(m.max_time - m.min_time),
                m.num_series,
                m.num_samples,
                indicatif::HumanBytes(*size).to_string(),
                m.level
            )?;
        }
    }
    let table = |out: &mut dyn std::io::Write, title: &str, rows: &[(String, u64)]| {
        writeln!(out, "\n{title}")?;
        for (k, v) in rows {
            writeln!(out, "{v:>10}  {k}")?;
        }
        Ok::<(), std::io::Error>(())
    };
    table(out, "TOP METRICS BY SERIES", &st.top_metrics)?;
    table(
        out,
        "TOP LABEL NAMES BY DISTINCT VALUES",
        &st.top_label_names,
    )?;
    table(out, "TOP LABEL PAIRS BY SERIES", &st.top_label_pairs)?;
    Ok(())
}

/// What `tsdb check` found.
#[derive(Debug, Default)]
pub struct CheckReport {
    /// Blocks checked.
    pub blocks: usize,
    /// WAL segments read.
    pub wal_segments: usize,
    /// Problems, each naming a file and offset where known.
    pub problems: Vec<String>,
}

impl CheckReport {
    /// Whether nothing was wrong.
    pub fn is_sound(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Verifies every block (index, chunk files, chunks against the index, `meta.json` counts)
/// and the WAL of the store in `dir`, without modifying anything. `Err` only when the folder
/// cannot be read at all.
pub fn check(dir: &Path) -> Result<CheckReport, inferdb_storage::Error> {
    if !dir.is_dir() {
        return Err(inferdb_storage::Error::io(
            dir,
            std::io::Error::new(std::io::ErrorKind::NotFound, "no data folder here"),
        ));
    }
    let mut rep = CheckReport::default();
    for d in block::list_block_dirs(dir)? {
        rep.blocks += 1;
        match Block::open(&d) {
            Ok(b) => match b.check() {
                Ok(errs) => rep.problems.extend(
                    errs.into_iter()
                        .map(|e| format!("block {}: {e}", d.display())),
                ),
                Err(e) => rep.problems.push(format!("block {}: {e}", d.display())),
            },
            Err(e) => rep.problems.push(format!("block {}: {e}", d.display())),
        }
    }
    // The WAL, replayed read-only (nothing is repaired); each damaged span once.
    match inferdb_storage::wal::replay(&dir.join("wal"), true, |_| Ok(())) {
        Ok((ws, _)) => {
            rep.wal_segments = ws.segments;
            for c in &ws.corruptions {
                rep.problems.push(format!("wal: {c}"));
            }
        }
        Err(e) => rep.problems.push(format!("reading the WAL: {e}")),
    }
    Ok(rep)
}

impl TsdbArgs {
    /// Runs the command; the exit code follows `tsdb check`'s convention.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        match self.command {
            TsdbCommand::Stats(a) => {
                let st =
                    stats(&a.data_dir, a.top).map_err(|e| super::store_error(&a.data_dir, e))?;
                print_stats(&st, &mut std::io::stdout().lock())?;
                Ok(ExitCode::SUCCESS)
            }
            TsdbCommand::Check(a) => {
                let rep = match check(&a.data_dir) {
                    Ok(r) => r,
                    Err(e) => {
                        eprintln!("inferdb tsdb check: {e}");
                        return Ok(ExitCode::from(2));
                    }
                };
                for p in &rep.problems {
                    println!("{p}");
                }
                if rep.is_sound() {
                    println!(
                        "ok: {} block(s), {} WAL segment(s), every checksum verified",
                        rep.blocks, rep.wal_segments
                    );
                    Ok(ExitCode::SUCCESS)
                } else {
                    println!("CORRUPT: {} problem(s) found", rep.problems.len());
                    Ok(ExitCode::from(1))
                }
            }
        }
    }
}
