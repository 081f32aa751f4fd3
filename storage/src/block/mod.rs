//! Persistent, immutable, time-partitioned blocks.
//!
//! A block is a folder named by its id holding `meta.json` (time range, statistics,
//! compaction lineage), `index` (symbols, series, postings; see [`crate::index`]) and
//! `chunks/` (segmented chunk files; see [`crate::chunkfile`]). Blocks are written into
//! `<id>.tmp`, fsynced and renamed into place, so a reader never sees a half-written block.
//! Byte layouts are in `storage/FORMAT.md`.

use std::collections::{BTreeSet, HashMap};
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::chunkfile::{relocate, split_ref, ChunkFileReader, ChunkFileWriter};
use crate::error::{Error, Result};
use crate::index::{sets, write_index, IndexReader};
use crate::labels::Labels;
use crate::matcher::Matcher;
use crate::tombstones::{Tombstones, TOMBSTONES_FILE};

use crate::chunk::{self as chunk_api, ChunkMeta, ChunkWriter, MAX_SAMPLES_PER_CHUNK};

/// Rows in a histogram group chunk: twice an ordinary chunk's samples, as the group shares
/// its timestamps and column headers among its members (an hour of 15 s scrapes).
pub const GROUP_ROWS: usize = 240;

/// Samples per chunk in compaction output (histogram groups: twice as many rows). Larger
/// than the head's [`MAX_SAMPLES_PER_CHUNK`]: on 24 h of imported vLLM history (issue #20,
/// `benches/compare_import_size.sh`) chunks of 960 took the folder from 15.84 to 13.43 MB
/// (index 1.57 to 0.50 MB, fewer chunk headers) and decoded every series through the querier
/// at 337 instead of 227 M samples/s; a short range reads more samples of one chunk.
pub const COMPACTED_CHUNK_SAMPLES: usize = 960;

/// The newest stretch of each series that a writer of longer chunks
/// ([`BlockWriter::set_chunk_samples`]) still writes in head-sized chunks (histogram groups of
/// [`GROUP_ROWS`] rows): the last hour before a series' newest sample. Queries over the recent
/// past of a block (instant queries, alert windows, a dashboard's newest steps) then decode a
/// few minutes' chunk, not hours of a long one; the rest keeps the long chunks' bytes.
pub const RECENT_SPAN_MS: i64 = 3_600_000;

/// Where a histogram group member handed to [`BlockWriter::add_series_from`] comes from: the
/// same value for every member of one source group and different for any other group (for a
/// block's chunk: the block's position among the sources and the chunk reference of the
/// group's first byte), so that the writer decodes each source group once.
pub type GroupSource = (usize, u64);

/// Chunk bytes of one histogram's series a [`BlockWriter`] holds before grouping them.
const MAX_PENDING_BYTES: usize = 64 << 20;

mod histogram;

/// Name of the metadata file in a block folder.
pub const META_FILE: &str = "meta.json";
/// Name of the index file in a block folder.
pub const INDEX_FILE: &str = "index";
/// Name of the chunk folder in a block folder.
pub const CHUNKS_DIR: &str = "chunks";
/// Suffix of a block folder still being written.
pub const TMP_SUFFIX: &str = ".tmp";
/// Version written in `meta.json`.
pub const META_VERSION: u32 = 1;

/// A block's `meta.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockMeta {
    /// The block id: 26 characters, sortable by creation time (ULID-like).
    pub id: String,
    /// Start of the block's time range (inclusive), in milliseconds.
    pub min_time: i64,
    /// End of the block's time range, as given by its writer; by convention exclusive, as in
    /// Prometheus (a 2 h block of `[t, t+2h)` has `max_time = t + 2h`).
    pub max_time: i64,
    /// Number of series.
    pub num_series: u64,
    /// Number of samples.
    pub num_samples: u64,
    /// Number of chunks.
    pub num_chunks: u64,
    /// Compaction level: 1 for a block written from the head or by import, parents' max + 1
    /// after compaction.
    pub level: u32,
    /// The ids of the level-1 blocks whose data this block holds (itself for a level-1 block).
    pub sources: Vec<String>,
}

#[derive(Serialize, Deserialize)]
struct MetaFile {
    version: u32,
    #[serde(flatten)]
    meta: BlockMeta,
}

