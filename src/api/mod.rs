//! The Prometheus-compatible HTTP API (axum) that Grafana's Prometheus datasource, `promtool`
//! and Prometheus API clients use unchanged.
//!
//! Handlers are written against two small traits so they can be tested with fakes:
//! [`ApiBackend`] (PromQL queries and the label/series index) and [`ScrapeStatus`] (targets and
//! metric metadata, provided by the scraper). [`router::router`] builds the axum `Router`;
//! [`router::serve`] runs it.

pub mod auth;
pub mod backend;
pub mod conn;
pub mod error;
pub mod json;
pub mod params;
pub mod result_cache;
pub mod router;
pub mod startup;
pub mod tls;
pub mod web_urls;

mod admin;
mod alertmanagers;
mod compare;
mod federate;
mod insights;
mod labels;
mod metadata;
mod misc;
mod parse_query;
mod query;
mod query_range;
mod read;
mod rules;
mod series;
mod status;
mod targets;
mod write;

use std::time::{Duration, Instant};

use inferdb_query::engine::CancelToken;
use inferdb_storage::{Labels, Matcher};

pub use backend::DbBackend;
pub use error::{ApiError, ErrorType};
pub use router::{router, serve, ApiConfig, ApiState};
pub use web_urls::WebUrls;

/// The maximum number of points per series a range query may produce, as in Prometheus.
pub const MAX_POINTS_PER_SERIES: i64 = 11_000;

/// The PromQL type of a parsed expression, as far as the API needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExprType {
    /// A scalar.
    Scalar,
    /// A string literal.
    String,
    /// An instant vector.
    Vector,
    /// A range vector.
    Matrix,
}

impl ExprType {
    /// The name Prometheus uses in error messages.
    pub fn describe(self) -> &'static str {
        match self {
            ExprType::Scalar => "scalar",
            ExprType::String => "string",
            ExprType::Vector => "instant vector",
            ExprType::Matrix => "range vector",
        }
    }
}

/// Per-query limits and controls handed to the backend.
#[derive(Debug, Clone)]
pub struct QueryOptions {
    /// Time allowed for evaluation.
    pub timeout: Duration,
    /// When evaluation must stop (`start + timeout`).
    pub deadline: Instant,
    /// The most samples a query may hold in memory at once (0: no limit).
    pub max_samples: usize,
    /// The lookback delta for instant selectors, milliseconds; `None` for the server default.
    pub lookback_delta_ms: Option<i64>,
    /// Canceled when the client went away or the timeout passed; the engine polls it.
    pub cancel: CancelToken,
}

impl QueryOptions {
    /// Options with a timeout from now and no other limits.
    pub fn with_timeout(timeout: Duration) -> Self {
        QueryOptions {
            timeout,
            deadline: Instant::now() + timeout,
            max_samples: 0,
            lookback_delta_ms: None,
            cancel: CancelToken::new(),
        }
    }

    /// The same options with `time` allowed from now (the deadline moved accordingly); the
    /// cancel token is shared.
    pub fn with_time_left(&self, time: Duration) -> Self {
        QueryOptions {
            timeout: time,
            deadline: Instant::now() + time,
            ..self.clone()
        }
    }

    /// Whether the query should stop now (canceled or past its deadline).
    pub fn should_stop(&self) -> bool {
        self.cancel.is_canceled() || Instant::now() >= self.deadline
    }
}

/// One element of an instant vector.
#[derive(Debug, Clone, PartialEq)]
pub struct VectorSample {
    /// The series' labels.
    pub labels: Labels,
    /// Timestamp, milliseconds.
    pub t: i64,
    /// Value.
    pub v: f64,
}

/// One series of a range vector.
#[derive(Debug, Clone, PartialEq)]
pub struct MatrixSeries {
    /// The series' labels.
    pub labels: Labels,
    /// `(timestamp ms, value)` in time order.
    pub samples: Vec<(i64, f64)>,
}

/// A query result value.
#[derive(Debug, Clone, PartialEq)]
pub enum QueryValue {
    /// `[<ts>,"<v>"]`.
    Scalar {
        /// Timestamp, milliseconds.
        t: i64,
        /// Value.
        v: f64,
    },
    /// `[<ts>,"<s>"]`.
    String {
        /// Timestamp, milliseconds.
        t: i64,
        /// The string.
        s: String,
    },
    /// An instant vector.
    Vector(Vec<VectorSample>),
    /// A range vector (matrix).
    Matrix(Vec<MatrixSeries>),
}

