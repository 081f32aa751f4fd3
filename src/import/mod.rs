//! Backfilling history from OpenMetrics text files into blocks, like
//! `promtool tsdb create-blocks-from openmetrics`.
//!
//! [`import_files`] streams: memory stays bounded whatever the size of the input (it grows
//! with the number of series, not of samples), and nothing is half-imported.
//!
//! 1. **Parse pass.** Every file is read once, in pieces of whole lines, through
//!    [`crate::model::exposition`]'s parser and the scraper's series cache. Each sample must carry a timestamp and valid labels and
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
//! 3. **Compaction** (with [`ImportOptions::compact`], the default). The data folder is
//!    reopened and its blocks compacted as complete history
//!    ([`inferdb_storage::Db::compact_history`]): the imported 2 h blocks end in the larger
//!    blocks a live store's compactions make, with one index each instead of one per 2 h,
//!    and classic histograms stored as groups. A failed compaction (a full disk) leaves the
//!    imported blocks as they are, reported in [`ImportStats::compaction_error`]; the server
//!    compacts them later.
//!
//! Memory: the series' labels, texts and open chunks, one piece of input, the spill buffer
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

use crate::model::exposition::{Entry, Format, Parser, ParserState};
use crate::model::series_cache::SeriesCache;

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
    /// Compact the data folder's blocks after the import (default `true`).
    pub compact: bool,
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
            compact: true,
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
    /// The data folder's blocks after the compaction that follows the import (empty when
    /// none ran).
    pub compacted: Vec<BlockMeta>,
    /// Why the compaction after the import failed (the imported blocks are in place).
    pub compaction_error: Option<String>,
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

