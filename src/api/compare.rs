//! `GET /inferdb/v1/compare?a_start=&a_end=&b_start=&b_end=&by=`: `inferdb compare` as JSON
//! over the server's own store (see [`crate::insight::compare`]); the four times are required,
//! `by` is `model_name`, `instance` or absent (the whole fleet only).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

use super::error::ApiError;
use super::params::Params;
use super::router::{json_response, ApiState};
use crate::insight::compare::{self, GroupBy, Span};
use crate::insight::BackendSource;

/// Handles `/inferdb/v1/compare`.
pub(crate) async fn handle(
    State(state): State<ApiState>,
    params: Params,
) -> Result<Response, ApiError> {
    let span = |s: &str, e: &str| -> Result<Span, ApiError> {
        let start = params.time(s)?;
        let end = params.time(e)?;
        if end <= start {
            return Err(ApiError::bad_data(format!("{e} must be after {s}")));
        }
        Ok(Span { start, end })
    };
    let a = span("a_start", "a_end")?;
    let b = span("b_start", "b_end")?;
    let by = GroupBy::parse(params.get("by").unwrap_or(""))
        .map_err(|e| ApiError::invalid_param("by", e))?;
    let step = params.duration_opt("step")?;
    let src = BackendSource {
        backend: state.backend().clone(),
        timeout: state.config().query_timeout,
    };
    let c = tokio::task::spawn_blocking(move || compare::compare(&src, a, b, by, step))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .map_err(|e| ApiError::execution(e.to_string()))?;
    let body = serde_json::to_string(&c).map_err(|e| ApiError::internal(e.to_string()))?;
    Ok(json_response(StatusCode::OK, body))
}
