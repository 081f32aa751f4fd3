//! HTTP API tests against a fake backend: envelope, parameters, errors, limits, transport.

mod common;

use std::sync::Arc;
use std::time::Duration;

use inferdb::api::{
    ApiBackend, ApiConfig, ApiError, ApiState, ExprType, MatrixSeries, MetricMetadata, NoScrape,
    QueryOptions, QueryOutput, QueryValue, ScrapeStatus, VectorSample,
};
use inferdb_storage::{Labels, MatchOp, Matcher};
use serde_json::{json, Value};

/// A tiny selector parser for the fake: `name{a="b",c=~"d"}`, `{..}`, `name`.
fn parse_selector(s: &str) -> Result<Vec<Matcher>, String> {
    let s = s.trim();
    let (name, rest) = match s.find('{') {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, ""),
    };
    let mut ms = Vec::new();
    if !name.is_empty() {
        ms.push(Matcher::equal("__name__", name));
    }
    if !rest.is_empty() {
        let inner = rest
            .strip_prefix('{')
            .and_then(|r| r.strip_suffix('}'))
            .ok_or_else(|| "1:1: parse error: unexpected end of input".to_string())?;
        for part in inner.split(',').filter(|p| !p.trim().is_empty()) {
            let (op, idx, len) = ["=~", "!~", "!=", "="]
                .iter()
                .find_map(|op| part.find(op).map(|i| (*op, i, op.len())))
                .ok_or_else(|| format!("1:1: parse error: bad matcher {part}"))?;
            let n = part[..idx].trim();
            let v = part[idx + len..].trim().trim_matches('"');
            let op = match op {
                "=" => MatchOp::Equal,
                "!=" => MatchOp::NotEqual,
                "=~" => MatchOp::RegexMatch,
                _ => MatchOp::RegexNoMatch,
            };
            ms.push(Matcher::new(op, n, v).map_err(|e| e.to_string())?);
        }
    }
    if ms.is_empty() {
        return Err(
            "1:1: parse error: vector selector must contain at least one non-empty matcher".into(),
        );
    }
    Ok(ms)
}

struct Fake {
    series: Vec<(Labels, Vec<(i64, f64)>)>,
}

impl Fake {
    fn select(&self, ms: &[Matcher]) -> Vec<&(Labels, Vec<(i64, f64)>)> {
        self.series
            .iter()
            .filter(|(l, _)| ms.iter().all(|m| m.matches(l.get(&m.name).unwrap_or(""))))
            .collect()
    }
}

