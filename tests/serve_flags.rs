//! `inferdb serve`'s Prometheus flags do what Prometheus does with them, and the rest are
//! refused: log level and format (Prometheus 3's keys, no colour, one line per event),
//! `--web.listen-address :PORT`, `--web.external-url`/`--web.route-prefix`, `--enable-feature`,
//! `--storage.tsdb.wal-compression[-type]` (the WAL's record format), refused flags, reload
//! failures logged.

mod common;

use std::io::{Read, Write};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{free_port, serve_command, Client, Proc, BIN};

/// Waits until the log holds a line containing `what` (20 s at most).
fn wait_log(p: &Proc, what: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let log = p.log();
        if log.contains(what) || Instant::now() > deadline {
            return log;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A raw GET without following redirects: (status line, headers+body).
fn raw_get(port: u16, path: &str) -> String {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

fn start(work: &Path, extra: &[&str], port: u16, ready_path: &str) -> (Proc, String) {
    let client = Client::new();
    let mut cmd = serve_command(&work.join("data"), port);
    cmd.args(extra);
    let mut p = Proc::spawn("inferdb", &mut cmd, work.join("inferdb.log"));
    let base = format!("http://127.0.0.1:{port}");
    p.wait_for(&format!("{base}{ready_path}"), &client);
    (p, base)
}

#[test]
fn json_logs_parse_with_prometheus_keys_and_no_colour() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let (p, _) = start(
        dir.path(),
        &[
            "--log.format=json",
            "--log.level=debug",
            "--enable-feature=no-such-feature,promql-at-modifier",
        ],
        port,
        "/-/ready",
    );
    let log = wait_log(&p, "Listening and serving HTTP");
    assert!(!log.contains('\u{1b}'), "ANSI escape in the log:\n{log}");
    let mut levels = std::collections::BTreeSet::new();
    let mut unknown = false;
    for line in log.lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
        for k in ["time", "level", "source", "msg"] {
            assert!(v.get(k).is_some_and(|x| x.is_string()), "{k} in {line}");
        }
        assert!(keys.len() >= 4);
        levels.insert(v["level"].as_str().unwrap().to_string());
        if v["msg"] == "Unknown option for --enable-feature" {
            assert_eq!(v["option"], "no-such-feature");
            assert_eq!(v["level"], "WARN");
            unknown = true;
        }
    }
    assert!(unknown, "unknown feature not logged:\n{log}");
    assert!(levels.contains("DEBUG"), "--log.level=debug: {levels:?}");
    assert!(
        log.contains("Listening and serving HTTP") && !log.contains("inferdb serving on"),
        "{log}"
    );
    p.terminate();
}

#[test]
fn logfmt_at_warn_leaves_out_info_lines() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let (p, _) = start(dir.path(), &["--log.level=warn"], port, "/-/ready");
    std::thread::sleep(Duration::from_millis(300));
    let log = p.log();
    // "nothing to scrape" is a warning; startup info lines are filtered out
    assert!(log.contains("level=WARN"), "{log}");
    assert!(!log.contains("level=INFO"), "{log}");
    for line in log.lines() {
        assert!(line.starts_with("time="), "not logfmt: {line}");
        assert!(
            line.contains(" source=") && line.contains(" msg="),
            "{line}"
        );
    }
    p.terminate();
}

#[test]
fn listen_address_colon_port_binds_every_interface() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut cmd = Command::new(BIN);
    cmd.args(["serve", "--no-gpu", "--data-dir"])
        .arg(dir.path().join("data"))
        .args(["--web.listen-address", &format!(":{port}")]);
    let mut p = Proc::spawn("inferdb", &mut cmd, dir.path().join("log"));
    p.wait_for(
        &format!("http://127.0.0.1:{port}/-/healthy"),
        &Client::new(),
    );
    let log = p.log();
    assert!(
        log.contains(&format!("[::]:{port}")) || log.contains(&format!("0.0.0.0:{port}")),
        "{log}"
    );
    p.terminate();
}