/// One series selected from a block: its labels and the chunks that overlap the query range.
#[derive(Debug, Clone, PartialEq)]
pub struct BlockSeries {
    /// The series' labels.
    pub labels: Labels,
    /// `(metadata, chunk reference)` in time order; read a chunk with [`Block::chunk`].
    pub chunks: Vec<(ChunkMeta, u64)>,
}

const CROCKFORD: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// A new block id: 48-bit millisecond timestamp and 80 random bits in Crockford base32, like
/// a ULID. Ids made by one process are strictly increasing.
pub fn new_block_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    static LAST: Mutex<(u64, u128)> = Mutex::new((0, 0));
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let ms = (now.as_millis() as u64) & ((1 << 48) - 1);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(now.as_nanos());
    h.write_u32(std::process::id());
    let a = h.finish();
    h.write_u64(a);
    let b = h.finish();
    let mut rand = ((u128::from(a) << 64) | u128::from(b)) & ((1 << 80) - 1);
    {
        let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
        let (lms, lrand) = *last;
        let (ms2, rand2) = if ms < lms || (ms == lms && rand <= lrand) {
            (lms, (lrand + 1) & ((1 << 80) - 1))
        } else {
            (ms, rand)
        };
        *last = (ms2, rand2);
        rand = rand2;
        let v = (u128::from(ms2) << 80) | rand;
        let mut s = String::with_capacity(26);
        for i in (0..26).rev() {
            s.push(CROCKFORD[((v >> (i * 5)) & 31) as usize] as char);
        }
        s
    }
}

fn fsync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|f| f.sync_all())
        .map_err(|e| Error::io(dir, e))
}

/// A histogram series held by a [`BlockWriter`]: its chunks and where each group member's
/// group comes from.
type PendingSeries = (Labels, Vec<(Vec<u8>, Option<GroupSource>)>);

/// Writes a block incrementally: chunks go to the chunk files as series are added, the index
/// and `meta.json` are written by [`BlockWriter::finish`], which then renames the temporary
/// folder into place.
pub struct BlockWriter {
    parent: PathBuf,
    id: String,
    tmp: PathBuf,
    chunks: ChunkFileWriter,
    series: Vec<(Labels, Vec<(ChunkMeta, u64)>)>,
    /// Buckets and counts of the histogram named `pending_name`, held until the series of
    /// another name arrives, then written as histogram groups (see [`histogram`]).
    pending: Vec<PendingSeries>,
    pending_name: String,
    /// Chunk bytes held in `pending`.
    pending_bytes: usize,
    /// Whether classic histograms are stored as groups.
    group_histograms: bool,
    /// Samples per chunk written ([`MAX_SAMPLES_PER_CHUNK`] unless set).
    chunk_samples: usize,
}

impl BlockWriter {
    /// Starts a block under `parent` (created if missing) in `<parent>/<id>.tmp`.
    pub fn new(parent: &Path) -> Result<Self> {
        fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
        let id = new_block_id();
        let tmp = parent.join(format!("{id}{TMP_SUFFIX}"));
        fs::create_dir(&tmp).map_err(|e| Error::io(&tmp, e))?;
        let chunks = ChunkFileWriter::create(&tmp.join(CHUNKS_DIR))?;
        Ok(BlockWriter {
            parent: parent.to_path_buf(),
            id,
            tmp,
            chunks,
            series: Vec::new(),
            pending: Vec::new(),
            pending_name: String::new(),
            pending_bytes: 0,
            group_histograms: true,
            chunk_samples: MAX_SAMPLES_PER_CHUNK,
        })
    }

    /// Stores every series in chunks of its own (`false`) instead of grouping the buckets and
    /// count of each classic histogram (the default; for comparisons and tests).
    pub fn set_group_histograms(&mut self, on: bool) {
        self.group_histograms = on;
    }

    /// Writes chunks of up to `samples` samples (histogram groups of twice as many rows as
    /// with [`MAX_SAMPLES_PER_CHUNK`]); shorter chunks added are merged and re-encoded. For
    /// compacted history: fewer, larger chunks take fewer bytes (each chunk has a header and
    /// an index entry per series) at the cost of decoding more samples for a short range. A
    /// series' newest [`RECENT_SPAN_MS`] stays in head-sized chunks, where short ranges read.
    pub fn set_chunk_samples(&mut self, samples: usize) {
        self.chunk_samples = samples.clamp(1, chunk_api::MAX_ENCODED_SAMPLES / 2);
    }