impl ApiBackend for Fake {
    fn check_query(&self, q: &str) -> Result<ExprType, String> {
        if q.is_empty() {
            return Err("1:1: parse error: no expression found in input".into());
        }
        if q.matches('(').count() > q.matches(')').count() {
            return Err(format!(
                "1:{}: parse error: unclosed left parenthesis",
                q.len() + 1
            ));
        }
        if q.ends_with(']') {
            return Ok(ExprType::Matrix);
        }
        if q.starts_with('"') {
            return Ok(ExprType::String);
        }
        if q == "1+1" || q.parse::<f64>().is_ok() {
            return Ok(ExprType::Scalar);
        }
        Ok(ExprType::Vector)
    }
    fn format_query(&self, q: &str) -> Result<String, String> {
        self.check_query(q)?;
        Ok(q.replace(' ', ""))
    }
    fn parse_selector(&self, s: &str) -> Result<Vec<Matcher>, String> {
        parse_selector(s)
    }
    fn instant_query(&self, q: &str, t: i64, opts: &QueryOptions) -> Result<QueryOutput, ApiError> {
        let value = match q {
            "1+1" => QueryValue::Scalar { t, v: 2.0 },
            "\"hello\"" => QueryValue::String {
                t,
                s: "hello".into(),
            },
            "sleep" => {
                while !opts.should_stop() {
                    std::thread::sleep(Duration::from_millis(5));
                }
                return Err(ApiError::timeout());
            }
            "fail" => {
                return Err(ApiError::execution(
                    "vector cannot contain metrics with the same labelset",
                ))
            }
            _ => {
                let ms = parse_selector(q).map_err(ApiError::bad_data)?;
                let lookback = opts.lookback_delta_ms.unwrap_or(300_000);
                QueryValue::Vector(
                    self.select(&ms)
                        .into_iter()
                        .filter_map(|(l, s)| {
                            s.iter()
                                .rev()
                                .find(|(st, _)| *st <= t && *st > t - lookback)
                                .map(|(_, v)| VectorSample {
                                    labels: l.clone(),
                                    t,
                                    v: *v,
                                })
                        })
                        .collect(),
                )
            }
        };
        Ok(QueryOutput {
            value,
            warnings: vec![],
            infos: vec![],
        })
    }
    fn range_query(
        &self,
        q: &str,
        start: i64,
        end: i64,
        step: i64,
        opts: &QueryOptions,
    ) -> Result<QueryOutput, ApiError> {
        let mut out: Vec<MatrixSeries> = Vec::new();
        let mut t = start;
        while t <= end {
            if let QueryValue::Vector(v) = self.instant_query(q, t, opts)?.value {
                for s in v {
                    match out.iter_mut().find(|m| m.labels == s.labels) {
                        Some(m) => m.samples.push((t, s.v)),
                        None => out.push(MatrixSeries {
                            labels: s.labels,
                            samples: vec![(t, s.v)],
                        }),
                    }
                }
            }
            t += step;
        }
        out.sort_by(|a, b| a.labels.cmp(&b.labels));
        Ok(QueryOutput {
            value: QueryValue::Matrix(out),
            warnings: vec![],
            infos: vec![],
        })
    }
    fn series(&self, ms: &[Matcher], _s: i64, _e: i64) -> Result<Vec<Labels>, ApiError> {
        Ok(self
            .select(ms)
            .into_iter()
            .map(|(l, _)| l.clone())
            .collect())
    }
    fn label_names(&self, ms: &[Matcher], _s: i64, _e: i64) -> Result<Vec<String>, ApiError> {
        let mut v: Vec<String> = self
            .select(ms)
            .into_iter()
            .flat_map(|(l, _)| l.iter().map(|x| x.name.clone()).collect::<Vec<_>>())
            .collect();
        v.sort();
        v.dedup();
        Ok(v)
    }
    fn label_values(
        &self,
        name: &str,
        ms: &[Matcher],
        _s: i64,
        _e: i64,
    ) -> Result<Vec<String>, ApiError> {
        let mut v: Vec<String> = self
            .select(ms)
            .into_iter()
            .filter_map(|(l, _)| l.get(name).map(str::to_string))
            .collect();
        v.sort();
        v.dedup();
        Ok(v)
    }
}

struct Meta;
impl ScrapeStatus for Meta {
    fn metadata(&self) -> Vec<MetricMetadata> {
        vec![
            MetricMetadata {
                metric: "vllm:num_requests_running".into(),
                typ: "gauge".into(),
                help: "Number of requests in model execution batches.".into(),
                unit: "".into(),
            },
            MetricMetadata {
                metric: "vllm:time_to_first_token_seconds".into(),
                typ: "histogram".into(),
                help: "Histogram of time to first token in seconds.".into(),
                unit: "".into(),
            },
        ]
    }
}

const LLAMA: &str = "meta-llama/Llama-3.1-8B-Instruct";
const QWEN: &str = "Qwen/Qwen2.5-7B-Instruct";

fn fake() -> Fake {
    let mut series = Vec::new();
    for (model, inst, base) in [(LLAMA, "10.0.0.5:8000", 3.0), (QWEN, "10.0.0.6:8000", 7.0)] {
        let l = Labels::from_pairs([
            ("__name__", "vllm:num_requests_running"),
            ("engine", "0"),
            ("instance", inst),
            ("job", "vllm"),
            ("model_name", model),
        ]);
        let samples = (0..100)
            .map(|i| (1_754_000_000_000 + i * 15_000, base + i as f64 * 0.5))
            .collect();
        series.push((l, samples));
    }
    Fake { series }
}

