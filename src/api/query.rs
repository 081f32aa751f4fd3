//! `/api/v1/query`: instant queries.

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

use super::error::ApiError;
use super::params::Params;
use super::router::{json_response, ApiState, InlineKey};
use super::QueryOptions;
use crate::model::time::now_ms;

/// Query options from the server limits and the request's `timeout` and `lookback_delta`.
pub(crate) fn query_options(state: &ApiState, params: &Params) -> Result<QueryOptions, ApiError> {
    let cfg = state.config();
    let mut timeout = cfg.query_timeout;
    if let Some(ms) = params.duration_opt("timeout")? {
        if ms > 0 {
            timeout = timeout.min(Duration::from_millis(ms as u64));
        }
    }
    let lookback = match params.duration_opt("lookback_delta")? {
        Some(ms) if ms > 0 => ms,
        _ => cfg.lookback_delta_ms,
    };
    let mut opts = QueryOptions::with_timeout(timeout);
    opts.max_samples = cfg.max_samples;
    opts.lookback_delta_ms = Some(lookback);
    Ok(opts)
}

/// Parses `query` to check it (parse errors are `bad_data`). Runs inside the query slot, on
/// the blocking pool: a huge regex can take seconds to compile and must neither hold up the
/// async runtime nor escape the query timeout and concurrency limit.
pub(crate) fn checked_query(
    backend: &dyn super::ApiBackend,
    query: &str,
) -> Result<super::ExprType, ApiError> {
    backend
        .check_query(query)
        .map_err(|e| ApiError::invalid_param("query", e))
}

/// Handles GET and POST `/api/v1/query`.
pub(crate) async fn handle(
    State(state): State<ApiState>,
    params: Params,
) -> Result<Response, ApiError> {
    let limit = params.limit()?;
    let t = params.time_or("time", now_ms())?;
    let opts = query_options(&state, &params)?;
    let query = params.get("query").unwrap_or("").to_string();
    let (timeout, cancel) = (opts.timeout, opts.cancel.clone());
    let inline = InlineKey::new(&query, 0);
    let mut out = state
        .run_query(timeout, cancel, inline, move |b, time_left| {
            checked_query(b, &query)?;
            let opts = opts.with_time_left(time_left);
            b.instant_query(&query, t, &opts)
        })
        .await?;
    if out.value.truncate(limit) {
        out.warnings.push("results truncated due to limit".into());
    }
    Ok(json_response(
        StatusCode::OK,
        out.value.success_json(&out.warnings, &out.infos),
    ))
}
