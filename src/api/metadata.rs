//! `/api/v1/metadata`: HELP/TYPE/UNIT of metric families, from the scraper.

use std::collections::{BTreeMap, BTreeSet};

use axum::extract::State;
use axum::response::Response;

use super::error::ApiError;
use super::json;
use super::params::Params;
use super::router::{success, ApiState};

fn number(params: &Params, key: &str) -> Result<Option<usize>, ApiError> {
    match params.get(key) {
        None => Ok(None),
        Some(s) => match s.parse::<i64>() {
            Ok(n) if n < 0 => Ok(None),
            Ok(n) => Ok(Some(usize::try_from(n).unwrap_or(usize::MAX))),
            Err(_) => Err(ApiError::bad_data(format!("{key} must be a number"))),
        },
    }
}

/// Handles GET `/api/v1/metadata` (`limit`, `limit_per_metric`, `metric`).
pub(crate) async fn handle(
    State(state): State<ApiState>,
    params: Params,
) -> Result<Response, ApiError> {
    let limit = number(&params, "limit")?;
    let per_metric = number(&params, "limit_per_metric")?;
    let only = params.get("metric").map(str::to_string);
    let mut all = state.scrape().metadata();
    if let Some(r) = state.remote() {
        all.extend(r.metadata().into_iter().map(|m| super::MetricMetadata {
            metric: m.metric,
            typ: m.typ.to_string(),
            help: m.help,
            unit: m.unit,
        }));
    }
    // family -> distinct (type, help, unit)
    let mut by_family: BTreeMap<String, BTreeSet<(String, String, String)>> = BTreeMap::new();
    for m in all {
        if only.as_deref().is_some_and(|o| o != m.metric) {
            continue;
        }
        by_family
            .entry(m.metric)
            .or_default()
            .insert((m.typ, m.help, m.unit));
    }
    let mut data = String::from("{");
    for (n, (family, entries)) in by_family.iter().enumerate() {
        if limit.is_some_and(|l| n >= l) {
            break;
        }
        if n > 0 {
            data.push(',');
        }
        json::push_str(&mut data, family);
        data.push_str(":[");
        for (i, (typ, help, unit)) in entries.iter().enumerate() {
            if per_metric.is_some_and(|l| i >= l) {
                break;
            }
            if i > 0 {
                data.push(',');
            }
            data.push_str("{\"type\":");
            json::push_str(&mut data, typ);
            data.push_str(",\"help\":");
            json::push_str(&mut data, help);
            data.push_str(",\"unit\":");
            json::push_str(&mut data, unit);
            data.push('}');
        }
        data.push(']');
    }
    data.push('}');
    Ok(success(&data, &[], &[]))
}

/// Handles GET `/api/v1/targets/metadata` (`match_target`, `metric`, `limit`): one entry per
/// active target and metric family on its last page, as Prometheus answers it (`metric` is
/// left out of the entries when the request names one; `limit` is checked before each
/// target, so the last target's entries may pass it).
pub(crate) async fn targets(
    State(state): State<ApiState>,
    params: Params,
) -> Result<Response, ApiError> {
    let limit = number(&params, "limit")?;
    let matchers = match params.get("match_target") {
        None | Some("") => None,
        Some(s) => Some(
            state
                .backend()
                .parse_selector(s)
                .map_err(|e| ApiError::invalid_param("match_target", e))?,
        ),
    };
    let metric = params.get("metric").filter(|m| !m.is_empty());
    let mut data = String::from("[");
    let mut n = 0usize;
    let mut entry = |data: &mut String,
                     target: &inferdb_storage::Labels,
                     name: Option<&str>,
                     m: &super::MetricMetadata| {
        if n > 0 {
            data.push(',');
        }
        n += 1;
        data.push_str("{\"target\":");
        json::push_labels(data, target);
        if let Some(name) = name {
            data.push_str(",\"metric\":");
            json::push_str(data, name);
        }
        data.push_str(",\"type\":");
        json::push_str(data, &m.typ);
        data.push_str(",\"help\":");
        json::push_str(data, &m.help);
        data.push_str(",\"unit\":");
        json::push_str(data, &m.unit);
        data.push('}');
    };
    let mut count = 0usize;
    for t in state.scrape().target_metadata() {
        if limit.is_some_and(|l| count >= l) {
            break;
        }
        if let Some(ms) = &matchers {
            if !ms
                .iter()
                .all(|m| m.matches(t.target.get(&m.name).unwrap_or("")))
            {
                continue;
            }
        }
        for m in &t.metadata {
            match metric {
                None => entry(&mut data, &t.target, Some(&m.metric), m),
                Some(want) if want == m.metric => entry(&mut data, &t.target, None, m),
                Some(_) => continue,
            }
            count += 1;
        }
    }
    data.push(']');
    Ok(success(&data, &[], &[]))
}
