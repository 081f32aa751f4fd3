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
    seeds.push(("gauge_xor", gauge.finish()));
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
