//! `operating_point` recovers a known knee: simulated servers in the `load-sweep` scenario
//! (concurrency sweeping from 2 to twice the server's capacity and back; tokens/s flat past
//! the capacity while inter-token latency, KV-cache usage and preemptions climb), each serving
//! a model of its own and with a capacity set by its seed, sampled into a store at simulated
//! time (`sim::record`). `inferdb advise` must put every model's knee within one bin of its
//! server's capacity.

use std::sync::Arc;
use std::time::Duration;

use inferdb::api::{ApiBackend, DbBackend};
use inferdb::insight::{advise, BackendSource, Thresholds};
use inferdb::sim::record::{record, Recording, SimHost};
use inferdb::sim::{Scenario, ScenarioPlan, VllmModel};
use inferdb_query::EngineOptions;

const START_S: i64 = 1_796_083_200;

#[test]
fn operating_point_finds_the_knee_within_one_bin() {
    let dir = tempfile::tempdir().unwrap();
    let db =
        inferdb_storage::Db::open(dir.path(), inferdb_storage::db::Options::default()).unwrap();
    let seeds = [11u64, 12, 13, 14, 15, 16];
    let hosts: Vec<SimHost> = seeds
        .iter()
        .enumerate()
        .map(|(i, &seed)| SimHost {
            model: format!("model-{i}"),
            ..SimHost::new(i, seed, Some(ScenarioPlan::constant(Scenario::LoadSweep)))
        })
        .collect();
    let capacity: Vec<f64> = seeds
        .iter()
        .map(|&s| VllmModel::new(s, 0.0, 1800.0).capacity())
        .collect();
    record(
        &db,
        &Recording {
            hosts,
            start_s: START_S as f64,
            step_s: 15.0,
            seconds: 7200.0,
            families: Some(
                [
                    "vllm:num_requests_running",
                    "vllm:kv_cache_usage_perc",
                    "vllm:generation_tokens",
                    "vllm:num_preemptions",
                    "vllm:inter_token_latency_seconds",
                ]
                .iter()
                .map(|s| s.to_string())
                .collect(),
            ),
            gpu: false,
        },
    )
    .unwrap();
    let backend: Arc<dyn ApiBackend> =
        Arc::new(DbBackend::new(Arc::new(db), EngineOptions::default()));
    let src = BackendSource {
        backend,
        timeout: Duration::from_secs(60),
    };
    let r = advise(
        &src,
        START_S * 1000,
        (START_S + 7200) * 1000,
        &Thresholds::default(),
        &[],
    )
    .unwrap();
    let mut within = 0;
    for (i, cap) in capacity.iter().enumerate() {
        let model = format!("model-{i}");
        let f = r
            .findings
            .iter()
            .find(|f| f.kind == "operating_point" && f.scope.get("model_name") == Some(&model))
            .unwrap_or_else(|| panic!("no operating_point for {model}"));
        let knee = f.evidence["knee_running"];
        let width = f.evidence["bin_width"];
        let ok = (knee - cap).abs() <= width;
        eprintln!(
            "{model}: capacity {cap}, knee {knee:.1} ({:.1}-{:.1}), bin width {width:.1}: {}",
            f.evidence["knee_running_low"],
            f.evidence["knee_running_high"],
            if ok { "within one bin" } else { "MISSED" }
        );
        within += usize::from(ok);
        // past the knee latency climbs and throughput does not
        assert!(
            f.evidence["itl_p95_seconds_at_most_running"] > f.evidence["itl_p95_seconds_at_knee"]
        );
    }
    eprintln!(
        "operating_point: {within}/{} knees within one bin",
        capacity.len()
    );
    assert_eq!(within, capacity.len());
    // the capacities differ, so the test tells them apart
    assert!(capacity.iter().any(|c| *c != capacity[0]), "{capacity:?}");
}
