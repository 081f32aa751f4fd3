//! `inferdb query instant|range`: ask a PromQL question from the shell, against a data folder
//! directly (read-only, safe beside a running `serve`) or a running inferdb or Prometheus
//! (`--url`). Output as an aligned table, the API's JSON, or CSV.

use std::collections::BTreeSet;
use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Context};
use chrono::{DateTime, SecondsFormat, Utc};
use inferdb_query::go_format::{format_float, FloatFormat};
use inferdb_query::EngineOptions;
use inferdb_storage::Labels;
use serde_json::Value as Json;

use super::{duration_ms, parse_time};
use crate::api::{
    json, ApiBackend, ApiError, DbBackend, ExprType, MatrixSeries, QueryOptions, QueryOutput,
    QueryValue, VectorSample, MAX_POINTS_PER_SERIES,
};
use crate::model::time::now_ms;

/// Arguments of `inferdb query`.
#[derive(Debug, clap::Args)]
pub struct QueryArgs {
    /// Instant or range query.
    #[command(subcommand)]
    pub command: QueryCommand,
}

/// The `query` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum QueryCommand {
    /// Evaluates an expression at one time (default: now).
    #[command(after_help = "Examples:
  inferdb query instant 'sum by (model_name) (rate(vllm:generation_tokens_total[1m]))'
  inferdb query instant up --time 2025-08-01T00:00:00Z --url http://localhost:9090 --format json")]
    Instant(InstantArgs),
    /// Evaluates an expression at every step between two times.
    #[command(after_help = "Examples:
  inferdb query range 'vllm:num_requests_running' --start -1h --step 1m
  inferdb query range 'rate(vllm:prompt_tokens_total[5m])' --start 2025-08-01T00:00:00Z --end 2025-08-01T06:00:00Z --step 5m --format csv")]
    Range(RangeArgs),
}

/// How to print results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// An aligned table.
    Table,
    /// The HTTP API's JSON.
    Json,
    /// CSV with a column per label.
    Csv,
}

/// Options shared by both query kinds.
#[derive(Debug, Clone, clap::Args)]
pub struct CommonArgs {
    /// Where the data comes from.
    #[command(flatten)]
    pub source: crate::cli::SourceArgs,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
    pub format: OutputFormat,
    /// The longest the query may run (the same flag as `serve`'s).
    #[arg(long = "query.timeout", default_value = "2m", value_name = "DURATION")]
    pub timeout: String,
    /// How far back an instant selector looks for a sample (the same flag as `serve`'s).
    #[arg(
        long = "query.lookback-delta",
        default_value = "5m",
        value_name = "DURATION"
    )]
    pub lookback_delta: String,
    /// Metric-rename bridging (with --data-dir).
    #[command(flatten)]
    pub aliases: crate::metric_aliases::AliasArgs,
}

/// Arguments of `inferdb query instant`.
#[derive(Debug, Clone, clap::Args)]
pub struct InstantArgs {
    /// The PromQL expression.
    pub expr: String,
    /// Evaluation time: RFC 3339, Unix seconds, `now`, or relative like `-5m` / `now-1h`.
    #[arg(
        long,
        default_value = "now",
        value_name = "TIME",
        allow_hyphen_values = true
    )]
    pub time: String,
    /// Shared options.
    #[command(flatten)]
    pub common: CommonArgs,
}

/// Arguments of `inferdb query range`.
#[derive(Debug, Clone, clap::Args)]
pub struct RangeArgs {
    /// The PromQL expression.
    pub expr: String,
    /// Start: RFC 3339, Unix seconds, `now`, or relative like `-6h`.
    #[arg(
        long,
        default_value = "-1h",
        value_name = "TIME",
        allow_hyphen_values = true
    )]
    pub start: String,
    /// End (default now).
    #[arg(
        long,
        default_value = "now",
        value_name = "TIME",
        allow_hyphen_values = true
    )]
    pub end: String,
    /// Resolution: a duration (`15s`, `1m`) or seconds; default about 250 points.
    #[arg(long, value_name = "DURATION")]
    pub step: Option<String>,
    /// Shared options.
    #[command(flatten)]
    pub common: CommonArgs,
}

/// A query to run, resolved from the arguments.
#[derive(Debug, Clone)]
pub enum Request {
    /// `expr` at `t`.
    Instant {
        /// Expression.
        expr: String,
        /// Time, ms.
        t: i64,
    },
    /// `expr` from `start` to `end` every `step` (ms).
    Range {
        /// Expression.
        expr: String,
        /// Start, ms.
        start: i64,
        /// End, ms.
        end: i64,
        /// Step, ms.
        step: i64,
    },
}

