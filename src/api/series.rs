//! `/api/v1/series`: label sets of the series matching `match[]`.

use axum::extract::State;
use axum::response::Response;
use inferdb_storage::{Labels, Matcher};

use super::error::ApiError;
use super::json;
use super::params::{Params, MAX_TIME_MS, MIN_TIME_MS};
use super::router::{success, ApiState};
use super::QueryOptions;

/// Parses every `match[]` value; each must have a matcher that does not match the empty
/// string, as Prometheus requires.
pub(crate) fn matcher_sets(
    state: &ApiState,
    params: &Params,
) -> Result<Vec<Vec<Matcher>>, ApiError> {
    params
        .get_all("match[]")
        .into_iter()
        .map(|s| {
            let ms = state
                .backend()
                .parse_selector(s)
                .map_err(ApiError::bad_data)?;
            if ms.iter().all(|m| m.matches_empty()) {
                return Err(ApiError::bad_data(
                    "match[] must contain at least one non-empty matcher",
                ));
            }
            Ok(ms)
        })
        .collect()
}

/// Handles GET and POST `/api/v1/series`.
pub(crate) async fn handle(
    State(state): State<ApiState>,
    params: Params,
) -> Result<Response, ApiError> {
    if params.get_all("match[]").is_empty() {
        return Err(ApiError::bad_data("no match[] parameter provided"));
    }
    let limit = params.limit()?;
    let start = params.time_or("start", MIN_TIME_MS)?;
    let end = params.time_or("end", MAX_TIME_MS)?;
    let sets = matcher_sets(&state, &params)?;
    let opts = QueryOptions::with_timeout(state.config().query_timeout);
    let series = state
        .run_blocking(opts.timeout, opts.cancel.clone(), move |b| {
            let mut all: Vec<Labels> = Vec::new();
            for ms in &sets {
                all.extend(b.series(ms, start, end)?);
            }
            all.sort();
            all.dedup();
            Ok(all)
        })
        .await?;
    let mut warnings = Vec::new();
    let shown = if limit > 0 && series.len() > limit {
        warnings.push("results truncated due to limit".to_string());
        &series[..limit]
    } else {
        &series[..]
    };
    let mut data = String::with_capacity(shown.len() * 128 + 2);
    data.push('[');
    for (i, ls) in shown.iter().enumerate() {
        if i > 0 {
            data.push(',');
        }
        json::push_labels(&mut data, ls);
    }
    data.push(']');
    Ok(success(&data, &warnings, &[]))
}