    /// The id the block will have.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Adds a series with its encoded chunks (time-ordered, non-overlapping). Empty chunks are
    /// skipped; a series without samples is left out. Series may come in any order; a label
    /// set added twice has its chunks combined.
    ///
    /// The buckets and count of a classic histogram are held until a series of another name
    /// comes and then stored as histogram groups where that is lossless (see
    /// `chunk::group`); series come in label order from compaction and in family order from
    /// import, both of which keep a histogram's series together.
    pub fn add_series<'a>(
        &mut self,
        labels: Labels,
        chunks: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<()> {
        self.add_series_from(labels, chunks.into_iter().map(|c| (c, None)))
    }

    /// [`add_series`](BlockWriter::add_series) with, for each chunk that is a histogram
    /// group member, where its group comes from (see [`GroupSource`]): members of one source
    /// group regrouped together are then decoded from one decoder, each column once.
    pub fn add_series_from<'a>(
        &mut self,
        labels: Labels,
        chunks: impl IntoIterator<Item = (&'a [u8], Option<GroupSource>)>,
    ) -> Result<()> {
        if !self.group_histograms {
            return self.add_single(labels, chunks.into_iter().map(|c| c.0));
        }
        let (name, grouped) = match histogram::role(&labels) {
            Some((base, role)) => (base, role != histogram::Role::Sum),
            None => (labels.metric_name().unwrap_or(""), false),
        };
        if name != self.pending_name {
            self.flush_pending()?;
            self.pending_name.clear();
            self.pending_name.push_str(name);
        }
        if !grouped {
            return self.add_single(labels, chunks.into_iter().map(|c| c.0));
        }
        let mut owned = Vec::new();
        for (c, src) in chunks {
            let n = chunk_api::encoded_len(c)?;
            let c = c.get(..n).ok_or_else(|| {
                Error::corrupt("chunk", "", 0, "encoded length exceeds the buffer")
            })?;
            self.pending_bytes += c.len();
            owned.push((c.to_vec(), src));
        }
        self.pending.push((labels, owned));
        if self.pending_bytes > MAX_PENDING_BYTES {
            // a histogram with very many series: groups from what is held (a group's members
            // still to come form groups of their own)
            self.flush_pending()?;
        }
        Ok(())
    }

    /// Adds a series with chunks of its own; group members (from a block being compacted)
    /// are re-encoded as ordinary chunks, and so are chunks shorter than the writer's
    /// [`chunk size`](BlockWriter::set_chunk_samples), merged with their neighbours.
    fn add_single<'a>(
        &mut self,
        labels: Labels,
        chunks: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<()> {
        let mut out = Vec::new();
        // samples being re-encoded, oldest first, not yet written
        let mut run: Vec<(i64, f64)> = Vec::new();
        for c in chunks {
            let n = chunk_api::encoded_len(c)?;
            let c = c.get(..n).ok_or_else(|| {
                Error::corrupt("chunk", "", 0, "encoded length exceeds the buffer")
            })?;
            // group members, and with larger chunks than the head's the shorter ones
            let recode = chunk_api::group_member(c).is_some()
                || (self.chunk_samples > MAX_SAMPLES_PER_CHUNK
                    && usize::from(chunk_api::header(c)?.num_samples) < self.chunk_samples);
            if recode {
                let mut it = chunk_api::decode(c)?;
                for s in it.by_ref() {
                    run.push(s);
                    if run.len() >= self.chunk_samples {
                        self.write_settled(&mut run, &mut out)?;
                    }
                }
                if let Some(e) = it.take_err() {
                    return Err(e);
                }
                continue;
            }
            for piece in run.chunks(self.chunk_samples) {
                self.write_samples(piece, &mut out)?;
            }
            run.clear();
            self.append_chunk(c, &mut out)?;
        }
        // the end of the series: its newest hour in head-sized chunks
        let recent = match run.last() {
            Some(&(last, _)) if self.chunk_samples > MAX_SAMPLES_PER_CHUNK => {
                run.partition_point(|&(t, _)| t <= last - RECENT_SPAN_MS)
            }
            _ => run.len(),
        };
        for piece in run[..recent].chunks(self.chunk_samples) {
            self.write_samples(piece, &mut out)?;
        }
        for piece in run[recent..].chunks(MAX_SAMPLES_PER_CHUNK) {
            self.write_samples(piece, &mut out)?;
        }
        if !out.is_empty() {
            self.series.push((labels, out));
        }
        Ok(())
    }

