//! Replays every file of `fuzz/corpus/<target>/` for the storage fuzz targets through the same
//! function the fuzz target calls, on stable Rust (no libFuzzer needed).

use std::path::PathBuf;

fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let b = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p, b)
        })
        .collect()
}

#[test]
fn chunk_decode_corpus() {
    let files = corpus("chunk_decode");
    assert!(files.len() >= 5, "corpus has only {} files", files.len());
    let mut decoded = 0;
    for (path, bytes) in &files {
        eprintln!("{}", path.display());
        inferdb_storage::fuzzing::chunk_decode(bytes);
        if inferdb_storage::chunk::decode(bytes).is_ok() {
            decoded += 1;
        }
    }
    // the seeds include real chunks, which must decode
    assert!(decoded >= 3, "only {decoded} corpus files are valid chunks");
}

#[test]
fn index_read_corpus() {
    let files = corpus("index_read");
    assert!(files.len() >= 3, "corpus has only {} files", files.len());
    let mut opened = 0;
    for (path, bytes) in &files {
        eprintln!("{}", path.display());
        if inferdb_storage::fuzzing::index_read(bytes) {
            opened += 1;
        }
    }
    // the seeds are valid indexes (regenerate: block_corruption -- --ignored write_index_seeds)
    assert!(opened >= 3, "only {opened} corpus files open as indexes");
}

/// Regenerates the seed files of `fuzz/corpus/chunk_decode/`
/// (`cargo test -p inferdb-storage --test fuzz_corpus -- --ignored write_chunk_seeds`).
#[test]
#[ignore]
fn write_chunk_seeds() {
    use inferdb_storage::chunk::{ChunkWriter, EncodePolicy};
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/chunk_decode");
    std::fs::create_dir_all(&dir).unwrap();
    let base = 1_796_198_400_000i64;
    let chunk = |f: &dyn Fn(i64) -> (i64, f64), n: i64| {
        let mut w = ChunkWriter::new();
        for i in 0..n {
            let (t, v) = f(i);
            w.append(t, v);
        }
        w
    };
    let mut seeds: Vec<(&str, Vec<u8>)> = Vec::new();
    let counter = chunk(
        &|i| (base + i * 15_000 + (i * 7) % 3, (1000 + i * i * 37) as f64),
        120,
    );
    seeds.push(("counter_int", counter.finish()));
    seeds.push((
        "counter_xor",
        counter.finish_with(EncodePolicy::Xor).unwrap(),
    ));
    let gauge = chunk(&|i| (base + i * 1000, (i as f64 * 0.3).sin()), 120);
    seeds.push(("gauge_xor", gauge.finish_with(EncodePolicy::Xor).unwrap()));
    let zero = chunk(&|i| (base + i * 15_000, 0.0), 120);
    seeds.push(("const_regular", zero.finish()));
    let power = chunk(
        &|i| {
            (
                base + i * 15_000,
                (412_736 + (i * 7919) % 4000) as f64 / 1000.0,
            )
        },
        120,
    );
    seeds.push(("decimals3", power.finish()));
    let linear = chunk(&|i| (base + i * 15_000 + i % 2, (i * 100) as f64), 50);
    seeds.push(("linear_int", linear.finish()));
    let special = chunk(
        &|i| {
            let v = [
                f64::NAN,
                -0.0,
                f64::INFINITY,
                f64::from_bits(0x7ff0_0000_0000_0002),
                1.5,
            ][(i % 5) as usize];
            (base + i * 30_000, v)
        },
        20,
    );
    seeds.push(("specials", special.finish()));
    // a cumulative float sum (a histogram's `_sum`): steps in units of the last place, with a
    // reset and a staleness marker (exceptions)
    let sum = |i: i64| {
        let i = if i >= 70 { i - 70 } else { i };
        (0..=i)
            .map(|j| (j % 7) as f64 * 0.731_293_117 + 0.1)
            .sum::<f64>()
    };
    let steps = chunk(
        &|i| {
            let v = if i == 90 {
                f64::from_bits(0x7ff0_0000_0000_0002)
            } else {
                sum(i)
            };
            (base + i * 15_000, v)
        },
        120,
    );
    let steps_bytes = steps.finish();
    assert_eq!(steps_bytes[0] & 3, 0, "not coded as steps");
    seeds.push(("float_sum_steps", steps_bytes));
    let mut recs = Vec::new();
    for i in 0i64..60 {
        recs.extend_from_slice(&15_000u32.to_le_bytes());
        recs.extend_from_slice(&sum(i).to_bits().to_le_bytes());
    }
    seeds.push(("float_sum_records", recs));
    seeds.push(("empty", ChunkWriter::new().finish()));
    seeds.push(("one", chunk(&|_| (base, 42.0), 1).finish()));
    // garbage and damaged chunks
    let mut flipped = counter.finish();
    flipped[7] ^= 0x20;
    seeds.push(("flipped", flipped));
    let c = gauge.finish();
    seeds.push(("truncated", c[..c.len() / 2].to_vec()));
    seeds.push((
        "garbage",
        (0u32..200)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect(),
    ));
    seeds.push(("header_only", vec![0x02, 0x00, 0x78, 0x05]));
    // sample records (u32 gap, u64 bits) for the round-trip half of the target
    let mut recs = Vec::new();
    for i in 0u64..40 {
        recs.extend_from_slice(&(15_000u32 + (i % 3) as u32).to_le_bytes());
        recs.extend_from_slice(&((1000 + i * 17) as f64).to_bits().to_le_bytes());
    }
    seeds.push(("records", recs));
    for (name, bytes) in seeds {
        std::fs::write(dir.join(name), bytes).unwrap();
    }
}

