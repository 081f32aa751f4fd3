//! `inferdb import openmetrics`: round trip, block layout, atomicity on bad input.

mod cli_util;

use std::path::{Path, PathBuf};
use std::process::Command;

use inferdb::import::{import_files, validate_files, ImportError, ImportOptions};
use inferdb_storage::block::list_block_dirs;
use inferdb_storage::{Db, Labels, Options};

const H2: i64 = 2 * 3600 * 1000;
// 2026-12-01T01:23:45.678Z: deliberately not aligned to 2 h
const START: i64 = 1_796_088_225_678;

fn opts() -> ImportOptions {
    ImportOptions {
        progress: false,
        ..Default::default()
    }
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().to_string())
                .filter(|n| n.ends_with(".tmp"))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn import_round_trips_into_aligned_blocks() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    // 5 h of 15 s scrapes for 3 servers
    let (text, exp) = cli_util::gen(START, 1200, 15_000, 3);
    let f = write(tmp.path(), "in.om", &text);
    let st = import_files(&data, &[f], &opts()).unwrap();
    let nsamples: usize = exp.values().map(Vec::len).sum();
    assert_eq!(st.samples as usize, nsamples);
    assert_eq!(st.series, exp.len());
    assert_eq!(st.duplicates, 0);
    let end = START + 1199 * 15_000;
    assert_eq!((st.min_time, st.max_time), (START, end));
    // 01:23 .. 06:23 touches the ranges [00,02) [02,04) [04,06) [06,08)
    assert_eq!(st.blocks.len(), 4);
    for b in &st.blocks {
        assert_eq!(b.min_time.rem_euclid(H2), 0, "block {b:?} not aligned");
        assert_eq!(b.max_time - b.min_time, H2);
    }
    assert_eq!(
        st.blocks.iter().map(|b| b.num_samples).sum::<u64>() as usize,
        nsamples
    );
    // then compacted as history: [00,06) (its 6 h window), then with [06,08) in the 18 h
    // window [-06,12) that holds both
    assert_eq!(st.compaction_error, None);
    let ranges: Vec<(i64, i64)> = st
        .compacted
        .iter()
        .map(|b| (b.min_time, b.max_time))
        .collect();
    let day = START - START.rem_euclid(H2 * 12);
    assert_eq!(ranges, vec![(day, day + 4 * H2)]);
    assert_eq!(list_block_dirs(&data).unwrap().len(), 1);
    assert!(leftovers(&data).is_empty(), "{:?}", leftovers(&data));
    let got = cli_util::read_back(&data, i64::MIN, i64::MAX);
    assert_eq!(got.len(), exp.len());
    for (l, want) in &exp {
        let have = got.get(l).unwrap_or_else(|| panic!("series {l} missing"));
        assert!(cli_util::same_bits(have, want), "series {l} differs");
    }
    // And through PromQL: the last value of each running gauge.
    let db = cli_util::open_read_only(&data);
    let eng = inferdb_query::Engine::new(Default::default());
    let r = eng
        .instant(&db, "sum(vllm:num_requests_running)", end)
        .unwrap();
    let want: f64 = exp
        .iter()
        .filter(|(l, _)| l.metric_name() == Some("vllm:num_requests_running"))
        .map(|(_, v)| v.last().unwrap().1)
        .sum();
    match r.value {
        inferdb_query::value::Value::Vector(v) => {
            assert_eq!(v.len(), 1);
            assert_eq!(v[0].f, want);
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn bad_line_is_reported_and_nothing_is_imported() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let (good, _) = cli_util::gen(START, 50, 15_000, 1);
    let g = write(tmp.path(), "good.om", &good);
    // a second file with a bad value on line 3 and a sample without timestamp on line 5
    let bad = "# TYPE x gauge\nx{a=\"1\"} 1 1796088225.000\nx{a=\"2\"} one 1796088225.000\nx{a=\"3\"} 3 1796088225.000\nx{a=\"4\"} 4\n# EOF\n";
    let b = write(tmp.path(), "bad.om", bad);
    match import_files(&data, &[g.clone(), b.clone()], &opts()) {
        Err(ImportError::Invalid(p)) => {
            assert_eq!(p.len(), 2, "{p:?}");
            assert_eq!((p[0].file.clone(), p[0].line), (b.clone(), 3));
            assert!(p[0].reason.contains("invalid value"), "{}", p[0]);
            assert_eq!(p[1].line, 5);
            assert!(p[1].reason.contains("no timestamp"), "{}", p[1]);
            assert!(p[0].to_string().starts_with(&format!("{}:3:", b.display())));
        }
        other => panic!("expected invalid input, got {other:?}"),
    }
    // nothing written: no blocks, no staging folders (the data folder was not even created)
    assert!(list_block_dirs(&data).unwrap().is_empty());
    assert!(leftovers(&data).is_empty());
    // the dry run says the same
    assert!(matches!(
        validate_files(&[b], &opts()),
        Err(ImportError::Invalid(_))
    ));
    // missing "# EOF" is an OpenMetrics error at the last line
    let noeof = write(tmp.path(), "noeof.om", "x 1 1.0\nx 2 2.0\n");
    match import_files(&data, &[noeof], &opts()) {
        Err(ImportError::Invalid(p)) => assert_eq!(p[0].line, 2, "{p:?}"),
        other => panic!("expected invalid input, got {other:?}"),
    }
    // conflicting duplicate
    let dup = write(
        tmp.path(),
        "dup.om",
        "x 1 10.0\nx 1 11.0\nx 2 11.0\n# EOF\n",
    );
    match import_files(&data, &[dup], &opts()) {
        Err(ImportError::Invalid(p)) => {
            assert_eq!(p[0].line, 3, "{p:?}");
            assert!(p[0].reason.contains("duplicate"));
        }
        other => panic!("expected invalid input, got {other:?}"),
    }
    assert!(list_block_dirs(&data).unwrap().is_empty());
}

#[test]
fn invalid_utf8_is_a_problem_of_its_line_and_later_lines_are_still_read() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    // line 3 holds a byte that is not UTF-8; line 5 has another problem, which must be found too
    let mut bad = b"# TYPE x gauge\nx{a=\"1\"} 1 1796088225.000\nx{a=\"".to_vec();
    bad.extend_from_slice(&[0xff, 0xfe]);
    bad.extend_from_slice(
        b"\"} 2 1796088225.000\nx{a=\"3\"} 3 1796088225.000\nx{a=\"4\"} 4\n# EOF\n",
    );
    let b = tmp.path().join("bad.om");
    std::fs::write(&b, &bad).unwrap();
    match import_files(&data, std::slice::from_ref(&b), &opts()) {
        Err(ImportError::Invalid(p)) => {
            assert_eq!(p.len(), 2, "{p:?}");
            assert_eq!((p[0].file.clone(), p[0].line), (b.clone(), 3));
            assert_eq!(p[0].reason, "invalid UTF-8");
            assert_eq!(p[1].line, 5);
            assert!(p[1].reason.contains("no timestamp"), "{}", p[1]);
        }
        other => panic!("expected invalid input, got {other:?}"),
    }
    assert!(list_block_dirs(&data).unwrap().is_empty());
}

