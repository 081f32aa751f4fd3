//! `/api/v1/query_range`: range queries.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

use super::error::ApiError;
use super::params::Params;
use super::query::{checked_query, query_options};
use super::router::{json_response, ApiState, InlineKey};
use super::{ExprType, MAX_POINTS_PER_SERIES};
use inferdb_query::parser::parse_duration_ns;

/// Handles GET and POST `/api/v1/query_range`.
pub(crate) async fn handle(
    State(state): State<ApiState>,
    params: Params,
) -> Result<Response, ApiError> {
    let limit = params.limit()?;
    let start = params.time("start")?;
    let end = params.time("end")?;
    if end < start {
        return Err(ApiError::invalid_param(
            "end",
            "end timestamp must not be before start time",
        ));
    }
    let step_ns = parse_duration_ns(params.get("step").unwrap_or(""))
        .map_err(|e| ApiError::invalid_param("step", e))?;
    if step_ns <= 0 {
        return Err(ApiError::invalid_param(
            "step",
            "zero or negative query resolution step widths are not accepted. Try a positive integer",
        ));
    }
    // Go computes end.Sub(start)/step on nanosecond durations, saturating the difference.
    let span_ns = ((end as i128 - start as i128) * 1_000_000).min(i64::MAX as i128);
    if span_ns / step_ns as i128 > MAX_POINTS_PER_SERIES as i128 {
        return Err(ApiError::bad_data(
            "exceeded maximum resolution of 11,000 points per timeseries. Try decreasing the query resolution (?step=XX)",
        ));
    }
    let step_ms = (step_ns / 1_000_000).max(1);
    let opts = query_options(&state, &params)?;
    let query = params.get("query").unwrap_or("").to_string();
    let (timeout, cancel) = (opts.timeout, opts.cancel.clone());
    let inline = InlineKey::new(&query, end.saturating_sub(start) / step_ms);
    let mut out = state
        .run_query(timeout, cancel, inline, move |b, time_left| {
            let typ = checked_query(b, &query)?;
            if !matches!(typ, ExprType::Scalar | ExprType::Vector) {
                return Err(ApiError::invalid_param(
                    "query",
                    format!(
                        "invalid expression type {:?} for range query, must be Scalar or instant Vector",
                        typ.describe()
                    ),
                ));
            }
            let opts = opts.with_time_left(time_left);
            b.range_query(&query, start, end, step_ms, &opts)
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
