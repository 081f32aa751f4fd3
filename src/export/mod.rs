//! Exporting samples to Parquet ([`parquet`]) or CSV ([`csv`]) in long format: one row per
//! sample with `timestamp`, `value`, `__name__` and one column per label.
//!
//! [`export`] streams: it selects one metric at a time, iterates its series chunk by chunk and
//! hands rows to a [`RowSink`] in small batches; the Parquet sink flushes a row group every
//! [`ExportOptions::row_group_rows`] rows, so memory stays bounded whatever the time range.
//!
//! Layout of the output (`--out PATH`):
//! - `PATH` ending in `.parquet` / `.csv` (or `-` for CSV on stdout): one file with every
//!   selected series; its label columns are the union of all their label names;
//! - otherwise `PATH` is a folder with one file per metric, `PATH/<metric>.parquet`
//!   (`--partition-by metric`, the default);
//! - `--partition-by day`: `PATH/date=YYYY-MM-DD/<metric>.parquet` per UTC day (Hive-style,
//!   so `read_parquet('PATH/*/*.parquet', hive_partitioning = true)` adds a `date` column).
//!
//! Files are written as `<file>.tmp` and renamed when complete.

pub mod csv;
pub mod parquet;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use inferdb_storage::labels::METRIC_NAME;
use inferdb_storage::{Db, Labels, MatchOp, Matcher, Series};

/// Samples handed to a sink at once.
const BATCH: usize = 8192;

/// One day in milliseconds.
const DAY_MS: i64 = 24 * 3600 * 1000;

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportFormat {
    /// Apache Parquet (zstd, dictionary-encoded label columns).
    Parquet,
    /// Comma-separated values with a header line.
    Csv,
}

impl ExportFormat {
    /// The file extension, without the dot.
    pub fn extension(self) -> &'static str {
        match self {
            ExportFormat::Parquet => "parquet",
            ExportFormat::Csv => "csv",
        }
    }
}

/// How a folder output is split into files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Partition {
    /// One file per metric (the default for a folder).
    #[default]
    Metric,
    /// One folder per UTC day (`date=YYYY-MM-DD`), one file per metric in it.
    Day,
}

/// Export options.
#[derive(Debug, Clone)]
pub struct ExportOptions {
    /// Series selectors; a series is exported when it matches any of them.
    pub selectors: Vec<Vec<Matcher>>,
    /// First timestamp (inclusive, ms).
    pub start: i64,
    /// Last timestamp (inclusive, ms).
    pub end: i64,
    /// The output file or folder (see the module docs); `-` writes CSV to stdout.
    pub out: PathBuf,
    /// The format.
    pub format: ExportFormat,
    /// How a folder output is split.
    pub partition: Partition,
    /// Rows per Parquet row group.
    pub row_group_rows: usize,
    /// zstd level for Parquet (1..=22).
    pub zstd_level: i32,
    /// Replace existing files instead of failing.
    pub overwrite: bool,
    /// Show a progress bar with rows/s (when stderr is a terminal).
    pub progress: bool,
    /// Files written at once (one thread each) when the output is a folder; at least 1.
    pub threads: usize,
}

impl ExportOptions {
    /// Options exporting every series matching `selectors` in `[start, end]` to `out`, with
    /// defaults for the rest (Parquet, per-metric files, 1 Mi rows per row group, zstd 1).
    pub fn new(selectors: Vec<Vec<Matcher>>, start: i64, end: i64, out: PathBuf) -> Self {
        ExportOptions {
            selectors,
            start,
            end,
            out,
            format: ExportFormat::Parquet,
            partition: Partition::Metric,
            row_group_rows: 1 << 20,
            zstd_level: 1,
            overwrite: false,
            progress: false,
            threads: std::thread::available_parallelism().map_or(1, |n| n.get().min(4)),
        }
    }
}

