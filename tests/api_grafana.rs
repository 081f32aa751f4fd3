//! Replays every request of `tests/fixtures/grafana/grafana-requests.jsonl` (what Grafana's Prometheus
//! datasource sends) against a running inferdb — the real HTTP API, PromQL engine and storage —
//! loaded with vLLM-like data, and checks the status, shape and content each line expects.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use inferdb::api::{ApiConfig, ApiState, DbBackend, MetricMetadata, ScrapeStatus};
use inferdb_query::EngineOptions;
use inferdb_storage::{Db, Labels};
use serde_json::Value;

const LLAMA: &str = "meta-llama/Llama-3.1-8B-Instruct";
const QWEN: &str = "Qwen/Qwen2.5-7B-Instruct";
/// Data from 10 minutes before the dashboard window to Grafana's "now" (1754006437.512).
const DATA_START_MS: i64 = 1_753_984_800_000 - 600_000;
const DATA_END_MS: i64 = 1_754_006_437_000;
const SCRAPE_MS: i64 = 15_000;

const E2E_BUCKETS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
];
const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
];
const TPOT_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
];
const PROMPT_BUCKETS: &[f64] = &[
    1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0,
];

/// A small deterministic generator (xorshift).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn le_str(b: f64) -> String {
    inferdb_query::go_format::format_float(b, inferdb_query::go_format::FloatFormat::Json)
}

/// One histogram's cumulative state.
struct Hist {
    name: &'static str,
    bounds: &'static [f64],
    counts: Vec<f64>,
    sum: f64,
    count: f64,
}

impl Hist {
    fn new(name: &'static str, bounds: &'static [f64]) -> Self {
        Hist {
            name,
            bounds,
            counts: vec![0.0; bounds.len()],
            sum: 0.0,
            count: 0.0,
        }
    }
    fn observe(&mut self, v: f64) {
        for (i, b) in self.bounds.iter().enumerate() {
            if v <= *b {
                self.counts[i] += 1.0;
            }
        }
        self.sum += v;
        self.count += 1.0;
    }
    fn samples(&self, base: &[(&str, &str)], out: &mut Vec<(Labels, f64)>) {
        let with = |name: String, extra: Option<(&str, String)>| {
            let mut pairs: Vec<(String, String)> = base
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect();
            pairs.push(("__name__".into(), name));
            if let Some((k, v)) = extra {
                pairs.push((k.into(), v));
            }
            Labels::from_pairs(pairs)
        };
        for (i, b) in self.bounds.iter().enumerate() {
            out.push((
                with(format!("{}_bucket", self.name), Some(("le", le_str(*b)))),
                self.counts[i],
            ));
        }
        out.push((
            with(format!("{}_bucket", self.name), Some(("le", "+Inf".into()))),
            self.count,
        ));
        out.push((with(format!("{}_sum", self.name), None), self.sum));
        out.push((with(format!("{}_count", self.name), None), self.count));
    }
}

struct Server {
    model: &'static str,
    instance: &'static str,
    load: f64,
    prompt: f64,
    generation: f64,
    stop: f64,
    length: f64,
    hists: Vec<Hist>,
}

