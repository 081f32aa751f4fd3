//! Deleting series (tombstones in blocks and head), cleaning them, and snapshots.

use std::path::Path;

use inferdb_storage::fuzzing::{Interval, Tombstones, TOMBSTONES_FILE};
use inferdb_storage::{Db, Labels, Matcher, Options};

const BD: i64 = 10_000;

fn opts() -> Options {
    Options {
        background: false,
        block_duration_ms: BD,
        retention_ms: None,
        ..Options::default()
    }
}

fn l(inst: &str) -> Labels {
    Labels::from_pairs([("__name__", "up"), ("instance", inst)])
}

type Dump = Vec<(String, Vec<(i64, u64)>)>;

fn read(db: &Db, mint: i64, maxt: i64) -> Dump {
    let q = db.querier(mint, maxt).unwrap();
    q.select(&[])
        .unwrap()
        .iter()
        .map(|s| {
            let mut it = s.iter();
            let v: Vec<(i64, u64)> = it.by_ref().map(|(t, v)| (t, v.to_bits())).collect();
            assert!(it.err().is_none(), "{:?}", it.err());
            let mut ts = Vec::new();
            let mut vs = Vec::new();
            s.decode_into(&mut ts, &mut vs).unwrap();
            assert_eq!(ts, v.iter().map(|x| x.0).collect::<Vec<_>>());
            (s.labels().to_string(), v)
        })
        .collect()
}

fn series(db: &Db, mint: i64, maxt: i64) -> Vec<String> {
    let q = db.querier(mint, maxt).unwrap();
    q.series(&[Matcher::equal("__name__", "up")])
        .unwrap()
        .iter()
        .map(|l| l.to_string())
        .collect()
}

/// Samples every 100 ms in `[from, to)` for instances a, b, c.
fn fill(db: &Db, from: i64, to: i64) {
    let mut app = db.appender();
    for (i, inst) in ["a", "b", "c"].iter().enumerate() {
        let r = app.get_ref(&l(inst)).unwrap();
        let mut t = from;
        while t < to {
            app.append_ref(r, t, t as f64 + i as f64).unwrap();
            t += 100;
        }
    }
    app.commit().unwrap();
}

/// What `dump` holds once `[mint, maxt]` of `inst` is taken out.
fn without(dump: &Dump, inst: &str, mint: i64, maxt: i64) -> Dump {
    dump.iter()
        .map(|(k, v)| {
            let keep = if k.contains(&format!("instance=\"{inst}\"")) {
                v.iter()
                    .filter(|x| x.0 < mint || x.0 > maxt)
                    .copied()
                    .collect()
            } else {
                v.clone()
            };
            (k.clone(), keep)
        })
        .filter(|(_, v)| !v.is_empty())
        .collect()
}