#[test]
fn wal_read_corpus() {
    let files = corpus("wal_read");
    assert!(files.len() >= 5, "corpus has only {} files", files.len());
    let mut valid = 0;
    for (path, bytes) in &files {
        eprintln!("{}", path.display());
        if inferdb_storage::fuzzing::wal_decode(bytes) > 0 {
            valid += 1;
        }
    }
    // the seeds include real segments (regenerate: db_wal -- --ignored write_wal_seeds)
    assert!(
        valid >= 3,
        "only {valid} corpus files hold valid WAL records"
    );
}

#[test]
fn wal_record_decode_corpus() {
    let files = corpus("wal_record_decode");
    assert!(files.len() >= 8, "corpus has only {} files", files.len());
    let mut valid = 0;
    for (path, bytes) in &files {
        eprintln!("{}", path.display());
        if inferdb_storage::fuzzing::wal_record_decode(bytes) {
            valid += 1;
        }
    }
    // the seeds include real records, plain and compressed with each codec
    // (regenerate: db_wal -- --ignored write_wal_seeds)
    assert!(valid >= 4, "only {valid} corpus files are valid records");
}

/// The `re2_translate` target over its corpus, then a deterministic mutation pass (every
/// single-byte deletion, and insertions of RE2 metacharacters at every position) so the
/// checker and rewriter see many near-valid patterns on every test run.
#[test]
fn re2_translate_corpus() {
    let files = corpus("re2_translate");
    assert!(files.len() >= 10, "corpus has only {} files", files.len());
    let mut accepted = 0;
    for (path, bytes) in &files {
        eprintln!("{}", path.display());
        inferdb_storage::re2::fuzz_translate(bytes);
        if inferdb_storage::re2::translate(&String::from_utf8_lossy(bytes)).is_ok() {
            accepted += 1;
        }
        for i in 0..bytes.len() {
            let mut m = bytes.clone();
            m.remove(i);
            inferdb_storage::re2::fuzz_translate(&m);
            for ins in [
                b"{" as &[u8],
                b"}",
                b"(",
                b")",
                b"[",
                b"]",
                b"\\",
                b"*",
                b"{2,}",
                b"|",
                b"-",
                b"^",
                b":",
                b"?",
            ] {
                let mut m = bytes.clone();
                m.splice(i..i, ins.iter().copied());
                inferdb_storage::re2::fuzz_translate(&m);
            }
        }
    }
    // the seeds include ordinary dashboard regexes, which Go accepts
    assert!(accepted >= 10, "only {accepted} corpus patterns accepted");
    // and ones Go refuses, which must stay refused
    for bad in ["a{1001}", "(a{100}){100}", "a**", "\\1", "(?=a)", "[z-a]"] {
        assert!(
            inferdb_storage::re2::translate(bad).is_err(),
            "{bad} accepted"
        );
    }
}