    /// Writes the oldest `chunk_samples` samples of `run` as a chunk, as often as they can no
    /// longer be part of the series' newest [`RECENT_SPAN_MS`] (always, for head-sized chunks).
    fn write_settled(
        &mut self,
        run: &mut Vec<(i64, f64)>,
        out: &mut Vec<(ChunkMeta, u64)>,
    ) -> Result<()> {
        let n = self.chunk_samples;
        let long = n > MAX_SAMPLES_PER_CHUNK;
        let mut done = 0;
        while run.len() - done >= n {
            let newest = run[run.len() - 1].0;
            if long && run[done + n - 1].0 > newest - RECENT_SPAN_MS {
                break;
            }
            self.write_samples(&run[done..done + n], out)?;
            done += n;
        }
        run.drain(..done);
        Ok(())
    }

    /// Encodes `samples` as one chunk and appends it.
    fn write_samples(
        &mut self,
        samples: &[(i64, f64)],
        out: &mut Vec<(ChunkMeta, u64)>,
    ) -> Result<()> {
        if samples.is_empty() {
            return Ok(());
        }
        let mut w = ChunkWriter::new();
        for &(t, v) in samples {
            w.append(t, v);
        }
        self.append_chunk(&w.finish(), out)
    }

    /// Appends chunk `c` to the chunk files and its entry to `out` (nothing for an empty
    /// chunk).
    fn append_chunk(&mut self, c: &[u8], out: &mut Vec<(ChunkMeta, u64)>) -> Result<()> {
        let m = chunk_api::meta(c)?;
        if m.num_samples > 0 {
            out.push((m, self.chunks.append(c)?));
        }
        Ok(())
    }

    /// Writes the held histogram series: each group whose members share their timestamps as
    /// group chunks of up to [`GROUP_ROWS`] rows (scaled with the writer's chunk size; rows
    /// a group cannot code exactly as chunks of each member's own), everything else series
    /// by series.
    fn flush_pending(&mut self) -> Result<()> {
        let pending = std::mem::take(&mut self.pending);
        self.pending_bytes = 0;
        if pending.is_empty() {
            return Ok(());
        }
        let labels: Vec<&Labels> = pending.iter().map(|p| &p.0).collect();
        let plan = histogram::groups(&labels);
        let mut slots: Vec<Option<PendingSeries>> = pending.into_iter().map(Some).collect();
        for g in plan {
            let members: Vec<PendingSeries> = g.iter().filter_map(|&i| slots[i].take()).collect();
            if members.len() == 1 {
                for (l, cs) in members {
                    self.add_single(l, cs.iter().map(|c| c.0.as_slice()))?;
                }
            } else {
                self.add_group(members)?;
            }
        }
        Ok(())
    }