/// Writes six hours of vLLM-like metrics for three servers (Llama on two instances, Qwen on
/// one) into `db`, cutting the older part into blocks so queries merge blocks and head.
fn load_vllm_data(db: &Db) {
    let mut rng = Rng(0x9e3779b97f4a7c15);
    let mut servers: Vec<Server> = [
        (LLAMA, "10.0.0.5:8000", 1.0),
        (LLAMA, "10.0.0.6:8000", 0.7),
        (QWEN, "10.0.0.7:8000", 1.3),
    ]
    .into_iter()
    .map(|(model, instance, load)| Server {
        model,
        instance,
        load,
        prompt: 0.0,
        generation: 0.0,
        stop: 0.0,
        length: 0.0,
        hists: vec![
            Hist::new("vllm:e2e_request_latency_seconds", E2E_BUCKETS),
            Hist::new("vllm:time_to_first_token_seconds", TTFT_BUCKETS),
            Hist::new("vllm:time_per_output_token_seconds", TPOT_BUCKETS),
            Hist::new("vllm:request_prompt_tokens", PROMPT_BUCKETS),
        ],
    })
    .collect();
    let cut_at = DATA_START_MS + 4 * 3_600_000;
    let mut cut = false;
    let mut t = DATA_START_MS;
    while t <= DATA_END_MS {
        if !cut && t >= cut_at {
            db.cut_all().expect("cut blocks");
            cut = true;
        }
        let mut app = db.appender();
        for s in servers.iter_mut() {
            let base: [(&str, &str); 4] = [
                ("engine", "0"),
                ("instance", s.instance),
                ("job", "vllm"),
                ("model_name", s.model),
            ];
            let reqs = (s.load * (3.0 + 4.0 * rng.next())).round();
            for _ in 0..reqs as usize {
                let p = (20.0 + 900.0 * rng.next()).round();
                let g = (10.0 + 300.0 * rng.next()).round();
                s.prompt += p;
                s.generation += g;
                if rng.next() < 0.8 {
                    s.stop += 1.0;
                } else {
                    s.length += 1.0;
                }
                let ttft = 0.02 + 0.5 * rng.next() * rng.next();
                let tpot = 0.01 + 0.05 * rng.next();
                s.hists[0].observe(ttft + tpot * g);
                s.hists[1].observe(ttft);
                s.hists[2].observe(tpot);
                s.hists[3].observe(p);
            }
            let mut out: Vec<(Labels, f64)> = Vec::new();
            let lab = |name: &str, extra: &[(&str, &str)]| {
                let mut pairs: Vec<(&str, &str)> = base.to_vec();
                pairs.push(("__name__", name));
                pairs.extend_from_slice(extra);
                Labels::from_pairs(pairs)
            };
            out.push((
                lab("vllm:num_requests_running", &[]),
                (s.load * 10.0 * rng.next()).round(),
            ));
            out.push((
                lab("vllm:num_requests_waiting", &[]),
                (s.load * 3.0 * rng.next()).round(),
            ));
            out.push((
                lab("vllm:gpu_cache_usage_perc", &[]),
                0.3 + 0.6 * rng.next(),
            ));
            out.push((lab("vllm:cache_config_info", &[]), 1.0));
            out.push((lab("vllm:prompt_tokens_total", &[]), s.prompt));
            out.push((lab("vllm:generation_tokens_total", &[]), s.generation));
            out.push((
                lab("vllm:request_success_total", &[("finished_reason", "stop")]),
                s.stop,
            ));
            out.push((
                lab(
                    "vllm:request_success_total",
                    &[("finished_reason", "length")],
                ),
                s.length,
            ));
            for h in &s.hists {
                h.samples(&base, &mut out);
            }
            for (l, v) in out {
                app.append(&l, t, v).expect("append");
            }
        }
        app.commit().expect("commit");
        t += SCRAPE_MS;
    }
}

struct Meta;
impl ScrapeStatus for Meta {
    fn metadata(&self) -> Vec<MetricMetadata> {
        let m = |metric: &str, typ: &str, help: &str| MetricMetadata {
            metric: metric.into(),
            typ: typ.into(),
            help: help.into(),
            unit: String::new(),
        };
        vec![
            m(
                "vllm:num_requests_running",
                "gauge",
                "Number of requests in model execution batches.",
            ),
            m(
                "vllm:num_requests_waiting",
                "gauge",
                "Number of requests waiting to be processed.",
            ),
            m(
                "vllm:time_to_first_token_seconds",
                "histogram",
                "Histogram of time to first token in seconds.",
            ),
            m(
                "vllm:prompt_tokens_total",
                "counter",
                "Number of prefill tokens processed.",
            ),
            m(
                "vllm:generation_tokens_total",
                "counter",
                "Number of generation tokens processed.",
            ),
        ]
    }
}

fn corpus_path() -> PathBuf {
    common::conformance::fixtures_dir().join("grafana/grafana-requests.jsonl")
}

/// The JSON value written right after the status code in an `expect` text, if it is complete
/// (no `...` abbreviation or `<placeholder>`).
fn expected_json(expect: &str) -> Option<Value> {
    let code = status_in(expect).to_string();
    let after = expect.find(&format!("{code} {{"))? + code.len() + 1;
    let start = after;
    let mut it = serde_json::Deserializer::from_str(&expect[start..]).into_iter::<Value>();
    let v = it.next()?.ok()?;
    let text = v.to_string();
    if text.contains('<') || text.contains("...") {
        return None;
    }
    Some(v)
}

/// A bare JSON array written right after the status code (`200 ["a","b"]`), if complete.
fn expected_data_array(expect: &str) -> Option<Value> {
    let code = status_in(expect).to_string();
    let start = expect.find(&format!("{code} ["))? + code.len() + 1;
    let mut it = serde_json::Deserializer::from_str(&expect[start..]).into_iter::<Value>();
    let v = it.next()?.ok()?;
    (!v.to_string().contains("...")).then_some(v)
}

