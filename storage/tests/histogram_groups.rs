//! Classic histograms stored as groups (`chunk::group`, the block writer's grouping): every
//! sample reads back bit-exactly through blocks written from the head, by backfill and by
//! compaction, whatever the histograms hold (random bucket layouts, layout changes, missing
//! buckets, NaN, staleness markers, counter resets), and `Block::check` passes.

use std::collections::BTreeMap;

use inferdb_storage::{Db, Labels, Options, Sample};
use proptest::prelude::*;

const STEP: i64 = 15_000;
const BD: i64 = 20 * 60 * 1000;
const T0: i64 = 1_796_083_200_000;

fn opts() -> Options {
    Options {
        background: false,
        block_duration_ms: BD,
        retention_ms: None,
        ..Options::default()
    }
}

type Store = BTreeMap<Labels, Vec<(i64, u64)>>;

fn read_all(db: &Db) -> Store {
    let q = db.querier(i64::MIN, i64::MAX).unwrap();
    q.select(&[])
        .unwrap()
        .iter()
        .map(|s| {
            let (mut ts, mut vs) = (Vec::new(), Vec::new());
            s.decode_into(&mut ts, &mut vs).unwrap();
            let mut it = s.iter();
            let one: Vec<(i64, u64)> = it.by_ref().map(|(t, v)| (t, v.to_bits())).collect();
            assert!(it.err().is_none(), "{:?}", it.err());
            let bulk: Vec<(i64, u64)> = ts
                .into_iter()
                .zip(vs)
                .map(|(t, v)| (t, v.to_bits()))
                .collect();
            assert_eq!(one, bulk, "{}", s.labels());
            (s.labels().clone(), one)
        })
        .collect()
}

/// Block checks clean; returns how many chunk references of the blocks are group members.
fn check_blocks(db: &Db) -> usize {
    let mut members = 0;
    for b in db.open_blocks() {
        let errs = b.check().unwrap();
        assert!(errs.is_empty(), "{errs:?}");
        for s in b.select(&[], i64::MIN, i64::MAX).unwrap() {
            for (_, r) in &s.chunks {
                if inferdb_storage::chunk::group_member(b.chunk(*r).unwrap()).is_some() {
                    members += 1;
                }
            }
        }
    }
    members
}

/// What goes wrong in one histogram.
#[derive(Debug, Clone)]
struct Quirks {
    /// Bucket bounds (indexes into `LES`), the count series, rows.
    les: Vec<usize>,
    count: bool,
    rows: usize,
    /// From this row on one more bucket exists (a restart with other buckets).
    added_at: Option<usize>,
    /// The bucket that misses one scrape: (bucket, row).
    missing: Option<(usize, usize)>,
    /// A special value: (member, row, which).
    special: Option<(usize, usize, usize)>,
    /// Every member resets at this row.
    reset: Option<usize>,
}

const LES: [&str; 6] = ["0.1", "0.5", "1", "2.5", "10", "+Inf"];

fn histogram(name: &str, inst: &str, q: &Quirks, seed: u64) -> Vec<(Labels, Vec<Sample>)> {
    let mut x = seed | 1;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % 4
    };
    let mut les: Vec<usize> = q.les.clone();
    les.sort_unstable();
    les.dedup();
    let extra = (0..LES.len()).find(|i| !les.contains(i));
    let mut out: BTreeMap<String, Vec<Sample>> = BTreeMap::new();
    let mut per = vec![0f64; LES.len()];
    for r in 0..q.rows {
        if q.reset == Some(r) {
            per.iter_mut().for_each(|c| *c = 0.0);
        }
        let t = T0 + r as i64 * STEP;
        let mut live: Vec<usize> = les.clone();
        if let (Some(a), Some(e)) = (q.added_at, extra) {
            if r >= a {
                live.push(e);
                live.sort_unstable();
            }
        }
        let mut cum = 0.0;
        for &i in &live {
            per[i] += rnd() as f64;
            cum += per[i];
            if q.missing == Some((i, r)) {
                continue;
            }
            out.entry(LES[i].to_string())
                .or_default()
                .push(Sample { t, v: cum });
        }
        if q.count {
            out.entry("count".into())
                .or_default()
                .push(Sample { t, v: cum });
        }
    }
    let mut series: Vec<(Labels, Vec<Sample>)> = out
        .into_iter()
        .map(|(le, ss)| {
            let l = if le == "count" {
                Labels::from_pairs([
                    ("__name__", format!("{name}_count")),
                    ("instance", inst.into()),
                ])
            } else {
                Labels::from_pairs([
                    ("__name__", format!("{name}_bucket")),
                    ("instance", inst.into()),
                    ("le", le),
                ])
            };
            (l, ss)
        })
        .collect();
    if let Some((m, r, which)) = q.special {
        let m = m % series.len();
        let ss = &mut series[m].1;
        let r = r % ss.len();
        ss[r].v = [f64::NAN, inferdb_storage::stale_nan(), 0.5, -0.0][which % 4];
    }
    series
}

