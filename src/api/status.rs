//! `/api/v1/status/*`: build and runtime information, flags, configuration, TSDB statistics.

use std::time::SystemTime;

use axum::extract::State;
use axum::response::Response;
use chrono::{DateTime, SecondsFormat, Utc};

use super::error::ApiError;
use super::json;
use super::params::Params;
use super::router::{success, ApiState};
use super::QueryOptions;

/// The Prometheus version inferdb reports: its query semantics follow Prometheus 3.
pub const EMULATED_PROMETHEUS_VERSION: &str = crate::build_info::PROMETHEUS_API_VERSION;

fn rfc3339(t: SystemTime) -> String {
    DateTime::<Utc>::from(t).to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// Handles `/api/v1/status/buildinfo`. There is deliberately no `features` key: Grafana would
/// take the server for Mimir.
pub(crate) async fn buildinfo() -> Response {
    let mut d = String::from("{\"version\":");
    json::push_str(&mut d, EMULATED_PROMETHEUS_VERSION);
    d.push_str(",\"revision\":");
    json::push_str(&mut d, crate::build_info::REVISION);
    d.push_str(",\"branch\":\"HEAD\",\"buildUser\":\"inferdb\",\"buildDate\":");
    json::push_str(&mut d, crate::build_info::BUILD_DATE);
    d.push_str(",\"goVersion\":");
    json::push_str(
        &mut d,
        &format!(
            "inferdb {} ({})",
            crate::build_info::VERSION,
            crate::build_info::TOOLCHAIN
        ),
    );
    d.push('}');
    success(&d, &[], &[])
}

/// Handles `/api/v1/status/runtimeinfo`.
pub(crate) async fn runtimeinfo(State(state): State<ApiState>) -> Response {
    let cwd = std::env::current_dir()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let start = rfc3339(state.start_time());
    let mut d = String::from("{\"startTime\":");
    json::push_str(&mut d, &start);
    d.push_str(",\"CWD\":");
    json::push_str(&mut d, &cwd);
    d.push_str(",\"reloadConfigSuccess\":true,\"lastConfigTime\":");
    json::push_str(&mut d, &start);
    d.push_str(&format!(
        ",\"corruptionCount\":0,\"goroutineCount\":0,\"GOMAXPROCS\":{cpus},\"GOMEMLIMIT\":0,\"GOGC\":\"\",\"GODEBUG\":\"\",\"storageRetention\":"
    ));
    json::push_str(&mut d, &state.config().storage_retention);
    d.push('}');
    success(&d, &[], &[])
}

/// Handles `/api/v1/status/flags`.
pub(crate) async fn flags(State(state): State<ApiState>) -> Response {
    let mut d = String::from("{");
    for (i, (k, v)) in state.config().flags.iter().enumerate() {
        if i > 0 {
            d.push(',');
        }
        json::push_str(&mut d, k);
        d.push(':');
        json::push_str(&mut d, v);
    }
    d.push('}');
    success(&d, &[], &[])
}

/// Handles `/api/v1/status/config`.
pub(crate) async fn config(State(state): State<ApiState>) -> Response {
    let mut d = String::from("{\"yaml\":");
    json::push_str(&mut d, &state.config().config_yaml);
    d.push('}');
    success(&d, &[], &[])
}

/// Handles `/api/v1/status/walreplay`: the replay's first, last and current segment (the
/// replay is over once the full API answers; see `startup.rs` for the answers during it).
pub(crate) async fn walreplay(State(state): State<ApiState>) -> Response {
    walreplay_response(state.wal_replay().map(|p| &**p))
}

/// `/api/v1/status/walreplay`'s answer for this progress (zeros without one).
pub(crate) fn walreplay_response(p: Option<&inferdb_storage::ReplayProgress>) -> Response {
    let (min, max, current) = p.map_or((0, 0, 0), |p| p.get());
    success(
        &format!("{{\"min\":{min},\"max\":{max},\"current\":{current}}}"),
        &[],
        &[],
    )
}

fn push_ranking(d: &mut String, key: &str, items: &[(String, u64)]) {
    d.push_str(",\"");
    d.push_str(key);
    d.push_str("\":[");
    for (i, (name, value)) in items.iter().enumerate() {
        if i > 0 {
            d.push(',');
        }
        d.push_str("{\"name\":");
        json::push_str(d, name);
        d.push_str(&format!(",\"value\":{value}}}"));
    }
    d.push(']');
}

/// Handles `/api/v1/status/tsdb` (`limit`, default 10).
pub(crate) async fn tsdb(
    State(state): State<ApiState>,
    params: Params,
) -> Result<Response, ApiError> {
    let limit = match params.get("limit") {
        None => 10,
        Some(s) => match s.parse::<usize>() {
            Ok(n) if n >= 1 => n,
            _ => return Err(ApiError::bad_data("limit must be a positive number")),
        },
    };
    let opts = QueryOptions::with_timeout(state.config().query_timeout);
    let st = state
        .run_blocking(opts.timeout, opts.cancel.clone(), move |b| {
            b.tsdb_status(limit)
        })
        .await?;
    let mut d = format!(
        "{{\"headStats\":{{\"numSeries\":{},\"numLabelPairs\":{},\"chunkCount\":{},\"minTime\":{},\"maxTime\":{}}}",
        st.num_series, st.num_label_pairs, st.chunk_count, st.min_time, st.max_time
    );
    push_ranking(
        &mut d,
        "seriesCountByMetricName",
        &st.series_count_by_metric_name,
    );
    push_ranking(
        &mut d,
        "labelValueCountByLabelName",
        &st.label_value_count_by_label_name,
    );
    push_ranking(
        &mut d,
        "memoryInBytesByLabelName",
        &st.memory_in_bytes_by_label_name,
    );
    push_ranking(
        &mut d,
        "seriesCountByLabelValuePair",
        &st.series_count_by_label_value_pair,
    );
    d.push('}');
    Ok(success(&d, &[], &[]))
}
