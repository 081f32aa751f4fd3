//! `inferdb serve` starts as Prometheus does: the port answers before the WAL is replayed,
//! `/-/healthy` 200 and `/-/ready` 503 meanwhile, `/api/v1/status/walreplay` with the first,
//! last and current segment, the replay's progress and duration in the log; then ready.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{free_port, serve_command, Client, Proc};
use inferdb_storage::wal::{RefSample, WalWriter};
use inferdb_storage::Labels;
use serde_json::Value;

/// Series and samples per series written to the WAL: enough for the replay of a debug build to
/// take a noticeable while (about a second), so that the test sees it under way.
const SERIES: u64 = 400;
const SAMPLES: i64 = 3000;

/// Writes a WAL of `SERIES` × `SAMPLES` recent samples in 1 MiB segments into `data/wal`, as
/// a writer killed before its shutdown checkpoint leaves it; returns the segments written.
fn write_wal(data: &Path) -> u32 {
    let mut w = WalWriter::create(&data.join("wal"), 0, Duration::from_secs(60), 1 << 20).unwrap();
    let labels: Vec<Labels> = (0..SERIES)
        .map(|i| {
            Labels::from_pairs([
                ("__name__", "startup_test_metric".to_string()),
                ("series", i.to_string()),
            ])
        })
        .collect();
    // references as the head hands them out (they name the head's shard)
    let head = inferdb_storage::head::Head::new(2 * 3600 * 1000, None);
    let refs: Vec<u64> = labels
        .iter()
        .map(|l| head.get_or_create(l).unwrap())
        .collect();
    w.log_series(refs.iter().copied().zip(labels.iter()));
    w.flush().unwrap();
    let start = inferdb::model::time::now_ms() - SAMPLES * 1000;
    let mut batch = Vec::with_capacity(SERIES as usize);
    for k in 0..SAMPLES {
        batch.clear();
        batch.extend(refs.iter().enumerate().map(|(i, &r)| RefSample {
            r,
            t: start + k * 1000,
            v: (k + i as i64) as f64,
        }));
        w.log_samples(&batch);
        w.flush().unwrap();
    }
    w.sync().unwrap();
    w.segment()
}

fn walreplay(client: &Client, base: &str) -> Option<(i64, i64, i64)> {
    let (code, body) = client.get(&format!("{base}/api/v1/status/walreplay"));
    if code != 200 {
        return None;
    }
    let v: Value = serde_json::from_str(&body).ok()?;
    let d = &v["data"];
    Some((
        d["min"].as_i64()?,
        d["max"].as_i64()?,
        d["current"].as_i64()?,
    ))
}

#[test]
fn answers_while_the_wal_replays_then_becomes_ready() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let last = write_wal(&data);
    assert!(
        last >= 3,
        "the WAL should span several segments, got {last}"
    );

    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let client = Client::new();
    let mut p = Proc::spawn(
        "inferdb",
        &mut serve_command(&data, port),
        dir.path().join("inferdb.log"),
    );
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut seen_unready = false;
    let mut seen_progress: Vec<(i64, i64, i64)> = Vec::new();
    loop {
        if let Ok(Some(st)) = p.child.try_wait() {
            panic!("inferdb exited with {st}:\n{}", p.log());
        }
        assert!(Instant::now() < deadline, "never ready:\n{}", p.log());
        match client.status(&format!("{base}/-/ready")) {
            Some(200) => break,
            Some(503) => {
                seen_unready = true;
                // healthy while not ready; other endpoints unavailable
                assert_eq!(client.status(&format!("{base}/-/healthy")), Some(200));
                let (code, body) = client.get(&format!("{base}/api/v1/query?query=1"));
                // the replay may end between the two requests
                assert!(code == 503 || code == 200, "{code} {body}");
                if let Some(w) = walreplay(&client, &base) {
                    seen_progress.push(w);
                }
            }
            Some(other) => panic!("/-/ready answered {other}:\n{}", p.log()),
            None => {}
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        seen_unready,
        "the replay ended before /-/ready answered once (make the WAL larger):\n{}",
        p.log()
    );
    // zeros until the replay has listed the segments (as Prometheus answers before it starts)
    seen_progress.retain(|p| *p != (0, 0, 0));
    assert!(!seen_progress.is_empty(), "no progress seen:\n{}", p.log());
    for &(min, max, current) in &seen_progress {
        assert_eq!((min, max), (1, i64::from(last)), "{seen_progress:?}");
        assert!(
            (min..=max).contains(&current),
            "current outside [min, max]: {seen_progress:?}"
        );
    }
    assert!(
        seen_progress.windows(2).all(|w| w[0].2 <= w[1].2),
        "progress went back: {seen_progress:?}"
    );
    // after the replay: current is the last segment, and the data is there
    assert_eq!(
        walreplay(&client, &base),
        Some((1, i64::from(last), i64::from(last)))
    );
    let v = client.query(
        &base,
        "/api/v1/query",
        &[("query", "count(startup_test_metric)".to_string())],
    );
    assert_eq!(
        v["data"]["result"][0]["value"][1],
        Value::from(SERIES.to_string()),
        "{}",
        p.log()
    );
    let log = p.log();
    for what in [
        "Replaying WAL, this may take a while",
        "WAL segment loaded",
        "WAL replay completed",
        "total_replay_duration=",
        "Server is ready to receive web requests.",
    ] {
        assert!(log.contains(what), "no {what:?} in the log:\n{log}");
    }
    let listening = log.find("Listening and serving HTTP").unwrap();
    let replayed = log.find("WAL replay completed").unwrap();
    assert!(
        listening < replayed,
        "the port should be served before the replay:\n{log}"
    );
    p.terminate();
}
