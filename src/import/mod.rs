//! Backfilling history from OpenMetrics text files into blocks, like
//! `promtool tsdb create-blocks-from openmetrics`.
//!
//! [`import_files`] works in two phases so that nothing is half-imported:
//!
//! 1. **Parse and validate** every file completely (memory-mapped, parsed with
//!    [`crate::scrape::exposition`]). Each sample must carry a timestamp and valid labels; the
//!    samples are encoded straight into compressed chunks, one run per series and block range
//!    (2 h by default, aligned to multiples of the block duration since the epoch). Problems
//!    are collected with file and line number; if there is any, the import stops here and
//!    nothing is written.
//! 2. **Write** one block per block range into a staging folder `<data>/import-<id>.tmp`
//!    through the storage crate's [`BlockWriter`], then rename every finished block into the
//!    data folder. A crash before the renames leaves only the staging folder, which the next
//!    open of the database removes.
//!
//! Imported blocks may overlap the head or other blocks; the querier merges overlapping data.
//! The database's lock is held while writing, so a running `inferdb serve` on the same folder
//! makes the import fail with a clear error (stop it first; it picks the blocks up on restart).

use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::path::{Path, PathBuf};

use inferdb_storage::block::{BlockMeta, BlockWriter};
use inferdb_storage::chunk::{self, ChunkWriter};
use inferdb_storage::{Db, Label, Labels, Options};

use crate::scrape::exposition::{Entry, Format, Parser};

/// Files at least this large get a progress bar (when stderr is a terminal).
pub const PROGRESS_MIN_BYTES: u64 = 4 << 20;

/// At most this many problems are collected before validation stops.
pub const MAX_REPORTED_PROBLEMS: usize = 20;

/// Import options.
#[derive(Debug, Clone)]
pub struct ImportOptions {
    /// Only parse and validate; write nothing.
    pub dry_run: bool,
    /// Block range in milliseconds (default 2 h); blocks are aligned to multiples of it.
    pub block_duration_ms: i64,
    /// Show progress bars for large files.
    pub progress: bool,
    /// The text format of the files (OpenMetrics by default; Prometheus text 0.0.4 with
    /// integer millisecond timestamps also works).
    pub format: Format,
}

impl Default for ImportOptions {
    fn default() -> Self {
        ImportOptions {
            dry_run: false,
            block_duration_ms: 2 * 3600 * 1000,
            progress: true,
            format: Format::OpenMetrics,
        }
    }
}

/// One problem found in an input file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The file.
    pub file: PathBuf,
    /// 1-based line number (0 when the problem concerns the whole file).
    pub line: usize,
    /// What was wrong.
    pub reason: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}", self.file.display(), self.reason)
        } else {
            write!(f, "{}:{}: {}", self.file.display(), self.line, self.reason)
        }
    }
}

/// Why an import failed.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// The input had problems; nothing was imported.
    #[error("{} problem(s) in the input, nothing imported; first: {}", .0.len(), .0.first().map(|p| p.to_string()).unwrap_or_default())]
    Invalid(Vec<Problem>),
    /// A file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The storage layer failed while writing blocks; nothing was imported.
    #[error("writing blocks: {0}")]
    Storage(#[from] inferdb_storage::Error),
}

/// What an import (or a dry run) found and did.
#[derive(Debug, Clone, Default)]
pub struct ImportStats {
    /// Files read.
    pub files: usize,
    /// Bytes read.
    pub bytes: u64,
    /// Sample lines read.
    pub samples: u64,
    /// Samples that repeated an earlier (timestamp, value) of their series and were dropped.
    pub duplicates: u64,
    /// Distinct series.
    pub series: usize,
    /// Oldest sample (ms), `i64::MAX` when none.
    pub min_time: i64,
    /// Newest sample (ms), `i64::MIN` when none.
    pub max_time: i64,
    /// Block ranges the samples fall into.
    pub block_ranges: usize,
    /// The blocks written (empty on a dry run).
    pub blocks: Vec<BlockMeta>,
}

/// One series being accumulated.
struct Acc {
    labels: Labels,
    /// Finished chunks with their block-range index, in time order unless `loose` is used.
    done: Vec<(i64, Vec<u8>)>,
    cur: ChunkWriter,
    cur_range: i64,
    last: Option<(i64, f64)>,
    /// Samples that came out of time order; merged at the end.
    loose: Vec<(i64, f64)>,
}