/// Runs `req` against a data folder, read-only.
pub fn run_local(
    dir: &std::path::Path,
    req: &Request,
    timeout: Duration,
    lookback_ms: i64,
    metric_aliases: Option<Arc<inferdb_query::MetricAliases>>,
) -> Result<QueryOutput, ApiError> {
    let db = super::open_read_only(dir).map_err(|e| ApiError::internal(format!("{e:#}")))?;
    let backend = DbBackend::new(
        Arc::new(db),
        EngineOptions {
            lookback_delta_ms: lookback_ms,
            timeout,
            metric_aliases,
            ..EngineOptions::default()
        },
    );
    let mut opts = QueryOptions::with_timeout(timeout);
    opts.lookback_delta_ms = Some(lookback_ms);
    match req {
        Request::Instant { expr, t } => {
            backend
                .check_query(expr)
                .map_err(|e| ApiError::invalid_param("query", e))?;
            backend.instant_query(expr, *t, &opts)
        }
        Request::Range {
            expr,
            start,
            end,
            step,
        } => {
            let typ = backend
                .check_query(expr)
                .map_err(|e| ApiError::invalid_param("query", e))?;
            if !matches!(typ, ExprType::Scalar | ExprType::Vector) {
                return Err(ApiError::invalid_param(
                    "query",
                    format!(
                        "invalid expression type {:?} for range query, must be Scalar or instant Vector",
                        typ.describe()
                    ),
                ));
            }
            if end < start {
                return Err(ApiError::invalid_param(
                    "end",
                    "end timestamp must not be before start time",
                ));
            }
            if *step <= 0 || (end - start) / step > MAX_POINTS_PER_SERIES {
                return Err(ApiError::bad_data(
                    "exceeded maximum resolution of 11,000 points per timeseries. Try decreasing the query resolution (?step=XX)",
                ));
            }
            backend.range_query(expr, *start, *end, *step, &opts)
        }
    }
}

fn labels_from_json(v: &Json) -> anyhow::Result<Labels> {
    let o = v
        .as_object()
        .ok_or_else(|| anyhow!("metric is not an object"))?;
    Ok(Labels::from_pairs(o.iter().map(|(k, v)| {
        (k.clone(), v.as_str().unwrap_or_default().to_string())
    })))
}

fn point_from_json(p: &Json) -> anyhow::Result<(i64, f64)> {
    let t = p[0]
        .as_f64()
        .ok_or_else(|| anyhow!("timestamp is not a number"))?;
    let v = p[1]
        .as_str()
        .ok_or_else(|| anyhow!("value is not a string"))?;
    let v = match v {
        "+Inf" | "Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        "NaN" => f64::NAN,
        s => s.parse::<f64>().with_context(|| format!("value {s:?}"))?,
    };
    Ok(((t * 1000.0).round() as i64, v))
}

/// Reads a Prometheus API `data` object (`resultType` + `result`) into a value.
pub fn value_from_json(data: &Json) -> anyhow::Result<QueryValue> {
    let r = &data["result"];
    match data["resultType"].as_str() {
        Some("scalar") => {
            let (t, v) = point_from_json(r)?;
            Ok(QueryValue::Scalar { t, v })
        }
        Some("string") => Ok(QueryValue::String {
            t: (r[0].as_f64().unwrap_or(0.0) * 1000.0).round() as i64,
            s: r[1].as_str().unwrap_or_default().to_string(),
        }),
        Some("vector") => Ok(QueryValue::Vector(
            r.as_array()
                .ok_or_else(|| anyhow!("result is not a list"))?
                .iter()
                .map(|e| {
                    let (t, v) = point_from_json(&e["value"])?;
                    Ok(VectorSample {
                        labels: labels_from_json(&e["metric"])?,
                        t,
                        v,
                    })
                })
                .collect::<anyhow::Result<_>>()?,
        )),
        Some("matrix") => Ok(QueryValue::Matrix(
            r.as_array()
                .ok_or_else(|| anyhow!("result is not a list"))?
                .iter()
                .map(|e| {
                    Ok(MatrixSeries {
                        labels: labels_from_json(&e["metric"])?,
                        samples: e["values"]
                            .as_array()
                            .map(|a| a.iter().map(point_from_json).collect())
                            .unwrap_or_else(|| Ok(Vec::new()))?,
                    })
                })
                .collect::<anyhow::Result<_>>()?,
        )),
        other => Err(anyhow!("unknown resultType {other:?}")),
    }
}

