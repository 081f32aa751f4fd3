//! Db: block cuts from the head, WAL checkpoints, reopen, backfill, retention.

use inferdb_storage::{Db, Error, Labels, Matcher, Options, Sample};

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
    Labels::from_pairs([("__name__", "vllm:tokens_total"), ("instance", inst)])
}

fn read_all(db: &Db) -> Vec<(String, Vec<(i64, u64)>)> {
    let q = db.querier(i64::MIN, i64::MAX).unwrap();
    q.select(&[])
        .unwrap()
        .iter()
        .map(|s| {
            let mut it = s.iter();
            let v: Vec<(i64, u64)> = it.by_ref().map(|(t, v)| (t, v.to_bits())).collect();
            assert!(it.err().is_none(), "{:?}", it.err());
            (s.labels().to_string(), v)
        })
        .collect()
}

fn fill(db: &Db, from: i64, to: i64, step: i64, series: &[&str]) {
    let mut app = db.appender();
    let refs: Vec<_> = series.iter().map(|s| app.get_ref(&l(s)).unwrap()).collect();
    let mut t = from;
    while t < to {
        for (i, r) in refs.iter().enumerate() {
            app.append_ref(*r, t, (t / step) as f64 + i as f64 * 0.25)
                .unwrap();
        }
        t += step;
    }
    app.commit().unwrap();
}

#[test]
fn cuts_blocks_and_checkpoints_wal() {
    let d = tempfile::tempdir().unwrap();
    let db = Db::open(d.path(), opts()).unwrap();
    fill(&db, 0, 14_000, 100, &["a", "b"]);
    db.maintain().unwrap();
    assert!(
        db.blocks().is_empty(),
        "head spans less than 1.5 block durations"
    );
    fill(&db, 14_000, 40_000, 100, &["a"]);
    let before = read_all(&db);
    assert_eq!(before[0].1.len(), 400);
    db.maintain().unwrap();
    let blocks = db.blocks();
    assert!(!blocks.is_empty());
    assert_eq!(blocks[0].min_time, 0);
    assert_eq!(blocks[0].max_time, BD);
    assert!(db.head().min_time() >= blocks.last().unwrap().max_time);
    // same data through blocks + head
    assert_eq!(read_all(&db), before);
    // series b ended in the first blocks and left the head
    assert_eq!(db.head().num_series(), 1);
    // the WAL was checkpointed
    let names: Vec<String> = std::fs::read_dir(d.path().join("wal"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names.iter().any(|n| n.starts_with("checkpoint.")),
        "{names:?}"
    );
    // samples older than the head are refused
    let mut app = db.appender();
    assert!(matches!(
        app.append(&l("a"), 5, 1.0),
        Err(Error::OutOfBounds)
    ));
    drop(app);
    db.close().unwrap();
    let db = Db::open(d.path(), opts()).unwrap();
    assert!(db.open_stats().wal.corruptions.is_empty());
    assert_eq!(read_all(&db), before);
    fill(&db, 40_000, 41_000, 100, &["a", "c"]);
    assert_eq!(read_all(&db).len(), 3);
    db.close().unwrap();
}

#[test]
fn cut_all_then_reopen_keeps_everything_once() {
    let d = tempfile::tempdir().unwrap();
    let db = Db::open(d.path(), opts()).unwrap();
    fill(&db, 0, 35_000, 250, &["a", "b", "c"]);
    let before = read_all(&db);
    db.cut_all().unwrap();
    assert_eq!(db.blocks().len(), 3);
    assert_eq!(read_all(&db), before);
    db.close().unwrap();
    let db = Db::open(d.path(), opts()).unwrap();
    assert_eq!(db.blocks().len(), 3);
    assert_eq!(read_all(&db), before);
}

#[test]
fn backfill_writes_older_blocks() {
    let d = tempfile::tempdir().unwrap();
    let db = Db::open(d.path(), opts()).unwrap();
    fill(&db, 100_000, 101_000, 100, &["a"]);
    let hist: Vec<Sample> = (0..500)
        .map(|i| Sample {
            t: i * 100,
            v: i as f64,
        })
        .collect();
    let metas = db
        .backfill([(l("a"), hist.clone()), (l("old"), hist)])
        .unwrap();
    assert_eq!(metas.len(), 5);
    let got = read_all(&db);
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].1.len(), 510, "history and head of series a");
    assert_eq!(got[1].1.len(), 500);
    // history that reaches into the head is refused
    let bad = vec![Sample { t: 100_500, v: 1.0 }];
    assert!(matches!(
        db.backfill([(l("a"), bad)]),
        Err(Error::OutOfBounds)
    ));
    // a fresh series cannot go back into the backfilled time, also after a restart
    let mut app = db.appender();
    assert!(matches!(
        app.append(&l("new"), 49_000, 1.0),
        Err(Error::OutOfBounds)
    ));
    drop(app);
    db.close().unwrap();
    let db = Db::open(d.path(), opts()).unwrap();
    assert_eq!(read_all(&db).len(), 2);
    let mut app = db.appender();
    assert!(matches!(
        app.append(&l("new"), 49_000, 1.0),
        Err(Error::OutOfBounds)
    ));
    app.append(&l("new"), 50_000, 1.0).unwrap();
    app.commit().unwrap();
}

