//! The scenario matrix of `inferdb advise`: OpenMetrics history written by
//! `examples/gen_openmetrics.rs` with states injected by the simulator's scenario plans
//! (each state alone on one instance among healthy ones, two states in turn on one instance,
//! healthy instances, and a window where all are healthy), imported with `inferdb import`,
//! then advised over in-process. Every injected state must be named on the right instance and
//! model within its span (recall), and every finding but `operating_point` must be an injected
//! state (precision); nothing of severity warning or above where all are healthy.

mod common;
#[path = "../examples/gen_openmetrics.rs"]
#[allow(dead_code)]
mod gen_openmetrics;

use std::time::Instant;

use common::insight::{self, States};
use gen_openmetrics::{generate, GenOptions};
use inferdb::sim::ScenarioPlan;

const MODEL: &str = "meta-llama/Llama-3.1-8B-Instruct";

fn matrix() -> Vec<(&'static str, States)> {
    let mut m = insight::single_states();
    m.extend(insight::in_turn_then_healthy());
    m
}

#[test]
fn advise_names_every_injected_state_and_nothing_else() {
    let t_all = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let om = dir.path().join("history.om");
    let m = matrix();
    let start_s = gen_openmetrics::DEFAULT_START_S;
    {
        let f = std::fs::File::create(&om).unwrap();
        let mut w = std::io::BufWriter::new(f);
        generate(
            &mut w,
            &GenOptions {
                servers: m.len() as u64,
                hours: 1.5,
                step_s: 30.0,
                offset_ms: 7,
                families: Some(
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
                        "vllm:request_queue_time_seconds",
                        "process_start_time_seconds",
                    ]
                    .iter()
                    .map(|s| s.to_string())
                    .collect(),
                ),
                scenarios: m
                    .iter()
                    .map(|(p, _)| Some(ScenarioPlan::parse(p).unwrap()))
                    .collect(),
                ..GenOptions::default()
            },
        )
        .unwrap();
    }
    let t_gen = t_all.elapsed();
    let data = dir.path().join("data");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_inferdb"))
        .args(["import", "openmetrics", "--quiet", "--data-dir"])
        .arg(&data)
        .arg(&om)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let db = inferdb_storage::Db::open(
        &data,
        inferdb_storage::db::Options {
            read_only: true,
            background: false,
            ..Default::default()
        },
    )
    .unwrap();
    let src = insight::source(db);
    let (report, t_adv) = insight::advise_window(&src, start_s, 90);
    insight::assert_matrix_found(
        &report,
        &m,
        |_| MODEL,
        start_s,
        "matrix",
        &format!(
            "generate {t_gen:?}, advise {t_adv:?}, total {:?}",
            t_all.elapsed()
        ),
    );
    // healthy instances: nothing at all but operating_point
    for s in [6, 7] {
        let inst = format!("vllm-{s}:8000");
        assert!(!report
            .findings
            .iter()
            .any(|f| f.scope.get("instance") == Some(&inst)));
    }
    insight::assert_healthy_start(&src, start_s);
    // one operating point per model
    assert_eq!(
        report
            .findings
            .iter()
            .filter(|f| f.kind == "operating_point")
            .count(),
        1
    );
    drop(src);
    // the same over HTTP, and the CLI over --url
    let client = common::Client::new();
    let (_idb, base) = common::start_inferdb(dir.path(), &data, &client);
    let (code, body) = client.get(&format!(
        "{base}/inferdb/v1/insights?start={}&end={}&slo=ttft_p95=500ms",
        start_s,
        start_s + 90 * 60
    ));
    assert_eq!(code, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["window"]["start"].as_f64(), Some(start_s as f64));
    let fs = v["findings"].as_array().unwrap();
    let kinds = |k: &str| fs.iter().filter(|f| f["kind"] == k).count();
    for f in fs {
        for key in [
            "kind",
            "severity",
            "scope",
            "start",
            "end",
            "summary",
            "evidence",
            "recommendation",
            "queries",
        ] {
            assert!(f.get(key).is_some(), "{key} missing in {f}");
        }
        assert!(f["start"].as_f64().unwrap() >= start_s as f64);
        assert!(f["end"].as_f64().unwrap() <= (start_s + 90 * 60) as f64);
    }
    assert_eq!(kinds("kv_cache_pressure"), 1);
    assert_eq!(kinds("queueing"), 2);
    // the TTFT objective is missed where prefill is paid again or requests queue
    assert!(kinds("slo_breach") >= 2, "{body}");
    let (code, body) = client.get(&format!("{base}/inferdb/v1/insights?slo=ttft_p95"));
    assert_eq!(code, 400, "{body}");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_inferdb"))
        .args(["advise", "--url", &base, "--format", "json", "--start"])
        .arg(start_s.to_string())
        .arg("--end")
        .arg((start_s + 90 * 60).to_string())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cli: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        cli["findings"].as_array().unwrap().len(),
        report.findings.len()
    );
}
