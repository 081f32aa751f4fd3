//! Compaction: planning which blocks to merge and merging them into one larger block.
//!
//! Planning follows Prometheus' leveled compactor. Blocks whose time ranges overlap (e.g. a
//! backfilled block over head data) are merged first. Otherwise, leaving out the newest block,
//! blocks are grouped into aligned windows of the next range size (block duration × 3^k, as
//! Prometheus derives them: 2 h → 6 h → 18 h → ... by default); a
//! window holding more than one block is compacted when its blocks span the whole window or
//! it lies entirely before the most recent block.
//!
//! Merging keeps every sample: chunks that do not overlap in time are copied byte for byte;
//! overlapping chunks of a series are decoded, merged by timestamp and re-encoded.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::block::{Block, BlockMeta, BlockWriter, GroupSource};
use crate::chunk::{self, ChunkMeta, ChunkWriter, MAX_SAMPLES_PER_CHUNK};
use crate::error::{Error, Result};
use crate::labels::Labels;
use crate::tombstones::Intervals;

/// Two hours, the base block range.
#[cfg(any(test, feature = "fuzzing"))]
pub const BASE_RANGE_MS: i64 = 2 * 3600 * 1000;

/// The default compaction ranges: 2 h, 6 h, 18 h, 54 h, 162 h.
#[cfg(any(test, feature = "fuzzing"))]
pub fn default_ranges() -> Vec<i64> {
    (0..5).map(|i| BASE_RANGE_MS * 3i64.pow(i)).collect()
}

/// The compaction ranges as Prometheus derives them: ten ranges growing ×3 from the block
/// duration (`--storage.tsdb.min-block-duration`), cut at the max block duration, which is a
/// tenth of the retention capped at 31 days, and never below the block duration.
pub fn ranges(min_block_ms: i64, retention_ms: Option<i64>) -> Vec<i64> {
    let min = min_block_ms.max(1);
    let mut max = 31 * 24 * 3600 * 1000i64;
    if let Some(r) = retention_ms.filter(|&r| r > 0) {
        max = max.min(r / 10);
    }
    let max = max.max(min);
    (0..10u32)
        .map_while(|i| min.checked_mul(3i64.pow(i)))
        .take_while(|&r| r <= max)
        .collect()
}

/// Groups of block ids to compact with the default ranges (see [`plan_with_ranges`]).
#[cfg(any(test, feature = "fuzzing"))]
pub fn plan(metas: &[BlockMeta]) -> Vec<Vec<String>> {
    plan_with_ranges(metas, &default_ranges())
}

/// Groups of block ids to compact, each group into one block. Block `max_time` is taken as
/// exclusive (Prometheus convention). Groups of overlapping blocks come first and alone; else
/// the disjoint groups at the smallest range level that has any. Call again after compacting:
/// an empty plan means nothing is left to do.
pub fn plan_with_ranges(metas: &[BlockMeta], ranges: &[i64]) -> Vec<Vec<String>> {
    plan_blocks(metas, ranges, true)
}

/// [`plan_with_ranges`] for history that is complete (an import): the newest block is not
/// left out and every window holding more than one block is compacted, so that imported
/// history ends in the blocks a live store would have after its compactions.
pub fn plan_history(metas: &[BlockMeta], ranges: &[i64]) -> Vec<Vec<String>> {
    plan_blocks(metas, ranges, false)
}

fn plan_blocks(metas: &[BlockMeta], ranges: &[i64], live: bool) -> Vec<Vec<String>> {
    let mut ms: Vec<&BlockMeta> = metas.iter().collect();
    ms.sort_by(|a, b| (a.min_time, a.max_time, &a.id).cmp(&(b.min_time, b.max_time, &b.id)));

    // Overlapping blocks.
    let mut groups: Vec<Vec<String>> = Vec::new();
    let mut cur: Vec<&BlockMeta> = Vec::new();
    let mut cur_max = i64::MIN;
    for m in &ms {
        if !cur.is_empty() && m.min_time < cur_max {
            cur.push(m);
            cur_max = cur_max.max(m.max_time);
            continue;
        }
        if cur.len() > 1 {
            groups.push(cur.iter().map(|m| m.id.clone()).collect());
        }
        cur = vec![m];
        cur_max = m.max_time;
    }
    if cur.len() > 1 {
        groups.push(cur.iter().map(|m| m.id.clone()).collect());
    }
    if !groups.is_empty() {
        return groups;
    }

    if ms.len() < 2 {
        return Vec::new();
    }
    // Leave out the newest block (the one just cut from the head).
    let high_time = if live {
        ms.pop();
        ms[ms.len() - 1].min_time
    } else {
        i64::MAX
    };
    for &iv in ranges.iter().skip(1) {
        if iv <= 0 {
            continue;
        }
        let mut out = Vec::new();
        for part in split_by_range(&ms, iv) {
            let mint = part[0].min_time;
            let maxt = part[part.len() - 1].max_time;
            if part.len() > 1 && (maxt - mint == iv || maxt <= high_time) {
                out.push(part.iter().map(|m| m.id.clone()).collect());
            }
        }
        if !out.is_empty() {
            return out;
        }
    }
    Vec::new()
}