#[test]
fn retention_deletes_old_blocks() {
    let d = tempfile::tempdir().unwrap();
    let db = Db::open(
        d.path(),
        Options {
            retention_ms: Some(2 * BD),
            ..opts()
        },
    )
    .unwrap();
    fill(&db, 0, 80_000, 1000, &["a"]);
    db.cut_all().unwrap();
    let n_before = db.blocks().len();
    db.maintain().unwrap();
    let blocks = db.blocks();
    assert!(blocks.len() < n_before, "{} -> {}", n_before, blocks.len());
    let newest = blocks.iter().map(|b| b.max_time).max().unwrap();
    assert!(blocks.iter().all(|b| b.max_time >= newest - 2 * BD));
    let q = db.querier(i64::MIN, i64::MAX).unwrap();
    let s = q.select(&[Matcher::equal("instance", "a")]).unwrap();
    assert!(s[0].iter().next().unwrap().0 >= newest - 3 * BD);
}

#[test]
fn queries_run_through_cuts_and_compactions() {
    let d = tempfile::tempdir().unwrap();
    let db = Db::open(d.path(), opts()).unwrap();
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let (dbr, doner) = (&db, &done);
        s.spawn(move || {
            for k in 0..200 {
                fill(dbr, k * 500, (k + 1) * 500, 100, &["a", "b", "c"]);
                if k % 10 == 0 {
                    dbr.maintain().unwrap();
                }
            }
            doner.store(true, std::sync::atomic::Ordering::Release);
        });
        for _ in 0..3 {
            s.spawn(move || {
                let mut rounds = 0;
                while !doner.load(std::sync::atomic::Ordering::Acquire) || rounds < 3 {
                    rounds += 1;
                    let q = dbr.querier(i64::MIN, i64::MAX).unwrap();
                    for se in q.select(&[]).unwrap() {
                        let mut it = se.iter();
                        let mut want = 0;
                        for (t, v) in it.by_ref() {
                            assert_eq!(t, want, "{}", se.labels());
                            assert_eq!(v, (t / 100) as f64 + v.fract());
                            want += 100;
                        }
                        assert!(it.err().is_none(), "{:?}", it.err());
                    }
                }
            });
        }
    });
    assert!(db.blocks().len() >= 2);
    let all = read_all(&db);
    assert_eq!(all.len(), 3);
    assert!(all.iter().all(|s| s.1.len() == 1000));
}

/// Compaction ranges follow the block duration as in Prometheus (`min-block-duration` × 3^k):
/// three 10 s blocks merge into one 30 s block, nothing is lost, and a reopen reads it.
#[test]
fn compaction_ranges_follow_the_block_duration() {
    let d = tempfile::tempdir().unwrap();
    let db = Db::open(d.path(), opts()).unwrap();
    fill(&db, 0, 50_000, 100, &["a", "b"]);
    db.cut_all().unwrap();
    let before = read_all(&db);
    let blocks = db.blocks();
    // 0-10 s .. 30-40 s cut; then [0, 30 s) is a full window of the 30 s range
    db.maintain().unwrap();
    let after = db.blocks();
    assert!(
        after
            .iter()
            .any(|b| b.min_time == 0 && b.max_time == 3 * BD),
        "{blocks:?} -> {after:?}"
    );
    assert!(after.len() < blocks.len(), "{blocks:?} -> {after:?}");
    assert_eq!(read_all(&db), before);
    db.close().unwrap();
    let db = Db::open(d.path(), opts()).unwrap();
    assert_eq!(read_all(&db), before);
}