#[test]
fn delete_hides_samples_in_blocks_and_head_across_reopen_cut_and_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    fill(&db, 0, 45_000);
    db.cut_all().unwrap();
    assert_eq!(
        db.blocks().len(),
        4,
        "blocks [0,10s) .. [30s,40s), head 40s.."
    );
    let before = read(&db, i64::MIN, i64::MAX);
    // b loses 5s..42s: part of one block, three whole blocks, part of the head
    db.delete(&[Matcher::equal("instance", "b")], 5_000, 42_000)
        .unwrap();
    let want = without(&before, "b", 5_000, 42_000);
    assert_eq!(read(&db, i64::MIN, i64::MAX), want);
    // the series API leaves b out where all of its chunks are deleted, not elsewhere
    assert_eq!(series(&db, 20_000, 29_000).len(), 2);
    assert_eq!(series(&db, 0, 29_000).len(), 3);
    assert!(dir.path().join("head_tombstones").is_file());
    let with_stones = db
        .blocks()
        .iter()
        .filter(|m| dir.path().join(&m.id).join(TOMBSTONES_FILE).is_file())
        .count();
    assert_eq!(with_stones, 4);
    // deleting again, or where nothing is, changes nothing
    db.delete(&[Matcher::equal("instance", "b")], 6_000, 7_000)
        .unwrap();
    db.delete(&[Matcher::equal("instance", "zzz")], 0, 100_000)
        .unwrap();
    assert_eq!(read(&db, i64::MIN, i64::MAX), want);
    // samples appended after the delete are not hidden by it
    fill(&db, 45_000, 46_000);
    let want2 = read(&db, i64::MIN, i64::MAX);
    assert!(want2
        .iter()
        .any(|(k, v)| k.contains("\"b\"") && v.last().unwrap().0 == 45_900));
    db.close().unwrap();

    let db = Db::open(dir.path(), opts()).unwrap();
    assert_eq!(read(&db, i64::MIN, i64::MAX), want2, "after reopen");
    // the head range goes into a block without the deleted samples
    fill(&db, 46_000, 55_000);
    let want3 = read(&db, i64::MIN, i64::MAX);
    db.cut_all().unwrap();
    assert_eq!(read(&db, i64::MIN, i64::MAX), want3, "after the cut");
    assert!(
        !dir.path().join("head_tombstones").exists(),
        "head tombstones before the cut are forgotten"
    );
    let newest = db.blocks().last().unwrap().clone();
    assert_eq!(newest.min_time, 40_000);
    assert_eq!(newest.num_samples, 100 * 3 - 21, "b's 40.0-42.0 s left out");
    // compaction drops the deleted samples
    let out = tempfile::tempdir().unwrap();
    let blocks = db.open_blocks();
    let inputs: Vec<&inferdb_storage::block::Block> = blocks[..2].iter().map(|b| &**b).collect();
    let m = inferdb_storage::fuzzing::compact(out.path(), &inputs).unwrap();
    assert_eq!(m.num_samples, 600 - 150, "b's 5.0-19.9 s left out");
    let c = Db::open(
        out.path(),
        Options {
            read_only: true,
            ..opts()
        },
    )
    .unwrap();
    let first: Dump = want3
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                v.iter().filter(|x| x.0 < 20_000).copied().collect(),
            )
        })
        .collect();
    assert_eq!(read(&c, i64::MIN, i64::MAX), first, "after compaction");
    assert_eq!(read(&db, i64::MIN, i64::MAX), want3, "after compaction");
    db.close().unwrap();
}

#[test]
fn clean_tombstones_rewrites_blocks_and_deletes_emptied_ones() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    fill(&db, 0, 35_000);
    db.cut_all().unwrap();
    let ids: Vec<String> = db.blocks().iter().map(|m| m.id.clone()).collect();
    assert_eq!(ids.len(), 3);
    // everything in [10s, 20s) goes; b also loses 1s..2s
    db.delete(&[Matcher::equal("__name__", "up")], 10_000, 19_999)
        .unwrap();
    db.delete(&[Matcher::equal("instance", "b")], 1_000, 2_000)
        .unwrap();
    let want = read(&db, i64::MIN, i64::MAX);
    assert_eq!(db.clean_tombstones().unwrap(), 2);
    assert_eq!(read(&db, i64::MIN, i64::MAX), want);
    let blocks = db.blocks();
    assert_eq!(blocks.len(), 2, "the emptied block is gone: {blocks:?}");
    assert_eq!(blocks[1].id, ids[2], "the untouched block stays");
    assert_ne!(blocks[0].id, ids[0]);
    assert_eq!(blocks[0].num_samples, 300 - 11);
    for m in &blocks {
        assert!(!dir.path().join(&m.id).join(TOMBSTONES_FILE).exists());
        assert!(!dir.path().join(&ids[0]).exists() && !dir.path().join(&ids[1]).exists());
    }
    assert_eq!(db.clean_tombstones().unwrap(), 0);
    db.close().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    assert_eq!(read(&db, i64::MIN, i64::MAX), want);
}

