//! The commands agree with each other and refuse what would go wrong quietly: `query` takes
//! `serve`'s `--query.*` flag names and writes CSV times in milliseconds as `export csv` does;
//! a millisecond timestamp where seconds are expected is refused (`query --time`, import);
//! an export whose file name says the other format is refused, and one matching nothing exits
//! 0 with a warning; a second import over the same range warns; the simulator stays off vLLM's
//! port 8000 and says what to do when its port is taken; errors name their path once.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_inferdb");

fn run(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Writes an OpenMetrics file of 20 samples of `m{a="1"}` every 15 s from `t0` (seconds).
fn om_file(dir: &Path, name: &str, t0: i64) -> PathBuf {
    let mut s = String::new();
    for i in 0..20 {
        s.push_str(&format!("m{{a=\"1\"}} {i} {}\n", t0 + i * 15));
    }
    s.push_str("# EOF\n");
    let p = dir.join(name);
    std::fs::write(&p, s).unwrap();
    p
}

/// A store with the samples of [`om_file`] at `t0`.
fn store(dir: &Path, t0: i64) -> PathBuf {
    let data = dir.join("data");
    let f = om_file(dir, "h.om", t0);
    let o = run(&[
        "import",
        "openmetrics",
        "-q",
        "--data-dir",
        data.to_str().unwrap(),
        f.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    data
}

const T0: i64 = 1_796_198_400; // 2026-12-02T08:00:00Z

#[test]
fn query_takes_serves_flag_names_and_writes_export_csv_times() {
    let tmp = tempfile::tempdir().unwrap();
    let data = store(tmp.path(), T0);
    let d = data.to_str().unwrap();
    let t = (T0 + 19 * 15).to_string();
    let o = run(&[
        "query",
        "instant",
        "m",
        "--data-dir",
        d,
        "--time",
        &t,
        "--format",
        "csv",
        "--query.timeout",
        "30s",
        "--query.lookback-delta",
        "1m",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let q = stdout(&o);
    // the old names are gone (one name per setting across commands)
    let old = run(&["query", "instant", "m", "--data-dir", d, "--timeout", "30s"]);
    assert!(!old.status.success());
    assert!(stderr(&old).contains("--timeout"), "{}", stderr(&old));
    let old = run(&[
        "query",
        "instant",
        "m",
        "--data-dir",
        d,
        "--lookback-delta",
        "1m",
    ]);
    assert!(!old.status.success());

    let o = run(&[
        "export",
        "csv",
        "--match",
        "m",
        "--data-dir",
        d,
        "--start",
        &t,
        "--end",
        &t,
        "--out",
        "-",
        "-q",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let e = stdout(&o);
    let ms = ((T0 + 19 * 15) * 1000).to_string();
    // both: integer milliseconds in the first column
    assert_eq!(
        q.lines().nth(1).and_then(|l| l.split(',').next()),
        Some(ms.as_str()),
        "{q}"
    );
    assert_eq!(
        e.lines().nth(1).and_then(|l| l.split(',').next()),
        Some(ms.as_str()),
        "{e}"
    );

    // a millisecond --time is refused, not answered with nothing
    let o = run(&["query", "instant", "m", "--data-dir", d, "--time", &ms]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("plausibly milliseconds"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn export_refuses_a_name_of_the_other_format_and_warns_when_nothing_matches() {
    let tmp = tempfile::tempdir().unwrap();
    let data = store(tmp.path(), T0);
    let d = data.to_str().unwrap();
    for (fmt, name) in [("parquet", "x.csv"), ("csv", "x.parquet")] {
        let out = tmp.path().join(name);
        let o = run(&[
            "export",
            fmt,
            "--match",
            "m",
            "--data-dir",
            d,
            "--start",
            "0",
            "--out",
            out.to_str().unwrap(),
        ]);
        assert!(!o.status.success(), "export {fmt} --out {name} accepted");
        assert!(stderr(&o).contains(name), "{}", stderr(&o));
        assert!(!out.exists(), "{} was written", out.display());
    }
    let out = tmp.path().join("none.csv");
    let o = run(&[
        "export",
        "csv",
        "--match",
        "no_such_metric",
        "--data-dir",
        d,
        "--start",
        "0",
        "--out",
        out.to_str().unwrap(),
        "-q",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("warning: no samples match no_such_metric"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn import_refuses_millisecond_timestamps_and_warns_on_overlap() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let d = data.to_str().unwrap();
    let ms = om_file(tmp.path(), "ms.om", T0 * 1000);
    let o = run(&[
        "import",
        "openmetrics",
        "-q",
        "--data-dir",
        d,
        ms.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("plausibly milliseconds"),
        "{}",
        stderr(&o)
    );
    let o = run(&[
        "import",
        "openmetrics",
        "-q",
        "--allow-far-future",
        "--dry-run",
        "--data-dir",
        d,
        ms.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));

    let f = om_file(tmp.path(), "ok.om", T0);
    let o = run(&[
        "import",
        "openmetrics",
        "-q",
        "--data-dir",
        d,
        f.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stderr(&o).contains("overlap"), "{}", stderr(&o));
    let o = run(&[
        "import",
        "openmetrics",
        "-q",
        "--data-dir",
        d,
        f.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("warning: the imported samples"),
        "{}",
        stderr(&o)
    );
    assert!(stderr(&o).contains("overlap"), "{}", stderr(&o));
}

#[test]
fn simulator_stays_off_vllms_port_and_says_when_its_port_is_taken() {
    for args in [&["simulate", "--help"][..], &["serve", "--help"][..]] {
        let help = stdout(&run(args));
        assert!(help.contains("[default: 8100]"), "{help}");
        assert!(!help.contains("[default: 8000]"), "{help}");
    }
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let o = run(&["simulate", "--host", "127.0.0.1", "--port", &port]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("choose another with --port"), "{e}");
}

#[test]
fn errors_name_their_path_once() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nothing-here");
    let m = missing.to_str().unwrap();
    for args in [
        vec!["tsdb", "stats", "--data-dir", m],
        vec![
            "export",
            "csv",
            "--match",
            "up",
            "--start",
            "0",
            "--out",
            "-",
            "--data-dir",
            m,
        ],
    ] {
        let o = run(&args);
        assert!(!o.status.success());
        let e = stderr(&o);
        assert_eq!(e.matches(m).count(), 1, "{args:?}: {e}");
    }
    let bad = tmp.path().join("bad.yml");
    std::fs::write(&bad, "global: [\n").unwrap();
    let o = run(&[
        "serve",
        "--no-gpu",
        "--web.listen-address",
        "127.0.0.1:0",
        "--data-dir",
        m,
        "--config.file",
        bad.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    let e = stderr(&o);
    let last = e.lines().last().unwrap_or_default();
    assert_eq!(last.matches("bad.yml").count(), 1, "{e}");
}