/// Splits blocks (sorted by min time) into groups that each fit one aligned window of `iv`;
/// blocks that straddle a window boundary are left out.
fn split_by_range<'a>(ms: &[&'a BlockMeta], iv: i64) -> Vec<Vec<&'a BlockMeta>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < ms.len() {
        let t0 = ms[i].min_time.div_euclid(iv) * iv;
        let end = t0.saturating_add(iv);
        if ms[i].max_time > end {
            i += 1;
            continue;
        }
        let mut g = Vec::new();
        while i < ms.len() && ms[i].min_time >= t0 && ms[i].max_time <= end {
            g.push(ms[i]);
            i += 1;
        }
        out.push(g);
    }
    out
}

/// Merges `blocks` into one new block under `parent` and returns its metadata. The new block
/// covers the union of the time ranges, has level max+1 and the union of the sources. Every
/// sample is kept; where blocks hold the same series at the same timestamp, the sample of the
/// block listed later wins. The source blocks are left in place (delete them with
/// [`crate::block::delete_block`] once the new block is open).
///
/// Samples deleted by the blocks' tombstones are left out.
pub fn compact(parent: &Path, blocks: &[&Block]) -> Result<BlockMeta> {
    if blocks.is_empty() {
        return Err(Error::io(
            parent,
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "no blocks to compact"),
        ));
    }
    let mint = blocks.iter().map(|b| b.meta().min_time).min().unwrap_or(0);
    let maxt = blocks.iter().map(|b| b.meta().max_time).max().unwrap_or(0);
    let level = blocks.iter().map(|b| b.meta().level).max().unwrap_or(0) + 1;
    let sources: BTreeSet<String> = blocks
        .iter()
        .flat_map(|b| b.meta().sources.iter().cloned())
        .collect();
    merge_into(parent, blocks, mint, maxt, level, sources)
}

/// Writes `block` again under `parent` without the samples its tombstones delete (for
/// `clean_tombstones`): same time range and sources, level one above the original's.
pub fn rewrite(parent: &Path, block: &Block) -> Result<BlockMeta> {
    let m = block.meta();
    let sources: BTreeSet<String> = m.sources.iter().cloned().collect();
    merge_into(
        parent,
        &[block],
        m.min_time,
        m.max_time,
        m.level.max(1) + 1,
        sources,
    )
}