#[test]
fn external_url_and_route_prefix_move_every_route() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let (p, base) = start(
        dir.path(),
        &["--web.external-url", "https://mon.example.com/prom/"],
        port,
        "/prom/-/ready",
    );
    let c = Client::new();
    let (st, body) = c.get(&format!("{base}/prom/api/v1/status/flags"));
    assert_eq!(st, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        v["data"]["web.external-url"],
        "https://mon.example.com/prom"
    );
    assert_eq!(v["data"]["web.route-prefix"], "/prom");
    assert_eq!(c.get(&format!("{base}/prom/metrics")).0, 200);
    assert_eq!(c.get(&format!("{base}/api/v1/status/flags")).0, 404);
    assert_eq!(c.get(&format!("{base}/-/healthy")).0, 404);
    let root = raw_get(port, "/");
    assert!(root.starts_with("HTTP/1.1 302"), "{root}");
    assert!(
        root.to_ascii_lowercase().contains("location: /prom/"),
        "{root}"
    );
    p.terminate();

    // an explicit prefix wins over the external URL's path
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let (p, base) = start(
        dir.path(),
        &[
            "--web.external-url",
            "https://mon.example.com/prom/",
            "--web.route-prefix=/",
        ],
        port,
        "/-/ready",
    );
    assert_eq!(c.get(&format!("{base}/api/v1/status/buildinfo")).0, 200);
    p.terminate();
}

/// `serve ARGS` exits with a failure whose stderr contains every one of `needles`.
fn refused(args: &[&str], needles: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .arg("serve")
        .args([
            "--no-gpu",
            "--web.listen-address",
            "127.0.0.1:0",
            "--data-dir",
        ])
        .arg(dir.path().join("data"))
        .args(args)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} accepted:\n{err}");
    for n in needles {
        assert!(err.contains(n), "{args:?}: {n:?} not in:\n{err}");
    }
}

#[test]
fn flags_inferdb_cannot_honour_are_refused() {
    refused(
        &["--storage.tsdb.wal-compression-type=lz4"],
        &[
            "--storage.tsdb.wal-compression-type",
            "lz4",
            "snappy",
            "zstd",
        ],
    );
    refused(
        &["--storage.tsdb.wal-compression=maybe"],
        &["--storage.tsdb.wal-compression", "maybe"],
    );
    refused(&["--web.console.templates=consoles"], &["console"]);
    refused(&["--storage.tsdb.no-such-flag=1"], &["no-such-flag"]);
    refused(&["--log.level=verbose"], &["verbose"]);
    refused(&["--log.format=text"], &["text"]);
    refused(&["--web.external-url=ftp://x/"], &["--web.external-url"]);
    refused(
        &["--web.listen-address=:notaport"],
        &["--web.listen-address"],
    );
}

#[test]
fn failed_reload_is_logged() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("prometheus.yml");
    std::fs::write(&cfg, "scrape_configs: []\n").unwrap();
    let port = free_port();
    let (p, base) = start(
        dir.path(),
        &[
            "--web.enable-lifecycle",
            "--config.file",
            cfg.to_str().unwrap(),
        ],
        port,
        "/-/ready",
    );
    std::fs::write(&cfg, "scrape_configs: [[[\n").unwrap();
    let c = Client::new();
    let (st, _) = c.post(&format!("{base}/-/reload"), &[]);
    assert_eq!(st, 500);
    let log = wait_log(&p, "Error reloading config");
    let line = log
        .lines()
        .find(|l| l.contains("Error reloading config"))
        .unwrap_or_else(|| panic!("reload failure not logged:\n{log}"));
    assert!(
        line.contains("level=ERROR") && line.contains("err="),
        "{line}"
    );
    p.terminate();
}

#[test]
fn version_and_buildinfo_say_which_build() {
    let out = Command::new(BIN).arg("--version").output().unwrap();
    let v = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    for k in [
        "revision:",
        "build date:",
        "toolchain:",
        "rustc ",
        "Prometheus API:",
    ] {
        assert!(v.contains(k), "{k} not in {v}");
    }
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let (p, base) = start(dir.path(), &[], port, "/-/ready");
    let (st, body) = Client::new().get(&format!("{base}/api/v1/status/buildinfo"));
    assert_eq!(st, 200);
    let b: serde_json::Value = serde_json::from_str(&body).unwrap();
    let d = &b["data"];
    assert!(v.contains(d["revision"].as_str().unwrap()), "{v} / {d}");
    assert!(!d["buildDate"].as_str().unwrap().is_empty(), "{d}");
    assert!(d["goVersion"].as_str().unwrap().contains("rustc"), "{d}");
    // the provisioned Grafana datasource declares the version buildinfo answers
    let ds = std::fs::read_to_string(
        common::conformance::repo_root()
            .join("deploy/grafana/provisioning/datasources/inferdb.yaml"),
    )
    .unwrap();
    let declared = ds
        .lines()
        .find_map(|l| l.trim().strip_prefix("prometheusVersion:"))
        .unwrap()
        .trim();
    assert_eq!(declared, d["version"].as_str().unwrap());
    p.terminate();
}

