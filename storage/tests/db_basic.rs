//! Db: append, commit, rollback, query, reopen, read-only, locking, append rules.

use inferdb_storage::{Db, Error, Labels, MatchOp, Matcher, Options};

fn opts() -> Options {
    Options {
        background: false,
        ..Options::default()
    }
}

fn l(name: &str, inst: &str) -> Labels {
    Labels::from_pairs([("__name__", name), ("instance", inst)])
}

fn read_all(db: &Db, ms: &[Matcher]) -> Vec<(String, Vec<(i64, u64)>)> {
    let q = db.querier(i64::MIN, i64::MAX).unwrap();
    q.select(ms)
        .unwrap()
        .iter()
        .map(|s| {
            let mut it = s.iter();
            let v: Vec<(i64, u64)> = it.by_ref().map(|(t, v)| (t, v.to_bits())).collect();
            assert!(it.err().is_none());
            (s.labels().to_string(), v)
        })
        .collect()
}

#[test]
fn append_commit_query_reopen() {
    let d = tempfile::tempdir().unwrap();
    let db = Db::open(d.path(), opts()).unwrap();
    let mut app = db.appender();
    let a = app.get_ref(&l("vllm:x", "a")).unwrap();
    for t in 0..500 {
        app.append_ref(a, t * 1000, t as f64 * 0.5).unwrap();
    }
    app.append(&l("vllm:x", "b"), 5, f64::NAN).unwrap();
    app.append(&l("vllm:x", "b"), 6, inferdb_storage::stale_nan())
        .unwrap();
    // nothing visible before commit
    assert!(read_all(&db, &[]).is_empty());
    app.commit().unwrap();
    let mut app = db.appender();
    app.append(&l("vllm:x", "c"), 1, 1.0).unwrap();
    app.rollback();
    let got = read_all(&db, &[Matcher::equal("__name__", "vllm:x")]);
    assert_eq!(got.len(), 2, "rolled back series has no samples");
    assert_eq!(got[0].0, r#"vllm:x{instance="a"}"#);
    assert_eq!(got[0].1.len(), 500);
    assert_eq!(got[1].1[0].1, f64::NAN.to_bits());
    assert_eq!(got[1].1[1].1, inferdb_storage::STALE_NAN_BITS);
    let before = read_all(&db, &[]);
    db.close().unwrap();

    let db = Db::open(d.path(), opts()).unwrap();
    assert!(db.open_stats().wal.corruptions.is_empty());
    assert_eq!(read_all(&db, &[]), before);
    // appends continue after the replayed samples, refs are found by labels again
    let mut app = db.appender();
    let a = app.get_ref(&l("vllm:x", "a")).unwrap();
    assert!(matches!(app.append_ref(a, 0, 0.0), Err(Error::OutOfOrder)));
    app.append_ref(a, 500_000, 1.0).unwrap();
    app.commit().unwrap();
    assert_eq!(
        read_all(&db, &[Matcher::equal("instance", "a")])[0].1.len(),
        501
    );
}

#[test]
fn range_and_seek() {
    let d = tempfile::tempdir().unwrap();
    let db = Db::open(d.path(), opts()).unwrap();
    let mut app = db.appender();
    let r = app.get_ref(&l("m", "a")).unwrap();
    for t in 0..1000 {
        app.append_ref(r, t * 10, t as f64).unwrap();
    }
    app.commit().unwrap();
    let q = db.querier(1000, 2000).unwrap();
    let s = q.select(&[]).unwrap();
    let v: Vec<i64> = s[0].iter().map(|x| x.0).collect();
    assert_eq!(v.first(), Some(&1000));
    assert_eq!(v.last(), Some(&2000));
    assert_eq!(v.len(), 101);
    let mut it = s[0].iter();
    assert_eq!(it.seek(1555), Some((1560, 156.0)));
    assert_eq!(it.next(), Some((1570, 157.0)));
    assert_eq!(it.seek(1000), Some((1580, 158.0)), "seek never goes back");
    assert_eq!(it.seek(5000), None);
}

#[test]
fn append_rules_are_counted() {
    let d = tempfile::tempdir().unwrap();
    let db = Db::open(d.path(), opts()).unwrap();
    let mut app = db.appender();
    let r = app.get_ref(&l("m", "a")).unwrap();
    app.append_ref(r, 100, 1.0).unwrap();
    app.append_ref(r, 100, 1.0).unwrap(); // exact duplicate: fine
    assert!(matches!(
        app.append_ref(r, 100, 2.0),
        Err(Error::DuplicateTimestamp)
    ));
    assert!(matches!(app.append_ref(r, 99, 2.0), Err(Error::OutOfOrder)));
    app.commit().unwrap();
    let mut app = db.appender();
    app.append_ref(r, 100, 1.0).unwrap(); // duplicate of a committed sample
    assert!(matches!(app.append_ref(r, 50, 1.0), Err(Error::OutOfOrder)));
    app.commit().unwrap();
    let st = db.stats();
    assert_eq!(
        (
            st.out_of_order,
            st.duplicate_timestamp,
            st.exact_duplicates,
            st.samples_appended
        ),
        (2, 1, 2, 1)
    );
    assert_eq!(read_all(&db, &[])[0].1, vec![(100, 1f64.to_bits())]);
    let mut app = db.appender();
    assert!(matches!(
        app.append(&Labels::from_pairs([("job", "x")]), 1, 1.0),
        Err(Error::InvalidLabels(_))
    ));
}

#[test]
fn lock_and_read_only() {
    let d = tempfile::tempdir().unwrap();
    let db = Db::open(d.path(), opts()).unwrap();
    assert!(matches!(Db::open(d.path(), opts()), Err(Error::Locked(_))));
    let mut app = db.appender();
    app.append(&l("m", "a"), 1, 1.0).unwrap();
    app.commit().unwrap();
    // a reader beside the running writer sees what was committed
    let ro = Db::open(
        d.path(),
        Options {
            read_only: true,
            ..opts()
        },
    )
    .unwrap();
    assert_eq!(read_all(&ro, &[]).len(), 1);
    let mut app = ro.appender();
    assert!(matches!(
        app.append(&l("m", "b"), 1, 1.0),
        Err(Error::ReadOnly)
    ));
    drop(app);
    ro.close().unwrap();
    db.close().unwrap();
    // the lock is released on close
    Db::open(d.path(), opts()).unwrap().close().unwrap();
}

/// A closed store opens again at once, even while another thread forks processes: the child
/// of a fork holds a copy of the lock's descriptor until it execs, and the lock must not be
/// released only when that copy closes.
#[test]
fn close_releases_the_lock_while_processes_are_forked() {
    let dir = tempfile::tempdir().unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let forker = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = std::process::Command::new("true").status();
            }
        })
    };
    let mut locked = 0;
    for _ in 0..300 {
        match Db::open(dir.path(), opts()) {
            Ok(db) => db.close().unwrap(),
            Err(Error::Locked(_)) => locked += 1,
            Err(e) => panic!("{e}"),
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    forker.join().unwrap();
    assert_eq!(locked, 0, "opens refused as locked after a close");
}

#[test]
fn label_names_values_and_series() {
    let d = tempfile::tempdir().unwrap();
    let db = Db::open(d.path(), opts()).unwrap();
    let mut app = db.appender();
    app.append(&l("up", "a"), 1, 1.0).unwrap();
    app.append(&l("up", "b"), 1, 1.0).unwrap();
    app.append(
        &Labels::from_pairs([("__name__", "x"), ("gpu", "0")]),
        1,
        1.0,
    )
    .unwrap();
    app.commit().unwrap();
    let q = db.querier(0, 10).unwrap();
    assert_eq!(
        q.label_names(&[]).unwrap(),
        vec!["__name__", "gpu", "instance"]
    );
    assert_eq!(
        q.label_values("instance", &[]).unwrap(),
        vec!["a".to_string(), "b".to_string()]
    );
    assert_eq!(
        q.label_values("__name__", &[Matcher::equal("gpu", "0")])
            .unwrap(),
        vec!["x".to_string()]
    );
    let re = Matcher::new(MatchOp::RegexMatch, "instance", "a|b").unwrap();
    let s = q.series(&[re]).unwrap();
    assert_eq!(s, vec![l("up", "a"), l("up", "b")]);
    let nre = Matcher::new(MatchOp::RegexNoMatch, "__name__", "up").unwrap();
    assert_eq!(q.series(&[nre]).unwrap().len(), 1);
    // outside the range: nothing
    let q = db.querier(2, 10).unwrap();
    assert!(q.select(&[]).unwrap().is_empty());
}

/// Copies the WAL of a running database: what a crash would leave behind.
fn crash_image(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to.join("wal")).unwrap();
    for e in std::fs::read_dir(from.join("wal")).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, to.join("wal").join(p.file_name().unwrap())).unwrap();
    }
}

