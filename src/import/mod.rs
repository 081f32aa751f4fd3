//! Backfilling history from OpenMetrics text files into blocks, like
//! `promtool tsdb create-blocks-from openmetrics`.
//!
//! [`import_files`] streams: memory stays bounded whatever the size of the input (it grows
//! with the number of series, not of samples), and nothing is half-imported.
//!
//! 1. **Parse pass.** Every file is read once (memory-mapped, parsed with
//!    [`crate::model::exposition`]). Each sample must carry a timestamp and valid labels and
//!    must not repeat the previous sample's timestamp with another value; problems are
//!    collected with file and line number. Samples are encoded straight into compressed
//!    chunks, one open chunk per series, cut at 120 samples and at block-range boundaries
//!    (2 h by default, aligned to multiples of the block duration since the epoch). Finished
//!    chunks go to a [`spill::Spill`]: a bounded buffer per block range, appended to one file
//!    per range in the staging folder `<data>/import-<id>.tmp` when the buffer is full.
//!    A sample older than its series' previous one starts a new chunk.
//! 2. **Write pass** (only when the parse pass found no problem). For each block range, its
//!    chunks are read back and grouped by series; chunks of a series that overlap in time
//!    (out-of-order input) are decoded, merged, checked for conflicting duplicates and
//!    encoded again. Each range becomes one block, written into the staging folder through
//!    the storage crate's [`BlockWriter`] (fsynced). Only when every block is written are they
//!    renamed into the data folder. A crash before the renames leaves only the staging
//!    folder, which the next open of the database removes.
//!
//! Memory: the series' labels and open chunks, the spill buffer
//! ([`ImportOptions::spill_buffer_bytes`], 32 MiB by default) and, while a block is written,
//! that block range's chunks. A dry run spills into the system's temporary folder.
//!
//! Imported blocks may overlap the head or other blocks; the querier merges overlapping data.
//! The database's lock is held while importing, so a running `inferdb serve` on the same folder
//! makes the import fail with a clear error (stop it first; it picks the blocks up on restart).

pub mod spill;

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use inferdb_storage::block::{BlockMeta, BlockWriter};
use inferdb_storage::chunk::{self, ChunkWriter};
use inferdb_storage::{Db, Label, Labels, Options};

use crate::model::exposition::{Entry, Format, Parser};

use spill::Spill;

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
    /// Bytes of finished chunks buffered in memory before they are written to the staging
    /// folder's spill files.
    pub spill_buffer_bytes: usize,
    /// Accept timestamps that are plausibly milliseconds given as seconds (the year 5138 and
    /// later, see [`crate::model::time::plausibly_milliseconds`]); refused by default.
    pub allow_far_future: bool,
}