fn expected(series: &[(Labels, Vec<Sample>)]) -> Store {
    series
        .iter()
        .map(|(l, ss)| (l.clone(), ss.iter().map(|s| (s.t, s.v.to_bits())).collect()))
        .collect()
}

fn quirks() -> impl Strategy<Value = Quirks> {
    (
        proptest::collection::vec(0usize..LES.len(), 1..6),
        any::<bool>(),
        1usize..500,
        proptest::option::of(0usize..500),
        proptest::option::of((0usize..LES.len(), 0usize..500)),
        proptest::option::of((0usize..8, 0usize..500, 0usize..4)),
        proptest::option::of(0usize..500),
    )
        .prop_map(
            |(les, count, rows, added_at, missing, special, reset)| Quirks {
                les,
                count,
                rows,
                added_at,
                missing,
                special,
                reset,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Backfilled (one block per range) and then compacted: every sample reads back
    /// bit-exactly at each stage and the blocks check clean.
    #[test]
    fn histograms_round_trip_through_blocks(
        a in quirks(),
        b in quirks(),
        seed in any::<u64>(),
    ) {
        let d = tempfile::tempdir().unwrap();
        let db = Db::open(d.path(), opts()).unwrap();
        let mut series = histogram("h", "x", &a, seed);
        series.extend(histogram("h", "y", &b, seed ^ 0x55));
        series.extend(histogram("g", "x", &b, seed ^ 0xaa));
        series.push((
            Labels::from_pairs([("__name__", "h_sum"), ("instance", "x")]),
            (0..a.rows as i64).map(|i| Sample { t: T0 + i * STEP, v: i as f64 * 0.37 }).collect(),
        ));
        let want = expected(&series);
        db.backfill(series).unwrap();
        prop_assert_eq!(&read_all(&db), &want);
        check_blocks(&db);
        db.compact_history().unwrap();
        prop_assert_eq!(&read_all(&db), &want);
        check_blocks(&db);
        db.close().unwrap();
        let db = Db::open(d.path(), opts()).unwrap();
        prop_assert_eq!(&read_all(&db), &want);
    }
}

/// A regular histogram scraped into the head is grouped when its block is cut, and the
/// groups survive compaction.
#[test]
fn scraped_histogram_is_grouped() {
    let d = tempfile::tempdir().unwrap();
    let db = Db::open(d.path(), opts()).unwrap();
    let q = Quirks {
        les: vec![0, 1, 2, 5],
        count: true,
        rows: 400,
        added_at: None,
        missing: None,
        special: None,
        reset: Some(200),
    };
    let series = histogram("h", "x", &q, 9);
    let want = expected(&series);
    for r in 0..q.rows {
        let mut app = db.appender();
        for (l, ss) in &series {
            app.append(l, ss[r].t, ss[r].v).unwrap();
        }
        app.commit().unwrap();
    }
    db.cut_all().unwrap();
    assert!(db.blocks().len() >= 3);
    let members = check_blocks(&db);
    // every block chunk of the 5 series is a group member
    let chunks: u64 = db.blocks().iter().map(|m| m.num_chunks).sum();
    assert_eq!(members as u64, chunks, "not every chunk is grouped");
    assert_eq!(read_all(&db), want);
    db.compact_history().unwrap();
    assert_eq!(db.blocks().len(), 1);
    let members = check_blocks(&db);
    assert_eq!(members as u64, db.blocks()[0].num_chunks);
    assert_eq!(read_all(&db), want);
    // the compacted block holds rows 0..320 (the newest 20 min stay in the head): the rows
    // before its newest hour in one long group, the newest hour (RECENT_SPAN_MS, 240 rows at
    // 15 s) in a head-sized group of its own
    let b = &db.open_blocks()[0];
    for s in b.select(&[], i64::MIN, i64::MAX).unwrap() {
        let rows: Vec<u16> = s.chunks.iter().map(|(m, _)| m.num_samples).collect();
        assert_eq!(rows, [80, 240], "{}", s.labels);
    }
}

/// A staleness marker in one row (the target went down) leaves the rows around it grouped:
/// only that row is written member by member.
#[test]
fn a_stale_row_splits_the_group() {
    let d = tempfile::tempdir().unwrap();
    let db = Db::open(d.path(), opts()).unwrap();
    let q = Quirks {
        les: vec![0, 2, 5],
        count: true,
        rows: 80,
        added_at: None,
        missing: None,
        special: None,
        reset: None,
    };
    let mut series = histogram("h", "x", &q, 5);
    for (_, ss) in series.iter_mut() {
        ss[40].v = inferdb_storage::stale_nan();
    }
    let want = expected(&series);
    db.backfill(series).unwrap();
    assert_eq!(read_all(&db), want);
    let members = check_blocks(&db);
    let chunks: u64 = db.blocks().iter().map(|m| m.num_chunks).sum();
    // 4 members: rows 0..40 and 41..80 grouped, row 40 in 4 chunks of one sample
    assert_eq!((members, chunks), (8, 12));
}

/// Selections of some members of the groups (`+Inf` alone, one bucket, the count, every
/// bucket, everything), over the whole range and a part of it, read in any order, each
/// series through `decode_into`, the iterator or `seek`, some twice: every series reads its
/// own samples (the querier opens each group once per selection and keeps what is unread).
#[test]
fn selected_members_read_in_any_order() {
    use inferdb_storage::{MatchOp, Matcher};
    let d = tempfile::tempdir().unwrap();
    let db = Db::open(d.path(), opts()).unwrap();
    let q = Quirks {
        les: vec![0, 1, 2, 3, 4, 5],
        count: true,
        rows: 500,
        added_at: None,
        missing: None,
        special: None,
        reset: Some(300),
    };
    let mut series = histogram("h", "x", &q, 21);
    series.extend(histogram("h", "y", &q, 22));
    let want = expected(&series);
    db.backfill(series).unwrap();
    db.compact_history().unwrap();
    assert!(check_blocks(&db) > 0, "no groups written");
    let selections = [
        vec![Matcher::equal("le", "+Inf")],
        vec![Matcher::equal("le", "1")],
        vec![Matcher::equal("__name__", "h_count")],
        vec![Matcher::equal("__name__", "h_bucket")],
        vec![Matcher::new(MatchOp::RegexMatch, "__name__", "h_.+").unwrap()],
    ];
    let ranges = [(i64::MIN, i64::MAX), (T0 + 100 * STEP + 1, T0 + 420 * STEP)];
    for ms in &selections {
        for &(mint, maxt) in &ranges {
            for order in 0..3u64 {
                let q = db.querier(mint, maxt).unwrap();
                let sel = q.select(ms).unwrap();
                assert!(!sel.is_empty());
                let mut idx: Vec<usize> = (0..sel.len()).collect();
                match order {
                    0 => {}
                    1 => idx.reverse(),
                    _ => idx.sort_by_key(|&i| (i as u64 * 7 + 3) % sel.len() as u64),
                }
                // the first one again at the end
                idx.push(idx[0]);
                for (k, &i) in idx.iter().enumerate() {
                    let s = &sel[i];
                    let full = &want[s.labels()];
                    let exp: Vec<(i64, u64)> = full
                        .iter()
                        .copied()
                        .filter(|&(t, _)| t >= mint && t <= maxt)
                        .collect();
                    let got: Vec<(i64, u64)> = match (k + order as usize) % 3 {
                        0 => {
                            let (mut ts, mut vs) = (Vec::new(), Vec::new());
                            s.decode_into(&mut ts, &mut vs).unwrap();
                            ts.into_iter()
                                .zip(vs)
                                .map(|(t, v)| (t, v.to_bits()))
                                .collect()
                        }
                        1 => {
                            let mut it = s.iter();
                            let v = it.by_ref().map(|(t, v)| (t, v.to_bits())).collect();
                            assert!(it.err().is_none());
                            v
                        }
                        _ => {
                            // from the middle on
                            let from = exp[exp.len() / 2].0;
                            let mut it = s.iter();
                            let first = it.seek(from).unwrap();
                            let mut v = vec![(first.0, first.1.to_bits())];
                            v.extend(it.by_ref().map(|(t, v)| (t, v.to_bits())));
                            assert_eq!(v[..], exp[exp.len() / 2..], "{}", s.labels());
                            exp.clone()
                        }
                    };
                    assert_eq!(got, exp, "{} order {order}", s.labels());
                }
            }
        }
    }
}