/// Runs `req` against a running server's HTTP API.
pub fn run_remote(base: &str, req: &Request, timeout: Duration) -> Result<QueryOutput, ApiError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let base = base.trim_end_matches('/');
    let secs = |ms: i64| json::format_timestamp(ms);
    let (path, form): (&str, Vec<(&str, String)>) = match req {
        Request::Instant { expr, t } => (
            "/api/v1/query",
            vec![("query", expr.clone()), ("time", secs(*t))],
        ),
        Request::Range {
            expr,
            start,
            end,
            step,
        } => (
            "/api/v1/query_range",
            vec![
                ("query", expr.clone()),
                ("start", secs(*start)),
                ("end", secs(*end)),
                ("step", secs(*step)),
            ],
        ),
    };
    let url = format!("{base}{path}");
    rt.block_on(async move {
        let client = reqwest::Client::builder()
            .timeout(timeout + Duration::from_secs(5))
            .build()
            .map_err(|e| ApiError::internal(e.to_string()))?;
        let resp = client
            .post(&url)
            .form(&form)
            .send()
            .await
            .map_err(|e| ApiError::internal(format!("{url}: {e}")))?;
        let status = resp.status();
        let body = resp
            .text()
            .await
            .map_err(|e| ApiError::internal(format!("{url}: {e}")))?;
        let v: Json = serde_json::from_str(&body).map_err(|_| {
            ApiError::internal(format!(
                "{url}: HTTP {status}: {}",
                body.chars().take(300).collect::<String>()
            ))
        })?;
        if v["status"] != "success" {
            let typ = match v["errorType"].as_str().unwrap_or("") {
                "bad_data" => crate::api::ErrorType::BadData,
                "execution" => crate::api::ErrorType::Execution,
                "timeout" => crate::api::ErrorType::Timeout,
                "canceled" => crate::api::ErrorType::Canceled,
                _ => crate::api::ErrorType::Internal,
            };
            return Err(ApiError::new(
                typ,
                v["error"].as_str().unwrap_or("unknown error").to_string(),
            ));
        }
        let strings = |k: &str| -> Vec<String> {
            v[k].as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|x| x.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default()
        };
        let value = value_from_json(&v["data"])
            .map_err(|e| ApiError::internal(format!("{url}: unexpected answer: {e}")))?;
        Ok(QueryOutput {
            value,
            warnings: strings("warnings"),
            infos: strings("infos"),
        })
    })
}

fn rfc3339(t_ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(t_ms)
        .map(|d| d.to_rfc3339_opts(SecondsFormat::Millis, true))
        .unwrap_or_else(|| json::format_timestamp(t_ms))
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// Prints `out` in `format`.
pub fn print(out: &QueryOutput, format: OutputFormat, w: &mut dyn Write) -> std::io::Result<()> {
    match format {
        OutputFormat::Json => {
            writeln!(
                w,
                "{}",
                json::success_envelope(&out.value.to_json(), &out.warnings, &out.infos)
            )
        }
        OutputFormat::Csv => print_csv(&out.value, w),
        OutputFormat::Table => {
            print_table(&out.value, w)?;
            for m in &out.warnings {
                writeln!(w, "warning: {m}")?;
            }
            for m in &out.infos {
                writeln!(w, "info: {m}")?;
            }
            Ok(())
        }
    }
}

fn rows(v: &QueryValue) -> Vec<(Option<&Labels>, i64, f64)> {
    match v {
        QueryValue::Scalar { t, v } => vec![(None, *t, *v)],
        QueryValue::String { .. } => vec![],
        QueryValue::Vector(vs) => vs.iter().map(|s| (Some(&s.labels), s.t, s.v)).collect(),
        QueryValue::Matrix(m) => m
            .iter()
            .flat_map(|s| {
                s.samples
                    .iter()
                    .map(move |(t, v)| (Some(&s.labels), *t, *v))
            })
            .collect(),
    }
}

fn print_csv(v: &QueryValue, w: &mut dyn Write) -> std::io::Result<()> {
    if let QueryValue::String { t, s } = v {
        writeln!(w, "timestamp,value")?;
        return writeln!(w, "{t},{}", csv_field(s));
    }
    let rows = rows(v);
    let names: BTreeSet<&str> = rows
        .iter()
        .filter_map(|r| r.0)
        .flat_map(|l| l.iter().map(|x| x.name.as_str()))
        .collect();
    let mut header = vec!["timestamp".to_string(), "value".to_string()];
    header.extend(names.iter().map(|n| csv_field(n)));
    writeln!(w, "{}", header.join(","))?;
    for (l, t, val) in rows {
        // milliseconds since the epoch, as `inferdb export csv` writes them
        let mut line = vec![t.to_string(), format_float(val, FloatFormat::Json)];
        for n in &names {
            line.push(csv_field(l.and_then(|l| l.get(n)).unwrap_or("")));
        }
        writeln!(w, "{}", line.join(","))?;
    }
    Ok(())
}

fn print_table(v: &QueryValue, w: &mut dyn Write) -> std::io::Result<()> {
    if let QueryValue::String { t, s } = v {
        return writeln!(w, "{}  {s}", rfc3339(*t));
    }
    let rows: Vec<[String; 3]> = rows(v)
        .into_iter()
        .map(|(l, t, val)| {
            [
                l.map(|l| l.to_string()).unwrap_or_default(),
                rfc3339(t),
                format_float(val, FloatFormat::Json),
            ]
        })
        .collect();
    if rows.is_empty() {
        return writeln!(w, "(no data)");
    }
    let header = ["SERIES", "TIMESTAMP", "VALUE"];
    let mut width = header.map(str::len);
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            width[i] = width[i].max(c.chars().count());
        }
    }
    let line = |cells: [&str; 3]| {
        format!(
            "{:<w0$}  {:<w1$}  {}",
            cells[0],
            cells[1],
            cells[2],
            w0 = width[0],
            w1 = width[1]
        )
    };
    writeln!(w, "{}", line(header).trim_end())?;
    for r in &rows {
        writeln!(w, "{}", line([&r[0], &r[1], &r[2]]).trim_end())?;
    }
    Ok(())
}