/// Why an export failed.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// Reading the database failed.
    #[error("reading the database: {0}")]
    Storage(#[from] inferdb_storage::Error),
    /// Writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The Parquet writer failed.
    #[error("writing parquet: {0}")]
    Parquet(#[from] ::parquet::errors::ParquetError),
    /// Building Arrow arrays failed.
    #[error("building arrow data: {0}")]
    Arrow(#[from] arrow_schema::ArrowError),
    /// The destination exists and `overwrite` was not set.
    #[error("{0} exists (use --overwrite to replace it)")]
    Exists(PathBuf),
    /// Options that do not fit together.
    #[error("{0}")]
    Usage(String),
}

impl ExportError {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        ExportError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// What an export wrote.
#[derive(Debug, Clone, Default)]
pub struct ExportStats {
    /// Rows (samples) written.
    pub rows: u64,
    /// Series exported (a series counts once per file it appears in).
    pub series: u64,
    /// Files written, with their row counts.
    pub files: Vec<(PathBuf, u64)>,
}

/// A destination for rows; one per output file.
pub trait RowSink {
    /// Starts the rows of a series; later [`RowSink::rows`] belong to it.
    fn series(&mut self, name: &str, labels: &Labels) -> Result<(), ExportError>;
    /// Appends samples of the current series.
    fn rows(&mut self, ts: &[i64], vs: &[f64]) -> Result<(), ExportError>;
    /// Flushes and closes the output.
    fn close(self: Box<Self>) -> Result<(), ExportError>;
}

/// The column name of a label: the label name, with `label_` in front of names that would
/// clash with the fixed columns (`timestamp`, `value`).
pub fn label_column(name: &str) -> String {
    match name {
        "timestamp" | "value" => format!("label_{name}"),
        _ => name.to_string(),
    }
}

/// A file name for a metric: the name with `/`, NUL and a leading `.` replaced by `_`.
pub fn file_stem(metric: &str) -> String {
    let mut s: String = metric
        .chars()
        .map(|c| if c == '/' || c == '\0' { '_' } else { c })
        .collect();
    if s.starts_with('.') || s.is_empty() {
        s.insert(0, '_');
    }
    s
}

/// `YYYY-MM-DD` of a UTC day starting at `t` (ms).
pub fn day_string(t: i64) -> String {
    chrono::DateTime::from_timestamp_millis(t)
        .map(|d| d.format("%Y-%m-%d").to_string())
        .unwrap_or_else(|| format!("day{}", t.div_euclid(DAY_MS)))
}

/// Output file being written: the sink and where it goes.
struct OpenFile {
    sink: Box<dyn RowSink>,
    tmp: Option<PathBuf>,
    dst: PathBuf,
    rows: u64,
}

fn open_file(
    opts: &ExportOptions,
    dst: &Path,
    label_names: &[String],
) -> Result<OpenFile, ExportError> {
    if dst == Path::new("-") {
        let sink: Box<dyn RowSink> = match opts.format {
            ExportFormat::Csv => Box::new(csv::CsvSink::new(
                Box::new(std::io::BufWriter::new(std::io::stdout())),
                label_names,
            )?),
            ExportFormat::Parquet => {
                return Err(ExportError::Usage(
                    "--out - (stdout) is only for --format csv".into(),
                ))
            }
        };
        return Ok(OpenFile {
            sink,
            tmp: None,
            dst: dst.to_path_buf(),
            rows: 0,
        });
    }
    if dst.exists() && !opts.overwrite {
        return Err(ExportError::Exists(dst.to_path_buf()));
    }
    if let Some(parent) = dst.parent() {
        if !parent.as_os_str().is_empty() {
            fs::create_dir_all(parent).map_err(|e| ExportError::io(parent, e))?;
        }
    }
    let mut tmp = dst.as_os_str().to_os_string();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let f = fs::File::create(&tmp).map_err(|e| ExportError::io(&tmp, e))?;
    let sink: Box<dyn RowSink> = match opts.format {
        ExportFormat::Parquet => Box::new(parquet::ParquetSink::new(
            f,
            label_names,
            opts.row_group_rows,
            opts.zstd_level,
        )?),
        ExportFormat::Csv => Box::new(csv::CsvSink::new(
            Box::new(std::io::BufWriter::with_capacity(1 << 20, f)),
            label_names,
        )?),
    };
    Ok(OpenFile {
        sink,
        tmp: Some(tmp),
        dst: dst.to_path_buf(),
        rows: 0,
    })
}

fn close_file(f: OpenFile, stats: &mut ExportStats) -> Result<(), ExportError> {
    f.sink.close()?;
    if let Some(tmp) = &f.tmp {
        fs::rename(tmp, &f.dst).map_err(|e| ExportError::io(&f.dst, e))?;
    }
    stats.files.push((f.dst, f.rows));
    Ok(())
}

/// Writes every sample of `s` (in the querier's range) to `f`.
fn copy_series(
    name: &str,
    s: &Series,
    f: &mut OpenFile,
    ts: &mut Vec<i64>,
    vs: &mut Vec<f64>,
    pb: Option<&indicatif::ProgressBar>,
) -> Result<u64, ExportError> {
    f.sink.series(name, s.labels())?;
    let mut it = s.iter();
    let mut n = 0u64;
    loop {
        ts.clear();
        vs.clear();
        for (t, v) in it.by_ref().take(BATCH) {
            ts.push(t);
            vs.push(v);
        }
        if ts.is_empty() {
            break;
        }
        f.sink.rows(ts, vs)?;
        n += ts.len() as u64;
        if let Some(pb) = pb {
            pb.inc(ts.len() as u64);
        }
        if ts.len() < BATCH {
            break;
        }
    }
    if let Some(e) = it.take_err() {
        return Err(ExportError::Storage(e));
    }
    f.rows += n;
    Ok(n)
}

/// The series of metric `name` matching any selector, sorted by labels, each once.
fn select_metric(
    q: &inferdb_storage::Querier,
    selectors: &[Vec<Matcher>],
    name: &str,
) -> Result<Vec<Series>, ExportError> {
    let mut by: BTreeMap<Labels, Series> = BTreeMap::new();
    for sel in selectors {
        let mut ms = sel.clone();
        ms.push(Matcher::new(MatchOp::Equal, METRIC_NAME, name)?);
        for s in q.select(&ms)? {
            by.entry(s.labels().clone()).or_insert(s);
        }
    }
    Ok(by.into_values().collect())
}

fn metric_names(
    q: &inferdb_storage::Querier,
    selectors: &[Vec<Matcher>],
) -> Result<BTreeSet<String>, ExportError> {
    let mut names = BTreeSet::new();
    for sel in selectors {
        names.extend(q.label_values(METRIC_NAME, sel)?);
    }
    Ok(names)
}

fn label_union<'a>(series: impl Iterator<Item = &'a Labels>) -> Vec<String> {
    let mut names = BTreeSet::new();
    for l in series {
        for x in l.iter() {
            if x.name != METRIC_NAME && !names.contains(x.name.as_str()) {
                names.insert(x.name.clone());
            }
        }
    }
    names.into_iter().collect()
}

fn progress(opts: &ExportOptions) -> Option<indicatif::ProgressBar> {
    if !opts.progress {
        return None;
    }
    let pb = indicatif::ProgressBar::new_spinner();
    pb.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} {human_pos} rows  {per_sec}  [{elapsed_precise}]  {msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
    );
    pb.enable_steady_tick(std::time::Duration::from_millis(200));
    Some(pb)
}

/// Whether `out` names one file rather than a folder.
fn is_single_file(out: &Path, format: ExportFormat) -> bool {
    out == Path::new("-")
        || out
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case(format.extension()))
}