fn merge_into(
    parent: &Path,
    blocks: &[&Block],
    mint: i64,
    maxt: i64,
    level: u32,
    sources: BTreeSet<String>,
) -> Result<BlockMeta> {
    let stones: Vec<_> = blocks.iter().map(|b| b.tombstones()).collect();
    let any_stones = stones.iter().any(|t| !t.is_empty());
    let mut all: BTreeMap<Labels, Vec<(ChunkMeta, usize, u64)>> = BTreeMap::new();
    for (bi, b) in blocks.iter().enumerate() {
        for s in b.select(&[], i64::MIN, i64::MAX)? {
            let e = all.entry(s.labels).or_default();
            e.extend(s.chunks.into_iter().map(|(m, r)| (m, bi, r)));
        }
    }

    let mut w = BlockWriter::new(parent)?;
    w.set_chunk_samples(crate::block::COMPACTED_CHUNK_SAMPLES);
    let res = (|| -> Result<()> {
        for (labels, mut chunks) in all {
            let dels: Vec<Option<&Intervals>> = if any_stones {
                stones.iter().map(|t| t.get(&labels)).collect()
            } else {
                vec![None; blocks.len()]
            };
            chunks
                .retain(|(m, bi, _)| !dels[*bi].is_some_and(|d| d.covers(m.min_time, m.max_time)));
            if chunks.is_empty() {
                continue;
            }
            chunks.sort_by_key(|(m, bi, _)| (m.min_time, m.max_time, *bi));
            // each chunk, and for a histogram group member where its group is (block, group
            // reference: member j's marker is j + 1 bytes before the group)
            let mut out: Vec<(Cow<'_, [u8]>, Option<GroupSource>)> =
                Vec::with_capacity(chunks.len());
            let mut i = 0;
            while i < chunks.len() {
                // A run of transitively overlapping chunks.
                let mut j = i + 1;
                let mut run_max = chunks[i].0.max_time;
                while j < chunks.len() && chunks[j].0.min_time <= run_max {
                    run_max = run_max.max(chunks[j].0.max_time);
                    j += 1;
                }
                let (m, bi, r) = chunks[i];
                if j == i + 1 && !dels[bi].is_some_and(|d| d.overlaps(m.min_time, m.max_time)) {
                    let c = blocks[bi].chunk(r)?;
                    let src = chunk::member_index(c).map(|j| (bi, r + j as u64 + 1));
                    out.push((Cow::Borrowed(c), src));
                } else {
                    merge_run(blocks, &chunks[i..j], &dels, &mut out)?;
                }
                i = j;
            }
            if !out.is_empty() {
                w.add_series_from(labels, out.iter().map(|(c, src)| (c.as_ref(), *src)))?;
            }
        }
        Ok(())
    })();
    match res {
        Ok(()) => w.finish(mint, maxt, level, Some(sources.into_iter().collect())),
        Err(e) => {
            w.abort();
            Err(e)
        }
    }
}

/// Decodes overlapping chunks (or one with deleted samples), merges their samples by
/// timestamp (later block wins on equal timestamps), leaves out the samples each block's
/// tombstones `dels` delete and re-encodes the rest.
fn merge_run(
    blocks: &[&Block],
    run: &[(ChunkMeta, usize, u64)],
    dels: &[Option<&Intervals>],
    out: &mut Vec<(Cow<'_, [u8]>, Option<GroupSource>)>,
) -> Result<()> {
    let mut samples: Vec<(i64, usize, f64)> = Vec::new();
    for (_, bi, r) in run {
        let mut it = blocks[*bi].decode_chunk(*r)?;
        let d = dels[*bi];
        for (t, v) in it.by_ref() {
            if !d.is_some_and(|d| d.contains(t)) {
                samples.push((t, *bi, v));
            }
        }
        if let Some(e) = it.take_err() {
            return Err(e);
        }
    }
    samples.sort_by_key(|(t, bi, _)| (*t, *bi));
    let mut w = ChunkWriter::new();
    let mut k = 0;
    while k < samples.len() {
        // Take the last of equal timestamps (highest block index).
        let mut l = k;
        while l + 1 < samples.len() && samples[l + 1].0 == samples[k].0 {
            l += 1;
        }
        if w.len() >= MAX_SAMPLES_PER_CHUNK {
            out.push((Cow::Owned(w.finish()), None));
            w = ChunkWriter::new();
        }
        w.append(samples[l].0, samples[l].2);
        k = l + 1;
    }
    if !w.is_empty() {
        out.push((Cow::Owned(w.finish()), None));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(id: &str, min: i64, max: i64) -> BlockMeta {
        BlockMeta {
            id: id.into(),
            min_time: min,
            max_time: max,
            num_series: 1,
            num_samples: 1,
            num_chunks: 1,
            level: 1,
            sources: vec![id.into()],
        }
    }

    const H: i64 = 3600 * 1000;

    #[test]
    fn plans_overlaps_first() {
        let metas = vec![m("a", 0, 2 * H), m("b", H, 3 * H), m("c", 4 * H, 6 * H)];
        assert_eq!(plan(&metas), vec![vec!["a".to_string(), "b".into()]]);
    }

    #[test]
    fn plans_full_window_and_keeps_newest() {
        // Three 2h blocks fill [0,6h); a fourth is the newest and is left out.
        let metas = vec![
            m("a", 0, 2 * H),
            m("b", 2 * H, 4 * H),
            m("c", 4 * H, 6 * H),
            m("d", 6 * H, 8 * H),
        ];
        assert_eq!(
            plan(&metas),
            vec![vec!["a".to_string(), "b".into(), "c".into()]]
        );
        // Only two blocks in the first window and the newest right after: not yet.
        let metas = vec![m("a", 0, 2 * H), m("b", 2 * H, 4 * H), m("d", 4 * H, 6 * H)];
        assert!(plan(&metas).is_empty());
        // A window entirely before the most recent (non-newest) block is compacted.
        let metas = vec![
            m("a", 0, 2 * H),
            m("b", 2 * H, 4 * H),
            m("c", 6 * H, 8 * H),
            m("d", 8 * H, 10 * H),
        ];
        assert_eq!(plan(&metas), vec![vec!["a".to_string(), "b".into()]]);
        assert!(plan(&[m("a", 0, 2 * H)]).is_empty());
        assert!(plan(&[]).is_empty());
    }

    /// Prometheus' `ExponentialBlockRanges(min, 10, 3)` cut at the max block duration.
    #[test]
    fn ranges_follow_block_duration_and_retention() {
        let r = ranges(2 * H, Some(15 * 24 * H));
        assert_eq!(r, vec![2 * H, 6 * H, 18 * H]);
        assert_eq!(ranges(2 * H, Some(1)), vec![2 * H]);
        assert_eq!(ranges(2 * H, None).last().copied(), Some(486 * H));
        let s = 1000;
        let r = ranges(2 * s, Some(100 * 365 * 24 * H));
        assert_eq!(r.len(), 10);
        assert_eq!(&r[..3], &[2 * s, 6 * s, 18 * s]);
        assert_eq!(r[9], 2 * s * 3i64.pow(9));
        // min-block-duration 30m, retention 1d: max block 2.4 h
        assert_eq!(ranges(H / 2, Some(24 * H)), vec![H / 2, 3 * H / 2]);
    }
}