struct Server {
    base: String,
    client: reqwest::Client,
    _api: common::InProcessApi,
}

async fn start_with(config: ApiConfig, scrape: Arc<dyn ScrapeStatus>) -> Server {
    let api = common::InProcessApi::start(ApiState::new(Arc::new(fake()), scrape, config)).await;
    Server {
        base: api.base.clone(),
        client: reqwest::Client::builder().no_gzip().build().unwrap(),
        _api: api,
    }
}

async fn start() -> Server {
    start_with(ApiConfig::default(), Arc::new(Meta)).await
}

impl Server {
    async fn get(&self, path: &str, params: &[(&str, &str)]) -> (u16, String) {
        let r = self
            .client
            .get(format!("{}{path}", self.base))
            .query(params)
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    }
    async fn post(&self, path: &str, url: &[(&str, &str)], form: &[(&str, &str)]) -> (u16, String) {
        let r = self
            .client
            .post(format!("{}{path}", self.base))
            .query(url)
            .form(form)
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    }

    /// Asserts that a simple query (`1+1`) is answered with 200.
    async fn assert_answers(&self) {
        let (st, body) = self
            .post("/api/v1/query", &[], &[("query", "1+1"), ("time", "4")])
            .await;
        assert_eq!(st, 200, "{body}");
    }
}

/// The default API configuration with at most `n` queries at a time.
fn with_concurrency(n: usize) -> ApiConfig {
    ApiConfig {
        max_concurrency: n,
        ..ApiConfig::default()
    }
}

fn parse(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("bad JSON {e}: {body}"))
}

#[tokio::test]
async fn health_check_exact_body_get_post_and_custom_params() {
    let s = start().await;
    let want = r#"{"status":"success","data":{"resultType":"scalar","result":[4,"2"]}}"#;
    assert_eq!(
        s.post("/api/v1/query", &[], &[("query", "1+1"), ("time", "4")])
            .await,
        (200, want.into())
    );
    assert_eq!(
        s.get("/api/v1/query", &[("query", "1+1"), ("time", "4")])
            .await,
        (200, want.into())
    );
    let r = s
        .post(
            "/api/v1/query",
            &[("dedup", "true")],
            &[("query", "1+1"), ("time", "4"), ("timeout", "60s")],
        )
        .await;
    assert_eq!(r, (200, want.into()));
    // body wins over URL for the same key
    let r = s
        .post(
            "/api/v1/query",
            &[("query", "nonsense("), ("time", "99")],
            &[("query", "1+1"), ("time", "4")],
        )
        .await;
    assert_eq!(r, (200, want.into()));
    // string results
    let (c, b) = s
        .get("/api/v1/query", &[("query", "\"hello\""), ("time", "1.5")])
        .await;
    assert_eq!(
        (c, b.as_str()),
        (
            200,
            r#"{"status":"success","data":{"resultType":"string","result":[1.500,"hello"]}}"#
        )
    );
}

#[tokio::test]
async fn instant_vector_uses_eval_time_and_keeps_name() {
    let s = start().await;
    let (c, b) = s
        .post(
            "/api/v1/query",
            &[],
            &[
                ("query", "vllm:num_requests_running"),
                ("time", "1754000100.512"),
            ],
        )
        .await;
    assert_eq!(c, 200, "{b}");
    let v = parse(&b);
    assert_eq!(v["data"]["resultType"], "vector");
    let r = v["data"]["result"].as_array().unwrap();
    assert_eq!(r.len(), 2);
    for e in r {
        assert_eq!(e["metric"]["__name__"], "vllm:num_requests_running");
        assert_eq!(e["value"][0], json!(1754000100.512));
        assert!(e["value"][1].is_string());
    }
    // limit truncates with a warning
    let (_, b) = s
        .post(
            "/api/v1/query",
            &[],
            &[
                ("query", "vllm:num_requests_running"),
                ("time", "1754000100"),
                ("limit", "1"),
            ],
        )
        .await;
    let v = parse(&b);
    assert_eq!(v["data"]["result"].as_array().unwrap().len(), 1);
    assert_eq!(v["warnings"], json!(["results truncated due to limit"]));
}