    /// Writes the members of one histogram group (in group order).
    fn add_group(&mut self, members: Vec<PendingSeries>) -> Result<()> {
        // members of one source group: decoded through one slot
        let mut sources: HashMap<GroupSource, chunk_api::GroupSlot> = HashMap::new();
        for (c, src) in members.iter().flat_map(|m| &m.1) {
            if let (Some(src), Some(j)) = (src, chunk_api::member_index(c)) {
                sources.entry(*src).or_default().want(j);
            }
        }
        let mut cols: Vec<(Vec<i64>, Vec<f64>)> = Vec::with_capacity(members.len());
        for (_, cs) in &members {
            let (mut ts, mut vs) = (Vec::new(), Vec::new());
            for (c, src) in cs {
                if let Some(slot) = src.as_ref().and_then(|s| sources.get_mut(s)) {
                    slot.read(c, &mut ts, &mut vs)?;
                    continue;
                }
                let mut it = chunk_api::decode(c)?;
                it.decode_into(&mut ts, &mut vs);
                if let Some(e) = it.take_err() {
                    return Err(e);
                }
            }
            cols.push((ts, vs));
        }
        let ts = &cols[0].0;
        if cols.iter().any(|c| c.0 != *ts) || ts.windows(2).any(|w| w[1] <= w[0]) {
            // other timestamps (a bucket added or lost mid-range, overlapping chunks): apart
            for (l, cs) in members {
                self.add_single(l, cs.iter().map(|c| c.0.as_slice()))?;
            }
            return Ok(());
        }
        let n = members.len();
        let mut out: Vec<Vec<(ChunkMeta, u64)>> = vec![Vec::new(); n];
        // rows holding a value no group can code (a staleness marker when a target went
        // down, NaN) are written member by member; the runs between them as groups
        let groupable = |r: usize| cols.iter().all(|c| chunk_api::groupable(c.1[r]));
        // the newest hour in head-sized chunks (see RECENT_SPAN_MS)
        let recent = match ts.last() {
            Some(&last) if self.chunk_samples > MAX_SAMPLES_PER_CHUNK => {
                ts.partition_point(|&t| t <= last - RECENT_SPAN_MS)
            }
            _ => ts.len(),
        };
        let mut start = 0;
        while start < ts.len() {
            let good = groupable(start);
            let mut end = start + 1;
            let samples = if start < recent {
                self.chunk_samples
            } else {
                MAX_SAMPLES_PER_CHUNK
            };
            let cap = if good {
                samples * GROUP_ROWS / MAX_SAMPLES_PER_CHUNK
            } else {
                samples
            };
            let stop = if start < recent { recent } else { ts.len() };
            while end < stop && end - start < cap && groupable(end) == good {
                end += 1;
            }
            let rows = &ts[start..end];
            let vals: Vec<&[f64]> = cols.iter().map(|c| &c.1[start..end]).collect();
            let meta = ChunkMeta {
                min_time: rows[0],
                max_time: rows[rows.len() - 1],
                num_samples: rows.len() as u16,
            };
            match good.then(|| chunk_api::encode_group(rows, &vals)).flatten() {
                Some(bytes) => {
                    let r = self.chunks.append(&bytes)?;
                    for (j, o) in out.iter_mut().enumerate() {
                        o.push((meta, r + (n - 1 - j) as u64));
                    }
                }
                None => {
                    for (o, v) in out.iter_mut().zip(&vals) {
                        let mut w = ChunkWriter::new();
                        for (&t, &x) in rows.iter().zip(v.iter()) {
                            w.append(t, x);
                        }
                        o.push((meta, self.chunks.append(&w.finish())?));
                    }
                }
            }
            start = end;
        }
        for ((l, _), o) in members.into_iter().zip(out) {
            if !o.is_empty() {
                self.series.push((l, o));
            }
        }
        Ok(())
    }

    /// Writes index and `meta.json`, fsyncs everything and renames the block into place.
    /// `sources` defaults to the block's own id. On failure (a full disk) the temporary folder
    /// is removed, so that nothing half-written stays behind to take space.
    pub fn finish(
        self,
        min_time: i64,
        max_time: i64,
        level: u32,
        sources: Option<Vec<String>>,
    ) -> Result<BlockMeta> {
        let tmp = self.tmp.clone();
        self.write_out(min_time, max_time, level, sources)
            .inspect_err(|_| {
                let _ = fs::remove_dir_all(&tmp);
            })
    }

    fn write_out(
        mut self,
        min_time: i64,
        max_time: i64,
        level: u32,
        sources: Option<Vec<String>>,
    ) -> Result<BlockMeta> {
        self.flush_pending()?;
        self.chunks.sync()?;
        fsync_dir(self.chunks.dir())?;
        let mut series = std::mem::take(&mut self.series);
        series.sort_by(|a, b| a.0.cmp(&b.0));
        // Combine duplicates.
        let mut merged: Vec<(Labels, Vec<(ChunkMeta, u64)>)> = Vec::with_capacity(series.len());
        for (l, cs) in series {
            match merged.last_mut() {
                Some((pl, pcs)) if *pl == l => {
                    pcs.extend(cs);
                    pcs.sort_by_key(|(m, _)| (m.min_time, m.max_time));
                }
                _ => merged.push((l, cs)),
            }
        }
        write_index(&self.tmp.join(INDEX_FILE), &merged)?;
        let meta = BlockMeta {
            id: self.id.clone(),
            min_time,
            max_time,
            num_series: merged.len() as u64,
            num_samples: merged
                .iter()
                .flat_map(|(_, c)| c.iter())
                .map(|(m, _)| u64::from(m.num_samples))
                .sum(),
            num_chunks: merged.iter().map(|(_, c)| c.len() as u64).sum(),
            level,
            sources: sources.unwrap_or_else(|| vec![self.id.clone()]),
        };
        write_meta(&self.tmp, &meta)?;
        fsync_dir(&self.tmp)?;
        let dst = self.parent.join(&self.id);
        fs::rename(&self.tmp, &dst).map_err(|e| Error::io(&dst, e))?;
        fsync_dir(&self.parent)?;
        Ok(meta)
    }

