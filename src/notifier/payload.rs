//! The body of `POST /api/v2/alerts`: Alertmanager's `PostableAlerts` as Prometheus writes
//! them, a JSON array of
//! `{"annotations":{...},"endsAt":"...","startsAt":"...","generatorURL":"...","labels":{...}}`
//! with times in RFC 3339 with milliseconds (`2006-01-02T15:04:05.000Z`), annotations and the
//! generator URL left out when empty.

use serde::Serialize;

use super::Alert;

/// An RFC 3339 time with milliseconds in UTC, as `strfmt.DateTime` writes it; 0 is Go's zero
/// time (`0001-01-01T00:00:00.000Z`), which Alertmanager reads as unset.
pub fn format_time(ms: i64) -> String {
    if ms == 0 {
        return "0001-01-01T00:00:00.000Z".into();
    }
    match chrono::DateTime::from_timestamp_millis(ms) {
        Some(t) => t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
        None => "0001-01-01T00:00:00.000Z".into(),
    }
}

#[derive(Serialize)]
struct Postable<'a> {
    #[serde(skip_serializing_if = "Vec::is_empty", serialize_with = "as_map")]
    annotations: Vec<(&'a str, &'a str)>,
    #[serde(rename = "endsAt")]
    ends_at: String,
    #[serde(rename = "startsAt")]
    starts_at: String,
    #[serde(rename = "generatorURL", skip_serializing_if = "str::is_empty")]
    generator_url: &'a str,
    #[serde(serialize_with = "as_map")]
    labels: Vec<(&'a str, &'a str)>,
}

fn as_map<S: serde::Serializer>(v: &[(&str, &str)], s: S) -> Result<S::Ok, S::Error> {
    s.collect_map(v.iter().copied())
}

fn pairs(l: &inferdb_storage::labels::Labels) -> Vec<(&str, &str)> {
    l.iter()
        .map(|l| (l.name.as_str(), l.value.as_str()))
        .collect()
}

/// The JSON body for `alerts`.
pub fn encode(alerts: &[Alert]) -> Vec<u8> {
    let list: Vec<Postable<'_>> = alerts
        .iter()
        .map(|a| Postable {
            annotations: pairs(&a.annotations),
            ends_at: format_time(a.ends_at),
            starts_at: format_time(a.starts_at),
            generator_url: &a.generator_url,
            labels: pairs(&a.labels),
        })
        .collect();
    serde_json::to_vec(&list).unwrap_or_else(|_| b"[]".to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;
    use inferdb_storage::labels::Labels;

    #[test]
    fn body_is_prometheus_postable_alerts() {
        let a = Alert {
            labels: Labels::from_pairs([("alertname", "KvCacheFull"), ("instance", "a:1")]),
            annotations: Labels::from_pairs([("summary", "KV \"cache\" full")]),
            starts_at: 1_700_000_000_123,
            ends_at: 1_700_000_240_000,
            generator_url: "http://h:9090/graph?g0.expr=up&g0.tab=1".into(),
        };
        let b = Alert {
            annotations: Labels::from_pairs(Vec::<(String, String)>::new()),
            generator_url: String::new(),
            ends_at: 0,
            ..a.clone()
        };
        let body = String::from_utf8(encode(&[a, b])).unwrap();
        assert_eq!(
            body,
            concat!(
                r#"[{"annotations":{"summary":"KV \"cache\" full"},"endsAt":"2023-11-14T22:17:20.000Z","#,
                r#""startsAt":"2023-11-14T22:13:20.123Z","generatorURL":"http://h:9090/graph?g0.expr=up&g0.tab=1","#,
                r#""labels":{"alertname":"KvCacheFull","instance":"a:1"}},"#,
                r#"{"endsAt":"0001-01-01T00:00:00.000Z","startsAt":"2023-11-14T22:13:20.123Z","#,
                r#""labels":{"alertname":"KvCacheFull","instance":"a:1"}}]"#
            )
        );
        assert_eq!(encode(&[]), b"[]");
    }
}