impl Acc {
    fn new(labels: Labels) -> Self {
        Acc {
            labels,
            done: Vec::new(),
            cur: ChunkWriter::new(),
            cur_range: i64::MIN,
            last: None,
            loose: Vec::new(),
        }
    }

    fn cut(&mut self) {
        if !self.cur.is_empty() {
            let c = std::mem::take(&mut self.cur);
            self.done.push((self.cur_range, c.finish()));
        }
    }

    /// Adds a sample; `Err` with a reason for a conflicting duplicate, `Ok(false)` for an
    /// exact duplicate that was dropped.
    fn add(&mut self, t: i64, v: f64, bd: i64) -> Result<bool, String> {
        if let Some((lt, lv)) = self.last {
            if t == lt {
                if lv.to_bits() == v.to_bits() {
                    return Ok(false);
                }
                return Err(format!(
                    "duplicate sample for timestamp {t} with a different value ({lv} then {v})"
                ));
            }
            if t < lt {
                self.loose.push((t, v));
                return Ok(true);
            }
        }
        let r = t.div_euclid(bd);
        if r != self.cur_range || self.cur.len() >= chunk::MAX_SAMPLES_PER_CHUNK {
            self.cut();
            self.cur_range = r;
        }
        self.cur.append(t, v);
        self.last = Some((t, v));
        Ok(true)
    }

    /// Finishes the open chunk and, when samples came out of order, re-sorts everything.
    /// Returns a reason when two samples share a timestamp with different values.
    fn finish(&mut self, bd: i64) -> Result<u64, String> {
        self.cut();
        if self.loose.is_empty() {
            return Ok(0);
        }
        let mut all = std::mem::take(&mut self.loose);
        for (_, c) in &self.done {
            let mut it = chunk::decode(c).map_err(|e| e.to_string())?;
            all.extend(it.by_ref());
            if let Some(e) = it.err() {
                return Err(e.to_string());
            }
        }
        all.sort_by_key(|x| x.0);
        let mut dups = 0;
        let mut out: Vec<(i64, f64)> = Vec::with_capacity(all.len());
        for (t, v) in all {
            if let Some(&(lt, lv)) = out.last() {
                if lt == t {
                    if lv.to_bits() != v.to_bits() {
                        return Err(format!(
                            "duplicate sample for timestamp {t} with a different value ({lv} and {v})"
                        ));
                    }
                    dups += 1;
                    continue;
                }
            }
            out.push((t, v));
        }
        self.done.clear();
        self.last = None;
        self.cur_range = i64::MIN;
        for (t, v) in out {
            self.add(t, v, bd)?;
        }
        self.cut();
        Ok(dups)
    }
}

/// Everything parsed from the input, ready to be written.
struct Parsed {
    series: Vec<Acc>,
    stats: ImportStats,
}

