//! A flipped byte in a chunk or index file is reported with file and offset; other blocks stay
//! readable; nothing panics.

mod block_common;

use block_common::*;
use inferdb_storage::block::{Block, BlockMeta};
use inferdb_storage::fuzzing::split_ref;
use inferdb_storage::{Error, Labels, Matcher};
use std::fs;
use std::path::{Path, PathBuf};

fn small_block(p: &Path, salt: i64, nseries: usize) -> BlockMeta {
    let data: Vec<(Labels, Vec<(i64, f64)>)> = (0..nseries)
        .map(|i| {
            let l = Labels::from_pairs([
                ("__name__", "vllm:gpu_cache_usage_perc"),
                ("instance", &format!("h{i}")),
            ]);
            let s = (0..150)
                .map(|k| (k * 15_000 + salt, (k * 7 + i as i64) as f64 * 0.013))
                .collect();
            (l, s)
        })
        .collect();
    write(p, 0, 7_200_000, &data)
}

fn flip(path: &Path, off: u64) {
    let mut b = fs::read(path).unwrap();
    b[off as usize] ^= 0x5a;
    fs::write(path, b).unwrap();
}

fn corrupt_at(e: &Error) -> Option<(PathBuf, u64)> {
    match e {
        Error::Corrupt { path, offset, .. } => Some((path.clone(), *offset)),
        _ => None,
    }
}

fn assert_readable(b: &Block) {
    assert!(b.check().unwrap().is_empty());
    let all = read_all(b, &[], i64::MIN, i64::MAX);
    assert!(!all.is_empty());
}

#[test]
fn flipped_chunk_byte_is_reported_with_file_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    let metas: Vec<BlockMeta> = (0..3).map(|k| small_block(p, k, 4)).collect();
    let victim = p.join(&metas[1].id);
    let b = Block::open(&victim).unwrap();
    let s = b.select(&[], i64::MIN, i64::MAX).unwrap();
    let (_, r) = s[2].chunks[0];
    let len = b.chunk(r).unwrap().len() as u64;
    let (_, off) = split_ref(r);
    drop(b);
    let seg = victim.join("chunks").join("000001");
    let at = u64::from(off) + len / 2;
    flip(&seg, at);

    let b = Block::open(&victim).unwrap();
    let errs = b.check().unwrap();
    assert!(!errs.is_empty());
    for e in &errs {
        let (path, o) = corrupt_at(e).unwrap_or_else(|| panic!("not a corruption error: {e}"));
        assert_eq!(path, seg);
        assert!(
            o >= u64::from(off) && o < u64::from(off) + len,
            "offset {o} outside chunk at {off}+{len}"
        );
        assert!(e.to_string().contains("000001"));
    }
    // Decoding that chunk fails with the same file named; the other chunks still decode.
    let e = b.decode_chunk(r).expect_err("corrupt chunk decodes");
    assert_eq!(corrupt_at(&e).unwrap().0, seg);
    let ok = b
        .select(&[Matcher::equal("instance", "h0")], i64::MIN, i64::MAX)
        .unwrap();
    for (_, r) in &ok[0].chunks {
        assert!(b.decode_chunk(*r).unwrap().count() > 0);
    }
    // Other blocks are unaffected.
    for m in [&metas[0], &metas[2]] {
        assert_readable(&Block::open(&p.join(&m.id)).unwrap());
    }
}

#[test]
fn flipped_index_byte_is_reported_with_file_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    let metas: Vec<BlockMeta> = (0..3).map(|k| small_block(p, k, 50)).collect();
    let victim = p.join(&metas[1].id);
    let index = victim.join("index");
    // A byte in the middle of the series entries.
    let size = fs::metadata(&index).unwrap().len();
    flip(&index, size / 3);
    match Block::open(&victim) {
        Err(e) => assert_eq!(corrupt_at(&e).unwrap().0, index),
        Ok(b) => {
            let errs = b.check().unwrap();
            assert!(!errs.is_empty());
            for e in &errs {
                let (path, o) = corrupt_at(e).unwrap();
                assert_eq!(path, index);
                assert!(o < size);
            }
            // Selecting every series meets the bad entry and errors instead of panicking.
            assert!(b.select(&[], i64::MIN, i64::MAX).is_err());
        }
    }
    for m in [&metas[0], &metas[2]] {
        assert_readable(&Block::open(&p.join(&m.id)).unwrap());
    }
}

/// Every single-byte flip anywhere in a small block's index or chunk file is detected by
/// `Block::open` or `Block::check`, with the right file named, and never panics.
#[test]
fn every_flipped_byte_is_detected() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    let m = small_block(p, 0, 3);
    let bdir = p.join(&m.id);
    for file in [bdir.join("index"), bdir.join("chunks").join("000001")] {
        let orig = fs::read(&file).unwrap();
        for off in 0..orig.len() {
            let mut b = orig.clone();
            b[off] ^= 0x01;
            fs::write(&file, &b).unwrap();
            let errs = match Block::open(&bdir) {
                Err(e) => vec![e],
                Ok(blk) => {
                    let _ = blk.select(&[Matcher::equal("instance", "h1")], 0, i64::MAX);
                    let _ = blk.label_values("instance", &[]);
                    blk.check().unwrap()
                }
            };
            assert!(
                !errs.is_empty(),
                "flip at {off} of {} undetected",
                file.display()
            );
            assert_eq!(
                corrupt_at(&errs[0]).map(|x| x.0),
                Some(file.clone()),
                "{}",
                errs[0]
            );
        }
        fs::write(&file, &orig).unwrap();
    }
    assert_readable(&Block::open(&bdir).unwrap());
}