    /// Abandons the block, removing its temporary folder.
    pub fn abort(self) {
        let _ = fs::remove_dir_all(&self.tmp);
    }
}

fn write_meta(dir: &Path, meta: &BlockMeta) -> Result<()> {
    let path = dir.join(META_FILE);
    let mf = MetaFile {
        version: META_VERSION,
        meta: meta.clone(),
    };
    let json = serde_json::to_vec_pretty(&mf).map_err(|e| {
        Error::io(
            &path,
            std::io::Error::new(std::io::ErrorKind::InvalidData, e),
        )
    })?;
    let mut f = File::create(&path).map_err(|e| Error::io(&path, e))?;
    f.write_all(&json).map_err(|e| Error::io(&path, e))?;
    f.sync_all().map_err(|e| Error::io(&path, e))
}

/// Reads and parses a block's `meta.json`.
pub fn read_meta(dir: &Path) -> Result<BlockMeta> {
    let path = dir.join(META_FILE);
    let b = fs::read(&path).map_err(|e| Error::io(&path, e))?;
    let mf: MetaFile = serde_json::from_slice(&b).map_err(|e| {
        // serde_json reports line/column; turn them into a byte offset.
        let off: usize = b
            .split(|&c| c == b'\n')
            .take(e.line().saturating_sub(1))
            .map(|l| l.len() + 1)
            .sum::<usize>()
            + e.column().saturating_sub(1);
        Error::corrupt("block meta", &path, off as u64, e.to_string())
    })?;
    if mf.version != META_VERSION {
        return Err(Error::corrupt(
            "block meta",
            &path,
            0,
            format!("unsupported version {}", mf.version),
        ));
    }
    Ok(mf.meta)
}

/// Writes a complete block of `series` under `parent` and returns its metadata.
///
/// `series` should be sorted by labels with time-ordered, non-overlapping chunks (other orders
/// are sorted; duplicate label sets are combined). The block is written to `<parent>/<id>.tmp`,
/// fsynced and renamed to `<parent>/<id>`. Its level is 1 and its sources are itself.
pub fn write_block(
    parent: &Path,
    mint: i64,
    maxt: i64,
    series: impl Iterator<Item = (Labels, Vec<Vec<u8>>)>,
) -> Result<BlockMeta> {
    let mut w = BlockWriter::new(parent)?;
    for (l, chunks) in series {
        if let Err(e) = w.add_series(l, chunks.iter().map(Vec::as_slice)) {
            w.abort();
            return Err(e);
        }
    }
    w.finish(mint, maxt, 1, None)
}

/// The folders under `parent` that are complete blocks (have a `meta.json`, no `.tmp`
/// suffix), sorted by name (= by id).
pub fn list_block_dirs(parent: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let rd = match fs::read_dir(parent) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(Error::io(parent, e)),
    };
    for ent in rd {
        let ent = ent.map_err(|e| Error::io(parent, e))?;
        let p = ent.path();
        let name = ent.file_name();
        let name = name.to_string_lossy();
        if name.ends_with(TMP_SUFFIX) || name.ends_with(DELETE_SUFFIX) || !p.is_dir() {
            continue;
        }
        if p.join(META_FILE).is_file() {
            out.push(p);
        }
    }
    out.sort();
    Ok(out)
}

const DELETE_SUFFIX: &str = ".deleted";

/// Removes leftovers of interrupted writes and deletions under `parent` (`*.tmp` and
/// `*.deleted` folders). Call at startup, before opening blocks.
pub fn remove_leftovers(parent: &Path) -> Result<()> {
    let rd = match fs::read_dir(parent) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io(parent, e)),
    };
    for ent in rd {
        let ent = ent.map_err(|e| Error::io(parent, e))?;
        let name = ent.file_name();
        let name = name.to_string_lossy();
        if (name.ends_with(TMP_SUFFIX) || name.ends_with(DELETE_SUFFIX)) && ent.path().is_dir() {
            let p = ent.path();
            fs::remove_dir_all(&p).map_err(|e| Error::io(&p, e))?;
        }
    }
    Ok(())
}

