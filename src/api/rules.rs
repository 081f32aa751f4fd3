//! `/api/v1/rules` and `/api/v1/alerts`: the rule manager's groups, rules and active alerts
//! in Prometheus' JSON (alert values as Go's `FormatFloat(v, 'e', -1, 64)`, times as Go's
//! `time.Time`, durations in seconds).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::extract::State;
use axum::response::Response;
use inferdb_query::go_format::{format_float, push_float, FloatFormat};
use inferdb_storage::Matcher;

use super::error::ApiError;
use super::json;
use super::params::Params;
use super::router::{success, ApiState};
use crate::rules::group::{Alert, AlertState, Group, LoadedRule};

/// Which rules `/api/v1/rules` lists.
#[derive(Debug, Default)]
struct Filter {
    alerts: bool,
    records: bool,
    exclude_alerts: bool,
    names: Vec<String>,
    groups: Vec<String>,
    files: Vec<String>,
    matchers: Vec<Vec<Matcher>>,
}

/// Handles GET `/api/v1/rules` (filters `type`, `rule_name[]`, `rule_group[]`, `file[]`,
/// `match[]` on the rules' labels, `exclude_alerts`; pages of `group_limit` groups continued
/// from `group_next_token`, as Prometheus 3).
pub(crate) async fn rules(
    State(state): State<ApiState>,
    params: Params,
) -> Result<Response, ApiError> {
    let typ = params.get("type").unwrap_or("").to_lowercase();
    if !matches!(typ.as_str(), "" | "alert" | "record") {
        return Err(ApiError::invalid_param(
            "type",
            format!(
                "not supported value {}",
                inferdb_query::parser::go_quote(&typ)
            ),
        ));
    }
    let exclude = params.get("exclude_alerts").unwrap_or("").to_lowercase();
    let exclude_alerts = if exclude.is_empty() {
        false
    } else {
        super::params::parse_bool(&exclude).map_err(|_| {
            ApiError::invalid_param(
                "exclude_alerts",
                format!(
                    "error converting exclude_alerts: strconv.ParseBool: parsing {}: invalid syntax",
                    inferdb_query::parser::go_quote(&exclude)
                ),
            )
        })?
    };
    let page = Page::parse(&params)?;
    let owned =
        |k: &str| -> Vec<String> { params.get_all(k).into_iter().map(str::to_string).collect() };
    let filter = Filter {
        alerts: typ != "record",
        records: typ != "alert",
        exclude_alerts,
        names: owned("rule_name[]"),
        groups: owned("rule_group[]"),
        files: owned("file[]"),
        matchers: super::series::matcher_sets(&state, &params)?,
    };
    let Some(mgr) = state.rules().cloned() else {
        return Ok(success("{\"groups\":[]}", &[], &[]));
    };
    let data = tokio::task::spawn_blocking(move || {
        let mut d = String::from("{\"groups\":[");
        let mut listed = 0usize;
        let mut found_token = false;
        let mut next_token = None;
        for g in mgr.groups() {
            let g = g.lock();
            if let (Some(_), Some(token)) = (page.limit, &page.token) {
                if !found_token {
                    if *token != group_token(&g.file, &g.name) {
                        continue;
                    }
                    found_token = true;
                }
            }
            if (!filter.groups.is_empty() && !filter.groups.contains(&g.name))
                || (!filter.files.is_empty() && !filter.files.contains(&g.file))
            {
                continue;
            }
            let mut rules = String::new();
            for r in &g.rules {
                if !rule_selected(r, &filter) {
                    continue;
                }
                if !rules.is_empty() {
                    rules.push(',');
                }
                push_rule(&mut rules, r, filter.exclude_alerts);
            }
            if rules.is_empty() {
                continue;
            }
            if page.limit == Some(listed) {
                next_token = Some(group_token(&g.file, &g.name));
                break;
            }
            if listed > 0 {
                d.push(',');
            }
            listed += 1;
            push_group(&mut d, &g, &rules);
        }
        if let (Some(_), Some(token)) = (page.limit, &page.token) {
            if !found_token {
                return Err(ApiError::invalid_param(
                    "group_next_token",
                    format!("invalid group_next_token '{token}'. were rule groups changed?"),
                ));
            }
        }
        d.push(']');
        if let Some(t) = next_token {
            d.push_str(",\"groupNextToken\":");
            json::push_str(&mut d, &t);
        }
        d.push('}');
        Ok(d)
    })
    .await
    .map_err(|e| ApiError::internal(e.to_string()))??;
    Ok(success(&data, &[], &[]))
}

/// `/api/v1/rules` pagination: at most `limit` groups, starting at the group whose token is
/// `token` (Prometheus 3's `group_limit` and `group_next_token`).
#[derive(Debug, Default, PartialEq)]
struct Page {
    limit: Option<usize>,
    token: Option<String>,
}

