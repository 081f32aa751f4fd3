//! Every query of the provisioned Grafana dashboard (`deploy/grafana/dashboards/vllm.json`)
//! parses and evaluates, as an instant and as a range query, over an hour of data from the
//! built-in vLLM simulator and fake GPUs rendered as dcgm-exporter pages, and returns data.
//!
//! Three vLLM servers are simulated: two current ones (two models) and one "old" vLLM whose
//! page uses the names vLLM later renamed (`vllm:gpu_cache_usage_perc`,
//! `vllm:gpu_prefix_cache_*`, `vllm:time_per_output_token_seconds`): every vLLM panel must
//! show that server too, which checks the panels that cover both names.

mod common;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::OnceLock;

use common::grafana::{panel_exprs, substitute, variable_queries};
use inferdb::gpu::{sample_once, FakeGpu, Reading, F};
use inferdb::model::exposition::{parse as parse_page, Entry, Format};
use inferdb::sim::VllmModel;
use inferdb_query::storage::MemStorage;
use inferdb_query::{Engine, EngineOptions, Value};
use inferdb_storage::Labels;
use serde_json::Value as Json;

/// 2026-12-02T08:00:00Z in ms: start of the simulated hour.
const T0: i64 = 1_796_198_400_000;
const SCRAPE_MS: i64 = 15_000;
const STEPS: i64 = 240;
const END: i64 = T0 + STEPS * SCRAPE_MS;

const NEW_A: &str = "10.0.0.1:8000";
const NEW_B: &str = "10.0.0.2:8000";
const OLD: &str = "10.0.0.3:8000";
const GPU_HOST: &str = "gpu-node-07:9400";

/// The renames of vLLM's metrics the dashboard copes with (new prefix -> old prefix).
const RENAMES: &[(&str, &str)] = &[
    ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    (
        "vllm:prefix_cache_hits_total",
        "vllm:gpu_prefix_cache_hits_total",
    ),
    (
        "vllm:prefix_cache_queries_total",
        "vllm:gpu_prefix_cache_queries_total",
    ),
    (
        "vllm:inter_token_latency_seconds_",
        "vllm:time_per_output_token_seconds_",
    ),
];

fn dashboard() -> Json {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("deploy/grafana/dashboards/vllm.json");
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Adds every sample of a text-format page at `t` with extra labels.
fn add_page(db: &mut MemStorage, page: &str, t: i64, extra: &[(&str, &str)], old_names: bool) {
    for e in parse_page(page, Format::PromText) {
        let Ok(Entry::Sample(s)) = e else { continue };
        let mut name = s.name.to_string();
        if old_names {
            for (new, old) in RENAMES {
                if let Some(rest) = name.strip_prefix(new) {
                    name = format!("{old}{rest}");
                    break;
                }
            }
        }
        let mut pairs: Vec<(String, String)> = vec![("__name__".into(), name)];
        pairs.extend(s.labels.iter().map(|(n, v)| (n.to_string(), v.to_string())));
        pairs.extend(extra.iter().map(|(n, v)| (n.to_string(), v.to_string())));
        db.add(&Labels::from_pairs(pairs), t, s.value);
    }
}

/// The store of [`build_storage`], built once for all tests.
fn storage() -> &'static MemStorage {
    static DB: OnceLock<MemStorage> = OnceLock::new();
    DB.get_or_init(build_storage)
}