/// Deletes a block folder atomically from a reader's point of view: renames it to
/// `<id>.deleted` (so it is no longer listed), then removes it. Open [`Block`]s keep working
/// on their mappings until dropped.
pub fn delete_block(dir: &Path) -> Result<()> {
    let mut name = dir.file_name().unwrap_or_default().to_os_string();
    name.push(DELETE_SUFFIX);
    let gone = dir.with_file_name(name);
    fs::rename(dir, &gone).map_err(|e| Error::io(dir, e))?;
    if let Some(p) = dir.parent() {
        fsync_dir(p)?;
    }
    fs::remove_dir_all(&gone).map_err(|e| Error::io(&gone, e))
}

/// An open, immutable block: its index and chunk files are memory-mapped.
pub struct Block {
    dir: PathBuf,
    meta: BlockMeta,
    index: IndexReader,
    chunks: ChunkFileReader,
    size: u64,
    /// The deleted intervals of its series (`tombstones` file), replaced as a whole.
    tombstones: parking_lot::RwLock<std::sync::Arc<Tombstones>>,
}

impl std::fmt::Debug for Block {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Block")
            .field("dir", &self.dir)
            .field("meta", &self.meta)
            .finish()
    }
}

impl Block {
    /// Opens the block in `dir`: reads `meta.json` and the tombstones, maps and verifies the
    /// index' tables and maps the chunk segments.
    pub fn open(dir: &Path) -> Result<Block> {
        let meta = read_meta(dir)?;
        let tombstones = Tombstones::read(&dir.join(TOMBSTONES_FILE))?;
        let index = IndexReader::open(&dir.join(INDEX_FILE))?;
        let chunks = ChunkFileReader::open(&dir.join(CHUNKS_DIR))?;
        let mut size = 0;
        for f in [META_FILE, INDEX_FILE] {
            let p = dir.join(f);
            size += fs::metadata(&p).map_err(|e| Error::io(&p, e))?.len();
        }
        size += chunks.files().map(|(_, n)| n).sum::<u64>();
        Ok(Block {
            dir: dir.to_path_buf(),
            meta,
            index,
            chunks,
            size,
            tombstones: parking_lot::RwLock::new(std::sync::Arc::new(tombstones)),
        })
    }

    /// The deleted intervals of the block's series.
    pub fn tombstones(&self) -> std::sync::Arc<Tombstones> {
        self.tombstones.read().clone()
    }

    /// Replaces the block's tombstones: the `tombstones` file first (atomically), then what
    /// readers see.
    pub fn set_tombstones(&self, t: Tombstones) -> Result<()> {
        t.write(&self.dir.join(TOMBSTONES_FILE))?;
        *self.tombstones.write() = std::sync::Arc::new(t);
        Ok(())
    }

    /// The block's metadata.
    pub fn meta(&self) -> &BlockMeta {
        &self.meta
    }

    /// The block's folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Bytes on disk: `meta.json`, index and chunk segments.
    pub fn size_bytes(&self) -> u64 {
        self.size
    }

    /// The block's index.
    pub fn index(&self) -> &IndexReader {
        &self.index
    }