impl Page {
    /// Reads the two parameters with Prometheus' checks and messages.
    fn parse(params: &Params) -> Result<Page, ApiError> {
        let limit = params.get("group_limit").filter(|s| !s.is_empty());
        let token = params.get("group_next_token").filter(|s| !s.is_empty());
        let Some(limit) = limit else {
            return match token {
                Some(_) => Err(ApiError::invalid_param(
                    "group_next_token",
                    "group_limit needs to be present in order to paginate over the groups",
                )),
                None => Ok(Page::default()),
            };
        };
        let n = limit.parse::<i32>().map_err(|e| {
            let why = match e.kind() {
                std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow => {
                    "value out of range"
                }
                _ => "invalid syntax",
            };
            ApiError::invalid_param(
                "group_limit",
                format!(
                    "group_limit needs to be a valid number: strconv.ParseInt: parsing {}: {why}",
                    inferdb_query::parser::go_quote(limit)
                ),
            )
        })?;
        let n = usize::try_from(n).ok().filter(|&n| n > 0).ok_or_else(|| {
            ApiError::invalid_param("group_limit", "group_limit needs to be greater than 0")
        })?;
        Ok(Page {
            limit: Some(n),
            token: token.map(str::to_owned),
        })
    }
}

/// The page token of a group: the hex SHA-256 of `file;name`, as Prometheus'
/// `getRuleGroupNextToken`, so tokens are the same on both servers.
fn group_token(file: &str, name: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, format!("{file};{name}").as_bytes());
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// Handles GET `/api/v1/alerts`: every active alert of every alerting rule.
pub(crate) async fn alerts(State(state): State<ApiState>) -> Result<Response, ApiError> {
    let Some(mgr) = state.rules().cloned() else {
        return Ok(success("{\"alerts\":[]}", &[], &[]));
    };
    let data = tokio::task::spawn_blocking(move || {
        let mut d = String::from("{\"alerts\":[");
        let mut first = true;
        for g in mgr.groups() {
            let g = g.lock();
            for r in g.rules.iter().filter(|r| r.is_alert()) {
                for a in active_alerts(r) {
                    if !first {
                        d.push(',');
                    }
                    first = false;
                    push_alert(&mut d, a);
                }
            }
        }
        d.push_str("]}");
        d
    })
    .await
    .map_err(|e| ApiError::internal(e.to_string()))?;
    Ok(success(&data, &[], &[]))
}

fn rule_selected(r: &LoadedRule, f: &Filter) -> bool {
    if !f.names.is_empty() && !f.names.iter().any(|n| n == r.def.name()) {
        return false;
    }
    if (r.is_alert() && !f.alerts) || (!r.is_alert() && !f.records) {
        return false;
    }
    if f.matchers.is_empty() {
        return true;
    }
    let get = |name: &str| {
        r.labels
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .unwrap_or("")
    };
    f.matchers
        .iter()
        .any(|set| set.iter().all(|m| m.matches(get(&m.name))))
}

/// The alerts not yet resolved (Prometheus' `ActiveAlerts`).
fn active_alerts(r: &LoadedRule) -> impl Iterator<Item = &Alert> {
    r.active.values().filter(|a| a.resolved_at == 0)
}

fn ms_time(ms: i64) -> Option<SystemTime> {
    Some(UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).ok()?))
}

/// An evaluation timestamp (ms) with its nanoseconds below the millisecond.
fn eval_time(ms: i64, sub_ms_ns: u32) -> Option<SystemTime> {
    ms_time(ms).map(|t| t + Duration::from_nanos(u64::from(sub_ms_ns)))
}

/// A float as Go's `encoding/json` writes one: `'f'` between 1e-6 and 1e21, else `'e'` with
/// a negative exponent's leading zero dropped (`5e-7`, `1e+21`).
fn push_json_float(out: &mut String, v: f64) {
    let s = format_float(v, FloatFormat::Json);
    match s.split_once("e-0") {
        Some((m, e)) => {
            out.push_str(m);
            out.push_str("e-");
            out.push_str(e);
        }
        None => out.push_str(&s),
    }
}

fn push_pairs(out: &mut String, pairs: &[(String, String)]) {
    out.push('{');
    for (i, (k, v)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        json::push_str(out, k);
        out.push(':');
        json::push_str(out, v);
    }
    out.push('}');
}

fn push_alert(out: &mut String, a: &Alert) {
    out.push_str("{\"labels\":");
    json::push_labels(out, &a.labels);
    out.push_str(",\"annotations\":");
    push_pairs(out, &a.annotations);
    out.push_str(",\"state\":");
    json::push_str(out, a.state.as_str());
    out.push_str(",\"activeAt\":");
    json::push_go_time(out, eval_time(a.active_at, a.sub_ms_ns));
    if a.keep_firing_since != 0 {
        out.push_str(",\"keepFiringSince\":");
        json::push_go_time(out, eval_time(a.keep_firing_since, a.sub_ms_ns));
    }
    out.push_str(",\"value\":\"");
    push_float(out, a.value, FloatFormat::E);
    out.push_str("\"}");
}

