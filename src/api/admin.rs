//! The TSDB admin API, `POST|PUT /api/v1/admin/tsdb/{snapshot,delete_series,clean_tombstones}`,
//! served only with `--web.enable-admin-api`; without it each answers Prometheus' error
//! (`unavailable`, "admin APIs disabled", HTTP 500 as Prometheus 2.42 and 3 send it).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::error::{ApiError, ErrorType};
use super::json;
use super::params::{Params, MAX_TIME_MS, MIN_TIME_MS};
use super::router::{success, ApiState};
use super::QueryOptions;

fn enabled(state: &ApiState) -> Result<(), ApiError> {
    if state.config().enable_admin_api {
        Ok(())
    } else {
        Err(ApiError::new(ErrorType::Unavailable, "admin APIs disabled"))
    }
}

/// Handles `/api/v1/admin/tsdb/snapshot` (`skip_head`): `{"name":"<folder>"}` of the
/// snapshot written under `<data>/snapshots/`.
pub(crate) async fn snapshot(
    State(state): State<ApiState>,
    params: Params,
) -> Result<Response, ApiError> {
    enabled(&state)?;
    let skip_head = match params.get("skip_head") {
        None | Some("") => false,
        Some(s) => super::params::parse_bool(s).map_err(|e| {
            ApiError::invalid_param("skip_head", format!("unable to parse boolean: {e}"))
        })?,
    };
    let opts = QueryOptions::with_timeout(state.config().query_timeout.max(ADMIN_TIMEOUT));
    let name = state
        .run_blocking(opts.timeout, opts.cancel.clone(), move |b| {
            b.snapshot(skip_head)
        })
        .await?;
    tracing::info!(name = %name, skip_head, "snapshot written");
    let mut data = String::from("{\"name\":");
    json::push_str(&mut data, &name);
    data.push('}');
    Ok(success(&data, &[], &[]))
}

/// How long a rewrite may take at least before the request gives up waiting (the work
/// itself is not interrupted).
const ADMIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);

/// Handles `/api/v1/admin/tsdb/delete_series` (`match[]`, `start`, `end`): 204.
pub(crate) async fn delete_series(
    State(state): State<ApiState>,
    params: Params,
) -> Result<Response, ApiError> {
    enabled(&state)?;
    let selectors = params.get_all("match[]");
    if selectors.is_empty() {
        return Err(ApiError::bad_data("no match[] parameter provided"));
    }
    let start = params.time_or("start", MIN_TIME_MS)?;
    let end = params.time_or("end", MAX_TIME_MS)?;
    let mut sets = Vec::with_capacity(selectors.len());
    for s in selectors {
        sets.push(
            state
                .backend()
                .parse_selector(s)
                .map_err(|e| ApiError::invalid_param("match[]", e))?,
        );
    }
    let opts = QueryOptions::with_timeout(state.config().query_timeout.max(ADMIN_TIMEOUT));
    state
        .run_blocking(opts.timeout, opts.cancel.clone(), move |b| {
            for ms in &sets {
                b.delete_series(ms, start, end)?;
            }
            Ok(())
        })
        .await?;
    tracing::info!(start, end, "series deleted");
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// Handles `/api/v1/admin/tsdb/clean_tombstones`: 204.
pub(crate) async fn clean_tombstones(State(state): State<ApiState>) -> Result<Response, ApiError> {
    enabled(&state)?;
    let opts = QueryOptions::with_timeout(state.config().query_timeout.max(ADMIN_TIMEOUT));
    state
        .run_blocking(opts.timeout, opts.cancel.clone(), |b| b.clean_tombstones())
        .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