impl Default for ImportOptions {
    fn default() -> Self {
        ImportOptions {
            dry_run: false,
            block_duration_ms: 2 * 3600 * 1000,
            progress: true,
            format: Format::OpenMetrics,
            spill_buffer_bytes: spill::DEFAULT_BUFFER_BYTES,
            allow_far_future: false,
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

/// One series of the input.
struct SeriesState {
    labels: Labels,
    /// The open chunk (samples in increasing time order).
    cur: ChunkWriter,
    cur_range: i64,
    /// The last sample appended, `None` before the first.
    last: Option<(i64, f64)>,
}

impl SeriesState {
    fn new(labels: Labels) -> Self {
        SeriesState {
            labels,
            cur: ChunkWriter::new(),
            cur_range: i64::MIN,
            last: None,
        }
    }

    /// Hands the open chunk to the spill store.
    fn cut(&mut self, idx: u32, spill: &mut Spill) -> std::io::Result<()> {
        if self.cur.is_empty() {
            return Ok(());
        }
        let bytes = self.cur.finish();
        spill.push(
            self.cur_range,
            idx,
            self.cur.min_time(),
            self.cur.max_time(),
            &bytes,
        )?;
        self.cur = ChunkWriter::new();
        Ok(())
    }

    /// Adds a sample: `Ok(false)` for an exact repeat of the previous sample (dropped), `Err`
    /// with a reason when the previous sample has the same timestamp and another value. A
    /// sample older than the previous one starts a new chunk; overlapping chunks are merged
    /// when their block is written.
    fn add(
        &mut self,
        idx: u32,
        t: i64,
        v: f64,
        bd: i64,
        spill: &mut Spill,
    ) -> Result<bool, AddError> {
        if let Some((lt, lv)) = self.last {
            if t == lt {
                if lv.to_bits() == v.to_bits() {
                    return Ok(false);
                }
                return Err(AddError::Conflict(format!(
                    "duplicate sample for timestamp {t} with a different value ({lv} then {v})"
                )));
            }
            if t < lt {
                self.cut(idx, spill)?;
            }
        }
        let r = t.div_euclid(bd);
        if r != self.cur_range || self.cur.len() >= chunk::MAX_SAMPLES_PER_CHUNK {
            self.cut(idx, spill)?;
            self.cur_range = r;
        }
        self.cur.append(t, v);
        self.last = Some((t, v));
        Ok(true)
    }
}

enum AddError {
    Conflict(String),
    Io(std::io::Error),
}

impl From<std::io::Error> for AddError {
    fn from(e: std::io::Error) -> Self {
        AddError::Io(e)
    }
}

/// How far (bytes) the parser gets ahead of the pages of the input handed back.
const RELEASE_STEP: usize = 64 << 20;

/// Drops the mapped pages of `map[from..to]` from this process (they are read again from the
/// file, unchanged, if touched later), so that the resident memory of an import does not grow
/// with the size of its input.
#[allow(unsafe_code)] // madvise(MADV_DONTNEED) on the input's map
fn release(map: &memmap2::Mmap, from: usize, to: usize) {
    #[cfg(unix)]
    if to > from {
        // SAFETY: the mapping is a read-only private mapping of a file; MADV_DONTNEED only
        // discards our copies of its pages, and a later access reads the same bytes from the
        // file again. No reference into the range is invalidated.
        let _ = unsafe {
            map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, from, to - from)
        };
    }
    #[cfg(not(unix))]
    let _ = (map, from, to);
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

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> ImportError + '_ {
    move |e| ImportError::Io {
        path: path.to_path_buf(),
        source: e,
    }
}

/// Result of the parse pass: every series, the chunks in the spill store, the statistics.
struct Parsed {
    series: Vec<SeriesState>,
    spill: Spill,
    stats: ImportStats,
}

/// State of the parse pass over all files.
struct Pass {
    bd: i64,
    allow_far_future: bool,
    stats: ImportStats,
    series: Vec<SeriesState>,
    by_text: HashMap<Box<str>, u32>,
    by_labels: HashMap<Labels, u32>,
    problems: Vec<Problem>,
    pairs: Vec<Label>,
    spill: Spill,
}

/// Why the parse pass stops early.
enum Stop {
    /// Enough problems collected.
    Problems,
    /// Writing the spill failed.
    Io(std::io::Error),
}

impl Pass {
    /// Records a problem; `Err` once enough are collected.
    fn problem(&mut self, file: &Path, line: usize, reason: String) -> Result<(), Stop> {
        self.problems.push(Problem {
            file: file.to_path_buf(),
            line,
            reason,
        });
        if self.problems.len() >= MAX_REPORTED_PROBLEMS {
            return Err(Stop::Problems);
        }
        Ok(())
    }

    /// The series of a fully parsed sample (`series_text` as in the input); `None` after
    /// recording a problem with its labels.
    fn series_of(
        &mut self,
        s: &crate::model::exposition::Sample<'_>,
        series_text: &str,
        file: &Path,
        line: usize,
    ) -> Result<Option<u32>, Stop> {
        if let Some(&i) = self.by_text.get(series_text) {
            return Ok(Some(i));
        }
        self.pairs.clear();
        self.pairs.push(Label::new(
            inferdb_storage::labels::METRIC_NAME,
            s.name.as_ref(),
        ));
        for (k, v) in s.labels.iter() {
            self.pairs.push(Label::new(k.as_ref(), v.as_ref()));
        }
        let labels = Labels::new(self.pairs.clone());
        if let Err(e) = labels.validate() {
            self.problem(file, line, e.to_string())?;
            return Ok(None);
        }
        let i = match self.by_labels.get(&labels) {
            Some(&i) => i,
            None => {
                let Ok(i) = u32::try_from(self.series.len()) else {
                    self.problem(file, line, "more than 2^32 series".into())?;
                    return Err(Stop::Problems);
                };
                self.by_labels.insert(labels.clone(), i);
                self.series.push(SeriesState::new(labels));
                i
            }
        };
        self.by_text.insert(series_text.into(), i);
        Ok(Some(i))
    }

    /// Adds one sample of series `idx`.
    fn sample(&mut self, idx: u32, t: i64, v: f64, file: &Path, line: usize) -> Result<(), Stop> {
        self.stats.samples += 1;
        if !self.allow_far_future && crate::model::time::plausibly_milliseconds(t) {
            return self.problem(
                file,
                line,
                format!(
                    "timestamp {} is the year {}: plausibly milliseconds where seconds are \
                     expected (OpenMetrics timestamps are seconds); give --allow-far-future to \
                     import it as it is",
                    crate::api::json::format_timestamp(t),
                    chrono::DateTime::from_timestamp_millis(t).map_or_else(
                        || "?".to_string(),
                        |d| chrono::Datelike::year(&d).to_string()
                    )
                ),
            );
        }
        match self.series[idx as usize].add(idx, t, v, self.bd, &mut self.spill) {
            Ok(true) => {
                self.stats.min_time = self.stats.min_time.min(t);
                self.stats.max_time = self.stats.max_time.max(t);
                Ok(())
            }
            Ok(false) => {
                self.stats.duplicates += 1;
                Ok(())
            }
            Err(AddError::Conflict(reason)) => self.problem(file, line, reason),
            Err(AddError::Io(e)) => Err(Stop::Io(e)),
        }
    }
}

/// Value and timestamp of the rest of a sample line after its series text and one space,
/// when it is exactly `VALUE TIMESTAMP` as the exposition parser reads it; `None` for
/// anything else (then the line goes through the full parser, which gives the same sample
/// or the error).
fn fast_value_ts(rest: &str, format: Format) -> Option<(i64, f64)> {
    let sp = rest.find(' ')?;
    let (vtok, ttok) = (&rest[..sp], &rest[sp + 1..]);
    if vtok.is_empty() || ttok.is_empty() || vtok.contains('\t') || ttok.contains([' ', '\t']) {
        return None;
    }
    let v = crate::model::exposition::parse_value(vtok)?;
    let t = match format {
        // digits only, as the exposition parser (and Prometheus) read text timestamps
        Format::PromText if ttok.bytes().all(|c| c.is_ascii_digit()) => ttok.parse::<i64>().ok()?,
        Format::PromText => return None,
        Format::OpenMetrics => {
            let f = crate::model::exposition::parse_value(ttok)?;
            if !f.is_finite() {
                return None;
            }
            (f * 1000.0).round() as i64
        }
    };
    Some((t, v))
}

/// Parses one line with the full exposition parser, in the context of the family's `# TYPE`
/// line (which decides how `le` and `quantile` values are normalised). Returns the entries.
fn parse_line<'m>(
    mini: &'m mut String,
    type_line: Option<&str>,
    line: &str,
    format: Format,
) -> Vec<Result<Entry<'m>, crate::model::exposition::ParseError>> {
    mini.clear();
    if let Some(t) = type_line {
        mini.push_str(t);
        mini.push('\n');
    }
    mini.push_str(line);
    mini.push('\n');
    if format == Format::OpenMetrics {
        mini.push_str("# EOF\n");
    }
    let skip = usize::from(type_line.is_some());
    let m: &'m String = mini;
    Parser::new(m, format).skip(skip).collect()
}