#[test]
fn truncated_and_garbage_files_error() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    let m = small_block(p, 0, 3);
    let bdir = p.join(&m.id);
    let index = bdir.join("index");
    let orig = fs::read(&index).unwrap();
    for cut in [0, 5, 30, orig.len() / 2, orig.len() - 1] {
        fs::write(&index, &orig[..cut]).unwrap();
        assert!(Block::open(&bdir).is_err(), "truncated at {cut}");
    }
    fs::write(&index, &orig).unwrap();
    fs::write(bdir.join("meta.json"), b"{\"version\": 1, \"id\": 3").unwrap();
    let e = Block::open(&bdir).unwrap_err();
    assert!(matches!(e, Error::Corrupt { .. }), "{e}");
}

/// Random multi-byte mutations and truncations of a valid index never panic the reader, and
/// the unmodified bytes open.
#[test]
fn mutated_index_bytes_never_panic() {
    let dir = tempfile::tempdir().unwrap();
    let m = small_block(dir.path(), 0, 20);
    let orig = fs::read(dir.path().join(&m.id).join("index")).unwrap();
    assert!(inferdb_storage::fuzzing::index_read(&orig));
    let mut rng = Rng(7);
    let mut opened = 0;
    for _ in 0..3000 {
        let mut b = orig.clone();
        match rng.below(3) {
            0 => {
                for _ in 0..1 + rng.below(8) {
                    let i = rng.below(b.len() as u64) as usize;
                    b[i] = rng.next() as u8;
                }
            }
            1 => b.truncate(rng.below(b.len() as u64) as usize),
            _ => {
                let i = rng.below(b.len() as u64) as usize;
                let n = rng.below(64) as usize;
                let junk: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                b.splice(i..i, junk);
            }
        }
        if inferdb_storage::fuzzing::index_read(&b) {
            opened += 1;
        }
    }
    // Most mutations break a checksummed table and fail at open; some only hit series
    // entries or postings lists and open fine (then fail when read).
    assert!(opened < 3000);
}

/// Regenerates the seed corpus of the `index_read` fuzz target (valid small indexes):
/// `cargo test -p inferdb-storage --test block_corruption -- --ignored write_index_seeds`.
#[test]
#[ignore]
fn write_index_seeds() {
    let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/index_read");
    fs::create_dir_all(&out).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for (i, n) in [0usize, 1, 3, 12].into_iter().enumerate() {
        let m = small_block(dir.path(), i as i64, n);
        let b = fs::read(dir.path().join(&m.id).join("index")).unwrap();
        fs::write(out.join(format!("seed-{n}-series")), b).unwrap();
    }
    // Mixed label sets: absent labels, several names and values.
    let data: Vec<(Labels, Vec<(i64, f64)>)> = (0..8)
        .map(|i| {
            let mut p = vec![
                ("__name__", format!("vllm:m{}", i % 3)),
                ("job", "vllm".into()),
            ];
            if i % 2 == 0 {
                p.push(("gpu", (i % 4).to_string()));
            }
            (
                Labels::from_pairs(p),
                vec![(i as i64, 1.0), (i as i64 + 10, 2.0)],
            )
        })
        .collect();
    let m = write(dir.path(), 0, 100, &data);
    let b = fs::read(dir.path().join(&m.id).join("index")).unwrap();
    fs::write(out.join("seed-mixed-labels"), b).unwrap();
}

#[test]
fn query_names_the_chunk_file_and_offset_that_check_gives() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    let meta = small_block(p, 0, 4);
    let victim = p.join(&meta.id);
    let b = Block::open(&victim).unwrap();
    let s = b
        .select(&[Matcher::equal("instance", "h2")], i64::MIN, i64::MAX)
        .unwrap();
    let (_, r) = s[0].chunks[0];
    let len = b.chunk(r).unwrap().len() as u64;
    drop(b);
    let seg = victim.join("chunks").join("000001");
    flip(&seg, u64::from(split_ref(r).1) + len / 2);
    let checked: Vec<String> = Block::open(&victim)
        .unwrap()
        .check()
        .unwrap()
        .iter()
        .map(|e| e.to_string())
        .collect();
    assert!(!checked.is_empty());

    let db = inferdb_storage::Db::open(
        p,
        inferdb_storage::Options {
            read_only: true,
            ..Default::default()
        },
    )
    .unwrap();
    let q = db.querier(i64::MIN, i64::MAX).unwrap();
    let series = q.select(&[Matcher::equal("instance", "h2")]).unwrap();
    // by sample
    let mut it = series[0].iter();
    for _ in it.by_ref() {}
    let e = it.take_err().expect("the corrupt chunk is reported");
    assert_eq!(corrupt_at(&e).unwrap().0, seg, "{e}");
    assert!(checked.contains(&e.to_string()), "{e} not in {checked:?}");
    // in bulk
    let (mut ts, mut vs) = (Vec::new(), Vec::new());
    let e = series[0].decode_into(&mut ts, &mut vs).unwrap_err();
    assert!(checked.contains(&e.to_string()), "{e} not in {checked:?}");
}