#[test]
fn tombstones_read_corpus() {
    let files = corpus("tombstones_read");
    assert!(files.len() >= 5, "corpus has only {} files", files.len());
    let mut valid = 0;
    for (path, bytes) in &files {
        eprintln!("{}", path.display());
        if inferdb_storage::fuzzing::tombstones_decode(bytes) > 0 {
            valid += 1;
        }
    }
    // the seeds include real tombstone files (regenerate: tombstones -- --ignored write_seeds)
    assert!(
        valid >= 2,
        "only {valid} corpus files are valid tombstone files"
    );
}

#[test]
fn chunk_group_corpus() {
    let files = corpus("chunk_group");
    assert!(files.len() >= 5, "corpus has only {} files", files.len());
    let mut decoded = 0;
    for (path, bytes) in &files {
        eprintln!("{}", path.display());
        inferdb_storage::fuzzing::chunk_group(bytes);
        if inferdb_storage::chunk::group_member(bytes).is_some()
            && inferdb_storage::chunk::decode(bytes).is_ok()
        {
            decoded += 1;
        }
    }
    // the seeds include real groups, which must decode
    assert!(
        decoded >= 3,
        "only {decoded} corpus files are valid group members"
    );
}

/// Regenerates the seed files of `fuzz/corpus/chunk_group/`
/// (`cargo test -p inferdb-storage --test fuzz_corpus -- --ignored write_group_seeds`).
#[test]
#[ignore]
fn write_group_seeds() {
    use inferdb_storage::chunk::encode_group;
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/chunk_group");
    std::fs::create_dir_all(&dir).unwrap();
    let base = 1_796_198_400_000i64;
    // buckets of a histogram: `members` cumulative series over `rows` scrapes
    let hist = |members: usize, rows: usize, jitter: bool| {
        let ts: Vec<i64> = (0..rows as i64)
            .map(|i| base + i * 15_000 + if jitter { (i * 7) % 5 } else { 0 })
            .collect();
        let mut cols = vec![0f64; members];
        let mut out = vec![Vec::new(); members];
        for r in 0..rows {
            let mut cum = 0.0;
            for (j, c) in cols.iter_mut().enumerate() {
                *c += ((r * 31 + j * 17) % (j + 2)) as f64;
                if r == rows / 2 {
                    *c = 0.0; // a reset
                }
                cum += *c;
                out[j].push(cum);
            }
        }
        (ts, out)
    };
    let mut seeds: Vec<(String, Vec<u8>)> = Vec::new();
    for (name, m, rows, jitter) in [
        ("buckets12", 12, 120, false),
        ("buckets4_jitter", 4, 60, true),
        ("two_one_row", 2, 1, false),
        ("buckets30", 30, 120, true),
    ] {
        let (ts, cols) = hist(m, rows, jitter);
        let refs: Vec<&[f64]> = cols.iter().map(Vec::as_slice).collect();
        let g = encode_group(&ts, &refs).expect("whole numbers group");
        // member 0's bytes (all markers) and the last member's (one marker)
        seeds.push((format!("{name}_first"), g.clone()));
        seeds.push((format!("{name}_last"), g[m - 1..].to_vec()));
        if name == "buckets12" {
            let mut f = g.clone();
            let k = f.len() / 2;
            f[k] ^= 0x10;
            seeds.push(("flipped".into(), f));
            seeds.push(("truncated".into(), g[..g.len() / 2].to_vec()));
        }
    }
    // rows for the encoder: 4 members, steps with a staleness marker and a fraction
    let mut rows = vec![2u8];
    for r in 0..40u8 {
        rows.extend_from_slice(&[15, 0]);
        rows.extend_from_slice(&[r % 3, 1, if r == 20 { 0x80 } else { 2 }, 0]);
    }
    seeds.push(("rows_stale".into(), rows.clone()));
    rows[3 + 6 * 10] = 0x81;
    seeds.push(("rows_fraction".into(), rows));
    for (name, bytes) in seeds {
        std::fs::write(dir.join(name), bytes).unwrap();
    }
}
