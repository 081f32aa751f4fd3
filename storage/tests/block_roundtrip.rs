//! Block write/read round trip and selection semantics.

mod block_common;

use block_common::*;
use inferdb_storage::block::Block;
use inferdb_storage::{stale_nan, Labels, MatchOp, Matcher};
use std::collections::BTreeSet;

fn dataset(n: usize) -> Vec<(Labels, Vec<(i64, f64)>)> {
    let names = [
        "vllm:num_requests_running",
        "vllm:gpu_cache_usage_perc",
        "vllm:ab",
        "vllm:a",
    ];
    let models = ["llama", "mistral", "", "qwen-7b"];
    let mut rng = Rng(0x9e3779b97f4a7c15);
    let mut out = Vec::new();
    for i in 0..n {
        let mut pairs = vec![
            ("__name__", names[i % names.len()].to_string()),
            ("instance", format!("host-{}", i % 13)),
            ("model_name", models[(i / 4) % models.len()].to_string()),
            ("series", i.to_string()),
        ];
        if i % 7 == 0 {
            pairs.push(("gpu", (i % 8).to_string()));
        }
        let l = Labels::from_pairs(pairs);
        let start = (i as i64 % 5) * 15_000;
        let len = 1 + rng.below(400) as usize;
        let mut t = start;
        let mut s = Vec::with_capacity(len);
        for k in 0..len {
            let v = match k % 50 {
                7 => f64::NAN,
                8 => stale_nan(),
                9 => f64::INFINITY,
                10 => -0.0,
                _ => (rng.next() % 1000) as f64 / 7.0,
            };
            s.push((t, v));
            t += 1 + rng.below(30_000) as i64;
        }
        out.push((l, s));
    }
    out
}

fn m(op: MatchOp, n: &str, v: &str) -> Matcher {
    Matcher::new(op, n, v).unwrap()
}

#[test]
fn round_trip_every_sample_bit_exact() {
    let dir = tempfile::tempdir().unwrap();
    let data = dataset(1500);
    let meta = write(dir.path(), 0, 20_000_000, &data);
    assert_eq!(meta.num_series, 1500);
    assert_eq!(meta.level, 1);
    assert_eq!(meta.sources, vec![meta.id.clone()]);
    let total: usize = data.iter().map(|(_, s)| s.len()).sum();
    assert_eq!(meta.num_samples, total as u64);
    assert!(!dir.path().join(format!("{}.tmp", meta.id)).exists());

    let b = Block::open(&dir.path().join(&meta.id)).unwrap();
    assert_eq!(b.meta(), &meta);
    assert!(b.size_bytes() > 0);
    assert!(b.check().unwrap().is_empty());
    let got = read_all(&b, &[], i64::MIN, i64::MAX);
    let mut want: Vec<(Labels, Vec<(i64, u64)>)> = data
        .iter()
        .map(|(l, s)| {
            (
                l.clone(),
                s.iter().map(|(t, v)| (*t, v.to_bits())).collect(),
            )
        })
        .collect();
    want.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(got.len(), want.len());
    assert!(got == want, "samples differ after round trip");
}

#[test]
fn time_range_keeps_only_overlapping_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let l = Labels::from_pairs([("__name__", "x")]);
    let samples: Vec<(i64, f64)> = (0..1000).map(|i| (i * 1000, i as f64)).collect();
    let meta = write(dir.path(), 0, 1_000_000, &[(l, samples)]);
    let b = Block::open(&dir.path().join(&meta.id)).unwrap();
    let all = b.select(&[], 0, 1_000_000).unwrap();
    assert_eq!(all[0].chunks.len(), 9);
    // [130s, 250s] touches chunk 1 (120..239) and chunk 2 (240..359).
    let s = b.select(&[], 130_000, 250_000).unwrap();
    assert_eq!(s.len(), 1);
    let mins: Vec<i64> = s[0].chunks.iter().map(|(m, _)| m.min_time).collect();
    assert_eq!(mins, vec![120_000, 240_000]);
    // Inclusive bounds at chunk edges.
    let s = b.select(&[], 239_000, 239_000).unwrap();
    assert_eq!(s[0].chunks.len(), 1);
    assert!(b.select(&[], 2_000_000, 3_000_000).unwrap().is_empty());
    assert!(b.select(&[], 5, 4).unwrap().is_empty());
}