#[test]
fn torn_wal_tail_is_repaired_not_fatal() {
    let d = tempfile::tempdir().unwrap();
    let crashed = tempfile::tempdir().unwrap();
    let db = Db::open(d.path(), opts()).unwrap();
    for t in 0..10 {
        let mut app = db.appender();
        app.append(&l("m", "a"), t, t as f64).unwrap();
        app.commit().unwrap();
    }
    crash_image(d.path(), crashed.path());
    db.close().unwrap();
    // cut 3 bytes off the newest non-empty segment
    let wal = crashed.path().join("wal");
    let mut segs: Vec<_> = std::fs::read_dir(&wal)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| std::fs::metadata(p).unwrap().len() > 0)
        .collect();
    segs.sort();
    let last = segs.last().unwrap();
    let len = std::fs::metadata(last).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(last)
        .unwrap()
        .set_len(len - 3)
        .unwrap();
    let db = Db::open(crashed.path(), opts()).unwrap();
    let c = &db.open_stats().wal.corruptions;
    assert_eq!(c.len(), 1);
    assert_eq!(&c[0].path, last);
    let got = read_all(&db, &[]);
    assert_eq!(got[0].1.len(), 9, "the torn last commit is dropped");
    let mut app = db.appender();
    app.append(&l("m", "a"), 9, 9.0).unwrap();
    app.commit().unwrap();
    db.close().unwrap();
    let db = Db::open(crashed.path(), opts()).unwrap();
    assert!(db.open_stats().wal.corruptions.is_empty());
    assert_eq!(read_all(&db, &[])[0].1.len(), 10);
}