/// Compacts the blocks with these ids (offline, as the background compaction would) and
/// deletes them; returns the output's id.
fn compact_offline(dir: &Path, ids: &[&str]) -> String {
    use inferdb_storage::block::Block;
    let blocks: Vec<Block> = ids
        .iter()
        .map(|id| Block::open(&dir.join(id)).unwrap())
        .collect();
    let refs: Vec<&Block> = blocks.iter().collect();
    let m = inferdb_storage::fuzzing::compact(dir, &refs).unwrap();
    drop(refs);
    for b in blocks {
        let d = b.dir().to_path_buf();
        drop(b);
        std::fs::remove_dir_all(d).unwrap();
    }
    m.id
}

/// A crash after a block of level >= 2 was written again without its tombstones (or after
/// blocks of level >= 2 were compacted) and before the old blocks were deleted leaves both
/// on disk. The next open deletes the old ones, and queries count every sample once.
#[test]
fn interrupted_rewrite_or_compaction_at_level_2_leaves_no_duplicate() {
    use inferdb_storage::block::Block;
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    fill(&db, 0, 45_000);
    db.cut_all().unwrap();
    let ids: Vec<String> = db.blocks().iter().map(|m| m.id.clone()).collect();
    assert_eq!(ids.len(), 4);
    db.close().unwrap();
    // two level-2 blocks: [0, 20s) and [20s, 40s)
    let c1 = compact_offline(dir.path(), &[&ids[0], &ids[1]]);
    let c2 = compact_offline(dir.path(), &[&ids[2], &ids[3]]);
    let db = Db::open(dir.path(), opts()).unwrap();
    let levels: Vec<u32> = db.blocks().iter().map(|m| m.level).collect();
    assert_eq!(levels, vec![2, 2]);
    db.delete(&[Matcher::equal("instance", "b")], 3_000, 14_000)
        .unwrap();
    let want = read(&db, i64::MIN, i64::MAX);

    // clean_tombstones' rewrite of c1 written, the crash before c1 is deleted: the state
    // clean_tombstones leaves between `compact::rewrite` and `delete_block`
    let old = Block::open(&dir.path().join(&c1)).unwrap();
    let rewritten = inferdb_storage::fuzzing::rewrite(dir.path(), &old).unwrap();
    drop(old);
    assert_eq!(rewritten.level, 3);
    db.close().unwrap();
    assert!(dir.path().join(&c1).is_dir() && dir.path().join(&rewritten.id).is_dir());
    let db = Db::open(dir.path(), opts()).unwrap();
    let ids_now: Vec<String> = db.blocks().iter().map(|m| m.id.clone()).collect();
    assert_eq!(ids_now, vec![rewritten.id.clone(), c2.clone()]);
    assert!(!dir.path().join(&c1).exists(), "the old block is deleted");
    assert_eq!(
        read(&db, i64::MIN, i64::MAX),
        want,
        "each sample counted once"
    );
    let q = db.querier(i64::MIN, i64::MAX).unwrap();
    let n: usize = q
        .select(&[])
        .unwrap()
        .iter()
        .map(|s| s.iter().count())
        .sum();
    assert_eq!(n, 3 * 450 - 111, "b's 3.0-14.0 s deleted, nothing doubled");
    drop(q);
    db.close().unwrap();

    // the same for a compaction of level-2 and level-3 blocks into level 4, the crash before
    // its inputs are deleted
    let inputs = [
        Block::open(&dir.path().join(&rewritten.id)).unwrap(),
        Block::open(&dir.path().join(&c2)).unwrap(),
    ];
    let refs: Vec<&Block> = inputs.iter().collect();
    let top = inferdb_storage::fuzzing::compact(dir.path(), &refs).unwrap();
    drop(refs);
    drop(inputs);
    assert_eq!(top.level, 4);
    let db = Db::open(dir.path(), opts()).unwrap();
    let ids_now: Vec<String> = db.blocks().iter().map(|m| m.id.clone()).collect();
    assert_eq!(ids_now, vec![top.id.clone()]);
    assert_eq!(read(&db, i64::MIN, i64::MAX), want);
    // a read-only opener beside the crash state leaves the files alone and still counts once
    drop(db);
    let again = inferdb_storage::fuzzing::compact(
        dir.path(),
        &[&Block::open(&dir.path().join(&top.id)).unwrap()],
    )
    .unwrap();
    let ro = Db::open(
        dir.path(),
        Options {
            read_only: true,
            ..opts()
        },
    )
    .unwrap();
    assert_eq!(ro.blocks().len(), 1);
    assert_eq!(read(&ro, i64::MIN, i64::MAX), want);
    assert!(dir.path().join(&top.id).is_dir() && dir.path().join(&again.id).is_dir());
}