impl QueryValue {
    /// The `resultType` name.
    pub fn result_type(&self) -> &'static str {
        match self {
            QueryValue::Scalar { .. } => "scalar",
            QueryValue::String { .. } => "string",
            QueryValue::Vector(_) => "vector",
            QueryValue::Matrix(_) => "matrix",
        }
    }

    /// Encodes `{"resultType":...,"result":...}`.
    pub fn to_json(&self) -> String {
        let mut out = String::with_capacity(self.json_size_hint());
        self.write_json(&mut out);
        out
    }

    /// About how many bytes [`QueryValue::write_json`] writes (a little more, as a rule), so
    /// that the response buffer is allocated once.
    pub fn json_size_hint(&self) -> usize {
        // `[1796202015.123,"-1234.5678901234567"]` plus the comma: 40 bytes covers nearly
        // every point; the labels object needs its bytes plus quotes, colon and comma
        fn labels_len(l: &Labels) -> usize {
            l.iter()
                .map(|l| l.name.len() + l.value.len() + 6)
                .sum::<usize>()
                + 2
        }
        const POINT: usize = 40;
        64 + match self {
            QueryValue::Scalar { .. } => POINT,
            QueryValue::String { s, .. } => s.len() * 2 + POINT,
            QueryValue::Vector(v) => v.iter().map(|s| labels_len(&s.labels) + 24 + POINT).sum(),
            QueryValue::Matrix(m) => m
                .iter()
                .map(|s| labels_len(&s.labels) + 24 + s.samples.len() * POINT)
                .sum(),
        }
    }

    /// Appends `{"resultType":...,"result":...}` to `out`.
    pub fn write_json<W: inferdb_query::go_format::TextSink + ?Sized>(&self, out: &mut W) {
        out.put("{\"resultType\":\"");
        out.put(self.result_type());
        out.put("\",\"result\":");
        match self {
            QueryValue::Scalar { t, v } => json::push_scalar(out, *t, *v),
            QueryValue::String { t, s } => {
                out.put_byte(b'[');
                json::push_timestamp(out, *t);
                out.put_byte(b',');
                json::push_str(out, s);
                out.put_byte(b']');
            }
            QueryValue::Vector(v) => {
                out.put_byte(b'[');
                for (i, s) in v.iter().enumerate() {
                    if i > 0 {
                        out.put_byte(b',');
                    }
                    out.put("{\"metric\":");
                    json::push_labels(out, &s.labels);
                    out.put(",\"value\":");
                    json::push_point(out, s.t, s.v);
                    out.put_byte(b'}');
                }
                out.put_byte(b']');
            }
            QueryValue::Matrix(m) => {
                out.put_byte(b'[');
                for (i, s) in m.iter().enumerate() {
                    if i > 0 {
                        out.put_byte(b',');
                    }
                    out.put("{\"metric\":");
                    json::push_labels(out, &s.labels);
                    out.put(",\"values\":[");
                    for (j, (t, v)) in s.samples.iter().enumerate() {
                        if j > 0 {
                            out.put_byte(b',');
                        }
                        json::push_point(out, *t, *v);
                    }
                    out.put("]}");
                }
                out.put_byte(b']');
            }
        }
        out.put_byte(b'}');
    }

    /// The whole success response body, `{"status":"success","data":<value>[,"warnings":..]
    /// [,"infos":..]}`, written into one buffer allocated once.
    pub fn success_json(&self, warnings: &[String], infos: &[String]) -> Vec<u8> {
        let extra: usize = warnings.iter().chain(infos).map(|w| w.len() * 6 + 4).sum();
        let mut out = Vec::with_capacity(self.json_size_hint() + extra + 64);
        out.extend_from_slice(json::SUCCESS_PREFIX.as_bytes());
        self.write_json(&mut out);
        json::push_envelope_tail(&mut out, warnings, infos);
        out
    }

    /// Truncates a vector or matrix to `limit` series (0: no limit); true when it cut.
    pub fn truncate(&mut self, limit: usize) -> bool {
        if limit == 0 {
            return false;
        }
        match self {
            QueryValue::Vector(v) if v.len() > limit => {
                v.truncate(limit);
                true
            }
            QueryValue::Matrix(m) if m.len() > limit => {
                m.truncate(limit);
                true
            }
            _ => false,
        }
    }
}

/// A query's value with the warnings and infos the engine produced.
#[derive(Debug, Clone, PartialEq)]
pub struct QueryOutput {
    /// The value.
    pub value: QueryValue,
    /// Warnings (`"warnings"` in the response).
    pub warnings: Vec<String>,
    /// Informational notes (`"infos"` in the response).
    pub infos: Vec<String>,
}