/// The parse pass: reads every file once, validates each sample and streams finished chunks
/// into `spill`. Problems are collected (at most [`MAX_REPORTED_PROBLEMS`]).
///
/// Lines are split here. A sample line that starts with the previous sample's series text
/// followed by ` VALUE TIMESTAMP` takes a fast path (the series and its labels were validated
/// on its first line); every other line (comments, a new series, anything unusual) goes
/// through [`crate::model::exposition::Parser`] with its family's `# TYPE` line, which
/// gives the sample or the error. `# EOF` and what may follow it are checked here as the
/// parser does.
#[allow(unsafe_code)] // the input files are memory-mapped
fn parse_all(files: &[PathBuf], opts: &ImportOptions, spill: Spill) -> Result<Parsed, ImportError> {
    let spill_dir = spill.dir().to_path_buf();
    let mut pass = Pass {
        bd: opts.block_duration_ms.max(1),
        allow_far_future: opts.allow_far_future,
        stats: ImportStats {
            min_time: i64::MAX,
            max_time: i64::MIN,
            ..Default::default()
        },
        series: Vec::new(),
        by_text: HashMap::new(),
        by_labels: HashMap::new(),
        problems: Vec::new(),
        pairs: Vec::new(),
        spill,
    };
    let format = opts.format;
    let mut mini = String::new();
    for path in files {
        let f = fs::File::open(path).map_err(io_err(path))?;
        let len = f.metadata().map_err(io_err(path))?.len();
        pass.stats.files += 1;
        pass.stats.bytes += len;
        if len == 0 {
            match pass.problem(path, 0, "empty file".into()) {
                Ok(()) => continue,
                Err(_) => break,
            }
        }
        // SAFETY: Rust requires the bytes of a borrowed map not to change while borrowed. We
        // take that invariant the way ripgrep does for its memory maps (`MmapChoice::auto`):
        // an import reads history files that nothing writes meanwhile, and the file is opened
        // read-only and mapped privately, so this process never changes them. What this code
        // does not rely on: the text being valid UTF-8 as a whole (each line is checked just
        // before it is parsed, so bytes that differ from a first look cannot make an invalid
        // `&str`), and pages staying resident (`release` drops them; a later access reads the
        // file again).
        let map = unsafe { memmap2::Mmap::map(&f) }.map_err(io_err(path))?;
        #[cfg(unix)]
        let _ = map.advise(memmap2::Advice::Sequential);
        let pb = (opts.progress && len >= PROGRESS_MIN_BYTES)
            .then(|| progress_bar(len, &path.display().to_string()));
        let r = parse_text(&mut pass, &mut mini, path, &map, format, pb.as_ref());
        if let Some(pb) = pb {
            pb.finish_and_clear();
        }
        match r {
            Ok(()) => {}
            Err(Stop::Problems) => break,
            Err(Stop::Io(e)) => {
                return Err(ImportError::Io {
                    path: spill_dir,
                    source: e,
                })
            }
        }
    }
    if !pass.problems.is_empty() {
        return Err(ImportError::Invalid(pass.problems));
    }
    for (i, s) in pass.series.iter_mut().enumerate() {
        s.cut(i as u32, &mut pass.spill)
            .map_err(io_err(&spill_dir))?;
    }
    pass.stats.series = pass.series.len();
    pass.stats.block_ranges = pass.spill.ranges().len();
    Ok(Parsed {
        series: pass.series,
        spill: pass.spill,
        stats: pass.stats,
    })
}

