//! WAL properties: anything written replays identically; a truncation replays the whole
//! records before it, a flipped byte costs at most the record it hit (the records after it
//! are read), and the damage is reported, never a panic.

use std::path::Path;
use std::time::Duration;

use inferdb_storage::wal::{self, record, RefSample, ReplayItem, WalWriter};
use inferdb_storage::Labels;
use proptest::prelude::*;

fn replay(dir: &Path, ro: bool) -> (wal::ReplayStats, Vec<(u64, i64, u64)>) {
    let mut out = Vec::new();
    let (st, _) = wal::replay(dir, ro, |it| {
        if let ReplayItem::Samples(s) = it {
            out.extend(s.iter().map(|s| (s.r, s.t, s.v.to_bits())));
        }
        Ok(())
    })
    .unwrap();
    (st, out)
}

fn write(dir: &Path, batches: &[Vec<RefSample>], seg: u64) {
    let mut w = WalWriter::create(dir, 0, Duration::from_secs(1), seg).unwrap();
    let l = Labels::from_pairs([("__name__", "m"), ("a", "b")]);
    w.log_series([(1u64, &l)].into_iter());
    w.flush().unwrap();
    for b in batches {
        w.log_samples(b);
        w.flush().unwrap();
    }
}

fn arb_batches() -> impl Strategy<Value = Vec<Vec<RefSample>>> {
    prop::collection::vec(
        prop::collection::vec(
            (any::<u64>(), any::<i64>(), any::<u64>()).prop_map(|(r, t, v)| RefSample {
                r,
                t,
                v: f64::from_bits(v),
            }),
            0..20,
        ),
        0..20,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn round_trips(batches in arb_batches(), seg in 64u64..4096) {
        let d = tempfile::tempdir().unwrap();
        write(d.path(), &batches, seg);
        let (st, got) = replay(d.path(), false);
        let want: Vec<(u64, i64, u64)> =
            batches.iter().flatten().map(|s| (s.r, s.t, s.v.to_bits())).collect();
        prop_assert!(st.corruptions.is_empty());
        prop_assert_eq!(got, want);
    }

    #[test]
    fn damage_costs_only_the_damaged_record(batches in arb_batches(),
                                            cut in any::<prop::sample::Index>(),
                                            flip in any::<bool>()) {
        let d = tempfile::tempdir().unwrap();
        write(d.path(), &batches, 1 << 20);
        let seg = d.path().join("00000001");
        let mut b = std::fs::read(&seg).unwrap();
        let at = cut.index(b.len());
        if flip { b[at] ^= 0x5a; } else { b.truncate(at); }
        std::fs::write(&seg, &b).unwrap();
        // one record per non-empty batch
        let recs: Vec<Vec<(u64, i64, u64)>> = batches
            .iter()
            .filter(|b| !b.is_empty())
            .map(|b| b.iter().map(|s| (s.r, s.t, s.v.to_bits())).collect())
            .collect();
        let (st, got) = replay(d.path(), false);
        if flip {
            // every record but (at most) the damaged one
            let ok = got == recs.concat()
                || (0..recs.len()).any(|skip| {
                    got == recs
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| *i != skip)
                        .flat_map(|(_, r)| r.iter().copied())
                        .collect::<Vec<_>>()
                });
            prop_assert!(ok, "flip at {}: {:?}", at, st.corruptions);
        } else {
            // a cut: the whole records before it
            let n = (0..=recs.len()).find(|&n| recs[..n].concat() == got);
            prop_assert!(n.is_some());
        }
        prop_assert!(st.corruptions.len() <= 1);
        // replaying again reads the same; a torn tail was cut off
        let (st2, got2) = replay(d.path(), false);
        prop_assert!(st2.corruptions.iter().all(|c| !c.tail));
        prop_assert_eq!(got2, got);
    }
}

/// Regenerates `fuzz/corpus/wal_read/`
/// (`cargo test -p inferdb-storage --test db_wal -- --ignored write_wal_seeds`).
#[test]
#[ignore]
fn write_wal_seeds() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/wal_read");
    std::fs::create_dir_all(&dir).unwrap();
    let base = 1_796_198_400_000i64;
    let l1 = Labels::from_pairs([
        ("__name__", "vllm:num_requests_running"),
        ("model_name", "m"),
    ]);
    let l2 = Labels::from_pairs([("__name__", "DCGM_FI_DEV_POWER_USAGE"), ("gpu", "0")]);
    let mut seg = Vec::new();
    record::encode_series(&mut seg, [(1u64, &l1), (17u64, &l2)].into_iter());
    for i in 0..5 {
        let ss = [
            RefSample {
                r: 1,
                t: base + i * 15_000,
                v: i as f64,
            },
            RefSample {
                r: 17,
                t: base + i * 15_000 + 3,
                v: 287.125 + i as f64,
            },
        ];
        record::encode_samples(&mut seg, &ss);
    }
    let mut cp = Vec::new();
    record::encode_min_valid(&mut cp, base);
    record::encode_series(&mut cp, [(1u64, &l1)].into_iter());
    let mut w = inferdb_storage::chunk::ChunkWriter::new();
    for i in 0..30 {
        w.append(base + i * 15_000, (i * 3) as f64);
    }
    record::encode_chunks(&mut cp, 1, [w.finish().as_slice()].into_iter());
    let mut specials = Vec::new();
    record::encode_samples(
        &mut specials,
        &[
            RefSample {
                r: u64::MAX,
                t: i64::MIN,
                v: f64::NAN,
            },
            RefSample {
                r: 0,
                t: i64::MAX,
                v: f64::from_bits(0x7ff0_0000_0000_0002),
            },
            RefSample {
                r: 5,
                t: 0,
                v: -0.0,
            },
        ],
    );
    let mut flipped = seg.clone();
    flipped[40] ^= 0x08;
    let mut zeros = seg.clone();
    zeros.extend_from_slice(&[0u8; 64]);
    let seeds: Vec<(&str, Vec<u8>)> = vec![
        ("segment", seg.clone()),
        ("checkpoint", cp),
        ("specials", specials),
        ("torn", seg[..seg.len() - 5].to_vec()),
        ("flipped", flipped),
        ("zero_tail", zeros),
        (
            "garbage",
            (0u32..300)
                .map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8)
                .collect(),
        ),
        ("huge_len", vec![2, 0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0, 1]),
    ];
    for (name, bytes) in seeds {
        std::fs::write(dir.join(name), bytes).unwrap();
    }
}
