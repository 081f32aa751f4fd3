//! Small endpoints: exemplars (none), `format_query`, health,
//! readiness, reload and inferdb's own `/metrics`.

use std::fmt::Write as _;
use std::time::UNIX_EPOCH;

use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use inferdb_query::go_format::{format_float, FloatFormat};

use super::error::ApiError;
use super::json;
use super::params::{Params, MAX_TIME_MS, MIN_TIME_MS};
use super::router::{success, ApiState};

/// Handles GET and POST `/api/v1/query_exemplars`: parameters are checked as Prometheus
/// checks them; inferdb stores no exemplars, so the answer is `[]`.
pub(crate) async fn query_exemplars(
    State(state): State<ApiState>,
    params: Params,
) -> Result<Response, ApiError> {
    let start = params.time_or("start", MIN_TIME_MS)?;
    let end = params.time_or("end", MAX_TIME_MS)?;
    if end < start {
        return Err(ApiError::bad_data(
            "end timestamp must not be before start timestamp",
        ));
    }
    state
        .backend()
        .check_query(params.get("query").unwrap_or(""))
        .map_err(ApiError::bad_data)?;
    Ok(success("[]", &[], &[]))
}

/// Handles GET and POST `/api/v1/format_query`.
pub(crate) async fn format_query(
    State(state): State<ApiState>,
    params: Params,
) -> Result<Response, ApiError> {
    let formatted = state
        .backend()
        .format_query(params.get("query").unwrap_or(""))
        .map_err(|e| ApiError::invalid_param("query", e))?;
    let mut d = String::new();
    json::push_str(&mut d, &formatted);
    Ok(success(&d, &[], &[]))
}

/// Handles `/-/healthy`.
pub(crate) async fn healthy() -> Response {
    (StatusCode::OK, "inferdb is Healthy.\n").into_response()
}

/// Handles `/-/ready`.
pub(crate) async fn ready(State(state): State<ApiState>) -> Response {
    if state.is_ready() {
        (StatusCode::OK, "inferdb is Ready.\n").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "Service Unavailable\n").into_response()
    }
}

/// Handles POST/PUT `/-/reload` (only with `--web.enable-lifecycle`).
pub(crate) async fn reload(State(state): State<ApiState>) -> Response {
    if !state.config().enable_lifecycle {
        return (StatusCode::FORBIDDEN, "Lifecycle API is not enabled.\n").into_response();
    }
    let scrape = state.scrape().clone();
    match tokio::task::spawn_blocking(move || scrape.reload()).await {
        Ok(Ok(())) => StatusCode::OK.into_response(),
        Ok(Err(e)) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
    }
}

/// Handles GET `/metrics`: HTTP counters, process start time and whatever the scraper adds.
pub(crate) async fn metrics(State(state): State<ApiState>) -> Response {
    let mut out = String::new();
    let requests = state
        .metrics()
        .requests
        .lock()
        .map(|m| m.clone())
        .unwrap_or_default();
    let rows: Vec<(String, &str, f64)> = requests
        .iter()
        .map(|((handler, code), n)| (code.to_string(), *handler, *n as f64))
        .collect();
    let rows: Vec<([(&str, &str); 2], f64)> = rows
        .iter()
        .map(|(code, handler, n)| ([("code", code.as_str()), ("handler", *handler)], *n))
        .collect();
    let rows: Vec<(&[(&str, &str)], f64)> = rows.iter().map(|(l, n)| (&l[..], *n)).collect();
    crate::metrics::write_family(
        &mut out,
        "prometheus_http_requests_total",
        "Counter of HTTP requests.",
        "counter",
        &rows,
    );
    let durations = state
        .metrics()
        .durations
        .lock()
        .map(|m| m.clone())
        .unwrap_or_default();
    let labels: Vec<([(&str, &str); 1], &crate::metrics::Histogram)> = durations
        .iter()
        .map(|(handler, h)| ([("handler", *handler)], h))
        .collect();
    let rows: Vec<(&[(&str, &str)], &crate::metrics::Histogram)> =
        labels.iter().map(|(l, h)| (&l[..], *h)).collect();
    crate::metrics::write_histograms(
        &mut out,
        "prometheus_http_request_duration_seconds",
        "Histogram of latencies for HTTP requests.",
        &rows,
    );
    let start = state
        .start_time()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    out.push_str("# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.\n");
    out.push_str("# TYPE process_start_time_seconds gauge\n");
    let _ = writeln!(
        out,
        "process_start_time_seconds {}",
        format_float(start, FloatFormat::G)
    );
    crate::metrics::render_into(&mut out);
    out.push_str(&state.scrape().self_metrics());
    if let Some(r) = state.remote() {
        out.push_str(&r.self_metrics());
    }
    let mut r = (StatusCode::OK, out).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    r
}