#[test]
fn close_checkpoints_the_wal() {
    let d = tempfile::tempdir().unwrap();
    let db = Db::open(d.path(), opts()).unwrap();
    let mut app = db.appender();
    for t in 0..1000 {
        app.append(&l("m", "a"), t * 15_000, (t * 3) as f64)
            .unwrap();
    }
    app.commit().unwrap();
    let wal_size = |p: &std::path::Path| -> u64 {
        std::fs::read_dir(p.join("wal"))
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .sum()
    };
    let raw = wal_size(d.path());
    db.close().unwrap();
    let packed = wal_size(d.path());
    assert!(packed * 4 < raw, "checkpoint {packed} vs segments {raw}");
    assert!(!d.path().join("chunks_head").exists());
    let db = Db::open(d.path(), opts()).unwrap();
    assert_eq!(read_all(&db, &[])[0].1.len(), 1000);
}

#[test]
fn concurrent_readers_and_writer() {
    let d = tempfile::tempdir().unwrap();
    let db = Db::open(d.path(), opts()).unwrap();
    std::thread::scope(|s| {
        let dbr = &db;
        let w = s.spawn(move || {
            for t in 0..200 {
                let mut app = dbr.appender();
                for i in 0..20 {
                    app.append(&l("m", &i.to_string()), t, t as f64).unwrap();
                }
                app.commit().unwrap();
            }
        });
        for _ in 0..4 {
            s.spawn(move || {
                for _ in 0..50 {
                    let q = dbr.querier(i64::MIN, i64::MAX).unwrap();
                    for se in q.select(&[]).unwrap() {
                        let v: Vec<i64> = se.iter().map(|x| x.0).collect();
                        // every series is a gap-free prefix 0..n
                        assert!(v.iter().enumerate().all(|(i, &t)| t == i as i64));
                    }
                }
            });
        }
        w.join().unwrap();
    });
    let got = read_all(&db, &[]);
    assert_eq!(got.len(), 20);
    assert!(got.iter().all(|s| s.1.len() == 200));
}

