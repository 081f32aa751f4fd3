//! `/federate`: the newest sample of every series matching `match[]` within the lookback
//! delta before now, in the text exposition format 0.0.4, as Prometheus' federation handler
//! writes it: one `# TYPE <name> untyped` family per metric name (families sorted by name),
//! the series' labels, then the external labels the series lacks (`instance=""` among them
//! unless an external label sets it), the value and the timestamp. Stale markers are left
//! out (the format cannot carry them).

use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use inferdb_query::go_format::{push_float, FloatFormat};

use super::params::Params;
use super::router::ApiState;
use super::write::text_error;
use super::{QueryOptions, VectorSample};
use crate::model::exposition::escape_label_value;

/// The content type of the answer.
pub(crate) const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Handles GET `/federate`.
pub(crate) async fn handle(State(state): State<ApiState>, params: Params) -> Response {
    let mut sets = Vec::new();
    for s in params.get_all("match[]") {
        match state.backend().parse_selector(s) {
            // as Prometheus' storage: no matchers select no series
            Ok(ms) if ms.is_empty() => {}
            Ok(ms) => sets.push(ms),
            Err(e) => return text_error(StatusCode::BAD_REQUEST, &e),
        }
    }
    let maxt = crate::model::time::now_ms();
    let mint = maxt.saturating_sub(state.config().lookback_delta_ms);
    let samples = if sets.is_empty() {
        Vec::new()
    } else {
        let opts = QueryOptions::with_timeout(state.config().query_timeout);
        match state
            .run_blocking(opts.timeout, opts.cancel.clone(), move |b| {
                b.latest_samples(&sets, mint, maxt)
            })
            .await
        {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(err = %e.message, "federation failed");
                return text_error(StatusCode::INTERNAL_SERVER_ERROR, &e.message);
            }
        }
    };
    let body = write_federation(samples, &state.scrape().external_labels());
    let mut r = (StatusCode::OK, body).into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
    r
}

/// Writes `samples` (sorted by labels) as Prometheus' federation does; `external` are the
/// external labels sorted by name.
pub(crate) fn write_federation(
    mut samples: Vec<VectorSample>,
    external: &[(String, String)],
) -> String {
    samples.retain(|s| !inferdb_storage::is_stale_nan(s.v) && s.labels.metric_name().is_some());
    // stable: within a family the series stay in label order
    samples.sort_by(|a, b| a.labels.metric_name().cmp(&b.labels.metric_name()));
    let mut ext: Vec<(&str, &str)> = external
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    if !ext.iter().any(|(n, _)| *n == "instance") {
        ext.push(("instance", ""));
        ext.sort();
    }
    let mut out = String::with_capacity(samples.len() * 96);
    let mut family: Option<&str> = None;
    for s in &samples {
        let Some(name) = s.labels.metric_name() else {
            continue;
        };
        if family != Some(name) {
            out.push_str("# TYPE ");
            out.push_str(name);
            out.push_str(" untyped\n");
            family = Some(name);
        }
        out.push_str(name);
        out.push('{');
        let mut first = true;
        let mut label = |out: &mut String, n: &str, v: &str| {
            if !first {
                out.push(',');
            }
            first = false;
            out.push_str(n);
            out.push_str("=\"");
            out.push_str(&escape_label_value(v));
            out.push('"');
        };
        for l in s.labels.iter() {
            if l.name == "__name__" || l.value.is_empty() {
                continue;
            }
            label(&mut out, &l.name, &l.value);
        }
        for (n, v) in &ext {
            if s.labels.get(n).is_none_or(str::is_empty) {
                label(&mut out, n, v);
            }
        }
        out.push_str("} ");
        push_float(&mut out, s.v, FloatFormat::G);
        out.push(' ');
        out.push_str(&s.t.to_string());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use inferdb_storage::Labels;

    fn s(pairs: &[(&str, &str)], t: i64, v: f64) -> VectorSample {
        VectorSample {
            labels: Labels::from_pairs(pairs.iter().copied()),
            t,
            v,
        }
    }

    #[test]
    fn families_external_labels_and_stale_markers() {
        let samples = vec![
            s(
                &[("__name__", "up"), ("instance", "a:1"), ("job", "j")],
                1000,
                1.0,
            ),
            s(
                &[("__name__", "b_total"), ("job", "j"), ("zone", "x\"y\n")],
                2000,
                1e21,
            ),
            s(
                &[("__name__", "up"), ("instance", "b:1"), ("job", "j")],
                1000,
                f64::NAN,
            ),
            s(
                &[("__name__", "gone"), ("job", "j")],
                1000,
                inferdb_storage::stale_nan(),
            ),
            s(
                &[("Zed", "1"), ("__name__", "b_total")],
                3,
                f64::NEG_INFINITY,
            ),
        ];
        let ext = vec![
            ("cluster".to_string(), "c1".to_string()),
            ("job".into(), "ext".into()),
        ];
        assert_eq!(
            write_federation(samples, &ext),
            "# TYPE b_total untyped\n\
             b_total{job=\"j\",zone=\"x\\\"y\\n\",cluster=\"c1\",instance=\"\"} 1e+21 2000\n\
             b_total{Zed=\"1\",cluster=\"c1\",instance=\"\",job=\"ext\"} -Inf 3\n\
             # TYPE up untyped\n\
             up{instance=\"a:1\",job=\"j\",cluster=\"c1\"} 1 1000\n\
             up{instance=\"b:1\",job=\"j\",cluster=\"c1\"} NaN 1000\n"
        );
        let ext = vec![("instance".to_string(), "me".to_string())];
        assert_eq!(
            write_federation(vec![s(&[("__name__", "x")], 5, 0.5)], &ext),
            "# TYPE x untyped\nx{instance=\"me\"} 0.5 5\n"
        );
        assert_eq!(write_federation(Vec::new(), &[]), "");
    }
}
