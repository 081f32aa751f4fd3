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

use std::sync::Arc;
use std::time::{Duration, Instant};

use inferdb::api::{ApiBackend, DbBackend};
use inferdb::insight::{advise, BackendSource, Severity, Thresholds};
use inferdb::sim::record::{record, Recording, SimHost};
use inferdb::sim::ScenarioPlan;
use inferdb_query::EngineOptions;

const START_S: i64 = 1_796_083_200;
const MIN: f64 = 60.0;
const MODELS: [&str; 2] = [
    "meta-llama/Llama-3.1-8B-Instruct",
    "Qwen/Qwen2.5-7B-Instruct",
];

/// (plan, injected states as (kind, from min, to min))
type States = Vec<(&'static str, f64, f64)>;

fn matrix() -> Vec<(&'static str, States)> {
    vec![
        (
            "healthy,kv-pressure@30m,healthy@70m",
            vec![("kv_cache_pressure", 30.0, 70.0)],
        ),
        (
            "healthy,cache-kick@30m,healthy@70m",
            vec![("prefix_cache_collapse", 30.0, 70.0)],
        ),
        (
            "healthy,queueing@30m,healthy@70m",
            vec![("queueing", 30.0, 70.0)],
        ),
        (
            "healthy,underutilized@20m",
            vec![("underutilized", 20.0, 90.0)],
        ),
        ("healthy,restart@45m", vec![("restart", 45.0, 45.0)]),
        // two states at once on two instances
        (
            "healthy,kv-pressure@40m,healthy@65m",
            vec![("kv_cache_pressure", 40.0, 65.0)],
        ),
        (
            "healthy,queueing@40m,healthy@65m",
            vec![("queueing", 40.0, 65.0)],
        ),
        // two states in turn on one instance
        (
            "healthy,cache-kick@20m,queueing@50m,healthy@75m",
            vec![
                ("prefix_cache_collapse", 20.0, 50.0),
                ("queueing", 50.0, 75.0),
            ],
        ),
        ("healthy", vec![]),
        ("healthy", vec![]),
    ]
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
            seconds: 90.0 * MIN,
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
    let backend: Arc<dyn ApiBackend> =
        Arc::new(DbBackend::new(Arc::new(db), EngineOptions::default()));
    let src = BackendSource {
        backend,
        timeout: Duration::from_secs(60),
    };
    let t0 = START_S as f64;
    let th = Thresholds::default();
    let t_adv = Instant::now();
    let report = advise(&src, START_S * 1000, (START_S + 90 * 60) * 1000, &th, &[]).unwrap();
    let t_adv = t_adv.elapsed();
    for f in &report.findings {
        eprintln!(
            "{:?} {} {:?} {:.1}..{:.1} min: {}",
            f.severity,
            f.kind,
            f.scope,
            (f.start - t0) / MIN,
            (f.end - t0) / MIN,
            f.summary
        );
    }
    let slack = 5.0; // minutes of rate-window lag allowed after a span
    let inst = |s: usize| format!("vllm-{s}:8000");
    let (mut injected, mut found) = (0, 0);
    for (s, (_, states)) in m.iter().enumerate() {
        for &(kind, from, to) in states {
            injected += 1;
            let hit = report.findings.iter().any(|f| {
                f.kind == kind
                    && f.scope.get("instance") == Some(&inst(s))
                    && f.scope.get("model_name").is_none_or(|x| x == MODELS[s % 2])
                    && (f.start - t0) / MIN >= from - 1.0
                    && (f.start - t0) / MIN <= to + slack
                    && (f.end - t0) / MIN <= to + slack
            });
            if hit {
                found += 1;
            } else {
                eprintln!("MISSED {kind} on {} in {from}..{to} min", inst(s));
            }
        }
    }
    let (mut reported, mut correct) = (0, 0);
    for f in report
        .findings
        .iter()
        .filter(|f| f.kind != "operating_point")
    {
        reported += 1;
        let i = f.scope.get("instance").cloned().unwrap_or_default();
        let ok = m.iter().enumerate().any(|(s, (_, states))| {
            i == inst(s)
                && states.iter().any(|&(kind, from, to)| {
                    kind == f.kind
                        && (f.start - t0) / MIN >= from - 1.0
                        && (f.start - t0) / MIN <= to + slack
                })
        });
        if ok {
            correct += 1;
        } else {
            eprintln!(
                "FALSE {} {:?} at {:.1} min",
                f.kind,
                f.scope,
                (f.start - t0) / MIN
            );
        }
    }
    let recall = found as f64 / injected as f64;
    let precision = if reported == 0 {
        1.0
    } else {
        correct as f64 / reported as f64
    };
    eprintln!(
        "simulator matrix: {injected} injected, {found} found, {reported} reported, {correct} correct: precision {:.0} %, recall {:.0} % ({stored} samples recorded in {t_rec:?}, advise {t_adv:?}, total {:?})",
        100.0 * precision,
        100.0 * recall,
        t_all.elapsed()
    );
    assert_eq!(recall, 1.0, "recall");
    assert_eq!(precision, 1.0, "precision");
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
    // an all-healthy window: nothing of severity warning or above
    let healthy = advise(&src, START_S * 1000, (START_S + 19 * 60) * 1000, &th, &[]).unwrap();
    assert!(
        !healthy
            .findings
            .iter()
            .any(|f| f.severity >= Severity::Warning),
        "{:?}",
        healthy.findings
    );
}