fn progress_bar(len: u64, name: &str) -> indicatif::ProgressBar {
    let pb = indicatif::ProgressBar::new(len);
    pb.set_style(
        indicatif::ProgressStyle::with_template(
            "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    pb.set_message(name.to_string());
    pb
}

fn parse_all(files: &[PathBuf], opts: &ImportOptions) -> Result<Parsed, ImportError> {
    let bd = opts.block_duration_ms.max(1);
    let mut stats = ImportStats {
        min_time: i64::MAX,
        max_time: i64::MIN,
        ..Default::default()
    };
    let mut series: Vec<Acc> = Vec::new();
    let mut by_text: HashMap<Box<str>, usize> = HashMap::new();
    let mut by_labels: HashMap<Labels, usize> = HashMap::new();
    let mut problems: Vec<Problem> = Vec::new();
    let mut pairs: Vec<Label> = Vec::new();

    'files: for path in files {
        let f = fs::File::open(path).map_err(|e| ImportError::Io {
            path: path.clone(),
            source: e,
        })?;
        let len = f
            .metadata()
            .map_err(|e| ImportError::Io {
                path: path.clone(),
                source: e,
            })?
            .len();
        stats.files += 1;
        stats.bytes += len;
        if len == 0 {
            problems.push(Problem {
                file: path.clone(),
                line: 0,
                reason: "empty file".into(),
            });
            continue;
        }
        // SAFETY: the file is only read; a concurrent writer could change the bytes under us,
        // which would at worst produce parse errors (the text is validated as UTF-8 below).
        let map = unsafe { memmap2::Mmap::map(&f) }.map_err(|e| ImportError::Io {
            path: path.clone(),
            source: e,
        })?;
        let text = match std::str::from_utf8(&map) {
            Ok(t) => t,
            Err(e) => {
                let line = map[..e.valid_up_to()]
                    .iter()
                    .filter(|&&b| b == b'\n')
                    .count()
                    + 1;
                problems.push(Problem {
                    file: path.clone(),
                    line,
                    reason: "invalid UTF-8".into(),
                });
                continue;
            }
        };
        let pb = (opts.progress && len >= PROGRESS_MIN_BYTES)
            .then(|| progress_bar(len, &path.display().to_string()));
        let base = text.as_ptr() as usize;
        let mut line_hint = 0usize;
        let mut n = 0u64;
        for item in Parser::new(text, opts.format) {
            n += 1;
            let s = match item {
                Ok(Entry::Sample(s)) => s,
                Ok(_) => continue,
                Err(e) => {
                    problems.push(Problem {
                        file: path.clone(),
                        line: e.line,
                        reason: e.reason,
                    });
                    if problems.len() >= MAX_REPORTED_PROBLEMS {
                        break 'files;
                    }
                    continue;
                }
            };
            let off = s.series_text.as_ptr() as usize - base;
            if let Some(pb) = &pb {
                if n & 0xffff == 0 {
                    pb.set_position(off as u64);
                }
            }
            // The line number is only needed for problems; count newlines lazily.
            let line_of = |hint: &mut usize| -> usize {
                let l = text.as_bytes()[..off]
                    .iter()
                    .filter(|&&b| b == b'\n')
                    .count()
                    + 1;
                *hint = l;
                l
            };
            let Some(t) = s.timestamp_ms else {
                let line = line_of(&mut line_hint);
                problems.push(Problem {
                    file: path.clone(),
                    line,
                    reason: format!("sample {} has no timestamp", s.series_text),
                });
                if problems.len() >= MAX_REPORTED_PROBLEMS {
                    break 'files;
                }
                continue;
            };
            stats.samples += 1;
            let idx = match by_text.get(s.series_text) {
                Some(&i) => i,
                None => {
                    pairs.clear();
                    pairs.push(Label::new(
                        inferdb_storage::labels::METRIC_NAME,
                        s.name.as_ref(),
                    ));
                    for (k, v) in s.labels.iter() {
                        pairs.push(Label::new(k.as_ref(), v.as_ref()));
                    }
                    let labels = Labels::new(pairs.clone());
                    if let Err(e) = labels.validate() {
                        let line = line_of(&mut line_hint);
                        problems.push(Problem {
                            file: path.clone(),
                            line,
                            reason: e.to_string(),
                        });
                        if problems.len() >= MAX_REPORTED_PROBLEMS {
                            break 'files;
                        }
                        continue;
                    }
                    let i = match by_labels.get(&labels) {
                        Some(&i) => i,
                        None => {
                            let i = series.len();
                            by_labels.insert(labels.clone(), i);
                            series.push(Acc::new(labels));
                            i
                        }
                    };
                    by_text.insert(s.series_text.into(), i);
                    i
                }
            };
            match series[idx].add(t, s.value, bd) {
                Ok(true) => {
                    stats.min_time = stats.min_time.min(t);
                    stats.max_time = stats.max_time.max(t);
                }
                Ok(false) => stats.duplicates += 1,
                Err(reason) => {
                    let line = line_of(&mut line_hint);
                    problems.push(Problem {
                        file: path.clone(),
                        line,
                        reason,
                    });
                    if problems.len() >= MAX_REPORTED_PROBLEMS {
                        break 'files;
                    }
                }
            }
        }
        if let Some(pb) = pb {
            pb.finish_and_clear();
        }
    }
    if problems.is_empty() {
        for a in &mut series {
            match a.finish(bd) {
                Ok(d) => stats.duplicates += d,
                Err(reason) => problems.push(Problem {
                    file: PathBuf::from("<all files>"),
                    line: 0,
                    reason: format!("series {}: {reason}", a.labels),
                }),
            }
        }
    }
    if !problems.is_empty() {
        return Err(ImportError::Invalid(problems));
    }
    stats.series = series.len();
    let ranges: BTreeSet<i64> = series
        .iter()
        .flat_map(|a| a.done.iter().map(|(r, _)| *r))
        .collect();
    stats.block_ranges = ranges.len();
    Ok(Parsed { series, stats })
}

/// Parses and validates `files` without writing anything (`--dry-run`).
pub fn validate_files(files: &[PathBuf], opts: &ImportOptions) -> Result<ImportStats, ImportError> {
    Ok(parse_all(files, opts)?.stats)
}

/// Imports `files` into the database folder `data_dir` (created if missing). See the module
/// docs. On a dry run nothing is written and the data folder is not touched.
pub fn import_files(
    data_dir: &Path,
    files: &[PathBuf],
    opts: &ImportOptions,
) -> Result<ImportStats, ImportError> {
    let mut parsed = parse_all(files, opts)?;
    if opts.dry_run || parsed.series.is_empty() {
        return Ok(parsed.stats);
    }
    // Hold the database's lock (and let it clean up leftovers of an earlier crash).
    let db = Db::open(
        data_dir,
        Options {
            background: false,
            retention_ms: None,
            ..Options::default()
        },
    )?;
    let metas = write_blocks(data_dir, &mut parsed.series, opts.block_duration_ms.max(1));
    let close = db.close();
    parsed.stats.blocks = metas?;
    close?;
    Ok(parsed.stats)
}

fn write_blocks(
    data_dir: &Path,
    series: &mut [Acc],
    bd: i64,
) -> Result<Vec<BlockMeta>, ImportError> {
    series.sort_by(|a, b| a.labels.cmp(&b.labels));
    let ranges: BTreeSet<i64> = series
        .iter()
        .flat_map(|a| a.done.iter().map(|(r, _)| *r))
        .collect();
    let staging = data_dir.join(format!(
        "import-{}{}",
        inferdb_storage::block::new_block_id(),
        inferdb_storage::block::TMP_SUFFIX
    ));
    let result = (|| -> Result<Vec<BlockMeta>, ImportError> {
        fs::create_dir_all(&staging).map_err(|e| ImportError::Io {
            path: staging.clone(),
            source: e,
        })?;
        let mut cursors = vec![0usize; series.len()];
        let mut metas = Vec::new();
        for r in ranges {
            let mut w = BlockWriter::new(&staging)?;
            for (a, cur) in series.iter().zip(cursors.iter_mut()) {
                let lo = *cur;
                let mut hi = lo;
                while hi < a.done.len() && a.done[hi].0 == r {
                    hi += 1;
                }
                if hi == lo {
                    continue;
                }
                *cur = hi;
                if let Err(e) = w.add_series(
                    a.labels.clone(),
                    a.done[lo..hi].iter().map(|(_, c)| c.as_slice()),
                ) {
                    w.abort();
                    return Err(e.into());
                }
            }
            metas.push(w.finish(r * bd, r * bd + bd, 1, None)?);
        }
        // Everything is written and fsynced: move the blocks in.
        for m in &metas {
            let from = staging.join(&m.id);
            let to = data_dir.join(&m.id);
            fs::rename(&from, &to).map_err(|e| ImportError::Io {
                path: to.clone(),
                source: e,
            })?;
        }
        fs::File::open(data_dir)
            .and_then(|f| f.sync_all())
            .map_err(|e| ImportError::Io {
                path: data_dir.to_path_buf(),
                source: e,
            })?;
        Ok(metas)
    })();
    let _ = fs::remove_dir_all(&staging);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_order_samples_are_sorted_and_split_by_range() {
        let mut a = Acc::new(Labels::from_pairs([("__name__", "x")]));
        let bd = 1000;
        for t in [5, 1500, 3, 999, 1000, 2500] {
            assert!(a.add(t, t as f64, bd).is_ok());
        }
        assert_eq!(a.finish(bd), Ok(0));
        let ranges: Vec<i64> = a.done.iter().map(|(r, _)| *r).collect();
        assert_eq!(ranges, vec![0, 1, 2]);
        let first: Vec<(i64, f64)> = chunk::decode(&a.done[0].1).unwrap().collect();
        assert_eq!(first, vec![(3, 3.0), (5, 5.0), (999, 999.0)]);
    }

    #[test]
    fn conflicting_duplicate_is_an_error() {
        let mut a = Acc::new(Labels::from_pairs([("__name__", "x")]));
        assert_eq!(a.add(10, 1.0, 1000), Ok(true));
        assert_eq!(a.add(10, 1.0, 1000), Ok(false));
        assert!(a.add(10, 2.0, 1000).is_err());
    }
}