#[test]
fn snapshot_opens_with_the_same_answers() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    fill(&db, 0, 25_000);
    db.cut_all().unwrap();
    db.delete(&[Matcher::equal("instance", "a")], 3_000, 21_000)
        .unwrap();
    let live = read(&db, i64::MIN, i64::MAX);
    let snap = dir.path().join("snapshots/s1");
    db.snapshot(&snap, true).unwrap();
    let only_blocks = dir.path().join("snapshots/s2");
    db.snapshot(&only_blocks, false).unwrap();
    // the live store goes on changing; the snapshot does not
    db.delete(&[Matcher::equal("instance", "c")], 0, 100_000)
        .unwrap();
    db.clean_tombstones().unwrap();
    fill(&db, 25_000, 26_000);
    let check = |p: &Path| {
        let s = Db::open(
            p,
            Options {
                read_only: true,
                ..opts()
            },
        )
        .unwrap();
        for b in s.open_blocks() {
            assert!(b.check().unwrap().is_empty());
        }
        read(&s, i64::MIN, i64::MAX)
    };
    assert_eq!(check(&snap), live);
    let blocks_only: Dump = live
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                v.iter().filter(|x| x.0 < 20_000).copied().collect(),
            )
        })
        .collect();
    assert_eq!(check(&only_blocks), blocks_only);
    // a writable open of the snapshot works too
    let s = Db::open(&snap, opts()).unwrap();
    assert_eq!(read(&s, i64::MIN, i64::MAX), live);
}

#[test]
fn a_damaged_block_tombstone_file_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    fill(&db, 0, 15_000);
    db.cut_all().unwrap();
    db.delete(&[Matcher::equal("instance", "a")], 0, 1_000)
        .unwrap();
    let id = db.blocks()[0].id.clone();
    db.close().unwrap();
    let p = dir.path().join(&id).join(TOMBSTONES_FILE);
    let mut b = std::fs::read(&p).unwrap();
    let n = b.len();
    b[n - 6] ^= 1;
    std::fs::write(&p, b).unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    let bad = &db.open_stats().bad_blocks;
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert!(bad[0].1.contains("tombstones"), "{}", bad[0].1);
}

/// Writes the fuzz corpus seeds of `tombstones_read`: run with `--ignored write_seeds`.
#[test]
#[ignore]
fn write_seeds() {
    let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/tombstones_read");
    std::fs::create_dir_all(&out).unwrap();
    let mut t = Tombstones::default();
    std::fs::write(out.join("empty"), t.encode()).unwrap();
    t.add(&l("a"), Interval::new(1_000, 2_000));
    std::fs::write(out.join("one"), t.encode()).unwrap();
    t.add(&l("b"), Interval::new(i64::MIN, i64::MAX));
    t.add(&l("a"), Interval::new(-5_000, -1));
    t.add(
        &Labels::from_pairs([("__name__", "x"), ("v", "é\"\n")]),
        Interval::new(7, 7),
    );
    let full = t.encode();
    std::fs::write(out.join("several"), &full).unwrap();
    let mut bad = full.clone();
    bad[10] ^= 0xff;
    std::fs::write(out.join("bad_crc"), bad).unwrap();
    std::fs::write(out.join("truncated"), &full[..full.len() / 2]).unwrap();
    std::fs::write(out.join("magic_only"), b"IDBT").unwrap();
}
