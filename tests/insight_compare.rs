//! `inferdb compare` on simulated servers sampled into a store at simulated time
//! (`sim::record`, scraped every 30 s for an hour): 20 servers (20 seeds) healthy at the same load in both windows, and 20
//! whose prefill gets 20 % slower between the windows (`slow-prefill`: TTFT up 20 % at the
//! same arrivals). Compared by instance: every slowed server's `ttft_p95_seconds` is a
//! significant change of about +20 %, and no signal of a healthy server is significant. Then the
//! same over HTTP (`/inferdb/v1/compare`, the JSON shape) and the CLI over `--url`, and a window
//! too short to judge.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use inferdb::api::{ApiBackend, DbBackend};
use inferdb::insight::compare::{compare, GroupBy, Span, SIGNALS};
use inferdb::insight::BackendSource;
use inferdb::sim::record::{record, Recording, SimHost};
use inferdb::sim::ScenarioPlan;
use inferdb_query::EngineOptions;

const SEEDS: usize = 20;
const START_S: i64 = 1_796_083_200;

fn families() -> Vec<String> {
    [
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:prompt_tokens",
        "vllm:generation_tokens",
        "vllm:request_success",
        "vllm:num_preemptions",
        "vllm:prefix_cache_queries",
        "vllm:prefix_cache_hits",
        "vllm:time_to_first_token_seconds",
        "vllm:inter_token_latency_seconds",
        "vllm:e2e_request_latency_seconds",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn span(from_min: i64, to_min: i64) -> Span {
    Span {
        start: (START_S + from_min * 60) * 1000,
        end: (START_S + to_min * 60) * 1000,
    }
}

#[test]
fn compare_finds_a_ttft_regression_and_nothing_between_healthy_windows() {
    let t0 = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let db = inferdb_storage::Db::open(&data, inferdb_storage::db::Options::default()).unwrap();
    let slow = ScenarioPlan::parse("healthy,slow-prefill@30m").unwrap();
    let hosts: Vec<SimHost> = (0..2 * SEEDS)
        .map(|i| {
            let plan = if i < SEEDS {
                ScenarioPlan::parse("healthy").unwrap()
            } else {
                slow.clone()
            };
            SimHost::new(i, 5000 + i as u64, Some(plan))
        })
        .collect();
    let stored = record(
        &db,
        &Recording {
            hosts,
            start_s: START_S as f64,
            step_s: 30.0,
            seconds: 3600.0,
            families: Some(families()),
            gpu: true,
        },
    )
    .unwrap();
    let t_rec = t0.elapsed();
    let db = Arc::new(db);
    let backend: Arc<dyn ApiBackend> =
        Arc::new(DbBackend::new(db.clone(), EngineOptions::default()));
    let src = BackendSource {
        backend,
        timeout: Duration::from_secs(60),
    };
    // A: 3-28 min, B: 33-58 min (the slowdown starts at 30 min, ramped in over a minute)
    let (a, b) = (span(3, 28), span(33, 58));
    let t1 = Instant::now();
    let c = compare(&src, a, b, Some(GroupBy::Instance), None).unwrap();
    let t_cmp = t1.elapsed();
    let row = |inst: &str, sig: &str| {
        c.signals
            .iter()
            .find(|r| r.signal == sig && r.group.get("instance").map(|s| s.as_str()) == Some(inst))
            .unwrap_or_else(|| panic!("no {sig} for {inst}"))
    };
    let mut found = 0;
    let mut false_pos = Vec::new();
    for i in 0..2 * SEEDS {
        let inst = format!("vllm-{i}:8000");
        for sig in SIGNALS {
            let r = row(&inst, sig);
            assert!(r.a.is_some() && r.b.is_some(), "{inst} {sig}: {r:?}");
            let regression = i >= SEEDS && sig == "ttft_p95_seconds";
            if regression {
                let ch = r.change.unwrap();
                if r.significant && ch >= 0.10 {
                    found += 1;
                } else {
                    eprintln!("MISSED {inst}: {r:?}");
                }
            } else if r.significant && !(i >= SEEDS && sig == "ttft_p50_seconds") {
                // the median moves with the slowdown too; anything else is a false call
                false_pos.push(format!("{inst} {sig}: {r:?}"));
            }
        }
    }
    let healthy_calls = c
        .signals
        .iter()
        .filter(|r| {
            r.significant
                && r.group
                    .get("instance")
                    .and_then(|x| x.strip_prefix("vllm-"))
                    .and_then(|x| x.split(':').next())
                    .and_then(|x| x.parse::<usize>().ok())
                    .is_some_and(|i| i < SEEDS)
        })
        .count();
    eprintln!(
        "compare: {found}/{SEEDS} regressions found, {healthy_calls} significant signals on {SEEDS} healthy servers, {} false calls in all; {stored} samples recorded in {t_rec:?}, compare in {t_cmp:?}; load_change {:?}",
        false_pos.len(),
        c.load_change
    );
    assert_eq!(
        found, SEEDS,
        "every slowed server's TTFT p95 regression found"
    );
    assert!(false_pos.is_empty(), "false calls: {false_pos:#?}");
    // the fleet is always there, the load is the same
    let fleet: Vec<_> = c.signals.iter().filter(|r| r.group.is_empty()).collect();
    assert_eq!(fleet.len(), SIGNALS.len());
    assert!(c.load_change.unwrap().abs() < 0.05, "{:?}", c.load_change);
    assert!(!c.notes.iter().any(|n| n.contains("load differs")));
    // GPU utilisation joined by host: healthy servers run a busy GPU
    let g = row("vllm-0:8000", "gpu_utilization_mean");
    assert!(g.a.unwrap() > 80.0, "{g:?}");

    // a window too short to judge: shown, never significant, with a note
    let short = compare(&src, span(5, 9), b, None, None).unwrap();
    assert!(short.signals.iter().all(|r| !r.significant));
    assert!(
        short.notes.iter().any(|n| n.starts_with("not enough data")),
        "{:?}",
        short.notes
    );
    drop(src);
    Arc::try_unwrap(db).ok().unwrap().close().unwrap();

    // over HTTP, and the CLI over --url
    let client = common::Client::new();
    let (_idb, base) = common::start_inferdb(dir.path(), &data, &client);
    let q = format!(
        "{base}/inferdb/v1/compare?a_start={}&a_end={}&b_start={}&b_end={}&by=instance",
        a.start / 1000,
        a.end / 1000,
        b.start / 1000,
        b.end / 1000
    );
    let (code, body) = client.get(&q);
    assert_eq!(code, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let keys = |o: &serde_json::Value| {
        o.as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect::<Vec<String>>()
    };
    assert_eq!(keys(&v), ["load_change", "notes", "signals"]);
    let rows = v["signals"].as_array().unwrap();
    assert_eq!(rows.len(), SIGNALS.len() * (1 + 2 * SEEDS));
    for r in rows {
        assert_eq!(
            keys(r),
            ["a", "b", "change", "group", "signal", "significant"]
        );
    }
    assert_eq!(rows[0]["group"], serde_json::json!({}));
    let sig: BTreeMap<String, bool> = rows
        .iter()
        .filter(|r| r["signal"] == "ttft_p95_seconds")
        .map(|r| {
            (
                r["group"]["instance"].as_str().unwrap_or("").to_string(),
                r["significant"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(sig.values().filter(|s| **s).count(), SEEDS, "{sig:?}");
    for bad in [
        format!("{base}/inferdb/v1/compare?a_start=1&a_end=2&b_start=3"),
        q.replace("by=instance", "by=job"),
        format!("{base}/inferdb/v1/compare?a_start=10&a_end=5&b_start=1&b_end=2"),
    ] {
        let (code, body) = client.get(&bad);
        assert_eq!(code, 400, "{bad}: {body}");
    }
    // the CLI over --url answers as the endpoint (fleet only, the cheaper answer)
    let fleet_q = q.replace("&by=instance", "");
    let (code, fleet_body) = client.get(&fleet_q);
    assert_eq!(code, 200, "{fleet_body}");
    let v: serde_json::Value = serde_json::from_str(&fleet_body).unwrap();
    assert_eq!(v["signals"].as_array().unwrap().len(), SIGNALS.len());
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_inferdb"))
        .args(["compare", "--url", &base, "--format", "json"])
        .arg(format!("--a={}..{}", a.start / 1000, a.end / 1000))
        .arg(format!("--b={}..{}", b.start / 1000, b.end / 1000))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cli: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(cli, v, "the CLI over --url answers as the endpoint");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_inferdb"))
        .args(["compare", "--url", &base, "--a", "-1h", "--b", "-1h..now"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("START..END"));
}