#[test]
fn matchers_agree_with_brute_force() {
    let dir = tempfile::tempdir().unwrap();
    let data = dataset(600);
    let meta = write(dir.path(), 0, 20_000_000, &data);
    let b = Block::open(&dir.path().join(&meta.id)).unwrap();
    let sets: Vec<Vec<Matcher>> = vec![
        vec![],
        vec![Matcher::equal("__name__", "vllm:a")],
        vec![m(MatchOp::RegexMatch, "__name__", "vllm:a")],
        vec![m(MatchOp::RegexMatch, "__name__", "vllm:a.*")],
        vec![m(MatchOp::RegexMatch, "__name__", "a")],
        vec![m(MatchOp::RegexMatch, "__name__", "vllm:(a|ab)")],
        vec![m(MatchOp::RegexNoMatch, "__name__", "vllm:a")],
        vec![Matcher::equal("model_name", "")],
        vec![m(MatchOp::NotEqual, "model_name", "")],
        vec![m(MatchOp::RegexMatch, "model_name", "llama|")],
        vec![m(MatchOp::RegexMatch, "model_name", ".+")],
        vec![m(MatchOp::RegexMatch, "model_name", ".*")],
        vec![m(MatchOp::RegexNoMatch, "model_name", "m.*")],
        vec![m(MatchOp::RegexNoMatch, "model_name", "")],
        vec![m(MatchOp::NotEqual, "model_name", "llama")],
        vec![
            Matcher::equal("gpu", ""),
            Matcher::equal("instance", "host-3"),
        ],
        vec![
            m(MatchOp::RegexMatch, "gpu", "[0-3]"),
            m(MatchOp::NotEqual, "instance", "host-0"),
        ],
        vec![Matcher::equal("nosuch", "")],
        vec![m(MatchOp::NotEqual, "nosuch", "")],
        vec![m(MatchOp::RegexMatch, "nosuch", ".*")],
        vec![m(MatchOp::RegexMatch, "nosuch", ".+")],
        vec![m(MatchOp::NotEqual, "nosuch", "x")],
        vec![
            Matcher::equal("__name__", "vllm:a"),
            Matcher::equal("__name__", "vllm:ab"),
        ],
        vec![
            Matcher::equal("instance", "host-1"),
            m(MatchOp::RegexNoMatch, "model_name", "llama|mistral"),
        ],
        vec![Matcher::equal("instance", "host-99")],
    ];
    for ms in &sets {
        let got: Vec<Labels> = b
            .select(ms, i64::MIN, i64::MAX)
            .unwrap()
            .into_iter()
            .map(|s| s.labels)
            .collect();
        let mut want: Vec<Labels> = data
            .iter()
            .map(|(l, _)| l.clone())
            .filter(|l| matches_all(l, ms))
            .collect();
        want.sort();
        assert_eq!(got, want, "matchers {ms:?}");

        // label names / values restricted by the matchers
        let names: BTreeSet<String> = want
            .iter()
            .flat_map(|l| l.iter().map(|x| x.name.clone()))
            .collect();
        assert_eq!(
            b.label_names(ms).unwrap(),
            names.into_iter().collect::<Vec<_>>(),
            "{ms:?}"
        );
        let vals: BTreeSet<String> = want
            .iter()
            .filter_map(|l| l.get("model_name").map(String::from))
            .collect();
        assert_eq!(
            b.label_values("model_name", ms).unwrap(),
            vals.into_iter().collect::<Vec<_>>(),
            "{ms:?}"
        );
    }
}

#[test]
fn randomized_matchers_agree_with_brute_force() {
    let dir = tempfile::tempdir().unwrap();
    let data = dataset(300);
    let meta = write(dir.path(), 0, 20_000_000, &data);
    let b = Block::open(&dir.path().join(&meta.id)).unwrap();
    let names = ["__name__", "instance", "model_name", "gpu", "nosuch"];
    let values = [
        "", "vllm:a", "host-1", "host-1.*", "llama", ".*", ".+", "q.*|", "[0-4]", "vllm:.*", "x",
    ];
    let ops = [
        MatchOp::Equal,
        MatchOp::NotEqual,
        MatchOp::RegexMatch,
        MatchOp::RegexNoMatch,
    ];
    let mut rng = Rng(42);
    for _ in 0..400 {
        let n = rng.below(4) as usize;
        let ms: Vec<Matcher> = (0..n)
            .map(|_| {
                m(
                    ops[rng.below(4) as usize],
                    names[rng.below(names.len() as u64) as usize],
                    values[rng.below(values.len() as u64) as usize],
                )
            })
            .collect();
        let got: Vec<Labels> = b
            .select(&ms, i64::MIN, i64::MAX)
            .unwrap()
            .into_iter()
            .map(|s| s.labels)
            .collect();
        let mut want: Vec<Labels> = data
            .iter()
            .map(|(l, _)| l.clone())
            .filter(|l| matches_all(l, &ms))
            .collect();
        want.sort();
        assert_eq!(got, want, "matchers {ms:?}");
    }
}

