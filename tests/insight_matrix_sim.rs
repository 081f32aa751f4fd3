//! The scenario matrix of `inferdb advise` on the simulator's scenarios: ten simulated vLLM
//! servers (two models, a dcgm-exporter GPU series per host) following scenario plans, scraped
//! every 15 s for 90 minutes of simulated time into a store in-process (`sim::record`: each page
//! parsed as vLLM's text format and stored as a scrape would store it), then advised over.
//! Each state alone on one instance among healthy ones, two states at once on two instances,
//! two states in turn on one instance, healthy instances, and a window where all are healthy.
//! Every injected state must be named on the right instance and model within its span
//! (recall), every finding but `operating_point` must be an injected state (precision), and
//! nothing of severity warning or above where all are healthy. `underutilized` is judged here
//! by the GPUs joined to the instance's host (the OpenMetrics matrix, `insight_matrix.rs`,
//! has no GPU series and judges it by the KV cache).

mod common;

use std::time::Instant;

use common::insight::{self, States};
use inferdb::sim::record::{record, Recording, SimHost};
use inferdb::sim::ScenarioPlan;

const START_S: i64 = 1_796_083_200;
const MODELS: [&str; 2] = [
    "meta-llama/Llama-3.1-8B-Instruct",
    "Qwen/Qwen2.5-7B-Instruct",
];

fn matrix() -> Vec<(&'static str, States)> {
    let mut m = insight::single_states();
    // two states at once on two instances
    m.push((
        "healthy,kv-pressure@40m,healthy@65m",
        vec![("kv_cache_pressure", 40.0, 65.0)],
    ));
    m.push((
        "healthy,queueing@40m,healthy@65m",
        vec![("queueing", 40.0, 65.0)],
    ));
    m.extend(insight::in_turn_then_healthy());
    m
}

#[test]
fn advise_names_every_simulated_state_and_nothing_else() {
    let t_all = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let db =
        inferdb_storage::Db::open(dir.path(), inferdb_storage::db::Options::default()).unwrap();
    let m = matrix();
    let hosts: Vec<SimHost> = m
        .iter()
        .enumerate()
        .map(|(i, (plan, _))| SimHost {
            model: MODELS[i % 2].to_string(),
            ..SimHost::new(i, 300 + i as u64, Some(ScenarioPlan::parse(plan).unwrap()))
        })
        .collect();
    let stored = record(
        &db,
        &Recording {
            hosts,
            start_s: START_S as f64,
            step_s: 15.0,
            seconds: 90.0 * insight::MIN,
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
                    "vllm:inter_token_latency_seconds",
                    "vllm:request_queue_time_seconds",
                    "process_start_time_seconds",
                ]
                .iter()
                .map(|s| s.to_string())
                .collect(),
            ),
            gpu: true,
        },
    )
    .unwrap();
    let t_rec = t_all.elapsed();
    let src = insight::source(db);
    let (report, t_adv) = insight::advise_window(&src, START_S, 90);
    insight::assert_matrix_found(
        &report,
        &m,
        |s| MODELS[s % 2],
        START_S,
        "simulator matrix",
        &format!(
            "{stored} samples recorded in {t_rec:?}, advise {t_adv:?}, total {:?}",
            t_all.elapsed()
        ),
    );
    let inst = |s: usize| format!("vllm-{s}:8000");
    // the underutilized finding read the GPUs joined by host
    let u = report
        .findings
        .iter()
        .find(|f| f.kind == "underutilized")
        .unwrap();
    assert!(
        u.evidence["gpu_utilization_mean"] < 30.0,
        "{:?}",
        u.evidence
    );
    assert!(u.queries.iter().any(|q| q.contains("DCGM_FI_DEV_GPU_UTIL")));
    // healthy instances: nothing but operating_point
    for s in [8, 9] {
        assert!(!report
            .findings
            .iter()
            .any(|f| f.scope.get("instance") == Some(&inst(s))));
    }
    // one operating point per model
    assert_eq!(
        report
            .findings
            .iter()
            .filter(|f| f.kind == "operating_point")
            .count(),
        2
    );
    insight::assert_healthy_start(&src, START_S);
}