impl QueryArgs {
    /// Runs the query; exit code 1 when it fails, 2 when the data folder does not exist.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let now = now_ms();
        let (req, common) = match self.command {
            QueryCommand::Instant(a) => {
                let t = parse_time(&a.time, now).map_err(|e| anyhow!("--time: {e}"))?;
                (Request::Instant { expr: a.expr, t }, a.common)
            }
            QueryCommand::Range(a) => {
                let start = parse_time(&a.start, now).map_err(|e| anyhow!("--start: {e}"))?;
                let end = parse_time(&a.end, now).map_err(|e| anyhow!("--end: {e}"))?;
                let step = match &a.step {
                    Some(s) => duration_ms("step", s)?,
                    None => ((end - start) / 250).max(1000),
                };
                if step <= 0 {
                    return Err(anyhow!("--step must be positive"));
                }
                (
                    Request::Range {
                        expr: a.expr,
                        start,
                        end,
                        step,
                    },
                    a.common,
                )
            }
        };
        let timeout =
            Duration::from_millis(duration_ms("query.timeout", &common.timeout)?.max(1) as u64);
        let lookback = duration_ms("query.lookback-delta", &common.lookback_delta)?.max(1);
        if let Err(e) = common.source.check_folder() {
            eprintln!("inferdb query: {e}");
            return Ok(ExitCode::from(2));
        }
        let aliases = common.aliases.load()?;
        let res = match &common.source.url {
            Some(u) => run_remote(u, &req, timeout),
            None => run_local(&common.source.data_dir, &req, timeout, lookback, aliases),
        };
        match res {
            Ok(out) => {
                let stdout = std::io::stdout();
                let mut lock = stdout.lock();
                print(&out, common.format, &mut lock)?;
                lock.flush()?;
                Ok(ExitCode::SUCCESS)
            }
            Err(e) => {
                // Problems reaching or opening the data are the user's to fix, not internal
                // errors: print them plainly; query errors keep Prometheus' error type.
                if e.typ == crate::api::ErrorType::Internal {
                    eprintln!("inferdb query: {}", e.message);
                } else {
                    eprintln!("inferdb query: {}: {}", e.typ.as_str(), e.message);
                }
                Ok(ExitCode::from(1))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_and_table() {
        let out = QueryOutput {
            value: QueryValue::Vector(vec![VectorSample {
                labels: Labels::from_pairs([("__name__", "up"), ("job", "a,b")]),
                t: 1500,
                v: 1.0,
            }]),
            warnings: vec![],
            infos: vec![],
        };
        let mut buf = Vec::new();
        print(&out, OutputFormat::Csv, &mut buf).unwrap();
        assert_eq!(
            String::from_utf8(buf).unwrap(),
            "timestamp,value,__name__,job\n1500,1,up,\"a,b\"\n"
        );
        let mut buf = Vec::new();
        print(&out, OutputFormat::Table, &mut buf).unwrap();
        let s = String::from_utf8(buf).unwrap();
        assert!(s.starts_with("SERIES"), "{s}");
        assert!(
            s.contains("up{job=\"a,b\"}  1970-01-01T00:00:01.500Z  1"),
            "{s}"
        );
        let mut buf = Vec::new();
        print(&out, OutputFormat::Json, &mut buf).unwrap();
        let v: Json = serde_json::from_slice(&buf).unwrap();
        assert_eq!(value_from_json(&v["data"]).unwrap(), out.value);
    }
}