/// The compression bits of the records in the newest WAL segment of `data`.
fn newest_segment_bits(data: &Path) -> Vec<u8> {
    use inferdb_storage::wal::{compress::TYPE_MASK, record};
    let wal = data.join("wal");
    let Some(seg) = std::fs::read_dir(&wal)
        .map(|rd| {
            rd.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| n.len() == 8 && n.bytes().all(|b| b.is_ascii_digit()))
                .max()
        })
        .ok()
        .flatten()
    else {
        return Vec::new();
    };
    let bytes = std::fs::read(wal.join(seg)).unwrap_or_default();
    // the segment being written may end in half a record: read the whole ones
    record::Frames::new(&bytes)
        .map_while(|f| f.ok())
        .map(|(_, ty, _)| ty & !TYPE_MASK)
        .collect()
}

#[test]
fn wal_compression_flags_set_the_wal_record_format() {
    use inferdb_storage::wal::compress::{SNAPPY_BIT, ZSTD_BIT};
    let help = Command::new(BIN)
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for f in [
        "--storage.tsdb.wal-compression[=<BOOL>]",
        "--no-storage.tsdb.wal-compression",
        "--storage.tsdb.wal-compression-type <TYPE>",
    ] {
        assert!(help.contains(f), "{f} not in serve --help:\n{help}");
    }
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    // the server scrapes itself every second: hundreds of series, so records worth compressing
    let cfg = dir.path().join("prometheus.yml");
    std::fs::write(
        &cfg,
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: self\n    \
             static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
        ),
    )
    .unwrap();
    let data = dir.path().join("data");
    // a client per run: a pooled connection to the previous run's server would be dead
    let scrapes = |client: &Client, base: &str| -> f64 {
        let v = client.query(
            base,
            "/api/v1/query",
            &[("query", "count_over_time(up{job=\"self\"}[1h])".to_string())],
        );
        v["data"]["result"][0]["value"][1]
            .as_str()
            .map_or(0.0, |s| s.parse().unwrap())
    };
    let runs: [(&[&str], u8, &str, &str); 4] = [
        (&[], SNAPPY_BIT, "true", "snappy"),
        (
            &["--storage.tsdb.wal-compression-type=zstd"],
            ZSTD_BIT,
            "true",
            "zstd",
        ),
        (&["--no-storage.tsdb.wal-compression"], 0, "false", "snappy"),
        (
            &[
                "--storage.tsdb.wal-compression",
                "--storage.tsdb.wal-compression-type",
                "zstd",
            ],
            ZSTD_BIT,
            "true",
            "zstd",
        ),
    ];
    let mut before = 0.0;
    for (i, (args, want, flag, ty)) in runs.iter().enumerate() {
        let mut all = vec!["--config.file", cfg.to_str().unwrap()];
        all.extend_from_slice(args);
        let (p, base) = start(dir.path(), &all, port, "/-/ready");
        // what the earlier runs wrote (segments and checkpoints of other compressions) replayed
        let client = Client::new();
        let replayed = scrapes(&client, &base);
        assert!(
            replayed >= before,
            "run {i}: {replayed} scrapes after restart, {before} before"
        );
        // wait for two scrapes of this run to reach the WAL
        let deadline = Instant::now() + Duration::from_secs(30);
        while scrapes(&client, &base) < replayed + 2.0 {
            assert!(Instant::now() < deadline, "run {i}: no scrapes");
            std::thread::sleep(Duration::from_millis(100));
        }
        let bits = newest_segment_bits(&data);
        assert!(
            bits.iter().all(|&b| b == 0 || b == *want),
            "run {i} {args:?}: {bits:?}"
        );
        assert!(
            *want == 0 || bits.iter().filter(|&&b| b == *want).count() >= 2,
            "run {i} {args:?}: scrape records not compressed: {bits:?}"
        );
        let (_, body) = client.get(&format!("{base}/api/v1/status/flags"));
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["data"]["storage.tsdb.wal-compression"], *flag, "run {i}");
        assert_eq!(
            v["data"]["storage.tsdb.wal-compression-type"], *ty,
            "run {i}"
        );
        let saved = client.metric(&base, "prometheus_tsdb_wal_record_bytes_saved_total");
        if *want == 0 {
            assert_eq!(saved, None, "run {i}");
        } else {
            assert!(saved.unwrap_or(0.0) > 0.0, "run {i}: {saved:?}");
        }
        before = scrapes(&client, &base);
        if i % 2 == 0 {
            p.terminate(); // a clean stop: a checkpoint in this run's compression
        } else {
            drop(p); // SIGKILL: the segments stay for the next replay
        }
    }
    let (p, base) = start(dir.path(), &[], port, "/-/ready");
    assert!(scrapes(&Client::new(), &base) >= before);
    let log = std::fs::read_to_string(dir.path().join("inferdb.log")).unwrap();
    assert!(!log.contains("damaged WAL span"), "{log}");
    p.terminate();
}
