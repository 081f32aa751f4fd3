//! Compaction of adjacent and overlapping blocks, and retention over real blocks.

mod block_common;

use block_common::*;
use inferdb_storage::block::{delete_block, list_block_dirs, Block, BlockMeta};
use inferdb_storage::fuzzing::blocks_to_delete;
use inferdb_storage::fuzzing::{compact, plan};
use inferdb_storage::Labels;
use std::collections::BTreeMap;
use std::path::Path;

const H: i64 = 3600 * 1000;

type Data = BTreeMap<Labels, BTreeMap<i64, u64>>;

fn series(name: &str, inst: &str) -> Labels {
    Labels::from_pairs([("__name__", name), ("instance", inst)])
}

/// Samples every `step` ms in `[from, to)`, value derived from t and `salt`.
fn samples(from: i64, to: i64, step: i64, salt: f64) -> Vec<(i64, f64)> {
    (0..)
        .map(|i| from + i * step)
        .take_while(|t| *t < to)
        .map(|t| (t, t as f64 / 1000.0 + salt))
        .collect()
}

fn add(data: &mut Data, l: &Labels, s: &[(i64, f64)]) {
    let e = data.entry(l.clone()).or_default();
    for (t, v) in s {
        e.insert(*t, v.to_bits());
    }
}

fn read_block(b: &Block) -> Data {
    read_all(b, &[], i64::MIN, i64::MAX)
        .into_iter()
        .map(|(l, s)| {
            let mut prev = i64::MIN;
            for (t, _) in &s {
                assert!(*t > prev, "samples out of order or duplicated in {l}");
                prev = *t;
            }
            (l, s.into_iter().collect())
        })
        .collect()
}

fn open(parent: &Path, m: &BlockMeta) -> Block {
    Block::open(&parent.join(&m.id)).unwrap()
}

#[test]
fn adjacent_blocks_compact_keeping_every_sample() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    let mut want = Data::new();
    let mut metas = Vec::new();
    for k in 0..3 {
        let (from, to) = (k * 2 * H, (k + 1) * 2 * H);
        let mut blk = Vec::new();
        for i in 0..20 {
            // series 19 only exists in the last block
            if i == 19 && k < 2 {
                continue;
            }
            let l = series("vllm:num_requests_running", &format!("h{i}"));
            let s = samples(from + i, to, 15_000, k as f64);
            add(&mut want, &l, &s);
            blk.push((l, s));
        }
        metas.push(write(p, from, to, &blk));
    }
    // A fourth (newest) block makes the first window eligible.
    let l = series("vllm:num_requests_running", "h0");
    let s = samples(6 * H, 8 * H, 15_000, 9.0);
    metas.push(write(p, 6 * H, 8 * H, &[(l, s)]));

    let groups = plan(&metas);
    let want_group: Vec<String> = metas[..3].iter().map(|m| m.id.clone()).collect();
    assert_eq!(groups, vec![want_group]);

    let blocks: Vec<Block> = metas[..3].iter().map(|m| open(p, m)).collect();
    let refs: Vec<&Block> = blocks.iter().collect();
    let out = compact(p, &refs).unwrap();
    assert_eq!(out.min_time, 0);
    assert_eq!(out.max_time, 6 * H);
    assert_eq!(out.level, 2);
    let mut srcs: Vec<String> = metas[..3].iter().map(|m| m.id.clone()).collect();
    srcs.sort();
    assert_eq!(out.sources, srcs);
    assert_eq!(out.num_series, 20);
    let total: usize = want.values().map(|s| s.len()).sum();
    assert_eq!(out.num_samples, total as u64);

    let c = open(p, &out);
    assert!(c.check().unwrap().is_empty());
    assert_eq!(read_block(&c), want);
    // the 120-sample chunks of the inputs (480 samples per series and block) are merged
    // into chunks of up to COMPACTED_CHUNK_SAMPLES (960) in the output, but for each series'
    // newest hour (RECENT_SPAN_MS), which stays in chunks of up to 120
    let max = inferdb_storage::block::COMPACTED_CHUNK_SAMPLES;
    let span = inferdb_storage::block::RECENT_SPAN_MS;
    for s in c.select(&[], i64::MIN, i64::MAX).unwrap() {
        let last = s.chunks.iter().map(|(m, _)| m.max_time).max().unwrap();
        let (recent, old): (Vec<_>, Vec<_>) = s
            .chunks
            .iter()
            .map(|(m, _)| *m)
            .partition(|m| m.min_time > last - span);
        assert!(
            old.iter().all(|m| m.max_time <= last - span),
            "{}",
            s.labels
        );
        let old_n: usize = old.iter().map(|m| m.num_samples as usize).sum();
        let recent_n: usize = recent.iter().map(|m| m.num_samples as usize).sum();
        assert!(old.iter().all(|m| m.num_samples as usize <= max));
        assert!(recent.iter().all(|m| m.num_samples <= 120));
        assert_eq!(old.len(), old_n.div_ceil(max), "{}", s.labels);
        assert_eq!(recent.len(), recent_n.div_ceil(120), "{}", s.labels);
        assert_eq!(recent_n, 240, "{}: an hour at 15 s", s.labels);
    }

    // Caller deletes the sources; the compacted block remains readable.
    for m in &metas[..3] {
        delete_block(&p.join(&m.id)).unwrap();
    }
    drop(blocks);
    let dirs = list_block_dirs(p).unwrap();
    assert_eq!(dirs.len(), 2);
    assert!(dirs.contains(&p.join(&out.id)));
    let after: Vec<BlockMeta> = vec![out, metas[3].clone()];
    assert!(plan(&after).is_empty());
}