/// Parses one file's text (see [`parse_all`]), line by line; a line that is not UTF-8 is a
/// problem of that line.
fn parse_text(
    pass: &mut Pass,
    mini: &mut String,
    path: &Path,
    map: &memmap2::Mmap,
    format: Format,
    pb: Option<&indicatif::ProgressBar>,
) -> Result<(), Stop> {
    let bytes: &[u8] = map;
    let mut pos = 0usize;
    let mut lineno = 0usize;
    let mut released = 0usize;
    let mut type_line: Option<&str> = None;
    let mut eof_seen = false;
    // the series of the previous sample line: its text in the input and its index
    let mut prev: Option<(&str, u32)> = None;
    while pos < bytes.len() {
        let end = memchr::memchr(b'\n', &bytes[pos..]).map_or(bytes.len(), |i| pos + i);
        let raw = std::str::from_utf8(&bytes[pos..end]);
        pos = if end < bytes.len() { end + 1 } else { end };
        lineno += 1;
        let Ok(raw) = raw else {
            pass.problem(path, lineno, "invalid UTF-8".into())?;
            continue;
        };
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        if lineno & 0xffff == 0 {
            if let Some(pb) = pb {
                pb.set_position(pos as u64);
            }
            // Pages of the file behind the parser are handed back as it goes.
            if pos >= released + 2 * RELEASE_STEP {
                release(map, released, pos - RELEASE_STEP);
                released = pos - RELEASE_STEP;
            }
        }
        if let Some((p, idx)) = prev {
            if let Some(rest) = line.strip_prefix(p).and_then(|r| r.strip_prefix(' ')) {
                if !eof_seen {
                    if let Some((t, v)) = fast_value_ts(rest, format) {
                        pass.sample(idx, t, v, path, lineno)?;
                        continue;
                    }
                }
            }
        }
        if eof_seen {
            if line.trim().is_empty() && pos >= bytes.len() {
                continue;
            }
            return pass.problem(path, lineno, "unexpected data after # EOF".into());
        }
        if line.trim().is_empty() {
            continue;
        }
        if let Some(body) = line.strip_prefix('#') {
            if (format == Format::OpenMetrics && body == " EOF")
                || (format == Format::PromText && body.trim() == "EOF")
            {
                eof_seen = true;
                continue;
            }
            for e in parse_line(mini, None, line, format) {
                match e {
                    Ok(Entry::Type { .. }) => type_line = Some(line),
                    Ok(_) => {}
                    Err(e) => pass.problem(path, lineno, e.reason)?,
                }
            }
            continue;
        }
        let body = line.trim_start_matches([' ', '\t']);
        prev = None;
        for e in parse_line(mini, type_line, body, format) {
            let s = match e {
                Ok(Entry::Sample(s)) => s,
                Ok(_) => continue,
                Err(e) => {
                    pass.problem(path, lineno, e.reason)?;
                    continue;
                }
            };
            let Some(t) = s.timestamp_ms else {
                pass.problem(
                    path,
                    lineno,
                    format!("sample {} has no timestamp", s.series_text),
                )?;
                continue;
            };
            let series_text = &body[..s.series_text.len()];
            let Some(idx) = pass.series_of(&s, series_text, path, lineno)? else {
                continue;
            };
            prev = Some((series_text, idx));
            pass.sample(idx, t, s.value, path, lineno)?;
        }
    }
    if format == Format::OpenMetrics && !eof_seen {
        pass.problem(path, lineno, "data does not end with # EOF".into())?;
    }
    Ok(())
}