/// Counts for `/api/v1/status/tsdb`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TsdbStatus {
    /// Number of series in the head (or the whole store).
    pub num_series: u64,
    /// Number of distinct label pairs.
    pub num_label_pairs: u64,
    /// Number of chunks in the head.
    pub chunk_count: u64,
    /// Oldest sample timestamp, ms.
    pub min_time: i64,
    /// Newest sample timestamp, ms.
    pub max_time: i64,
    /// Top metric names by series count.
    pub series_count_by_metric_name: Vec<(String, u64)>,
    /// Top label names by number of distinct values.
    pub label_value_count_by_label_name: Vec<(String, u64)>,
    /// Top label names by bytes of their values.
    pub memory_in_bytes_by_label_name: Vec<(String, u64)>,
    /// Top label pairs (`name=value`) by series count.
    pub series_count_by_label_value_pair: Vec<(String, u64)>,
}

impl TsdbStatus {
    /// Computes the statistics from a list of series label sets, keeping the top `limit` of
    /// each ranking.
    pub fn from_series(series: &[Labels], limit: usize) -> Self {
        use std::collections::{BTreeMap, BTreeSet};
        let mut by_metric: BTreeMap<&str, u64> = BTreeMap::new();
        let mut values_by_name: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        let mut by_pair: BTreeMap<(&str, &str), u64> = BTreeMap::new();
        for ls in series {
            if let Some(n) = ls.metric_name() {
                *by_metric.entry(n).or_default() += 1;
            }
            for l in ls.iter() {
                values_by_name.entry(&l.name).or_default().insert(&l.value);
                *by_pair.entry((&l.name, &l.value)).or_default() += 1;
            }
        }
        fn top(mut v: Vec<(String, u64)>, limit: usize) -> Vec<(String, u64)> {
            v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            v.truncate(limit);
            v
        }
        TsdbStatus {
            num_series: series.len() as u64,
            num_label_pairs: by_pair.len() as u64,
            chunk_count: 0,
            min_time: 0,
            max_time: 0,
            series_count_by_metric_name: top(
                by_metric.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
                limit,
            ),
            label_value_count_by_label_name: top(
                values_by_name
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.len() as u64))
                    .collect(),
                limit,
            ),
            memory_in_bytes_by_label_name: top(
                values_by_name
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.iter().map(|s| s.len() as u64).sum()))
                    .collect(),
                limit,
            ),
            series_count_by_label_value_pair: top(
                by_pair
                    .iter()
                    .map(|((n, v), c)| (format!("{n}={v}"), *c))
                    .collect(),
                limit,
            ),
        }
    }
}

/// What the HTTP API needs from the query engine and the store.
///
/// Every method is synchronous and may block; the API runs them on tokio's blocking pool
/// behind a concurrency limit.
pub trait ApiBackend: Send + Sync + 'static {
    /// Parses `query` and returns its type, or the parse error as Prometheus words it
    /// (`1:36: parse error: unclosed left parenthesis`).
    fn check_query(&self, query: &str) -> Result<ExprType, String>;

    /// Parses `query` and prints it back formatted (for `/api/v1/format_query`).
    fn format_query(&self, query: &str) -> Result<String, String>;

    /// Parses a series selector (`match[]`) into matchers.
    fn parse_selector(&self, selector: &str) -> Result<Vec<Matcher>, String>;

    /// Evaluates `query` at `t_ms`.
    fn instant_query(
        &self,
        query: &str,
        t_ms: i64,
        opts: &QueryOptions,
    ) -> Result<QueryOutput, ApiError>;

    /// Evaluates `query` at `start + k*step` up to `end` (all ms); the value must be a matrix.
    fn range_query(
        &self,
        query: &str,
        start_ms: i64,
        end_ms: i64,
        step_ms: i64,
        opts: &QueryOptions,
    ) -> Result<QueryOutput, ApiError>;

    /// Label sets of the series matching all of `matchers` with samples in `[start, end]`,
    /// sorted.
    fn series(
        &self,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
    ) -> Result<Vec<Labels>, ApiError>;

    /// Sorted label names of the series matching `matchers` (all series when empty).
    fn label_names(
        &self,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
    ) -> Result<Vec<String>, ApiError>;

    /// Sorted values of label `name` over the series matching `matchers` (all when empty).
    fn label_values(
        &self,
        name: &str,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
    ) -> Result<Vec<String>, ApiError>;

    /// Cardinality statistics for `/api/v1/status/tsdb`, top `limit` per ranking.
    fn tsdb_status(&self, limit: usize) -> Result<TsdbStatus, ApiError> {
        let all = Matcher::new(inferdb_storage::MatchOp::RegexMatch, "__name__", ".+")
            .map_err(|e| ApiError::internal(e.to_string()))?;
        let series = self.series(&[all], params::MIN_TIME_MS, params::MAX_TIME_MS)?;
        Ok(TsdbStatus::from_series(&series, limit))
    }

    /// Whether the store is ready to answer (`/-/ready`).
    fn ready(&self) -> bool {
        true
    }

    /// For `/federate`: the newest sample in `[mint, maxt]` of every series matching any of
    /// `sets` (stale markers included), sorted by labels, each series once.
    fn latest_samples(
        &self,
        _sets: &[Vec<Matcher>],
        _mint: i64,
        _maxt: i64,
    ) -> Result<Vec<VectorSample>, ApiError> {
        Err(ApiError::internal(
            "federation is not supported by this server",
        ))
    }

    /// Admin API: deletes `[mint, maxt]` of the series matching all of `matchers`.
    fn delete_series(&self, _matchers: &[Matcher], _mint: i64, _maxt: i64) -> Result<(), ApiError> {
        Err(no_admin())
    }

    /// Admin API: writes a snapshot of the store under `<data>/snapshots/` (the head too
    /// unless `skip_head`) and returns its folder name.
    fn snapshot(&self, _skip_head: bool) -> Result<String, ApiError> {
        Err(no_admin())
    }

    /// Admin API: rewrites the blocks that have tombstones without the deleted samples.
    fn clean_tombstones(&self) -> Result<(), ApiError> {
        Err(no_admin())
    }
}

