//! A full disk under `inferdb serve` while it scrapes four simulated vLLM servers every
//! second, on a 48 MB tmpfs this test mounts (it needs root; elsewhere it prints why it is
//! skipped): fill the disk, free it, `kill -9`, restart. Every sample a query returned before
//! the fill and after the recovery is still there after the restart, nothing (not even `up`)
//! was stored while the WAL refused writes, `/api/v1/targets`, `/metrics` and a remote-write
//! sender were told, `tsdb check` is clean and the WAL folder holds no run of empty segments.
//!
//! `benches/full_disk_soak.sh` runs [`soak`] (ignored here): the same episode repeated with
//! the fill at random moments, also while blocks are cut and compacted (2 s blocks) and while
//! `inferdb import` writes blocks into another folder of the same file system.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{free_port, now_ms, Client, Proc, BIN};
use serde_json::Value;

const TARGETS: usize = 4;

/// A tmpfs mounted for the test, unmounted (lazily) on drop.
struct Mount(PathBuf);

impl Mount {
    fn new(at: &Path, size: &str) -> Option<Mount> {
        fs::create_dir_all(at).unwrap();
        match Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(at)
            .output()
        {
            Ok(o) if o.status.success() => Some(Mount(at.to_path_buf())),
            Ok(o) => {
                eprintln!(
                    "SKIPPED: cannot mount a tmpfs ({}); run as root to test a full disk",
                    String::from_utf8_lossy(&o.stderr).trim()
                );
                None
            }
            Err(e) => {
                eprintln!("SKIPPED: cannot run mount ({e})");
                None
            }
        }
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Waits for `cond` (polled every 100 ms) at most `secs` seconds; panics with `what`.
fn wait(secs: u64, what: &str, mut cond: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(secs);
    while !cond() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Every sample of the scraped jobs: series text → (timestamp ms, value text).
type Samples = BTreeMap<String, BTreeMap<i64, String>>;

fn all_samples(c: &Client, base: &str) -> Samples {
    select(c, base, r#"{job=~"vllm.*"}[1h]"#)
}

/// The `up` samples of the last 30 s (cheap to poll).
fn recent_up(c: &Client, base: &str) -> Samples {
    select(c, base, r#"up{job=~"vllm.*"}[30s]"#)
}

fn select(c: &Client, base: &str, q: &str) -> Samples {
    let v = c.query(
        base,
        "/api/v1/query",
        &[
            ("query", q.to_string()),
            ("time", format!("{}", now_ms() / 1000 + 1)),
        ],
    );
    let mut out = Samples::new();
    for s in v["data"]["result"].as_array().unwrap() {
        let key = s["metric"].to_string();
        let e = out.entry(key).or_default();
        for p in s["values"].as_array().unwrap() {
            let t = (p[0].as_f64().unwrap() * 1000.0).round() as i64;
            e.insert(t, p[1].as_str().unwrap().to_string());
        }
    }
    out
}

/// `up` samples of every target with timestamps in `[from, to]`.
fn up_between(s: &Samples, from: i64, to: i64) -> usize {
    s.iter()
        .filter(|(k, _)| k.contains(r#""__name__":"up""#))
        .map(|(_, v)| v.range(from..=to).count())
        .sum()
}

fn count(s: &Samples) -> usize {
    s.values().map(BTreeMap::len).sum()
}

/// The samples of `want` missing from `got`.
fn missing(want: &Samples, got: &Samples) -> Vec<String> {
    let mut out = Vec::new();
    for (k, v) in want {
        for (t, val) in v {
            if got.get(k).and_then(|g| g.get(t)) != Some(val) {
                out.push(format!("{k} @{t} = {val}"));
            }
        }
    }
    out
}

/// Fills the file system: one file written until a write fails.
fn fill(dir: &Path) -> PathBuf {
    let p = dir.join("filler");
    let mut f = fs::File::create(&p).unwrap();
    let block = vec![0xa5u8; 64 << 10];
    while f.write_all(&block).is_ok() {}
    let small = vec![0xa5u8; 512];
    while f.write_all(&small).is_ok() {}
    p
}

/// A run of two or more empty WAL segments, if any.
/// Appends to the filler until a write fails again.
fn top_up(filler: &Path) {
    if let Ok(mut f) = fs::OpenOptions::new().append(true).open(filler) {
        let block = vec![0x5au8; 4096];
        while f.write_all(&block).is_ok() {}
    }
}

fn empty_segment_runs(data: &Path) -> Vec<String> {
    let mut segs: Vec<(String, u64)> = fs::read_dir(data.join("wal"))
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                e.metadata().unwrap().len(),
            )
        })
        .collect();
    segs.sort();
    let mut bad = Vec::new();
    for w in segs.windows(2) {
        if w[0].1 == 0 && w[1].1 == 0 {
            bad.push(format!("{} and {}", w[0].0, w[1].0));
        }
    }
    bad
}

struct Setup {
    work: PathBuf,
    mnt: PathBuf,
    data: PathBuf,
    yml: PathBuf,
    _sim: Proc,
}

impl Setup {
    fn new(work: &Path, mnt: &Path, client: &Client) -> Setup {
        let sim_port = free_port();
        let mut sim = Proc::spawn(
            "simulator",
            Command::new(BIN).args([
                "simulate",
                "--port",
                &sim_port.to_string(),
                "--servers",
                &TARGETS.to_string(),
            ]),
            work.join("sim.log"),
        );
        sim.wait_for(
            &format!("http://127.0.0.1:{sim_port}/servers/0/metrics"),
            client,
        );
        let mut yml =
            String::from("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n");
        for i in 0..TARGETS {
            yml.push_str(&format!(
                "  - job_name: vllm{i}\n    metrics_path: /servers/{i}/metrics\n    static_configs:\n      - targets: ['127.0.0.1:{sim_port}']\n"
            ));
        }
        let ymlp = work.join("prometheus.yml");
        fs::write(&ymlp, yml).unwrap();
        Setup {
            work: work.to_path_buf(),
            mnt: mnt.to_path_buf(),
            data: mnt.join("data"),
            yml: ymlp,
            _sim: sim,
        }
    }

    fn start(&self, client: &Client, extra: &[&str]) -> (Proc, String) {
        let port = free_port();
        let mut cmd = common::serve_command(&self.data, port);
        cmd.arg("--config.file")
            .arg(&self.yml)
            .args(["--storage.tsdb.retention.time", "100y"])
            .arg("--web.enable-remote-write-receiver")
            .args(extra)
            .env("RUST_LOG", "info");
        let mut p = Proc::spawn("inferdb", &mut cmd, self.work.join("inferdb.log"));
        let base = format!("http://127.0.0.1:{port}");
        p.wait_ready(&base, client);
        (p, base)
    }
}

/// A remote-write request of 500 series, one sample each (its WAL record needs fresh pages:
/// a few bytes may still fit in the last page of a full tmpfs).
fn remote_write_body() -> Vec<u8> {
    use inferdb::remote::codec;
    use inferdb::remote::proto::{Label, Sample, TimeSeries, WriteRequest};
    let t = now_ms();
    let timeseries = (0..500)
        .map(|i| TimeSeries {
            labels: vec![
                Label {
                    name: "__name__".into(),
                    value: "pushed".into(),
                },
                Label {
                    name: "job".into(),
                    value: "vllm-push".into(),
                },
                Label {
                    name: "n".into(),
                    value: format!("{i}"),
                },
            ],
            samples: vec![Sample {
                value: i as f64,
                timestamp: t,
            }],
            exemplars: vec![],
        })
        .collect();
    codec::encode(&WriteRequest {
        timeseries,
        metadata: vec![],
    })
}

fn remote_write(c: &Client, base: &str) -> u16 {
    c.send(
        c.http
            .post(format!("{base}/api/v1/write"))
            .header("Content-Type", "application/x-protobuf")
            .header("Content-Encoding", "snappy")
            .header("X-Prometheus-Remote-Write-Version", "0.1.0")
            .body(remote_write_body()),
    )
    .0
}

/// What one fill-free-crash episode saw.
struct Episode {
    before: usize,
    after: usize,
    lost: usize,
    writes_failed: f64,
}

/// One episode on a running server: scrape `warm` s, fill, hold `full` s, free, wait until
/// scraping resumed, kill -9, restart, compare. Returns the new server.
fn episode(
    s: &Setup,
    c: &Client,
    srv: (Proc, String),
    warm: Duration,
    full: Duration,
    during: &mut dyn FnMut(),
) -> ((Proc, String), Episode) {
    let (mut p, base) = srv;
    std::thread::sleep(warm);
    wait(20, "scrapes", || {
        let t = now_ms();
        up_between(&recent_up(c, &base), t - 3000, t) >= TARGETS
    });
    during();
    let filler = fill(&s.mnt);
    // space freed meanwhile (a compaction deleting its inputs) is taken again
    wait(20, "the WAL to refuse writes", || {
        top_up(&filler);
        c.metric(&base, "inferdb_tsdb_wal_writable") == Some(0.0)
    });
    let refused_from = now_ms();
    // told: /metrics, the targets' lastError, a remote-write sender
    let failed = c
        .metric(&base, "prometheus_tsdb_wal_writes_failed_total")
        .unwrap();
    assert!(failed >= 1.0, "writes_failed_total = {failed}");
    wait(10, "lastError in /api/v1/targets", || {
        let (_, body) = c.get(&format!("{base}/api/v1/targets"));
        let v: Value = serde_json::from_str(&body).unwrap();
        v["data"]["activeTargets"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["lastError"].as_str().unwrap_or("").contains("WAL") && t["health"] == "down")
    });
    let st = remote_write(c, &base);
    assert!((500..600).contains(&st), "remote write while full: {st}");
    std::thread::sleep(full);
    let acked_full = all_samples(c, &base);
    let refused_to = now_ms();
    assert_eq!(
        c.metric(&base, "inferdb_tsdb_wal_writable"),
        Some(0.0),
        "still full"
    );
    let writes_failed = c
        .metric(&base, "prometheus_tsdb_wal_writes_failed_total")
        .unwrap();
    // a scrape starting 1 s after the refusal began cannot have been stored
    let stored_while_full = up_between(&acked_full, refused_from + 1000, refused_to - 1500);
    assert_eq!(
        stored_while_full, 0,
        "nothing enters the head while the WAL refuses writes"
    );

    fs::remove_file(&filler).unwrap();
    wait(20, "the WAL to accept writes again", || {
        c.metric(&base, "inferdb_tsdb_wal_writable") == Some(1.0)
    });
    let resumed = now_ms();
    wait(20, "scrapes after the recovery", || {
        up_between(&recent_up(c, &base), resumed, now_ms()) >= 3 * TARGETS
    });
    assert_eq!(
        remote_write(c, &base),
        204,
        "remote write after the recovery"
    );
    let acked = all_samples(c, &base);
    p.child.kill().unwrap();
    p.child.wait().unwrap();
    drop(p);

    let (p2, base2) = s.start(c, &[]);
    let got = all_samples(c, &base2);
    let lost = missing(&acked, &got);
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged samples lost after kill -9, e.g. {:?}",
        lost.len(),
        count(&acked),
        &lost[..lost.len().min(5)]
    );
    (
        (p2, base2),
        Episode {
            before: count(&acked_full),
            after: count(&acked),
            lost: lost.len(),
            writes_failed,
        },
    )
}

/// Stops the server cleanly and runs `inferdb tsdb check` on the data folder.
fn check(p: Proc, data: &Path) -> String {
    p.terminate();
    let out = Command::new(BIN)
        .args(["tsdb", "check", "--data-dir"])
        .arg(data)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "tsdb check: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

#[test]
fn full_disk_while_scraping_then_kill_loses_nothing() {
    let work = tempfile::tempdir().unwrap();
    let Some(_m) = Mount::new(&work.path().join("mnt"), "48m") else {
        return;
    };
    let c = Client::new();
    let s = Setup::new(work.path(), &work.path().join("mnt"), &c);
    let srv = s.start(&c, &[]);
    let (srv, ep) = episode(
        &s,
        &c,
        srv,
        Duration::from_secs(2),
        Duration::from_secs(4),
        &mut || {},
    );
    assert_eq!(ep.lost, 0);
    assert!(ep.after > ep.before, "scraping resumed after the recovery");
    let log = srv.0.log();
    // the log says so once per state change, not once per sample or scrape
    let refusals = log.matches("WAL write failed; appends are refused").count();
    assert_eq!(refusals, 1, "{log}");
    assert!(log.contains("WAL writes succeed again"), "{log}");
    eprintln!(
        "full disk episode: {} samples before the fill, {} after the recovery, {} lost, {} failed WAL writes",
        ep.before, ep.after, ep.lost, ep.writes_failed
    );
    let rep = check(srv.0, &s.data);
    assert!(rep.contains("ok:"), "{rep}");
    let runs = empty_segment_runs(&s.data);
    assert!(runs.is_empty(), "runs of empty WAL segments: {runs:?}");
}

/// The soak of `benches/full_disk_soak.sh`: `INFERDB_SOAK_ROUNDS` episodes (default 10) with
/// the fill after a random 1-6 s, held 2-5 s, while 2 s blocks are cut and compacted (ranges
/// 2 s × 3^k) and while `inferdb import`, started just before the fill, writes into the same
/// file system. Prints one line per round (with the compactions done and failed) and a
/// summary.
#[test]
#[ignore]
fn soak() {
    let rounds: usize = std::env::var("INFERDB_SOAK_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    // kept for the logs (`work/inferdb.log`) when a round fails
    let work = tempfile::tempdir().unwrap().keep();
    println!("work folder {}", work.display());
    let Some(_m) = Mount::new(&work.as_path().join("mnt"), "48m") else {
        panic!("the soak needs a tmpfs (root)");
    };
    let c = Client::new();
    let s = Setup::new(work.as_path(), &work.as_path().join("mnt"), &c);
    // an OpenMetrics file to import (generated once, outside the small file system)
    let om = work.as_path().join("history.om");
    write_history(&om);
    let mut seed = std::env::var("INFERDB_SOAK_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(now_ms() as u64);
    println!("seed {seed}");
    let mut rnd = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let blocks = ["--storage.tsdb.min-block-duration", "2s"];
    let mut srv = s.start(&c, &blocks);
    let (mut total_lost, mut checks_ok) = (0, 0);
    let (mut compactions_seen, mut rounds_compaction_hit, mut rounds_import_hit) =
        ((0usize, 0usize), 0, 0);
    for round in 0..rounds {
        let warm = Duration::from_millis(1000 + rnd(5000));
        let full = Duration::from_millis(2000 + rnd(3000));
        let mode = "cuts+compaction+import";
        let import_dir = s.mnt.join(format!("import{round}"));
        let mut import: Option<std::process::Child> = None;
        let mut during = || {
            import = Some(
                Command::new(BIN)
                    .args(["import", "openmetrics", "--data-dir"])
                    .arg(&import_dir)
                    .arg(&om)
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap(),
            );
        };
        let (next, ep) = episode(&s, &c, srv, warm, full, &mut during);
        srv = next;
        // the counters restart with the process killed in the episode: the log (appended
        // across restarts) counts compactions done and failed (on the full disk) this round
        let log = fs::read_to_string(s.work.join("inferdb.log")).unwrap_or_default();
        let (done, failed) = (
            log.matches("compact blocks").count(),
            log.matches("compaction failed").count(),
        );
        let (done_round, failed_round) = (done - compactions_seen.0, failed - compactions_seen.1);
        compactions_seen = (done, failed);
        if failed_round > 0 {
            rounds_compaction_hit += 1;
        }
        let mut import_result = String::new();
        if let Some(ch) = import {
            let out = ch.wait_with_output().unwrap();
            import_result = if out.status.success() {
                "import ok".into()
            } else {
                let err = String::from_utf8_lossy(&out.stderr);
                rounds_import_hit += 1;
                format!(
                    "import refused: {}",
                    err.lines().last().unwrap_or("").trim()
                )
            };
            // a failed import leaves no staging folder and no half-written block
            let leftovers: Vec<_> = fs::read_dir(&s.mnt)
                .unwrap()
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("import"))
                .flat_map(|e| fs::read_dir(e.path()).into_iter().flatten().flatten())
                .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
                .map(|e| e.path())
                .collect();
            assert!(leftovers.is_empty(), "{leftovers:?}");
            let _ = fs::remove_dir_all(&import_dir);
        }
        total_lost += ep.lost;
        let rep = check(srv.0, &s.data);
        if rep.contains("ok:") {
            checks_ok += 1;
        }
        srv = s.start(&c, &blocks);
        let blocks_now = c
            .metric(&srv.1, "prometheus_tsdb_blocks_loaded")
            .unwrap_or(0.0);
        println!(
            "round {round} ({mode}): fill after {} ms for {} ms, {} failed WAL writes, compactions {done_round} done / {failed_round} failed, {} samples acknowledged, {} lost, {} blocks, tsdb check: {} {}",
            warm.as_millis(),
            full.as_millis(),
            ep.writes_failed,
            ep.after,
            ep.lost,
            blocks_now,
            rep.lines().last().unwrap_or(""),
            import_result
        );
    }
    let runs = empty_segment_runs(&s.data);
    println!(
        "soak: {rounds} rounds, {total_lost} samples lost, tsdb check clean {checks_ok}/{rounds}, rounds where the fill failed a compaction {rounds_compaction_hit}, where it refused the import {rounds_import_hit}, runs of empty WAL segments: {}",
        runs.len()
    );
    assert_eq!(total_lost, 0);
    assert_eq!(checks_ok, rounds);
    assert!(runs.is_empty(), "{runs:?}");
}

/// Writes two hours of a few series as OpenMetrics, ending a day ago (older than the head).
fn write_history(path: &Path) {
    let end = (now_ms() / 1000 - 86_400) as f64;
    let mut out = String::new();
    out.push_str("# TYPE hist_requests counter\n");
    for pod in 0..200 {
        for k in 0..720 {
            let t = end - 7200.0 + k as f64 * 10.0;
            out.push_str(&format!(
                "hist_requests_total{{pod=\"p{pod}\"}} {} {t:.3}\n",
                k * (pod + 1)
            ));
        }
    }
    out.push_str("# EOF\n");
    fs::write(path, out).unwrap();
}