/// The chunks of one series in one block range, time-ordered and without overlaps: the
/// spilled chunks as they are when they do not overlap, else decoded, merged (exact repeats
/// dropped and counted in `dups`) and encoded again into `owned`.
fn series_chunks<'a>(
    data: &'a [u8],
    recs: &[spill::Rec],
    owned: &'a mut Vec<Vec<u8>>,
    dups: &mut u64,
) -> Result<Vec<&'a [u8]>, String> {
    let overlap = recs.windows(2).any(|w| w[1].min_time <= w[0].max_time);
    if !overlap {
        return Ok(recs.iter().map(|r| &data[r.off..r.off + r.len]).collect());
    }
    let mut all: Vec<(i64, f64)> = Vec::new();
    for r in recs {
        let mut it = chunk::decode(&data[r.off..r.off + r.len]).map_err(|e| e.to_string())?;
        all.extend(it.by_ref());
        if let Some(e) = it.take_err() {
            return Err(e.to_string());
        }
    }
    // stable: equal timestamps keep their input order
    all.sort_by_key(|x| x.0);
    owned.clear();
    let mut w = ChunkWriter::new();
    let mut last: Option<(i64, f64)> = None;
    for (t, v) in all {
        if let Some((lt, lv)) = last {
            if lt == t {
                if lv.to_bits() != v.to_bits() {
                    return Err(format!(
                        "duplicate sample for timestamp {t} with a different value ({lv} and {v})"
                    ));
                }
                *dups += 1;
                continue;
            }
        }
        if w.len() >= chunk::MAX_SAMPLES_PER_CHUNK {
            owned.push(w.finish());
            w = ChunkWriter::new();
        }
        w.append(t, v);
        last = Some((t, v));
    }
    if !w.is_empty() {
        owned.push(w.finish());
    }
    Ok(owned.iter().map(Vec::as_slice).collect())
}