    /// The series matching every matcher that have chunks overlapping `[mint, maxt]`
    /// (inclusive), sorted by labels, each with only those chunks. Matchers follow Prometheus:
    /// regexes are fully anchored and a matcher that matches `""` also selects series
    /// lacking the label. No matchers select every series.
    pub fn select(&self, ms: &[Matcher], mint: i64, maxt: i64) -> Result<Vec<BlockSeries>> {
        if mint > maxt || mint > self.meta.max_time || maxt < self.meta.min_time {
            return Ok(Vec::new());
        }
        let ids = self.index.select(ms)?;
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let mut s = self.index.series(id)?;
            s.chunks
                .retain(|(m, _)| m.max_time >= mint && m.min_time <= maxt);
            if !s.chunks.is_empty() {
                out.push(BlockSeries {
                    labels: s.labels,
                    chunks: s.chunks,
                });
            }
        }
        Ok(out)
    }

    /// The encoded chunk at reference `r` (mapped bytes, bounds-checked; its checksum is
    /// verified when decoded). Use [`Block::decode_chunk`] for errors that name the file.
    pub fn chunk(&self, r: u64) -> Result<&[u8]> {
        self.chunks.get(r)
    }

    /// Names the chunk file and the offset of chunk `r` in an error from decoding its bytes
    /// (the same file and offset as [`Block::check`] gives).
    pub fn locate_chunk_error(&self, r: u64, e: Error) -> Error {
        relocate(e, &self.chunks.segment_path(r), u64::from(split_ref(r).1))
    }

    /// Decodes the chunk at `r`, verifying its checksum; errors name the chunk file and offset.
    pub fn decode_chunk(&self, r: u64) -> Result<chunk_api::SampleIter<'_>> {
        self.chunks.decode(r)
    }

    /// Label names of the series matching `ms` (all series when empty), sorted.
    pub fn label_names(&self, ms: &[Matcher]) -> Result<Vec<String>> {
        if ms.is_empty() {
            return Ok(self
                .index
                .label_names()
                .into_iter()
                .map(String::from)
                .collect());
        }
        let mut names = BTreeSet::new();
        for id in self.index.select(ms)? {
            for l in &self.index.series(id)?.labels {
                if !names.contains(&l.name) {
                    names.insert(l.name.clone());
                }
            }
        }
        Ok(names.into_iter().collect())
    }

    /// Values of label `name` among the series matching `ms` (all series when empty), sorted.
    pub fn label_values(&self, name: &str, ms: &[Matcher]) -> Result<Vec<String>> {
        let values = self.index.label_values(name);
        if ms.is_empty() {
            return Ok(values.into_iter().map(String::from).collect());
        }
        let ids = self.index.select(ms)?;
        let mut out = Vec::new();
        if ids.is_empty() {
            return Ok(out);
        }
        for v in values {
            let p = self.index.postings(name, v)?;
            if !sets::intersect(&p, &ids).is_empty() {
                out.push(v.to_string());
            }
        }
        Ok(out)
    }

    /// Verifies every checksum in the block: each index section, each chunk in the chunk
    /// files, and that every chunk the index refers to decodes and agrees with its index
    /// entry. Returns one error per problem (file and offset in each); `Ok(vec![])` when the
    /// block is sound.
    pub fn check(&self) -> Result<Vec<Error>> {
        let mut errs = self.index.check();
        errs.extend(self.chunks.check());
        let (mut series, mut samples, mut nchunks) = (0u64, 0u64, 0u64);
        for id in 0..self.index.num_series() {
            let Ok(s) = self.index.series(id) else {
                continue; // reported by index.check()
            };
            series += 1;
            for (m, r) in &s.chunks {
                nchunks += 1;
                samples += u64::from(m.num_samples);
                let path = self.chunks.segment_path(*r);
                let off = u64::from(split_ref(*r).1);
                let mut it = match self.chunks.decode(*r) {
                    Ok(it) => it,
                    Err(e) => {
                        errs.push(e);
                        continue;
                    }
                };
                let (mut n, mut first, mut last) = (0u64, None, None);
                for (t, _) in it.by_ref() {
                    n += 1;
                    first.get_or_insert(t);
                    last = Some(t);
                }
                if let Some(e) = it.take_err() {
                    errs.push(relocate(e, &path, off));
                    continue;
                }
                if n != u64::from(m.num_samples)
                    || first != Some(m.min_time)
                    || last != Some(m.max_time)
                {
                    errs.push(Error::corrupt(
                        "chunk",
                        &path,
                        off,
                        format!(
                            "chunk holds {n} samples in [{first:?}, {last:?}], index says {} in [{}, {}] (series {})",
                            m.num_samples, m.min_time, m.max_time, s.labels
                        ),
                    ));
                }
            }
        }
        if errs.is_empty()
            && (series != self.meta.num_series
                || samples != self.meta.num_samples
                || nchunks != self.meta.num_chunks)
        {
            errs.push(Error::corrupt(
                "block meta",
                self.dir.join(META_FILE),
                0,
                format!(
                    "meta.json counts {}/{}/{} series/chunks/samples, index holds {series}/{nchunks}/{samples}",
                    self.meta.num_series, self.meta.num_chunks, self.meta.num_samples
                ),
            ));
        }
        let mut seen = BTreeSet::new();
        errs.retain(|e| seen.insert(e.to_string()));
        Ok(errs)
    }
}