#[test]
fn unfiltered_label_names_and_values() {
    let dir = tempfile::tempdir().unwrap();
    let data = dataset(100);
    let meta = write(dir.path(), 0, 20_000_000, &data);
    let b = Block::open(&dir.path().join(&meta.id)).unwrap();
    assert_eq!(
        b.label_names(&[]).unwrap(),
        vec!["__name__", "gpu", "instance", "model_name", "series"]
    );
    assert_eq!(
        b.label_values("model_name", &[]).unwrap(),
        vec!["llama", "mistral", "qwen-7b"]
    );
    assert!(b.label_values("nosuch", &[]).unwrap().is_empty());
}

#[test]
fn empty_block_and_block_ids() {
    let dir = tempfile::tempdir().unwrap();
    let meta = write(dir.path(), 0, 10, &[]);
    let b = Block::open(&dir.path().join(&meta.id)).unwrap();
    assert_eq!(meta.num_series, 0);
    assert!(b.select(&[], 0, 10).unwrap().is_empty());
    assert!(b.label_names(&[]).unwrap().is_empty());
    assert!(b.check().unwrap().is_empty());
    let a = inferdb_storage::block::new_block_id();
    let c = inferdb_storage::block::new_block_id();
    assert_eq!(a.len(), 26);
    assert!(a < c, "{a} !< {c}");
    let dirs = inferdb_storage::block::list_block_dirs(dir.path()).unwrap();
    assert_eq!(dirs, vec![dir.path().join(&meta.id)]);
}

#[test]
fn blocks_are_shared_across_reader_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Block>();
    let dir = tempfile::tempdir().unwrap();
    let data = dataset(200);
    let meta = write(dir.path(), 0, 20_000_000, &data);
    let b = std::sync::Arc::new(Block::open(&dir.path().join(&meta.id)).unwrap());
    let want = read_all(&b, &[], i64::MIN, i64::MAX);
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let b = b.clone();
            std::thread::spawn(move || read_all(&b, &[], i64::MIN, i64::MAX))
        })
        .collect();
    for h in handles {
        assert!(h.join().unwrap() == want);
    }
}

#[test]
fn unsorted_and_duplicate_input_is_normalised() {
    let dir = tempfile::tempdir().unwrap();
    let a = Labels::from_pairs([("__name__", "a")]);
    let z = Labels::from_pairs([("__name__", "z")]);
    let series = vec![
        (z.clone(), encode(&[(1, 1.0)])),
        (a.clone(), encode(&[(50, 5.0), (60, 6.0)])),
        (a.clone(), encode(&[(10, 1.0)])),
    ];
    let meta = inferdb_storage::block::write_block(dir.path(), 0, 100, series.into_iter()).unwrap();
    assert_eq!(meta.num_series, 2);
    assert_eq!(meta.num_samples, 4);
    let b = Block::open(&dir.path().join(&meta.id)).unwrap();
    let got = read_all(&b, &[], 0, 100);
    assert_eq!(got[0].0, a);
    let ts: Vec<i64> = got[0].1.iter().map(|x| x.0).collect();
    assert_eq!(ts, vec![10, 50, 60]);
    assert_eq!(got[1].0, z);
    assert!(b.check().unwrap().is_empty());
}

#[test]
fn leftover_tmp_folders_are_ignored_and_removed() {
    let dir = tempfile::tempdir().unwrap();
    let meta = write(
        dir.path(),
        0,
        10,
        &[(Labels::from_pairs([("__name__", "x")]), vec![(1, 1.0)])],
    );
    let tmp = dir.path().join("01ZZZZZZZZZZZZZZZZZZZZZZZZ.tmp");
    std::fs::create_dir_all(tmp.join("chunks")).unwrap();
    std::fs::write(tmp.join("meta.json"), b"{}").unwrap();
    let dirs = inferdb_storage::block::list_block_dirs(dir.path()).unwrap();
    assert_eq!(dirs, vec![dir.path().join(&meta.id)]);
    inferdb_storage::block::remove_leftovers(dir.path()).unwrap();
    assert!(!tmp.exists());
    assert!(dir.path().join(&meta.id).exists());
}