/// The write pass: one block per block range into `staging` (or, with `staging` `None`, only
/// the checks of merged chunks). Conflicting duplicates found here are problems; after the
/// first one nothing more is written.
fn write_ranges(
    parsed: &mut Parsed,
    bd: i64,
    staging: Option<&Path>,
) -> Result<Vec<BlockMeta>, ImportError> {
    let mut metas = Vec::new();
    let mut problems = Vec::new();
    let mut owned: Vec<Vec<u8>> = Vec::new();
    let spill_dir = parsed.spill.dir().to_path_buf();
    for r in parsed.spill.ranges() {
        let data = parsed.spill.take(r).map_err(io_err(&spill_dir))?;
        let mut recs = spill::records(&data).map_err(|e| ImportError::Io {
            path: spill_dir.clone(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
        })?;
        recs.sort_by_key(|c| (c.series, c.min_time));
        let mut w = match staging {
            Some(dir) if problems.is_empty() => Some(BlockWriter::new(dir)?),
            _ => None,
        };
        let mut i = 0;
        while i < recs.len() {
            let mut j = i + 1;
            while j < recs.len() && recs[j].series == recs[i].series {
                j += 1;
            }
            let st = &parsed.series[recs[i].series as usize];
            match series_chunks(&data, &recs[i..j], &mut owned, &mut parsed.stats.duplicates) {
                Ok(chunks) => {
                    if let Some(bw) = w.as_mut() {
                        if let Err(e) = bw.add_series(st.labels.clone(), chunks) {
                            if let Some(bw) = w.take() {
                                bw.abort();
                            }
                            return Err(e.into());
                        }
                    }
                }
                Err(reason) => {
                    problems.push(Problem {
                        file: PathBuf::from("<all files>"),
                        line: 0,
                        reason: format!("series {}: {reason}", st.labels),
                    });
                    if let Some(bw) = w.take() {
                        bw.abort();
                    }
                    if problems.len() >= MAX_REPORTED_PROBLEMS {
                        return Err(ImportError::Invalid(problems));
                    }
                }
            }
            i = j;
        }
        if let Some(bw) = w {
            metas.push(bw.finish(r * bd, r * bd + bd, 1, None)?);
        }
    }
    if !problems.is_empty() {
        return Err(ImportError::Invalid(problems));
    }
    Ok(metas)
}

/// A fresh staging folder name under `parent`.
fn staging_dir(parent: &Path, prefix: &str) -> PathBuf {
    parent.join(format!(
        "{prefix}{}{}",
        inferdb_storage::block::new_block_id(),
        inferdb_storage::block::TMP_SUFFIX
    ))
}

/// Parses and validates `files` without writing anything into a data folder (`--dry-run`).
/// Chunks go through a spill folder under the system's temporary folder, removed at the end.
pub fn validate_files(files: &[PathBuf], opts: &ImportOptions) -> Result<ImportStats, ImportError> {
    let tmp = staging_dir(
        &std::env::temp_dir(),
        &format!("inferdb-import-{}-", std::process::id()),
    );
    let result = (|| {
        let spill = Spill::new(tmp.join("spill"), opts.spill_buffer_bytes);
        let mut parsed = parse_all(files, opts, spill)?;
        write_ranges(&mut parsed, opts.block_duration_ms.max(1), None)?;
        Ok(parsed.stats)
    })();
    let _ = fs::remove_dir_all(&tmp);
    result
}

/// Imports `files` into the database folder `data_dir` (created if missing). See the module
/// docs. On a dry run nothing is written and the data folder is not touched.
pub fn import_files(
    data_dir: &Path,
    files: &[PathBuf],
    opts: &ImportOptions,
) -> Result<ImportStats, ImportError> {
    if opts.dry_run {
        return validate_files(files, opts);
    }
    let existed = data_dir.exists();
    // Hold the database's lock (and let it clean up leftovers of an earlier crash) before
    // anything goes into the folder.
    let db = Db::open(
        data_dir,
        Options {
            background: false,
            retention_ms: None,
            ..Options::default()
        },
    )?;
    let staging = staging_dir(data_dir, "import-");
    let result = (|| -> Result<ImportStats, ImportError> {
        fs::create_dir_all(&staging).map_err(io_err(&staging))?;
        let spill = Spill::new(staging.join("spill"), opts.spill_buffer_bytes);
        let mut parsed = parse_all(files, opts, spill)?;
        let metas = write_ranges(&mut parsed, opts.block_duration_ms.max(1), Some(&staging))?;
        // Everything is written and fsynced: move the blocks in.
        for m in &metas {
            let to = data_dir.join(&m.id);
            fs::rename(staging.join(&m.id), &to).map_err(io_err(&to))?;
        }
        fs::File::open(data_dir)
            .and_then(|f| f.sync_all())
            .map_err(io_err(data_dir))?;
        parsed.stats.blocks = metas;
        Ok(parsed.stats)
    })();
    let _ = fs::remove_dir_all(&staging);
    let close = db.close();
    if result.is_err() && !existed {
        // nothing was imported: leave no trace of the folder this call created
        let _ = fs::remove_dir_all(data_dir);
    }
    let stats = result?;
    close?;
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spill() -> Spill {
        Spill::new(
            std::env::temp_dir().join(format!("inferdb-import-unit-{}", std::process::id())),
            1 << 20,
        )
    }

    #[test]
    fn out_of_order_samples_are_sorted_and_split_by_range() {
        let mut sp = spill();
        let mut a = SeriesState::new(Labels::from_pairs([("__name__", "x")]));
        let bd = 1000;
        for t in [5, 1500, 3, 999, 1000, 2500, 4] {
            assert!(a.add(0, t, t as f64, bd, &mut sp).is_ok());
        }
        a.cut(0, &mut sp).unwrap();
        assert_eq!(sp.ranges(), vec![0, 1, 2]);
        let data = sp.take(0).unwrap();
        let mut recs = spill::records(&data).unwrap();
        recs.sort_by_key(|c| (c.series, c.min_time));
        assert_eq!(recs.len(), 3, "5 | 3 999 | 4");
        let mut owned = Vec::new();
        let mut dups = 0;
        let chunks = series_chunks(&data, &recs, &mut owned, &mut dups).unwrap();
        let first: Vec<(i64, f64)> = chunks
            .iter()
            .flat_map(|c| chunk::decode(c).unwrap().collect::<Vec<_>>())
            .collect();
        assert_eq!(first, vec![(3, 3.0), (4, 4.0), (5, 5.0), (999, 999.0)]);
        assert_eq!(dups, 0);
    }

    #[test]
    fn conflicting_duplicate_is_an_error() {
        let mut sp = spill();
        let mut a = SeriesState::new(Labels::from_pairs([("__name__", "x")]));
        assert!(matches!(a.add(0, 10, 1.0, 1000, &mut sp), Ok(true)));
        assert!(matches!(a.add(0, 10, 1.0, 1000, &mut sp), Ok(false)));
        assert!(matches!(
            a.add(0, 10, 2.0, 1000, &mut sp),
            Err(AddError::Conflict(_))
        ));
        // a repeat that is not adjacent is found when the chunks are merged
        assert!(matches!(a.add(0, 20, 1.0, 1000, &mut sp), Ok(true)));
        assert!(matches!(a.add(0, 10, 1.0, 1000, &mut sp), Ok(true)));
        assert!(matches!(a.add(0, 5, 7.0, 1000, &mut sp), Ok(true)));
        assert!(matches!(a.add(0, 20, 3.0, 1000, &mut sp), Ok(true)));
        a.cut(0, &mut sp).unwrap();
        let data = sp.take(0).unwrap();
        let mut recs = spill::records(&data).unwrap();
        recs.sort_by_key(|c| (c.series, c.min_time));
        let (mut owned, mut dups) = (Vec::new(), 0);
        let err = series_chunks(&data, &recs, &mut owned, &mut dups).unwrap_err();
        assert!(err.contains("timestamp 20"), "{err}");
        assert_eq!(dups, 1, "the repeat of (10, 1.0)");
    }
}