fn no_admin() -> ApiError {
    ApiError::internal("the admin API is not supported by this server")
}

/// One target's metric metadata, for `/api/v1/targets/metadata`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetMetadata {
    /// The target's labels (without `__`-prefixed ones).
    pub target: Labels,
    /// The metadata of the families on its last page, by family name.
    pub metadata: Vec<MetricMetadata>,
}

/// Metric metadata as scraped from `# HELP`/`# TYPE`/`# UNIT` lines.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct MetricMetadata {
    /// Metric family name (histograms without `_bucket`).
    pub metric: String,
    /// counter, gauge, histogram, gaugehistogram, summary, info, stateset or unknown.
    pub typ: String,
    /// Help text.
    pub help: String,
    /// Unit, often empty.
    pub unit: String,
}

/// One scrape target as `/api/v1/targets` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct TargetInfo {
    /// Labels before relabelling.
    pub discovered_labels: Labels,
    /// Target labels (`job`, `instance`, ...).
    pub labels: Labels,
    /// The job name.
    pub scrape_pool: String,
    /// The URL scraped.
    pub scrape_url: String,
    /// The last scrape's error, empty if none.
    pub last_error: String,
    /// When it was last scraped, ms since the epoch (0: never).
    pub last_scrape_ms: i64,
    /// How long the last scrape took, seconds.
    pub last_scrape_duration_s: f64,
    /// "up", "down" or "unknown".
    pub health: String,
    /// Scrape interval, ms.
    pub scrape_interval_ms: i64,
    /// Scrape timeout, ms.
    pub scrape_timeout_ms: i64,
}

/// The targets relabelling dropped in one scrape pool, as `/api/v1/targets` shows them.
#[derive(Debug, Clone, PartialEq)]
pub struct DroppedTargets {
    /// The job name.
    pub scrape_pool: String,
    /// How many were dropped.
    pub count: usize,
    /// The labels before relabelling of those kept (`keep_dropped_targets`).
    pub discovered_labels: Vec<Labels>,
}

/// What the API needs from the scraper: targets and metadata. The default is "nothing".
pub trait ScrapeStatus: Send + Sync + 'static {
    /// Active targets.
    fn targets(&self) -> Vec<TargetInfo> {
        Vec::new()
    }
    /// Per scrape pool: how many targets relabelling dropped, and the discovered labels
    /// of those kept for display.
    fn dropped_targets(&self) -> Vec<DroppedTargets> {
        Vec::new()
    }
    /// Metadata of every metric family seen.
    fn metadata(&self) -> Vec<MetricMetadata> {
        Vec::new()
    }
    /// Per active target, the metadata of the families on its last page.
    fn target_metadata(&self) -> Vec<TargetMetadata> {
        Vec::new()
    }
    /// The configuration's `global.external_labels`, sorted by name (added by `/federate`).
    fn external_labels(&self) -> Vec<(String, String)> {
        Vec::new()
    }
    /// Extra lines for inferdb's own `/metrics` page (Prometheus text format).
    fn self_metrics(&self) -> String {
        String::new()
    }
    /// Reloads the configuration (`POST /-/reload` with `--web.enable-lifecycle`).
    fn reload(&self) -> Result<(), String> {
        Err("configuration reload is not supported by this server".into())
    }
}

