//! WAL properties: anything written replays identically; a truncation replays the whole
//! records before it, a flipped byte costs at most the record it hit (the records after it
//! are read), and the damage is reported, never a panic. Each holds for every WAL
//! compression (records compressed per record, see `wal::compress`).

use std::path::Path;
use std::time::Duration;

use inferdb_storage::wal::{self, record, Compression, RefSample, ReplayItem, WalWriter};
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

const COMPRESSIONS: [Compression; 3] = [Compression::None, Compression::Snappy, Compression::Zstd];

fn write(dir: &Path, batches: &[Vec<RefSample>], seg: u64, c: Compression) {
    let mut w = WalWriter::create(dir, 0, Duration::from_secs(1), seg).unwrap();
    w.set_compression(c);
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
            // regular values too, so that compression has something to gain
            (
                prop_oneof![any::<u64>(), 0u64..4],
                prop_oneof![any::<i64>(), 0i64..100_000],
                prop_oneof![any::<u64>(), Just(0u64), Just(1f64.to_bits())],
            )
                .prop_map(|(r, t, v)| RefSample {
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
    fn round_trips(batches in arb_batches(), seg in 64u64..4096, c in 0usize..3) {
        let d = tempfile::tempdir().unwrap();
        write(d.path(), &batches, seg, COMPRESSIONS[c]);
        let (st, got) = replay(d.path(), false);
        let want: Vec<(u64, i64, u64)> =
            batches.iter().flatten().map(|s| (s.r, s.t, s.v.to_bits())).collect();
        prop_assert!(st.corruptions.is_empty());
        prop_assert_eq!(got, want);
    }

    #[test]
    fn damage_costs_only_the_damaged_record(batches in arb_batches(),
                                            cut in any::<prop::sample::Index>(),
                                            flip in any::<bool>(),
                                            c in 0usize..3) {
        let d = tempfile::tempdir().unwrap();
        write(d.path(), &batches, 1 << 20, COMPRESSIONS[c]);
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
        ("checkpoint", cp.clone()),
        ("specials", specials.clone()),
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
    // the same records compressed, plain and compressed records mixed in one segment
    // (a scrape's worth of samples: enough for either codec to gain)
    let mut scrape = Vec::new();
    let ss: Vec<RefSample> = (0..60)
        .map(|i| RefSample {
            r: 1 + (i % 6) as u64,
            t: base + (i / 6) * 15_000,
            v: (i % 4) as f64,
        })
        .collect();
    record::encode_samples(&mut scrape, &ss);
    let mut mixed = Vec::new();
    let mut z = wal::compress::Compressor::default();
    z.compress_records(&seg, Compression::Snappy, &mut mixed);
    z.compress_records(&scrape, Compression::Snappy, &mut mixed);
    z.compress_records(&specials, Compression::None, &mut mixed);
    z.compress_records(&scrape, Compression::Zstd, &mut mixed);
    z.compress_records(&cp, Compression::Zstd, &mut mixed);
    let mut seeds = seeds;
    seeds.push(("compressed", mixed.clone()));
    for (name, bytes) in seeds {
        std::fs::write(dir.join(name), bytes).unwrap();
    }

    // `wal_record_decode`: a type byte and a stored payload each
    let rdir = dir.join("../wal_record_decode");
    std::fs::create_dir_all(&rdir).unwrap();
    let mut records: Vec<(String, Vec<u8>)> = Vec::new();
    for (i, f) in record::Frames::new(&mixed).enumerate() {
        let (_, ty, payload) = f.unwrap();
        let mut b = vec![ty];
        b.extend_from_slice(payload);
        records.push((format!("record_{i}_type_{ty:#04x}"), b));
    }
    let snappy = records
        .iter()
        .find(|r| r.1[0] & wal::compress::SNAPPY_BIT != 0)
        .unwrap()
        .1
        .clone();
    let zstd = records
        .iter()
        .find(|r| r.1[0] & wal::compress::ZSTD_BIT != 0)
        .unwrap()
        .1
        .clone();
    let mut huge_claim = vec![record::TYPE_SAMPLES | wal::compress::SNAPPY_BIT];
    inferdb_storage::varint::put_uvarint(&mut huge_claim, 1 << 31);
    huge_claim.extend_from_slice(&[0, 1, 2]);
    let mut bad_bits = snappy.clone();
    bad_bits[0] |= wal::compress::ZSTD_BIT;
    records.extend([
        (
            "snappy_truncated".to_string(),
            snappy[..snappy.len() / 2].to_vec(),
        ),
        (
            "zstd_truncated".to_string(),
            zstd[..zstd.len() - 3].to_vec(),
        ),
        ("snappy_huge_claim".to_string(), huge_claim),
        ("both_bits".to_string(), bad_bits),
        (
            "empty_snappy".to_string(),
            vec![record::TYPE_SERIES | wal::compress::SNAPPY_BIT],
        ),
    ]);
    for (name, bytes) in records {
        std::fs::write(rdir.join(name), bytes).unwrap();
    }
}

/// The type bytes of every record of a WAL file.
fn type_bytes(path: &Path) -> Vec<u8> {
    record::Frames::new(&std::fs::read(path).unwrap())
        .map(|f| f.unwrap().1)
        .collect()
}

/// A database whose WAL compression changes at every restart keeps everything: checkpoints
/// and segments are written with the setting of the run that wrote them, and each is read by
/// its own records' flags.
#[test]
fn db_restarts_with_the_compression_switched() {
    use inferdb_storage::wal::compress::{SNAPPY_BIT, TYPE_MASK, ZSTD_BIT};
    use inferdb_storage::{Db, Matcher, Options};
    let d = tempfile::tempdir().unwrap();
    let opts = |c| Options {
        wal_compression: c,
        background: false,
        retention_ms: None,
        ..Options::default()
    };
    let labels = |i: usize| {
        Labels::from_pairs([
            ("__name__", "m".to_string()),
            ("pod", format!("pod-{i:04}")),
        ])
    };
    let runs = [
        Compression::Snappy,
        Compression::None,
        Compression::Zstd,
        Compression::Snappy,
    ];
    for (run, c) in runs.iter().enumerate() {
        let db = Db::open(d.path(), opts(*c)).unwrap();
        assert!(
            db.open_stats().wal.corruptions.is_empty(),
            "{:?}",
            db.open_stats().wal
        );
        // what earlier runs wrote is there
        let q = db.querier(i64::MIN, i64::MAX).unwrap();
        let all = q.select(&[Matcher::equal("__name__", "m")]).unwrap();
        assert_eq!(all.len(), if run == 0 { 0 } else { 20 }, "run {run}");
        for s in &all {
            let ts: Vec<i64> = s.iter().map(|x| x.0).collect();
            assert_eq!(
                ts,
                (0..run as i64 * 30).map(|t| t * 1000).collect::<Vec<_>>()
            );
        }
        drop(q);
        let mut app = db.appender();
        for t in run as i64 * 30..(run as i64 + 1) * 30 {
            for i in 0..20 {
                app.append(&labels(i), t * 1000, (t % 7) as f64).unwrap();
            }
        }
        app.commit().unwrap();
        // the segment written now carries this run's compression
        let wal = d.path().join("wal");
        let seg = std::fs::read_dir(&wal)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.len() == 8)
            .max()
            .unwrap();
        let bits: Vec<u8> = type_bytes(&wal.join(&seg))
            .iter()
            .map(|t| t & !TYPE_MASK)
            .collect();
        let want = match c {
            Compression::None => 0,
            Compression::Snappy => SNAPPY_BIT,
            Compression::Zstd => ZSTD_BIT,
        };
        assert!(
            !bits.is_empty() && bits.iter().all(|&b| b == want),
            "{c}: {bits:?}"
        );
        db.close().unwrap();
        // so does the checkpoint the close wrote, where compressing gains anything (its
        // min-valid-time and small Gorilla chunk records stay plain)
        let cp = std::fs::read_dir(&wal)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("checkpoint.")
            })
            .unwrap();
        let bits: Vec<u8> = type_bytes(&cp).iter().map(|t| t & !TYPE_MASK).collect();
        assert!(bits.iter().all(|&b| b == 0 || b == want), "{c}: {bits:?}");
        assert!(want == 0 || bits.contains(&want), "{c}: {bits:?}");
    }
    let db = Db::open(d.path(), opts(Compression::None)).unwrap();
    let q = db.querier(i64::MIN, i64::MAX).unwrap();
    let all = q.select(&[Matcher::equal("__name__", "m")]).unwrap();
    assert_eq!(all.len(), 20);
    for s in &all {
        assert_eq!(s.iter().count(), 120);
    }
}