#[test]
fn handles_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Db>();
    check::<inferdb_storage::Querier>();
    check::<inferdb_storage::Series>();
}

#[test]
fn read_only_beside_a_busy_writer() {
    let d = tempfile::tempdir().unwrap();
    let db = Db::open(
        d.path(),
        Options {
            block_duration_ms: 1000,
            ..opts()
        },
    )
    .unwrap();
    std::thread::scope(|s| {
        let dbr = &db;
        s.spawn(move || {
            for t in 0..300 {
                let mut app = dbr.appender();
                app.append(&l("m", "a"), t * 100, t as f64).unwrap();
                app.commit().unwrap();
                if t % 20 == 0 {
                    dbr.maintain().unwrap(); // cuts blocks and checkpoints the WAL
                }
            }
        });
        for _ in 0..20 {
            let ro = Db::open(
                d.path(),
                Options {
                    read_only: true,
                    block_duration_ms: 1000,
                    ..opts()
                },
            )
            .unwrap();
            for (_, v) in read_all(&ro, &[]) {
                // a gap-free prefix of what the writer committed
                assert!(v.iter().enumerate().all(|(i, s)| s.0 == i as i64 * 100));
            }
        }
    });
}

#[test]
fn commit_refs_checks_counts_and_replays_alike() {
    use inferdb_storage::wal::RefSample;
    let d = tempfile::tempdir().unwrap();
    let crashed = tempfile::tempdir().unwrap();
    let db = Db::open(d.path(), opts()).unwrap();
    let a = db.get_ref(&l("m", "a")).unwrap().0;
    let b = db.get_ref(&l("m", "b")).unwrap().0;
    let rs = |r: u64, t: i64, v: f64| RefSample { r, t, v };
    let mut unknown = Vec::new();
    let st = db
        .commit_refs(&[rs(a, 10, 1.0), rs(b, 10, 2.0)], &mut unknown)
        .unwrap();
    assert_eq!((st.appended, st.rejected()), (2, 0));
    // an unknown reference is handed back by index, the rest is stored and checked
    let gone = (1u64 << 30) | (a & 15);
    let batch = [
        rs(a, 20, 3.0),
        rs(gone, 20, 1.0),
        rs(b, 10, 2.0), // exact duplicate: ignored
        rs(b, 9, 5.0),  // out of order
        rs(b, 20, 4.0),
        rs(b, 20, 6.0), // another value at the newest timestamp
    ];
    let st = db.commit_refs(&batch, &mut unknown).unwrap();
    assert_eq!(unknown, vec![1]);
    assert_eq!(st.appended, 2);
    assert_eq!(st.exact_duplicates, 1);
    assert_eq!(st.out_of_order, 1);
    assert_eq!(st.duplicate_timestamp, 1);
    let s = db.stats();
    assert_eq!(s.samples_appended, 4);
    assert_eq!(
        (s.out_of_order, s.duplicate_timestamp, s.exact_duplicates),
        (1, 1, 1)
    );
    // an appender sees the committed samples
    let mut app = db.appender();
    assert!(matches!(
        app.append_ref(inferdb_storage::SeriesRef(a), 20, 9.0),
        Err(Error::DuplicateTimestamp)
    ));
    app.rollback();
    let want = vec![
        (
            r#"m{instance="a"}"#.to_string(),
            vec![(10, 1f64.to_bits()), (20, 3f64.to_bits())],
        ),
        (
            r#"m{instance="b"}"#.to_string(),
            vec![(10, 2f64.to_bits()), (20, 4f64.to_bits())],
        ),
    ];
    assert_eq!(read_all(&db, &[]), want);
    // the refused samples are in the WAL, and a replay refuses them the same way
    crash_image(d.path(), crashed.path());
    db.close().unwrap();
    let db = Db::open(crashed.path(), opts()).unwrap();
    assert_eq!(db.open_stats().unknown_refs, 0);
    assert_eq!(read_all(&db, &[]), want);
    db.close().unwrap();
    let db = Db::open(d.path(), opts()).unwrap();
    assert_eq!(read_all(&db, &[]), want);
}