/// `want` is contained in `got`: objects key by key; arrays of strings equal; arrays of
/// objects element-wise contained in some element.
fn contains(got: &Value, want: &Value) -> bool {
    match (got, want) {
        (Value::Object(g), Value::Object(w)) => w
            .iter()
            .all(|(k, wv)| g.get(k).is_some_and(|gv| contains(gv, wv))),
        (Value::Array(g), Value::Array(w)) => {
            if w.iter().all(Value::is_string) {
                g == w
            } else {
                w.iter().all(|wv| g.iter().any(|gv| contains(gv, wv)))
            }
        }
        _ => got == want,
    }
}

/// The first HTTP status code (three digits standing alone) in an `expect` text.
fn status_in(expect: &str) -> u16 {
    let b = expect.as_bytes();
    (0..b.len().saturating_sub(2))
        .find(|&i| {
            b[i..i + 3].iter().all(u8::is_ascii_digit)
                && (i == 0 || !b[i - 1].is_ascii_alphanumeric())
                && b.get(i + 3).is_none_or(|c| !c.is_ascii_alphanumeric())
        })
        .and_then(|i| expect[i..i + 3].parse().ok())
        .unwrap_or_else(|| panic!("no status code in {expect:?}"))
}

fn short(s: &str) -> &str {
    &s[..s
        .char_indices()
        .nth(2000)
        .map(|(i, _)| i)
        .unwrap_or(s.len())]
}

fn param<'a>(line: &'a Value, key: &str) -> Option<&'a str> {
    line["form"]
        .get(key)
        .or_else(|| line["params"].get(key))
        .and_then(Value::as_str)
}

fn parse_ts(s: &str) -> i64 {
    (s.parse::<f64>().unwrap() * 1000.0).round() as i64
}

fn ts_ms(v: &Value) -> i64 {
    (v.as_f64().expect("timestamp is a JSON number") * 1000.0).round() as i64
}

fn check_value_string(v: &Value) {
    let s = v.as_str().expect("sample value is a JSON string");
    assert!(
        s.parse::<f64>().is_ok() || matches!(s, "NaN" | "+Inf" | "-Inf"),
        "value {s:?} is not a Go float"
    );
}