#[test]
fn dry_run_counts_and_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let (text, exp) = cli_util::gen(START, 100, 15_000, 2);
    let f = write(tmp.path(), "in.om", &text);
    let mut o = opts();
    o.dry_run = true;
    let st = import_files(&data, &[f], &o).unwrap();
    assert_eq!(
        st.samples as usize,
        exp.values().map(Vec::len).sum::<usize>()
    );
    assert_eq!(st.block_ranges, 1);
    assert!(st.blocks.is_empty());
    assert!(!data.exists());
}

#[test]
fn import_overlapping_the_head_merges_with_it() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let l = Labels::from_pairs([("__name__", "m"), ("job", "j")]);
    {
        let db = Db::open(&data, Options::default()).unwrap();
        let mut a = db.appender();
        for i in 0..10 {
            a.append(&l, START + i * 1000, i as f64).unwrap();
        }
        a.commit().unwrap();
        db.close().unwrap();
    }
    // history older than the head, overlapping it and newer than it; out of order too
    let mut text = String::new();
    for i in [-5i64, 12, -3, 3, 11, 20, -4] {
        text.push_str(&format!(
            "m{{job=\"j\"}} {} {}\n",
            100 + i,
            cli_util::om_ts(START + i * 1000)
        ));
    }
    text.push_str("# EOF\n");
    let f = write(tmp.path(), "h.om", &text);
    let st = import_files(&data, &[f], &opts()).unwrap();
    assert_eq!(st.samples, 7);
    let got = cli_util::read_back(&data, i64::MIN, i64::MAX);
    let ts: Vec<i64> = got[&l].iter().map(|x| (x.0 - START) / 1000).collect();
    assert_eq!(
        ts,
        vec![-5, -4, -3, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 20]
    );
    let at = |i: i64| got[&l].iter().find(|x| x.0 == START + i * 1000).unwrap().1;
    assert_eq!(at(-4), 96.0);
    assert_eq!(at(20), 120.0);
    assert_eq!(at(5), 5.0);
}

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_inferdb"))
}

fn has_subcommand(name: &str) -> bool {
    let out = bin().arg(name).arg("--help").output().unwrap();
    out.status.success()
}

#[test]
fn cli_import_reports_line_numbers_and_exit_code() {
    if !has_subcommand("import") {
        eprintln!("SKIP: the inferdb binary has no `import` subcommand wired yet");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let bad = write(tmp.path(), "bad.om", "x 1 1.0\nx{a=} 2 2.0\n# EOF\n");
    let out = bin()
        .args(["import", "openmetrics", "--data-dir"])
        .arg(&data)
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("{}:2:", bad.display())), "{err}");
    assert!(err.contains("nothing imported"), "{err}");
    assert!(list_block_dirs(&data).unwrap().is_empty());

    let (text, _) = cli_util::gen(START, 30, 15_000, 1);
    let good = write(tmp.path(), "good.om", &text);
    let out = bin()
        .args(["import", "openmetrics", "--dry-run", "--data-dir"])
        .arg(&data)
        .arg(&good)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("dry run"));
    assert!(list_block_dirs(&data).unwrap().is_empty());
    let out = bin()
        .args(["import", "openmetrics", "--data-dir"])
        .arg(&data)
        .arg(&good)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(list_block_dirs(&data).unwrap().len(), 1);
}