#[test]
fn overlapping_blocks_merge_samples_per_series() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    let mut want = Data::new();
    // Head-cut block: every 15 s over [0, 2h).
    let a_series: Vec<(Labels, Vec<(i64, f64)>)> = (0..10)
        .map(|i| {
            let l = series("vllm:prompt_tokens_total", &format!("h{i}"));
            (l, samples(0, 2 * H, 15_000, 0.0))
        })
        .collect();
    // Backfill block over [1h, 3h) for some of the same series, interleaved timestamps
    // (every 10 s: some coincide with the head's, with different values) plus new series.
    let b_series: Vec<(Labels, Vec<(i64, f64)>)> = (5..15)
        .map(|i| {
            let l = series("vllm:prompt_tokens_total", &format!("h{i}"));
            (l, samples(H, 3 * H, 10_000, 0.5))
        })
        .collect();
    for (l, s) in &a_series {
        add(&mut want, l, s);
    }
    // Later block wins on equal timestamps.
    for (l, s) in &b_series {
        add(&mut want, l, s);
    }
    let ma = write(p, 0, 2 * H, &a_series);
    let mb = write(p, H, 3 * H, &b_series);
    let groups = plan(&[ma.clone(), mb.clone()]);
    assert_eq!(groups, vec![vec![ma.id.clone(), mb.id.clone()]]);

    let (ba, bb) = (open(p, &ma), open(p, &mb));
    let out = compact(p, &[&ba, &bb]).unwrap();
    assert_eq!((out.min_time, out.max_time), (0, 3 * H));
    let c = open(p, &out);
    assert!(c.check().unwrap().is_empty());
    let got = read_block(&c);
    assert_eq!(got.len(), 15);
    assert_eq!(got, want);
    let total: usize = want.values().map(|s| s.len()).sum();
    assert_eq!(out.num_samples, total as u64);
    // Re-encoded chunks respect the chunk size limit.
    for s in c.select(&[], i64::MIN, i64::MAX).unwrap() {
        for (m, _) in &s.chunks {
            assert!(m.num_samples as usize <= inferdb_storage::block::COMPACTED_CHUNK_SAMPLES);
        }
        for w in s.chunks.windows(2) {
            assert!(
                w[0].0.max_time < w[1].0.min_time,
                "chunks overlap in {}",
                s.labels
            );
        }
    }
}

#[test]
fn old_imported_history_is_kept_by_time_retention() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    let day = 24 * H;
    // History from 2020, long before "now": only old blocks exist.
    let base = 1_577_836_800_000; // 2020-01-01
    let mut metas = Vec::new();
    for k in 0..5 {
        let l = series("vllm:x", "a");
        let from = base + k * day;
        metas.push(write(
            p,
            from,
            from + day,
            &[(l, samples(from, from + day, 60_000, 0.0))],
        ));
    }
    let sized: Vec<(BlockMeta, u64)> = metas
        .iter()
        .map(|m| (m.clone(), open(p, m).size_bytes()))
        .collect();
    assert!(blocks_to_delete(&sized, Some(15 * day), None).is_empty());
    // A 2-day retention keeps what lies within 2 days of the newest block's end.
    assert_eq!(
        blocks_to_delete(&sized, Some(2 * day), None),
        vec![metas[0].id.clone(), metas[1].id.clone()]
    );
    // Size retention keeps the newest blocks that fit.
    let one = sized[4].1;
    let del = blocks_to_delete(&sized, None, Some(one * 2 + one / 2));
    assert_eq!(del.len(), 3);
    assert!(!del.contains(&metas[4].id) && !del.contains(&metas[3].id));
    // New data 30 days later: the history now ages out.
    let from = base + 40 * day;
    let l = series("vllm:x", "a");
    let m_new = write(
        p,
        from,
        from + 2 * H,
        &[(l, samples(from, from + 2 * H, 60_000, 0.0))],
    );
    let mut sized2 = sized.clone();
    sized2.push((m_new.clone(), 1));
    let del = blocks_to_delete(&sized2, Some(15 * day), None);
    assert_eq!(del.len(), 5);
    assert!(!del.contains(&m_new.id));
}