fn push_rule(out: &mut String, r: &LoadedRule, exclude_alerts: bool) {
    let tail = |out: &mut String| {
        out.push_str(",\"health\":");
        json::push_str(out, r.health.as_str());
        if let Some(e) = &r.last_error {
            out.push_str(",\"lastError\":");
            json::push_str(out, e);
        }
        out.push_str(",\"evaluationTime\":");
        push_json_float(out, r.eval_duration.as_secs_f64());
        out.push_str(",\"lastEvaluation\":");
        json::push_go_time(out, r.last_eval_at);
    };
    if r.is_alert() {
        // the rule's state: the highest of its alerts' (resolved ones count as inactive)
        let state = r
            .active
            .values()
            .map(|a| a.state)
            .max_by_key(|s| match s {
                AlertState::Inactive => 0,
                AlertState::Pending => 1,
                AlertState::Firing => 2,
            })
            .unwrap_or(AlertState::Inactive);
        out.push_str("{\"state\":");
        json::push_str(out, state.as_str());
        out.push_str(",\"name\":");
        json::push_str(out, &r.def.alert);
        out.push_str(",\"query\":");
        json::push_str(out, &r.expr.to_string());
        out.push_str(",\"duration\":");
        push_json_float(out, r.def.for_ms as f64 / 1000.0);
        out.push_str(",\"keepFiringFor\":");
        push_json_float(out, r.def.keep_firing_for_ms as f64 / 1000.0);
        out.push_str(",\"labels\":");
        push_pairs(out, &r.labels);
        let mut ann = r.def.annotations.clone();
        ann.sort();
        out.push_str(",\"annotations\":");
        push_pairs(out, &ann);
        out.push_str(",\"alerts\":");
        if exclude_alerts {
            out.push_str("null");
        } else {
            out.push('[');
            for (i, a) in active_alerts(r).enumerate() {
                if i > 0 {
                    out.push(',');
                }
                push_alert(out, a);
            }
            out.push(']');
        }
        tail(out);
        out.push_str(",\"type\":\"alerting\"}");
    } else {
        out.push_str("{\"name\":");
        json::push_str(out, &r.def.record);
        out.push_str(",\"query\":");
        json::push_str(out, &r.expr.to_string());
        out.push_str(",\"labels\":");
        push_pairs(out, &r.labels);
        tail(out);
        out.push_str(",\"type\":\"recording\"}");
    }
}

fn push_group(out: &mut String, g: &Group, rules: &str) {
    out.push_str("{\"name\":");
    json::push_str(out, &g.name);
    out.push_str(",\"file\":");
    json::push_str(out, &g.file);
    out.push_str(",\"rules\":[");
    out.push_str(rules);
    out.push_str("],\"interval\":");
    push_json_float(out, g.interval_ms as f64 / 1000.0);
    out.push_str(",\"limit\":");
    out.push_str(&g.limit.to_string());
    out.push_str(",\"evaluationTime\":");
    push_json_float(out, g.eval_duration.as_secs_f64());
    out.push_str(",\"lastEvaluation\":");
    json::push_go_time(out, g.last_eval_at);
    out.push('}');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_tokens_are_prometheus_sha256() {
        // sha256("rules.yml;vllm"), as Go's getRuleGroupNextToken computes it
        assert_eq!(
            group_token("rules.yml", "vllm"),
            "169eb788f67843fda937468a769ebcd8107ce002e48a132fd90aade1cf3b35ce"
        );
    }

    #[test]
    fn page_parameters_as_prometheus_reads_them() {
        let page = |q: &str| Page::parse(&Params::from_parts(Some(q), None));
        assert_eq!(page("").unwrap(), Page::default());
        assert_eq!(
            page("group_limit=3&group_next_token=ab").unwrap(),
            Page {
                limit: Some(3),
                token: Some("ab".into())
            }
        );
        let err = |q: &str| format!("{:?}", page(q).unwrap_err());
        assert!(err("group_limit=-1").contains("greater than 0"));
        assert!(err("group_limit=99999999999").contains("value out of range"));
        assert!(err("group_limit=1.5").contains("invalid syntax"));
        assert!(err("group_next_token=ab").contains("group_limit needs to be present"));
    }

    #[test]
    fn json_floats_as_go_writes_them() {
        let f = |v: f64| {
            let mut s = String::new();
            push_json_float(&mut s, v);
            s
        };
        assert_eq!(f(15.0), "15");
        assert_eq!(f(0.000123), "0.000123");
        assert_eq!(f(5e-7), "5e-7");
        assert_eq!(f(1.5e-10), "1.5e-10");
        assert_eq!(f(0.0), "0");
        assert_eq!(f(1e21), "1e+21");
    }

    #[test]
    fn go_times() {
        let mut s = String::new();
        json::push_go_time(&mut s, None);
        assert_eq!(s, "\"0001-01-01T00:00:00Z\"");
        s.clear();
        json::push_go_time(&mut s, ms_time(1_700_000_000_120));
        assert_eq!(s, "\"2023-11-14T22:13:20.12Z\"");
        s.clear();
        json::push_go_time(&mut s, ms_time(1_700_000_000_000));
        assert_eq!(s, "\"2023-11-14T22:13:20Z\"");
    }
}