/// An hour of scrapes every 15 s of three simulated vLLM servers and one GPU host.
fn build_storage() -> MemStorage {
    let mut db = MemStorage::new();
    let mut servers: Vec<(VllmModel, &str, bool)> = vec![
        (VllmModel::new(1, T0 as f64 / 1000.0, 600.0), NEW_A, false),
        (VllmModel::new(2, T0 as f64 / 1000.0, 600.0), NEW_B, false),
        (VllmModel::new(3, T0 as f64 / 1000.0, 600.0), OLD, true),
    ];
    let mut gpu = FakeGpu::h100s(2);
    gpu.drift = 0.25;
    for r in gpu.readings.values_mut() {
        r.push(Reading::new(F::DCGM_FI_DEV_MEMORY_TEMP, 55.0));
    }
    for step in 1..=STEPS {
        let t = T0 + step * SCRAPE_MS;
        for (i, (model, inst, old)) in servers.iter_mut().enumerate() {
            model.advance_to(t as f64 / 1000.0);
            let mut page = model.render();
            if i == 1 {
                page = page.replace(
                    "meta-llama/Llama-3.1-8B-Instruct",
                    "Qwen/Qwen2.5-7B-Instruct",
                );
            }
            add_page(
                &mut db,
                &page,
                t,
                &[("job", "vllm"), ("instance", inst)],
                *old,
            );
        }
        let (page, failed) = sample_once(&mut gpu, "gpu-node-07");
        assert!(failed.is_empty(), "{failed:?}");
        add_page(
            &mut db,
            &page,
            t,
            &[("job", "dcgm"), ("instance", GPU_HOST)],
            false,
        );
    }
    db
}

/// `label_values(selector, label)` as the PromQL Grafana's answer corresponds to.
fn label_values_query(q: &str) -> Option<(String, String)> {
    let inner = q.trim().strip_prefix("label_values(")?.strip_suffix(')')?;
    let (sel, label) = inner.rsplit_once(',')?;
    let label = label.trim().to_string();
    Some((format!("count by ({label}) ({})", sel.trim()), label))
}

/// Series (label sets) of an instant result.
fn instant_series(v: &Value) -> Result<Vec<Labels>, String> {
    match v {
        Value::Vector(v) => Ok(v.iter().map(|s| s.metric.clone()).collect()),
        Value::Scalar { .. } => Ok(vec![Labels::default()]),
        o => Err(format!("instant query gave {}", o.type_name())),
    }
}

fn range_points(v: &Value) -> Result<usize, String> {
    match v {
        Value::Matrix(m) => Ok(m.iter().map(|s| s.floats.len()).sum()),
        o => Err(format!("range query gave {}", o.type_name())),
    }
}

const ALL: &[(&str, &str)] = &[
    ("model_name", ".*"),
    ("instance", ".*"),
    ("gpu_instance", ".*"),
];

#[test]
fn dashboard_has_the_panels_an_operator_needs() {
    let d = dashboard();
    assert_eq!(d["schemaVersion"].as_i64(), Some(39));
    let exprs: Vec<String> = panel_exprs(&d).into_iter().map(|(_, e)| e).collect();
    let all = exprs.join("\n");
    for needle in [
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "histogram_quantile(0.5, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket",
        "histogram_quantile(0.95, sum by (le) (rate(vllm:inter_token_latency_seconds_bucket",
        "histogram_quantile(0.99, sum by (le) (rate(vllm:e2e_request_latency_seconds_bucket",
        "vllm:kv_cache_usage_perc{model_name=~\"$model_name\", instance=~\"$instance\"} or vllm:gpu_cache_usage_perc",
        "vllm:prefix_cache_hits_total",
        "vllm:gpu_prefix_cache_queries_total",
        "vllm:time_per_output_token_seconds_bucket",
        "vllm:num_preemptions_total",
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:request_success_total",
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_GPU_TEMP",
    ] {
        assert!(all.contains(needle), "no panel query contains {needle}");
    }
    let vars: BTreeSet<String> = variable_queries(&d).into_iter().map(|(n, _)| n).collect();
    assert!(
        vars.contains("model_name") && vars.contains("instance"),
        "{vars:?}"
    );
    // every panel query filters by the variables it should
    for (title, e) in panel_exprs(&d) {
        if e.contains("vllm:") {
            assert!(
                e.contains("model_name=~\"$model_name\"") && e.contains("instance=~\"$instance\""),
                "{title}: {e} ignores $model_name or $instance"
            );
        }
    }
}