#[tokio::test]
async fn range_query_shape_and_errors() {
    let s = start().await;
    let (c, b) = s
        .post(
            "/api/v1/query_range",
            &[],
            &[
                (
                    "query",
                    "vllm:num_requests_running{model_name=\"meta-llama/Llama-3.1-8B-Instruct\"}",
                ),
                ("start", "1754000000"),
                ("end", "1754000060"),
                ("step", "20"),
            ],
        )
        .await;
    assert_eq!(c, 200, "{b}");
    let v = parse(&b);
    assert_eq!(v["data"]["resultType"], "matrix");
    let vals = v["data"]["result"][0]["values"].as_array().unwrap();
    let ts: Vec<i64> = vals.iter().map(|p| p[0].as_i64().unwrap()).collect();
    assert_eq!(ts, vec![1754000000, 1754000020, 1754000040, 1754000060]);
    assert_eq!(vals[0][1], "3");

    let bad = |q: &str, start: &str, end: &str, step: &str| {
        vec![
            ("query".to_string(), q.to_string()),
            ("start".into(), start.into()),
            ("end".into(), end.into()),
            ("step".into(), step.into()),
        ]
    };
    type Case<'a> = (Vec<(String, String)>, u16, &'a str);
    let cases: Vec<Case> = vec![
        (
            bad(
                "rate(vllm:prompt_tokens_total[1m0s]",
                "1754002830",
                "1754006430",
                "15",
            ),
            400,
            r#"{"status":"error","errorType":"bad_data","error":"invalid parameter \"query\": 1:36: parse error: unclosed left parenthesis"}"#,
        ),
        (
            bad(
                "vllm:num_requests_running[5m]",
                "1754002830",
                "1754006430",
                "15",
            ),
            400,
            r#"{"status":"error","errorType":"bad_data","error":"invalid parameter \"query\": invalid expression type \"range vector\" for range query, must be Scalar or instant Vector"}"#,
        ),
        (
            bad("up", "1754002830", "1754006430", "0"),
            400,
            r#"{"status":"error","errorType":"bad_data","error":"invalid parameter \"step\": zero or negative query resolution step widths are not accepted. Try a positive integer"}"#,
        ),
        (
            bad("up", "0", "11001", "1"),
            400,
            r#"{"status":"error","errorType":"bad_data","error":"exceeded maximum resolution of 11,000 points per timeseries. Try decreasing the query resolution (?step=XX)"}"#,
        ),
        (
            bad("up", "10", "5", "1"),
            400,
            r#"{"status":"error","errorType":"bad_data","error":"invalid parameter \"end\": end timestamp must not be before start time"}"#,
        ),
        (
            bad("up", "x", "5", "1"),
            400,
            r#"{"status":"error","errorType":"bad_data","error":"invalid parameter \"start\": cannot parse \"x\" to a valid timestamp"}"#,
        ),
        (
            bad("fail", "0", "10", "1"),
            422,
            r#"{"status":"error","errorType":"execution","error":"vector cannot contain metrics with the same labelset"}"#,
        ),
    ];
    for (form, code, body) in cases {
        let f: Vec<(&str, &str)> = form.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
        assert_eq!(
            s.post("/api/v1/query_range", &[], &f).await,
            (code, body.to_string()),
            "{form:?}"
        );
    }
    // exactly 11,000 steps is fine; a 1e9-point range is refused
    let (c, _) = s
        .get(
            "/api/v1/query_range",
            &[
                ("query", "1+1"),
                ("start", "0"),
                ("end", "11000"),
                ("step", "1"),
            ],
        )
        .await;
    assert_eq!(c, 200);
    let (c, _) = s
        .get(
            "/api/v1/query_range",
            &[
                ("query", "1+1"),
                ("start", "0"),
                ("end", "1000000000"),
                ("step", "1"),
            ],
        )
        .await;
    assert_eq!(c, 400);
}

