//! `/api/v1/targets`: the scraper's targets and their health.

use axum::extract::State;
use axum::response::Response;
use chrono::{DateTime, SecondsFormat, Utc};

use inferdb_query::go_format::{format_float, FloatFormat};

use super::json;
use super::params::Params;
use super::router::{success, ApiState};

/// Handles GET `/api/v1/targets` (`state=active|dropped|any`, `scrapePool`).
pub(crate) async fn handle(State(state): State<ApiState>, params: Params) -> Response {
    let want = params.get("state").unwrap_or("any").to_ascii_lowercase();
    let pool = params.get("scrapePool").map(str::to_string);
    let mut d = String::from("{\"activeTargets\":[");
    // as Prometheus: no state shows both, an unknown one neither
    let want = if want.is_empty() {
        "any".to_string()
    } else {
        want
    };
    if want == "any" || want == "active" {
        let mut first = true;
        for t in state.scrape().targets() {
            if pool.as_deref().is_some_and(|p| p != t.scrape_pool) {
                continue;
            }
            if !first {
                d.push(',');
            }
            first = false;
            d.push_str("{\"discoveredLabels\":");
            json::push_labels(&mut d, &t.discovered_labels);
            d.push_str(",\"labels\":");
            json::push_labels(&mut d, &t.labels);
            d.push_str(",\"scrapePool\":");
            json::push_str(&mut d, &t.scrape_pool);
            d.push_str(",\"scrapeUrl\":");
            json::push_str(&mut d, &t.scrape_url);
            d.push_str(",\"globalUrl\":");
            json::push_str(&mut d, &t.scrape_url);
            d.push_str(",\"lastError\":");
            json::push_str(&mut d, &t.last_error);
            d.push_str(",\"lastScrape\":");
            let last = if t.last_scrape_ms > 0 {
                DateTime::<Utc>::from_timestamp_millis(t.last_scrape_ms)
                    .map(|x| x.to_rfc3339_opts(SecondsFormat::Millis, true))
                    .unwrap_or_default()
            } else {
                "0001-01-01T00:00:00Z".to_string()
            };
            json::push_str(&mut d, &last);
            d.push_str(",\"lastScrapeDuration\":");
            let dur = if t.last_scrape_duration_s.is_finite() {
                t.last_scrape_duration_s
            } else {
                0.0
            };
            d.push_str(&format_float(dur, FloatFormat::Json));
            d.push_str(",\"health\":");
            json::push_str(&mut d, &t.health);
            d.push_str(",\"scrapeInterval\":");
            json::push_str(
                &mut d,
                &inferdb_query::printer::format_duration_ms(t.scrape_interval_ms),
            );
            d.push_str(",\"scrapeTimeout\":");
            json::push_str(
                &mut d,
                &inferdb_query::printer::format_duration_ms(t.scrape_timeout_ms),
            );
            d.push('}');
        }
    }
    d.push_str("],\"droppedTargets\":[");
    if want != "any" && want != "dropped" {
        d.push_str("],\"droppedTargetCounts\":null}");
    } else {
        let pools = state.scrape().dropped_targets();
        let mut first = true;
        for p in &pools {
            if pool.as_deref().is_some_and(|x| x != p.scrape_pool) {
                continue;
            }
            for l in &p.discovered_labels {
                if !first {
                    d.push(',');
                }
                first = false;
                d.push_str("{\"discoveredLabels\":");
                json::push_labels(&mut d, l);
                d.push_str(",\"scrapePool\":");
                json::push_str(&mut d, &p.scrape_pool);
                d.push('}');
            }
        }
        d.push_str("],\"droppedTargetCounts\":{");
        for (i, p) in pools.iter().enumerate() {
            if i > 0 {
                d.push(',');
            }
            json::push_str(&mut d, &p.scrape_pool);
            d.push(':');
            d.push_str(&p.count.to_string());
        }
        d.push_str("}}");
    }
    success(&d, &[], &[])
}