/// Exports the samples selected by `opts` from `db`. See the module docs for the layout.
pub fn export(db: &Db, opts: &ExportOptions) -> Result<ExportStats, ExportError> {
    if opts.start > opts.end {
        return Err(ExportError::Usage("--start is after --end".into()));
    }
    if opts.selectors.is_empty() {
        return Err(ExportError::Usage(
            "at least one --match selector is needed".into(),
        ));
    }
    let single = is_single_file(&opts.out, opts.format);
    if single && opts.partition == Partition::Day {
        return Err(ExportError::Usage(
            "--partition-by day writes a folder; --out must not end in .parquet/.csv".into(),
        ));
    }
    // Clamp the range to the data so that huge ranges (and day partitions) stay cheap.
    let (mut lo, mut hi) = (i64::MAX, i64::MIN);
    for m in db.blocks() {
        lo = lo.min(m.min_time);
        hi = hi.max(m.max_time);
    }
    let ds = db.stats();
    if ds.head_min_time <= ds.head_max_time {
        lo = lo.min(ds.head_min_time);
        hi = hi.max(ds.head_max_time);
    }
    let (start, end) = (opts.start.max(lo), opts.end.min(hi));
    let pb = progress(opts);
    let mut stats = ExportStats::default();
    let (mut ts, mut vs) = (Vec::with_capacity(BATCH), Vec::with_capacity(BATCH));
    let result = (|| -> Result<(), ExportError> {
        if single {
            let q = db.querier(opts.start, opts.end)?;
            let mut names = BTreeSet::new();
            for sel in &opts.selectors {
                names.extend(q.label_names(sel)?);
            }
            names.remove(METRIC_NAME);
            let names: Vec<String> = names.into_iter().collect();
            let mut f = open_file(opts, &opts.out, &names)?;
            for m in metric_names(&q, &opts.selectors)? {
                if let Some(pb) = &pb {
                    pb.set_message(m.clone());
                }
                for s in select_metric(&q, &opts.selectors, &m)? {
                    stats.rows += copy_series(&m, &s, &mut f, &mut ts, &mut vs, pb.as_ref())?;
                    stats.series += 1;
                }
            }
            return close_file(f, &mut stats);
        }
        if start > end {
            return Ok(());
        }
        let ranges: Vec<(i64, i64, Option<String>)> = match opts.partition {
            Partition::Metric => vec![(start, end, None)],
            Partition::Day => {
                let mut out = Vec::new();
                let mut d = start.div_euclid(DAY_MS) * DAY_MS;
                while d <= end {
                    let a = d.max(start);
                    let b = (d + DAY_MS - 1).min(end);
                    out.push((a, b, Some(format!("date={}", day_string(d)))));
                    d += DAY_MS;
                }
                out
            }
        };
        for (a, b, sub) in ranges {
            let dir = match &sub {
                Some(s) => opts.out.join(s),
                None => opts.out.clone(),
            };
            let metrics: Vec<String> = metric_names(&db.querier(a, b)?, &opts.selectors)?
                .into_iter()
                .collect();
            // Metrics are handed out one at a time to `threads` workers, each writing whole
            // files; the first error stops them all.
            let next = std::sync::atomic::AtomicUsize::new(0);
            let failed = std::sync::atomic::AtomicBool::new(false);
            let threads = opts.threads.clamp(1, metrics.len().max(1));
            let results: Vec<Result<ExportStats, ExportError>> = std::thread::scope(|sc| {
                let handles: Vec<_> = (0..threads)
                    .map(|_| {
                        sc.spawn(|| {
                            export_metrics(
                                db,
                                opts,
                                (a, b),
                                &dir,
                                &metrics,
                                &next,
                                &failed,
                                pb.as_ref(),
                            )
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| {
                        h.join().unwrap_or_else(|_| {
                            Err(ExportError::Usage("an export thread panicked".into()))
                        })
                    })
                    .collect()
            });
            let mut files = Vec::new();
            for r in results {
                let st = r?;
                stats.rows += st.rows;
                stats.series += st.series;
                files.extend(st.files);
            }
            files.sort();
            stats.files.extend(files);
        }
        Ok(())
    })();
    if let Some(pb) = pb {
        pb.finish_and_clear();
    }
    result.map(|_| stats)
}

/// One export worker: takes metrics from `metrics` (index `next`) until none is left or
/// another worker failed, writing each to `dir/<metric>.<ext>`.
#[allow(clippy::too_many_arguments)]
fn export_metrics(
    db: &Db,
    opts: &ExportOptions,
    (a, b): (i64, i64),
    dir: &Path,
    metrics: &[String],
    next: &std::sync::atomic::AtomicUsize,
    failed: &std::sync::atomic::AtomicBool,
    pb: Option<&indicatif::ProgressBar>,
) -> Result<ExportStats, ExportError> {
    use std::sync::atomic::Ordering;
    let mut stats = ExportStats::default();
    let (mut ts, mut vs) = (Vec::with_capacity(BATCH), Vec::with_capacity(BATCH));
    let r = (|| {
        let q = db.querier(a, b)?;
        loop {
            if failed.load(Ordering::Relaxed) {
                return Ok(());
            }
            let Some(m) = metrics.get(next.fetch_add(1, Ordering::Relaxed)) else {
                return Ok(());
            };
            let series = select_metric(&q, &opts.selectors, m)?;
            if series.is_empty() {
                continue;
            }
            if let Some(pb) = pb {
                pb.set_message(m.clone());
            }
            let names = label_union(series.iter().map(|s| s.labels()));
            let dst = dir.join(format!("{}.{}", file_stem(m), opts.format.extension()));
            let mut f = open_file(opts, &dst, &names)?;
            let r = (|| {
                for s in &series {
                    stats.rows += copy_series(m, s, &mut f, &mut ts, &mut vs, pb)?;
                    stats.series += 1;
                }
                Ok(())
            })();
            if let Err(e) = r {
                if let Some(t) = &f.tmp {
                    let _ = fs::remove_file(t);
                }
                return Err(e);
            }
            let tmp = f.tmp.clone();
            if let Err(e) = close_file(f, &mut stats) {
                if let Some(t) = &tmp {
                    let _ = fs::remove_file(t);
                }
                return Err(e);
            }
        }
    })();
    if r.is_err() {
        failed.store(true, Ordering::Relaxed);
    }
    r.map(|()| stats)
}

/// Writes a CSV or text line to `w`, mapping errors to [`ExportError::Io`] on `path`.
pub(crate) fn write_all(w: &mut dyn Write, buf: &[u8], path: &Path) -> Result<(), ExportError> {
    w.write_all(buf).map_err(|e| ExportError::io(path, e))
}

/// `t` (ms) as RFC 3339 UTC with seconds, for messages.
pub fn day_time(t: i64) -> String {
    chrono::DateTime::from_timestamp_millis(t)
        .map(|d| d.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string())
        .unwrap_or_else(|| t.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_days() {
        assert_eq!(label_column("value"), "label_value");
        assert_eq!(label_column("model"), "model");
        assert_eq!(file_stem("vllm:x/y"), "vllm:x_y");
        assert_eq!(file_stem(".x"), "_.x");
        assert_eq!(day_string(0), "1970-01-01");
        assert_eq!(day_string(DAY_MS * 365 + 5), "1971-01-01");
        assert!(is_single_file(
            Path::new("a/b.parquet"),
            ExportFormat::Parquet
        ));
        assert!(!is_single_file(Path::new("a/b"), ExportFormat::Parquet));
        assert!(is_single_file(Path::new("-"), ExportFormat::Csv));
    }
}
