//! The querier's bulk reads (`Series::decode_into`, `SeriesIter::next_batch`) and `seek` give
//! exactly what sample-by-sample iteration gives, over head, blocks and overlapping blocks.

use inferdb_storage::{Db, Labels, Options, Sample};

const BD: i64 = 10_000;

fn l(inst: &str) -> Labels {
    Labels::from_pairs([("__name__", "vllm:tokens_total"), ("instance", inst)])
}

fn check(db: &Db, mint: i64, maxt: i64) -> usize {
    let q = db.querier(mint, maxt).unwrap();
    let mut total = 0;
    for s in q.select(&[]).unwrap() {
        let mut it = s.iter();
        let want: Vec<(i64, u64)> = it.by_ref().map(|(t, v)| (t, v.to_bits())).collect();
        assert!(it.err().is_none());
        assert!(want.windows(2).all(|w| w[0].0 < w[1].0));
        assert!(want.iter().all(|x| x.0 >= mint && x.0 <= maxt));
        total += want.len();

        let (mut ts, mut vs) = (vec![-1], vec![-1.0]);
        assert_eq!(s.decode_into(&mut ts, &mut vs).unwrap(), want.len());
        let got: Vec<(i64, u64)> = ts[1..]
            .iter()
            .zip(&vs[1..])
            .map(|(&t, v)| (t, v.to_bits()))
            .collect();
        assert_eq!(got, want, "decode_into over [{mint}, {maxt}]");

        // batches, mixed with single samples
        let mut it = s.iter();
        let mut got = Vec::new();
        let mut k = 0;
        loop {
            k += 1;
            if k % 3 == 0 {
                match it.next() {
                    Some((t, v)) => got.push((t, v.to_bits())),
                    None => break,
                }
                continue;
            }
            match it.next_batch() {
                Some((t, v)) => {
                    assert!(!t.is_empty());
                    assert_eq!(t.len(), v.len());
                    got.extend(t.iter().zip(v).map(|(&t, v)| (t, v.to_bits())));
                }
                None => break,
            }
        }
        assert_eq!(got, want, "next_batch over [{mint}, {maxt}]");

        // seek to every 7th timestamp and between samples
        for (i, w) in want.iter().enumerate().step_by(7) {
            let mut it = s.iter();
            assert_eq!(it.seek(w.0).map(|(t, v)| (t, v.to_bits())), Some(*w));
            assert_eq!(
                it.next().map(|(t, v)| (t, v.to_bits())),
                want.get(i + 1).copied()
            );
            let mut it = s.iter();
            assert_eq!(
                it.seek(w.0 + 1).map(|(t, v)| (t, v.to_bits())),
                want.get(i + 1).copied()
            );
        }
        // seeking backwards does not move
        let mut it = s.iter();
        if want.len() > 10 {
            assert_eq!(it.seek(want[10].0).map(|x| x.0), Some(want[10].0));
            assert_eq!(it.seek(want[2].0).map(|x| x.0), Some(want[11].0));
        }
    }
    total
}

#[test]
fn bulk_reads_match_iteration() {
    let d = tempfile::tempdir().unwrap();
    let db = Db::open(
        d.path(),
        Options {
            background: false,
            block_duration_ms: BD,
            retention_ms: None,
            ..Options::default()
        },
    )
    .unwrap();
    // history in blocks, with a second, overlapping backfill (merged by the querier)
    let hist: Vec<Sample> = (0..600)
        .map(|i| Sample {
            t: i * 100,
            v: (i * 3) as f64,
        })
        .collect();
    db.backfill([(l("a"), hist.clone()), (l("b"), hist)])
        .unwrap();
    let shifted: Vec<Sample> = (0..200)
        .map(|i| Sample {
            t: 20_050 + i * 100,
            v: i as f64 + 0.5,
        })
        .collect();
    db.backfill([(l("a"), shifted)]).unwrap();
    // then the head: some samples cut into blocks, the rest kept
    let mut app = db.appender();
    let refs: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|s| app.get_ref(&l(s)).unwrap())
        .collect();
    for i in 0..900 {
        let t = 60_000 + i * 100 + (i % 7);
        for (j, r) in refs.iter().enumerate() {
            app.append_ref(*r, t, (i * (j as i64 + 1)) as f64).unwrap();
        }
    }
    app.commit().unwrap();
    db.maintain().unwrap();
    let all = check(&db, i64::MIN, i64::MAX);
    assert_eq!(all, 600 + 200 + 600 + 3 * 900);
    for (mint, maxt) in [
        (0, 0),
        (5_000, 35_000),
        (20_000, 20_100),
        (59_950, 61_000),
        (70_001, 149_999),
        (150_000, 200_000),
    ] {
        check(&db, mint, maxt);
    }
}