/// The input is read in pieces of about this many bytes, cut after a line break, each
/// checked as UTF-8 and parsed before the next is read, so that memory does not grow with the
/// size of a file.
const PIECE_BYTES: usize = 8 << 20;

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
    format: Format,
    stats: ImportStats,
    series: Vec<SeriesState>,
    /// Series texts read so far and their index in `series` (the scraper's series cache:
    /// a line whose series text is the expected one skips series and label parsing).
    cache: SeriesCache<u32>,
    by_labels: HashMap<Labels, u32>,
    /// The cache slot of the previous sample line of the current file.
    prev: Option<u32>,
    /// How many bytes of input are parsed at a time ([`PIECE_BYTES`]).
    piece: usize,
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
    /// Reading the input failed.
    Read(std::io::Error),
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

    /// The cache slot of a fully parsed sample's series, added on its first line; `None`
    /// after recording a problem with its labels.
    fn slot_of(
        &mut self,
        s: &crate::model::exposition::Sample<'_>,
        file: &Path,
        line: usize,
    ) -> Result<Option<u32>, Stop> {
        let norm = s.labels.normalised_label();
        if let Some(slot) = self.cache.lookup(s.series_text) {
            if self.cache.normalised_label(slot) == norm {
                return Ok(Some(slot));
            }
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
        Ok(Some(self.cache.add_fresh(s.series_text, norm, Some(i))))
    }

    /// A sample line of the series in cache slot `slot`, with its value and timestamp.
    fn slot_sample(
        &mut self,
        slot: u32,
        t: Option<i64>,
        v: f64,
        file: &Path,
        line: usize,
    ) -> Result<(), Stop> {
        self.prev = Some(slot);
        let Some(t) = t else {
            let text = self.cache.text_of(slot).to_string();
            return self.problem(file, line, format!("sample {text} has no timestamp"));
        };
        let Some(&idx) = self.cache.slot(slot).series.as_ref() else {
            return Ok(());
        };
        self.sample(idx, t, v, file, line)
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

/// The parse pass: reads every file once, validates each sample and streams finished chunks
/// into `spill`. Problems are collected (at most [`MAX_REPORTED_PROBLEMS`]).
///
/// Each file is read in pieces ([`PIECE_BYTES`]) through the exposition parser, with the
/// scraper's fast path: a line whose series text is the previous line's series, or the series
/// first seen after it, gives its value and timestamp without the series and its labels being
/// parsed again (they were validated on the series' first line).
fn parse_all(files: &[PathBuf], opts: &ImportOptions, spill: Spill) -> Result<Parsed, ImportError> {
    let spill_dir = spill.dir().to_path_buf();
    let mut pass = Pass {
        bd: opts.block_duration_ms.max(1),
        allow_far_future: opts.allow_far_future,
        format: opts.format,
        stats: ImportStats {
            min_time: i64::MAX,
            max_time: i64::MIN,
            ..Default::default()
        },
        series: Vec::new(),
        cache: SeriesCache::default(),
        by_labels: HashMap::new(),
        prev: None,
        piece: PIECE_BYTES,
        problems: Vec::new(),
        pairs: Vec::new(),
        spill,
    };
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
        let pb = (opts.progress && len >= PROGRESS_MIN_BYTES)
            .then(|| progress_bar(len, &path.display().to_string()));
        let r = parse_file(&mut pass, path, f, pb.as_ref());
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
            Err(Stop::Read(e)) => {
                return Err(ImportError::Io {
                    path: path.clone(),
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

/// Reads one file in pieces cut after a line break and parses each (see [`parse_all`]).
fn parse_file(
    pass: &mut Pass,
    path: &Path,
    mut f: fs::File,
    pb: Option<&indicatif::ProgressBar>,
) -> Result<(), Stop> {
    use std::io::Read;
    pass.prev = None;
    let mut state = ParserState::start();
    // `buf[..filled]` holds what was read and not parsed yet
    let mut buf: Vec<u8> = vec![0; pass.piece + pass.piece.min(64 << 10)];
    let mut filled = 0usize;
    let mut done = 0u64;
    let mut want = pass.piece;
    let mut at_end = false;
    loop {
        while !at_end && filled < want {
            if buf.len() < want {
                buf.resize(want, 0);
            }
            let n = loop {
                match f.read(&mut buf[filled..]) {
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    r => break r,
                }
            };
            let n = match n {
                Ok(n) => n,
                Err(e) => return Err(Stop::Read(e)),
            };
            filled += n;
            at_end = n == 0;
        }
        let cut = if at_end {
            filled
        } else {
            match memchr::memrchr(b'\n', &buf[..filled]) {
                Some(i) => i + 1,
                None => {
                    // a line longer than a piece: read on until it ends
                    want = filled * 2;
                    continue;
                }
            }
        };
        want = pass.piece;
        let after_eof = state.after_eof();
        parse_piece(pass, path, &buf[..cut], &mut state, at_end)?;
        if after_eof {
            // data after `# EOF` was reported, once; the rest of the file is not read
            return Ok(());
        }
        done += cut as u64;
        if let Some(pb) = pb {
            pb.set_position(done);
        }
        buf.copy_within(cut..filled, 0);
        filled -= cut;
        if at_end {
            return Ok(());
        }
    }
}

/// Parses one piece of a file, whole lines; a line that is not UTF-8 is a problem of that
/// line, and the lines after it are read.
fn parse_piece(
    pass: &mut Pass,
    path: &Path,
    mut bytes: &[u8],
    state: &mut ParserState,
    ends_file: bool,
) -> Result<(), Stop> {
    loop {
        let (good, bad) = match std::str::from_utf8(bytes) {
            Ok(text) => return parse_text(pass, path, text, state, ends_file),
            Err(e) => {
                // the lines before the one with the invalid byte
                let start = memchr::memrchr(b'\n', &bytes[..e.valid_up_to()]).map_or(0, |i| i + 1);
                (&bytes[..start], start)
            }
        };
        if let Ok(text) = std::str::from_utf8(good) {
            parse_text(pass, path, text, state, false)?;
        }
        state.skip_line();
        pass.problem(path, state.line(), "invalid UTF-8".into())?;
        bytes = match memchr::memchr(b'\n', &bytes[bad..]) {
            Some(i) => &bytes[bad + i + 1..],
            None => &[],
        };
    }
}

/// Parses whole lines of a file, going on from `state`.
fn parse_text(
    pass: &mut Pass,
    path: &Path,
    text: &str,
    state: &mut ParserState,
    ends_file: bool,
) -> Result<(), Stop> {
    let mut p = Parser::resume(text, pass.format, *state, ends_file);
    loop {
        if let Some(k) = pass.prev {
            // the previous line's series again (a series' samples in a run), or the series
            // first seen after it (samples in scrape order)
            let mut hit = None;
            for slot in [k, k + 1] {
                if slot as usize >= pass.cache.total()
                    || pass.cache.normalised_label(slot) != p.normalise()
                {
                    continue;
                }
                if let Some(r) = p.next_known(pass.cache.text_of(slot)) {
                    hit = Some((slot, r));
                    break;
                }
            }
            if let Some((slot, r)) = hit {
                match r {
                    Ok((v, t)) => pass.slot_sample(slot, t, v, path, p.line())?,
                    Err(e) => pass.problem(path, e.line, e.reason)?,
                }
                continue;
            }
        }
        let Some(e) = p.next() else { break };
        match e {
            Ok(Entry::Sample(s)) => {
                if let Some(slot) = pass.slot_of(&s, path, p.line())? {
                    pass.slot_sample(slot, s.timestamp_ms, s.value, path, p.line())?;
                }
            }
            Ok(_) => {}
            Err(e) => pass.problem(path, e.line, e.reason)?,
        }
    }
    *state = p.state();
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
    let db = open_for_import(data_dir)?;
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
    let mut stats = result?;
    close?;
    if opts.compact && !stats.blocks.is_empty() {
        match compact_history(data_dir) {
            Ok(metas) => stats.compacted = metas,
            Err(e) => stats.compaction_error = Some(e.to_string()),
        }
    }
    Ok(stats)
}

/// The store in `data_dir` opened for an import: its lock held, no background work, no
/// retention (imported history may be older than the retention window).
fn open_for_import(data_dir: &Path) -> Result<Db, inferdb_storage::Error> {
    Db::open(
        data_dir,
        Options {
            background: false,
            retention_ms: None,
            ..Options::default()
        },
    )
}

/// Reopens the data folder (so that it sees the imported blocks), compacts its blocks as
/// complete history and returns them.
fn compact_history(data_dir: &Path) -> Result<Vec<BlockMeta>, inferdb_storage::Error> {
    let db = open_for_import(data_dir)?;
    let res = db.compact_history();
    let metas = db.blocks();
    db.close()?;
    res.map(|()| metas)
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

    /// Parses `text` as one OpenMetrics file read in pieces of `piece` bytes: the problems
    /// (line and reason), the samples, each series' labels and its samples.
    fn parse_in_pieces(text: &[u8], piece: usize) -> (Vec<(usize, String)>, u64, Vec<String>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in.om");
        fs::write(&path, text).unwrap();
        let mut pass = Pass {
            bd: 1000,
            allow_far_future: false,
            format: Format::OpenMetrics,
            stats: ImportStats::default(),
            series: Vec::new(),
            cache: SeriesCache::default(),
            by_labels: HashMap::new(),
            prev: None,
            piece,
            problems: Vec::new(),
            pairs: Vec::new(),
            spill: Spill::new(dir.path().join("spill"), 1 << 20),
        };
        let f = fs::File::open(&path).unwrap();
        assert!(matches!(parse_file(&mut pass, &path, f, None), Ok(())));
        let series = pass
            .series
            .iter()
            .map(|s| format!("{} {:?}", s.labels, s.last))
            .collect();
        let problems = pass
            .problems
            .iter()
            .map(|p| (p.line, p.reason.clone()))
            .collect();
        (problems, pass.stats.samples, series)
    }

    /// A file read in pieces of any size gives the same series, samples and problems (with
    /// the same line numbers) as when read whole: pieces cut inside a family, a line longer
    /// than a piece, a line that is not UTF-8, a missing timestamp, a bad value.
    #[test]
    fn pieces_of_any_size_read_the_same() {
        let mut text = Vec::new();
        text.extend_from_slice(b"# TYPE h histogram\n");
        for t in 0..20 {
            for le in ["0.5", "1", "+Inf"] {
                text.extend_from_slice(format!("h_bucket{{le=\"{le}\"}} {t} {t}.5\n").as_bytes());
            }
        }
        text.extend_from_slice(b"# TYPE g gauge\n");
        text.extend_from_slice(b"g{a=\"\xff\"} 1 1\n");
        text.extend_from_slice(format!("g{{a=\"{}\"}} 1 1\n", "x".repeat(300)).as_bytes());
        text.extend_from_slice(b"g 1\ng 2 2\ng x 3\ng 3 3\n# EOF\n");
        let whole = parse_in_pieces(&text, PIECE_BYTES);
        assert_eq!(
            whole.0,
            vec![
                (63, "invalid UTF-8".to_string()),
                (65, "sample g has no timestamp".to_string()),
                (67, "invalid value \"x\"".to_string()),
            ]
        );
        assert_eq!(whole.1, 20 * 3 + 3);
        assert_eq!(whole.2.len(), 3 + 2);
        assert!(whole.2[1].contains("le=\"1.0\""), "{:?}", whole.2);
        for piece in [1, 7, 64, 100, 1000] {
            assert_eq!(
                parse_in_pieces(&text, piece),
                whole,
                "pieces of {piece} bytes"
            );
        }
        // a file cut off before its `# EOF`
        let cut = &text[..text.len() - 6];
        let (problems, ..) = parse_in_pieces(cut, 7);
        assert_eq!(problems.last().unwrap().1, "data does not end with # EOF");
        // data after `# EOF`: one problem, wherever the pieces are cut
        let mut after = text.clone();
        after.extend(b"g 4 4\n".repeat(10));
        for piece in [7, PIECE_BYTES] {
            let (problems, ..) = parse_in_pieces(&after, piece);
            assert_eq!(problems.len(), 4, "{problems:?}");
            assert_eq!(problems[3], (70, "unexpected data after # EOF".to_string()));
        }
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