/// Checks one answer against what the corpus line expects; returns a description of what was
/// checked.
fn check(line: &Value, code: u16, body: &str) -> Vec<&'static str> {
    let expect = line["expect"].as_str().unwrap();
    let scenario = line["scenario"].as_str().unwrap();
    let mut checked = vec!["status"];
    let want_code = status_in(expect);
    assert_eq!(code, want_code, "{scenario}: status (body {})", short(body));
    let v: Value =
        serde_json::from_str(body).unwrap_or_else(|e| panic!("{scenario}: bad JSON {e}: {body}"));
    if let Some(want) = expected_json(expect) {
        if want.get("status").is_some() {
            assert!(
                contains(&v, &want),
                "{scenario}: got {}\nwant {want}",
                short(&v.to_string())
            );
            checked.push("body");
        }
    } else if let Some(want) = expected_data_array(expect) {
        assert_eq!(v["data"], want, "{scenario}: data");
        checked.push("data");
    } else if let Some(msg) = expect.split_once(" bad_data: ").map(|(_, m)| m) {
        assert_eq!(v["errorType"], "bad_data", "{scenario}");
        assert_eq!(v["error"].as_str(), Some(msg), "{scenario}: error text");
        checked.push("error text");
    } else if let Some(i) = expect.find("\"data\":[\"") {
        // abbreviated name list: every listed name is present, and the list is sorted
        let listed = &expect[i + 8..expect[i..].find(']').map(|j| i + j).unwrap_or(expect.len())];
        let data: Vec<&str> = v["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_str().unwrap())
            .collect();
        for name in listed
            .split(',')
            .map(|x| x.trim().trim_matches('"'))
            .filter(|x| !x.is_empty() && *x != "...")
        {
            assert!(
                data.contains(&name),
                "{scenario}: {name} missing from {data:?}"
            );
        }
        checked.push("listed names");
    }
    if code != 200 {
        assert_eq!(v["status"], "error");
        return checked;
    }
    assert_eq!(v["status"], "success", "{scenario}");
    if expect.contains("sorted") && v["data"].is_array() && v["data"][0].is_string() {
        let d: Vec<&str> = v["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_str().unwrap())
            .collect();
        let mut s = d.clone();
        s.sort();
        assert_eq!(d, s, "{scenario}: not sorted");
        assert!(!d.is_empty(), "{scenario}: empty list");
        checked.push("sorted");
    }
    if expect.contains("starting with vllm:") {
        let d = v["data"].as_array().unwrap();
        assert!(!d.is_empty() && d.iter().all(|x| x.as_str().unwrap().starts_with("vllm:")));
    }
    let path = line["path"].as_str().unwrap();
    if path == "/api/v1/series" {
        let d = v["data"].as_array().unwrap();
        assert!(!d.is_empty(), "{scenario}: no series");
        for s in d {
            assert_eq!(s["__name__"], "vllm:num_requests_running");
        }
        checked.push("series");
    }
    if path == "/api/v1/metadata" {
        for (k, list) in v["data"].as_object().unwrap() {
            assert!(
                !list.as_array().unwrap().is_empty(),
                "{k}: empty metadata list"
            );
            assert!(!k.ends_with("_bucket"));
        }
        checked.push("metadata lists");
    }
    if path == "/api/v1/status/buildinfo" {
        assert!(
            v["data"].get("features").is_none(),
            "buildinfo must not have features"
        );
        for k in [
            "version",
            "revision",
            "branch",
            "buildUser",
            "buildDate",
            "goVersion",
        ] {
            assert!(v["data"][k].is_string(), "buildinfo.{k}");
        }
        checked.push("buildinfo");
    }
    if path == "/api/v1/query" || path == "/api/v1/query_range" {
        let data = &v["data"];
        let rt = data["resultType"].as_str().expect("resultType");
        for t in ["matrix", "vector", "scalar"] {
            if expect.contains(&format!("200 {t}"))
                || expect.contains(&format!("\"resultType\":\"{t}\""))
                || expect.starts_with(&format!("200 {t}"))
            {
                assert_eq!(rt, t, "{scenario}: resultType");
                checked.push("resultType");
            }
        }
        if path == "/api/v1/query_range" {
            assert_eq!(rt, "matrix", "{scenario}: range queries answer matrices");
            let start = parse_ts(param(line, "start").unwrap());
            let end = parse_ts(param(line, "end").unwrap());
            let step = parse_ts(param(line, "step").unwrap());
            let result = data["result"].as_array().unwrap();
            assert!(!result.is_empty(), "{scenario}: empty matrix");
            let mut first_ts: Option<Vec<i64>> = None;
            for s in result {
                let vals = s["values"].as_array().unwrap();
                assert!(!vals.is_empty());
                let ts: Vec<i64> = vals.iter().map(|p| ts_ms(&p[0])).collect();
                for (p, t) in vals.iter().zip(&ts) {
                    assert!(
                        *t >= start && *t <= end && (t - start) % step == 0,
                        "{scenario}: off-grid timestamp {t}"
                    );
                    check_value_string(&p[1]);
                }
                assert!(ts.windows(2).all(|w| w[0] < w[1]));
                if expect.contains("SAME timestamps") {
                    match &first_ts {
                        None => first_ts = Some(ts),
                        Some(f) => {
                            assert_eq!(f, &ts, "{scenario}: le series with different timestamps")
                        }
                    }
                }
            }
            checked.push("step grid");
            let metrics: Vec<&serde_json::Map<String, Value>> = result
                .iter()
                .map(|s| s["metric"].as_object().unwrap())
                .collect();
            let mut sorted: Vec<Value> = result.iter().map(|s| s["metric"].clone()).collect();
            sorted.sort_by_key(|m| m.to_string());
            if expect.contains("sorted by labels") {
                let keys: Vec<BTreeMap<String, String>> = metrics
                    .iter()
                    .map(|m| {
                        m.iter()
                            .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                            .collect()
                    })
                    .collect();
                let mut s = keys.clone();
                s.sort();
                assert_eq!(keys, s, "{scenario}: matrix not sorted by labels");
                checked.push("sorted by labels");
            }
            if expect.contains("__name__ dropped")
                || expect.contains("metric {}")
                || expect.contains("\"metric\":{}")
            {
                assert!(
                    metrics.iter().all(|m| !m.contains_key("__name__")),
                    "{scenario}: __name__ kept"
                );
                checked.push("__name__ dropped");
            }
            if expect.contains("metric {}") || expect.contains("\"metric\":{}") {
                assert_eq!(result.len(), 1, "{scenario}");
                assert!(metrics[0].is_empty(), "{scenario}: metric not empty");
                let vals = result[0]["values"].as_array().unwrap();
                if expect.contains("1081 points") {
                    assert_eq!(vals.len(), 1081, "{scenario}: points");
                }
                checked.push("metric {}");
            }
            if expect.contains("with __name__") || expect.contains("includes __name__") {
                assert!(
                    metrics.iter().all(|m| m.contains_key("__name__")),
                    "{scenario}: __name__ missing"
                );
                checked.push("with __name__");
            }
            if expect.contains("one series per le") {
                assert_eq!(
                    result.len(),
                    PROMPT_BUCKETS.len() + 1,
                    "{scenario}: one series per bucket"
                );
                assert!(metrics.iter().all(|m| m.len() == 1 && m.contains_key("le")));
                assert!(metrics.iter().any(|m| m["le"] == "+Inf"));
                checked.push("one per le");
            }
            if expect.contains("finished_reason\":\"length") {
                let reasons: Vec<&str> = metrics
                    .iter()
                    .map(|m| m["finished_reason"].as_str().unwrap())
                    .collect();
                assert_eq!(reasons, vec!["length", "stop"], "{scenario}");
                assert!(metrics.iter().all(|m| m.len() == 1));
                checked.push("finished_reason series");
            }
            if expect.contains("two series {model_name=") || scenario == "explore_both" {
                let models: Vec<&str> = metrics
                    .iter()
                    .map(|m| m["model_name"].as_str().unwrap())
                    .collect();
                assert_eq!(models, vec![QWEN, LLAMA], "{scenario}");
                assert!(metrics.iter().all(|m| m.len() == 1));
                checked.push("two model series");
            }
            if scenario == "explore_both" || expect.contains("values per second") {
                // token rates are positive per-second numbers
                for s in result {
                    for p in s["values"].as_array().unwrap() {
                        let x: f64 = p[1].as_str().unwrap().parse().unwrap();
                        assert!(x > 0.0, "{scenario}: rate {x}");
                    }
                }
                checked.push("positive rates");
            }
        } else {
            let t = parse_ts(param(line, "time").unwrap());
            match rt {
                "scalar" => assert_eq!(ts_ms(&data["result"][0]), t),
                "vector" => {
                    let result = data["result"].as_array().unwrap();
                    for s in result {
                        assert_eq!(
                            ts_ms(&s["value"][0]),
                            t,
                            "{scenario}: value timestamp is the evaluation time"
                        );
                        check_value_string(&s["value"][1]);
                    }
                    if expect.contains("keeps __name__") {
                        assert!(result.iter().all(|s| s["metric"].get("__name__").is_some()));
                        assert!(!result.is_empty() || scenario == "alert_rule_evaluation");
                        checked.push("keeps __name__");
                    }
                    if expect.contains("one element per finished_reason") {
                        assert_eq!(result.len(), 2);
                        checked.push("per finished_reason");
                    }
                    if scenario == "explore_both" || scenario == "variable_query_result" {
                        let mut models: Vec<&str> = result
                            .iter()
                            .map(|s| s["metric"]["model_name"].as_str().unwrap())
                            .collect();
                        models.sort();
                        assert_eq!(models, vec![QWEN, LLAMA]);
                        checked.push("per model");
                    }
                }
                other => panic!("{scenario}: unexpected {other}"),
            }
            checked.push("instant time");
        }
    }
    checked
}

struct Running {
    base: String,
    api: common::InProcessApi,
    _dir: tempfile::TempDir,
}

async fn start_loaded(config: ApiConfig) -> Running {
    let dir = tempfile::tempdir().unwrap();
    let db = common::open_db(dir.path());
    load_vllm_data(&db);
    let db = Arc::new(db);
    let backend = DbBackend::new(db.clone(), EngineOptions::default());
    let api =
        common::InProcessApi::start(ApiState::new(Arc::new(backend), Arc::new(Meta), config)).await;
    Running {
        base: api.base.clone(),
        api,
        _dir: dir,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grafana_corpus_replays() {
    let corpus = std::fs::read_to_string(corpus_path())
        .unwrap_or_else(|e| panic!("{}: {e}", corpus_path().display()));
    let running = start_loaded(ApiConfig::default()).await;
    let base = running.base.clone();
    let client = reqwest::Client::new();

    let mut n = 0;
    for raw in corpus.lines().filter(|l| !l.trim().is_empty()) {
        let line: Value = serde_json::from_str(raw).unwrap();
        let method = line["method"].as_str().unwrap();
        let url = format!("{base}{}", line["path"].as_str().unwrap());
        let to_pairs = |v: &Value| -> Vec<(String, String)> {
            v.as_object()
                .map(|o| {
                    o.iter()
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                        .collect()
                })
                .unwrap_or_default()
        };
        let mut req = match method {
            "GET" => client.get(&url),
            "POST" => client.post(&url),
            m => panic!("method {m}"),
        }
        .query(&to_pairs(&line["params"]));
        if method == "POST" {
            req = req.form(&to_pairs(&line["form"]));
        }
        if let Some(h) = line["headers"].as_object() {
            for (k, v) in h {
                if k != "Content-Type" {
                    req = req.header(k, v.as_str().unwrap());
                }
            }
        }
        let resp = req.send().await.unwrap();
        let code = resp.status().as_u16();
        let ct = resp
            .headers()
            .get("content-type")
            .map(|h| h.to_str().unwrap().to_string());
        let body = resp.text().await.unwrap();
        assert_eq!(ct.as_deref(), Some("application/json"), "{raw}");
        let checked = check(&line, code, &body);
        eprintln!(
            "ok {} #{} {} {}: {}",
            line["scenario"],
            line["seq"],
            method,
            line["path"],
            checked.join(", ")
        );
        n += 1;
    }
    assert_eq!(n, 62, "every corpus line replayed");
    running.api.stop().await;
}

/// 200 concurrent dashboard range queries all succeed (they queue behind the concurrency
/// limit); a 100 MB body, a 1e9-point range and regex bombs are refused cleanly and the server
/// stays up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_load_and_abuse_are_handled() {
    let running = start_loaded(ApiConfig {
        max_concurrency: 4,
        ..ApiConfig::default()
    })
    .await;
    let base = running.base.clone();
    let client = reqwest::Client::new();
    let queries = [
        "sum by (model_name) (rate(vllm:generation_tokens_total[1m0s]))",
        "histogram_quantile(0.99, sum by(le) (rate(vllm:e2e_request_latency_seconds_bucket[1m0s])))",
        "vllm:num_requests_running",
        "sum by(le) (increase(vllm:request_prompt_tokens_bucket[1m0s]))",
    ];
    let mut tasks = Vec::new();
    for i in 0..200 {
        let client = client.clone();
        let url = format!("{base}/api/v1/query_range");
        let q = queries[i % queries.len()];
        tasks.push(tokio::spawn(async move {
            let r = client
                .post(url)
                .form(&[
                    ("query", q),
                    ("start", "1754002830"),
                    ("end", "1754006430"),
                    ("step", "15"),
                ])
                .send()
                .await
                .unwrap();
            let code = r.status().as_u16();
            let v: Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
            (
                code,
                v["data"]["result"].as_array().map(|a| a.len()).unwrap_or(0),
            )
        }));
    }
    for t in tasks {
        let (code, n) = t.await.unwrap();
        assert_eq!(code, 200);
        assert!(n > 0);
    }

    // a 100 MB body: refused without reading it all
    let big = vec![b'a'; 100 << 20];
    let r = client
        .post(format!("{base}/api/v1/query"))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(big)
        .send()
        .await;
    if let Ok(r) = r {
        assert_eq!(r.status().as_u16(), 413);
    }
    // a 1e9-point range
    let r = client
        .get(format!("{base}/api/v1/query_range"))
        .query(&[
            ("query", "vllm:num_requests_running"),
            ("start", "0"),
            ("end", "1000000000"),
            ("step", "1"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    // a regex too big to compile, and one that backtracking engines choke on
    let r = client
        .get(format!("{base}/api/v1/query"))
        .query(&[("query", "{__name__=~\"((((a{100}){100}){100}){100})\"}")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let r = client
        .get(format!("{base}/api/v1/series"))
        .query(&[(
            "match[]",
            "{__name__=~\"(a+)+(b+)+(c+)+$\",model_name=~\"(.*a){20}\"}",
        )])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    // still serving
    let r = client
        .post(format!("{base}/api/v1/query"))
        .form(&[("query", "1+1"), ("time", "4")])
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.text().await.unwrap(),
        r#"{"status":"success","data":{"resultType":"scalar","result":[4,"2"]}}"#
    );
    running.api.stop().await;
}
