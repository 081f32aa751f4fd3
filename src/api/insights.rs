//! `GET /inferdb/v1/insights?start=&end=&slo=`: `inferdb advise` as JSON over the server's own
//! store (see [`crate::insight`]); `start` defaults to an hour before `end`, `end` to now.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

use super::error::ApiError;
use super::params::Params;
use super::router::{json_response, ApiState};
use crate::insight::{self, BackendSource, Thresholds};
use crate::model::time::now_ms;

/// Handles `/inferdb/v1/insights`.
pub(crate) async fn handle(
    State(state): State<ApiState>,
    params: Params,
) -> Result<Response, ApiError> {
    let end = params.time_or("end", now_ms())?;
    let start = params.time_or("start", end - 3_600_000)?;
    if end <= start {
        return Err(ApiError::bad_data("end must be after start"));
    }
    let slos = insight::parse_slos(params.get("slo").unwrap_or(""))
        .map_err(|e| ApiError::invalid_param("slo", e))?;
    let src = BackendSource {
        backend: state.backend().clone(),
        timeout: state.config().query_timeout,
    };
    let report = tokio::task::spawn_blocking(move || {
        insight::advise(&src, start, end, &Thresholds::default(), &slos)
    })
    .await
    .map_err(|e| ApiError::internal(e.to_string()))?
    .map_err(|e| ApiError::execution(e.to_string()))?;
    let body = serde_json::to_string(&report).map_err(|e| ApiError::internal(e.to_string()))?;
    Ok(json_response(StatusCode::OK, body))
}