/// A [`ScrapeStatus`] with no targets and no metadata.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoScrape;
impl ScrapeStatus for NoScrape {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_value_json() {
        let v = QueryValue::Scalar { t: 4000, v: 2.0 };
        assert_eq!(v.to_json(), r#"{"resultType":"scalar","result":[4,"2"]}"#);
        // Prometheus writes a scalar result with Go's 'f' layout, a sample with 'e' when small
        let v = QueryValue::Scalar { t: 4000, v: 1e-7 };
        assert_eq!(
            v.to_json(),
            r#"{"resultType":"scalar","result":[4,"0.0000001"]}"#
        );
        let v = QueryValue::Scalar {
            t: 4000,
            v: -2.5e22,
        };
        assert_eq!(
            v.to_json(),
            r#"{"resultType":"scalar","result":[4,"-25000000000000000000000"]}"#
        );
        let v = QueryValue::Scalar {
            t: 4000,
            v: f64::NEG_INFINITY,
        };
        assert_eq!(
            v.to_json(),
            r#"{"resultType":"scalar","result":[4,"-Inf"]}"#
        );
        let m = QueryValue::Matrix(vec![MatrixSeries {
            labels: Labels::from_pairs([("model_name", "m")]),
            samples: vec![(1_753_984_820_000, f64::NAN), (1_753_984_840_000, 2.4375)],
        }]);
        assert_eq!(
            m.to_json(),
            r#"{"resultType":"matrix","result":[{"metric":{"model_name":"m"},"values":[[1753984820,"NaN"],[1753984840,"2.4375"]]}]}"#
        );
        let v = QueryValue::Vector(vec![VectorSample {
            labels: Labels::default(),
            t: 1_754_006_437_512,
            v: f64::INFINITY,
        }]);
        assert_eq!(
            v.to_json(),
            r#"{"resultType":"vector","result":[{"metric":{},"value":[1754006437.512,"+Inf"]}]}"#
        );
        let s = QueryValue::String {
            t: 1000,
            s: "a\"b".into(),
        };
        assert_eq!(
            s.to_json(),
            r#"{"resultType":"string","result":[1,"a\"b"]}"#
        );
        assert_eq!(
            QueryValue::Vector(vec![]).to_json(),
            r#"{"resultType":"vector","result":[]}"#
        );
    }

    #[test]
    fn success_json_is_the_envelope_around_to_json() {
        let m = QueryValue::Matrix(vec![
            MatrixSeries {
                labels: Labels::from_pairs([("__name__", "x"), ("job", "a<b")]),
                samples: (0..100)
                    .map(|i| (1_796_202_015_000 + i * 15_000 + i % 7, i as f64 / 3.0))
                    .collect(),
            },
            MatrixSeries {
                labels: Labels::default(),
                samples: vec![(-1, -1e-7), (0, 1e300)],
            },
        ]);
        let w = ["w\"1".to_string()];
        for (warnings, infos) in [(&[][..], &[][..]), (&w[..], &w[..])] {
            let body = String::from_utf8(m.success_json(warnings, infos)).unwrap();
            assert_eq!(body, json::success_envelope(&m.to_json(), warnings, infos));
            let v: serde_json::Value = serde_json::from_str(&body).unwrap();
            assert_eq!(v["data"]["result"][0]["values"][1][1], "0.3333333333333333");
            assert_eq!(v["data"]["result"][1]["values"][0][1], "-1e-07");
            // the size hint covers the body: one allocation
            assert!(m.json_size_hint() >= m.to_json().len());
        }
    }

    #[test]
    fn tsdb_status_counts() {
        let s = vec![
            Labels::from_pairs([("__name__", "a"), ("job", "x")]),
            Labels::from_pairs([("__name__", "a"), ("job", "y")]),
            Labels::from_pairs([("__name__", "b"), ("job", "x")]),
        ];
        let st = TsdbStatus::from_series(&s, 10);
        assert_eq!(st.num_series, 3);
        assert_eq!(st.series_count_by_metric_name[0], ("a".to_string(), 2));
        assert_eq!(st.num_label_pairs, 4);
        assert_eq!(
            st.series_count_by_label_value_pair[..2],
            [("__name__=a".to_string(), 2), ("job=x".to_string(), 2)]
        );
        let st = TsdbStatus::from_series(&s, 1);
        assert_eq!(st.series_count_by_metric_name.len(), 1);
    }
}