#[tokio::test]
async fn labels_values_series_and_match() {
    let s = start().await;
    let w = [
        ("limit", "40000"),
        ("start", "1754002800"),
        ("end", "1754006460"),
    ];
    let (c, b) = s.get("/api/v1/label/model_name/values", &w).await;
    assert_eq!(
        (c, b.as_str()),
        (
            200,
            r#"{"status":"success","data":["Qwen/Qwen2.5-7B-Instruct","meta-llama/Llama-3.1-8B-Instruct"]}"#
        )
    );
    let mut with_match = w.to_vec();
    with_match.push((
        "match[]",
        "vllm:num_requests_running{model_name=\"meta-llama/Llama-3.1-8B-Instruct\"}",
    ));
    let (_, b) = s.get("/api/v1/label/model_name/values", &with_match).await;
    assert_eq!(parse(&b)["data"], json!([LLAMA]));
    let (_, b) = s.post("/api/v1/labels", &[], &with_match).await;
    assert_eq!(
        parse(&b)["data"],
        json!(["__name__", "engine", "instance", "job", "model_name"])
    );
    // several match[] are a union
    let (_, b) = s
        .get(
            "/api/v1/label/instance/values",
            &[
                (
                    "match[]",
                    "{model_name=\"meta-llama/Llama-3.1-8B-Instruct\"}",
                ),
                ("match[]", "{model_name=\"Qwen/Qwen2.5-7B-Instruct\"}"),
            ],
        )
        .await;
    assert_eq!(parse(&b)["data"], json!(["10.0.0.5:8000", "10.0.0.6:8000"]));
    // limit
    let (_, b) = s
        .get("/api/v1/label/model_name/values", &[("limit", "1")])
        .await;
    assert_eq!(
        b,
        r#"{"status":"success","data":["Qwen/Qwen2.5-7B-Instruct"],"warnings":["results truncated due to limit"]}"#
    );
    // nothing matches: [] not null
    let (_, b) = s
        .get(
            "/api/v1/label/model_name/values",
            &[("match[]", "nothing_here")],
        )
        .await;
    assert_eq!(b, r#"{"status":"success","data":[]}"#);
    // series
    let (c, b) = s
        .post(
            "/api/v1/series",
            &[],
            &[("match[]", "vllm:num_requests_running"), ("limit", "40000")],
        )
        .await;
    assert_eq!(c, 200);
    let v = parse(&b);
    assert_eq!(
        v["data"][0],
        json!({"__name__":"vllm:num_requests_running","engine":"0","instance":"10.0.0.5:8000","job":"vllm","model_name":LLAMA})
    );
    assert_eq!(v["data"].as_array().unwrap().len(), 2);
    // errors
    assert_eq!(
        s.post("/api/v1/series", &[], &[("start", "1")]).await,
        (
            400,
            r#"{"status":"error","errorType":"bad_data","error":"no match[] parameter provided"}"#
                .into()
        )
    );
    assert_eq!(
        s.get("/api/v1/labels", &[("match[]", "{job=~\".*\"}")]).await,
        (400, r#"{"status":"error","errorType":"bad_data","error":"match[] must contain at least one non-empty matcher"}"#.into())
    );
    let (c, b) = s.get("/api/v1/labels", &[("limit", "-3")]).await;
    assert_eq!(
        (c, parse(&b)["errorType"].as_str().unwrap()),
        (400, "bad_data")
    );
    // label/<n>/values is GET only (Grafana retries with GET on 405)
    let (c, _) = s.post("/api/v1/label/job/values", &[], &[]).await;
    assert_eq!(c, 405);
}

#[tokio::test]
async fn metadata_status_and_misc() {
    let s = start().await;
    let (c, b) = s.get("/api/v1/metadata", &[("limit", "40000")]).await;
    assert_eq!(c, 200);
    assert_eq!(
        parse(&b)["data"]["vllm:num_requests_running"],
        json!([{"type":"gauge","help":"Number of requests in model execution batches.","unit":""}])
    );
    let (_, b) = s
        .get(
            "/api/v1/metadata",
            &[("metric", "vllm:time_to_first_token_seconds")],
        )
        .await;
    assert_eq!(parse(&b)["data"].as_object().unwrap().len(), 1);
    let (_, b) = s.get("/api/v1/metadata", &[("limit", "1")]).await;
    assert_eq!(parse(&b)["data"].as_object().unwrap().len(), 1);

    let (c, b) = s.get("/api/v1/status/buildinfo", &[]).await;
    assert_eq!(c, 200);
    let v = parse(&b);
    assert!(v["data"].get("features").is_none());
    assert!(v["data"]["version"].as_str().unwrap().starts_with('3'));
    for k in ["revision", "branch", "buildUser", "buildDate", "goVersion"] {
        assert!(v["data"][k].is_string(), "{k}");
    }
    assert_eq!(
        s.get("/api/v1/rules", &[]).await,
        (200, r#"{"status":"success","data":{"groups":[]}}"#.into())
    );
    assert_eq!(
        s.get("/api/v1/alerts", &[]).await,
        (200, r#"{"status":"success","data":{"alerts":[]}}"#.into())
    );
    // exemplar probe with millisecond times
    assert_eq!(
        s.post(
            "/api/v1/query_exemplars",
            &[],
            &[
                ("query", "test"),
                ("start", "1754004637512"),
                ("end", "1754006437512")
            ]
        )
        .await,
        (200, r#"{"status":"success","data":[]}"#.into())
    );
    let (c, b) = s.get("/api/v1/status/runtimeinfo", &[]).await;
    assert_eq!(c, 200);
    assert_eq!(parse(&b)["data"]["storageRetention"], "15d");
    let (c, b) = s.get("/api/v1/status/tsdb", &[]).await;
    assert_eq!(c, 200);
    let v = parse(&b);
    assert_eq!(v["data"]["headStats"]["numSeries"], 2);
    assert_eq!(
        v["data"]["seriesCountByMetricName"][0],
        json!({"name":"vllm:num_requests_running","value":2})
    );
    let (c, b) = s.get("/api/v1/status/flags", &[]).await;
    assert_eq!((c, parse(&b)["data"].is_object()), (200, true));
    let (c, b) = s.get("/api/v1/targets", &[]).await;
    assert_eq!(c, 200);
    assert_eq!(parse(&b)["data"]["activeTargets"], json!([]));
    let (c, b) = s
        .get("/api/v1/format_query", &[("query", "sum( x )")])
        .await;
    assert_eq!((c, parse(&b)["data"].as_str().unwrap()), (200, "sum(x)"));
    let (c, b) = s.get("/api/v1/format_query", &[("query", "sum(")]).await;
    assert_eq!(
        (c, parse(&b)["errorType"].as_str().unwrap()),
        (400, "bad_data")
    );
    assert_eq!(s.get("/-/healthy", &[]).await.0, 200);
    assert_eq!(s.get("/-/ready", &[]).await.0, 200);
    assert_eq!(s.post("/-/reload", &[], &[]).await.0, 403);
    assert_eq!(s.get("/api/v1/nope", &[]).await.0, 404);
    let (c, b) = s.get("/metrics", &[]).await;
    assert_eq!(c, 200);
    assert!(
        b.contains("prometheus_http_requests_total{code=\"200\",handler=\"/api/v1/rules\"} 1"),
        "{b}"
    );
}

#[tokio::test]
async fn gzip_when_asked_and_identity_otherwise() {
    let s = start().await;
    // a large answer (the process's metrics page) is gzipped for a client that asks
    let url = format!("{}/metrics", s.base);
    let r = s
        .client
        .get(&url)
        .header("Accept-Encoding", "gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers().get("content-encoding").unwrap(), "gzip");
    let bytes = r.bytes().await.unwrap();
    let mut d = flate2::read::GzDecoder::new(&bytes[..]);
    let mut text = String::new();
    std::io::Read::read_to_string(&mut d, &mut text).unwrap();
    assert!(text.len() > 1400, "{}", text.len());
    assert!(text.contains("prometheus_http_requests_total"), "{text}");
    for accept in [Some("zstd, br"), None] {
        let mut req = s.client.get(&url);
        if let Some(a) = accept {
            req = req.header("Accept-Encoding", a);
        }
        let r = req.send().await.unwrap();
        assert!(r.headers().get("content-encoding").is_none(), "{accept:?}");
    }
    // a small answer goes as it is even to a client that accepts gzip: one packet either way
    let url = format!("{}/api/v1/label/model_name/values", s.base);
    let r = s
        .client
        .get(&url)
        .header("Accept-Encoding", "gzip")
        .send()
        .await
        .unwrap();
    assert!(r.headers().get("content-encoding").is_none());
    assert_eq!(r.headers().get("content-type").unwrap(), "application/json");
    let text = r.text().await.unwrap();
    assert!(text.len() < 1400 && text.contains(LLAMA), "{text}");
}

#[tokio::test]
async fn oversized_body_refused_and_server_stays_up() {
    let cfg = ApiConfig {
        max_body_bytes: 1 << 20,
        ..ApiConfig::default()
    };
    let s = start_with(cfg, Arc::new(NoScrape)).await;
    let big = "x".repeat(4 << 20);
    let r = s
        .client
        .post(format!("{}/api/v1/query", s.base))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(format!("query={big}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 413);
    let v = parse(&r.text().await.unwrap());
    assert_eq!(v["status"], "error");
    s.assert_answers().await;
}

#[tokio::test]
async fn timeout_answers_503_and_frees_the_slot() {
    let cfg = with_concurrency(1);
    let s = start_with(cfg, Arc::new(NoScrape)).await;
    let r = s
        .post(
            "/api/v1/query",
            &[],
            &[("query", "sleep"), ("timeout", "0.2")],
        )
        .await;
    assert_eq!(
        r,
        (503, r#"{"status":"error","errorType":"timeout","error":"query timed out in expression evaluation"}"#.into())
    );
    // the single slot is free again once the canceled query stopped
    s.assert_answers().await;
}

#[tokio::test]
async fn concurrent_requests_queue_instead_of_failing() {
    let cfg = with_concurrency(2);
    let s = Arc::new(start_with(cfg, Arc::new(NoScrape)).await);
    let mut tasks = Vec::new();
    for _ in 0..50 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            s.post(
                "/api/v1/query_range",
                &[],
                &[
                    ("query", "vllm:num_requests_running"),
                    ("start", "1754000000"),
                    ("end", "1754001000"),
                    ("step", "15"),
                ],
            )
            .await
            .0
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), 200);
    }
}

#[tokio::test]
async fn basic_auth_from_web_config() {
    let hash = bcrypt::hash("s3cret", 4).unwrap();
    let web =
        inferdb::api::auth::WebConfig::parse(&format!("basic_auth_users:\n  grafana: '{hash}'\n"))
            .unwrap();
    let cfg = ApiConfig {
        basic_auth_users: web.basic_auth_users,
        ..ApiConfig::default()
    };
    let s = start_with(cfg, Arc::new(NoScrape)).await;
    let url = format!("{}/api/v1/query", s.base);
    let form = [("query", "1+1"), ("time", "4")];
    let r = s.client.post(&url).form(&form).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 401);
    assert!(r
        .headers()
        .get("www-authenticate")
        .unwrap()
        .to_str()
        .unwrap()
        .starts_with("Basic"));
    let r = s
        .client
        .post(&url)
        .basic_auth("grafana", Some("wrong"))
        .form(&form)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);
    for _ in 0..2 {
        let r = s
            .client
            .post(&url)
            .basic_auth("grafana", Some("s3cret"))
            .form(&form)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
    }
    let r = s
        .client
        .get(format!("{}/metrics", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);
}