#[test]
fn dashboard_queries_parse_and_return_data() {
    let d = dashboard();
    let db = storage();
    let engine = Engine::new(EngineOptions::default());
    let (start, end, step) = (END - 30 * 60_000, END, 60_000);
    let mut failures = vec![];
    let exprs = panel_exprs(&d);
    assert!(exprs.len() >= 20, "only {} panel queries", exprs.len());
    let old_only: &[(&str, &str)] = &[
        ("model_name", ".*"),
        ("instance", OLD),
        ("gpu_instance", ".*"),
    ];
    for (title, raw) in &exprs {
        for vars in [ALL, old_only] {
            // the GPU panels do not depend on $instance: checked once
            if vars == old_only && !raw.contains("vllm:") {
                continue;
            }
            let q = match substitute(raw, vars) {
                Ok(q) => q,
                Err(e) => {
                    failures.push(format!("{title}: {e}"));
                    continue;
                }
            };
            if let Err(e) = inferdb_query::parse(&q) {
                failures.push(format!("{title}: {q}: parse: {e}"));
                continue;
            }
            let inst = engine
                .instant(db, &q, end)
                .map_err(|e| e.to_string())
                .and_then(|r| instant_series(&r.value));
            match inst {
                Ok(s) if s.is_empty() => failures.push(format!("{title}: {q}: instant: empty")),
                Ok(_) => {}
                Err(e) => failures.push(format!("{title}: {q}: instant: {e}")),
            }
            let range = engine
                .range(db, &q, start, end, step)
                .map_err(|e| e.to_string())
                .and_then(|r| range_points(&r.value));
            match range {
                Ok(0) => failures.push(format!("{title}: {q}: range: empty")),
                Ok(_) => {}
                Err(e) => failures.push(format!("{title}: {q}: range: {e}")),
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} queries failed:\n{}",
        failures.len(),
        exprs.len(),
        failures.join("\n")
    );
}

#[test]
fn kv_cache_panel_shows_old_and_new_servers() {
    let d = dashboard();
    let db = storage();
    let engine = Engine::new(EngineOptions::default());
    let (_, raw) = panel_exprs(&d)
        .into_iter()
        .find(|(t, _)| t == "KV-cache usage")
        .expect("a KV-cache usage panel");
    let q = substitute(&raw, ALL).unwrap();
    let r = engine.instant(db, &q, END).unwrap();
    let instances: BTreeSet<String> = instant_series(&r.value)
        .unwrap()
        .iter()
        .filter_map(|l| l.get("instance").map(str::to_string))
        .collect();
    let want: BTreeSet<String> = [NEW_A, NEW_B, OLD].iter().map(|s| s.to_string()).collect();
    assert_eq!(instances, want, "{q}");
}

#[test]
fn template_variables_list_the_data() {
    let d = dashboard();
    let db = storage();
    let engine = Engine::new(EngineOptions::default());
    let vars = variable_queries(&d);
    assert!(vars.len() >= 2);
    let mut seen = std::collections::BTreeMap::new();
    for (name, raw) in vars {
        let q = substitute(&raw, ALL).unwrap();
        let (promql, label) =
            label_values_query(&q).unwrap_or_else(|| panic!("${name}: not label_values(): {q}"));
        inferdb_query::parse(&promql).unwrap_or_else(|e| panic!("${name}: {promql}: {e}"));
        let r = engine
            .instant(db, &promql, END)
            .unwrap_or_else(|e| panic!("${name}: {promql}: {e}"));
        let values: BTreeSet<String> = instant_series(&r.value)
            .unwrap()
            .iter()
            .filter_map(|l| l.get(&label).map(str::to_string))
            .collect();
        seen.insert(name, values);
    }
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<BTreeSet<_>>();
    assert_eq!(
        seen["model_name"],
        s(&[
            "Qwen/Qwen2.5-7B-Instruct",
            "meta-llama/Llama-3.1-8B-Instruct"
        ])
    );
    assert_eq!(seen["instance"], s(&[NEW_A, NEW_B, OLD]));
    assert_eq!(seen["gpu_instance"], s(&[GPU_HOST]));
}

#[test]
fn substitution_expands_variables_and_rejects_unknown_ones() {
    assert_eq!(
        substitute(
            "rate(x{a=~\"$instance\", b=~\"${model_name}\"}[$__rate_interval])",
            ALL
        )
        .unwrap(),
        "rate(x{a=~\".*\", b=~\".*\"}[1m])"
    );
    assert!(substitute("x{a=~\"$nope\"}", ALL).is_err());
}
