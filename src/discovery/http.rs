//! `http_sd_configs`: Prometheus' HTTP service discovery. Every `refresh_interval` (60 s)
//! GET `url` answering a JSON list of target groups (`[{"targets": [...], "labels":
//! {...}}]`, content type `application/json`); each group gets `__meta_url`. A failed
//! refresh keeps the targets found before.

use std::time::Duration;

use serde::{Deserialize, Deserializer};

use super::client::{with_http_config, HttpClientConfig};
use super::{GroupDoc, TargetGroup, Updater};
use crate::config::PromDuration;

/// Largest discovery document read (Prometheus reads any size; a larger one is an error).
const MAX_BODY: usize = 64 << 20;

/// One `http_sd_configs` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpSdConfig {
    /// Where the target groups are.
    pub url: String,
    /// How often to fetch them (60 s); also the request timeout.
    pub refresh_interval: Duration,
    /// Client settings (auth, TLS, proxy, headers).
    pub http: HttpClientConfig,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Own {
    #[serde(default)]
    url: String,
    #[serde(default)]
    refresh_interval: Option<PromDuration>,
}

impl<'de> Deserialize<'de> for HttpSdConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let (o, http): (Own, _) = with_http_config(d, &["url", "refresh_interval"])?;
        if o.url.is_empty() {
            return Err(D::Error::custom("URL is missing"));
        }
        let u = reqwest::Url::parse(&o.url).map_err(D::Error::custom)?;
        if u.scheme() != "http" && u.scheme() != "https" {
            return Err(D::Error::custom("URL scheme must be 'http' or 'https'"));
        }
        if u.host_str().unwrap_or("").is_empty() {
            return Err(D::Error::custom("host is missing in URL"));
        }
        Ok(HttpSdConfig {
            url: o.url,
            refresh_interval: o
                .refresh_interval
                .map(|d| d.0)
                .unwrap_or(Duration::from_secs(60)),
            http,
        })
    }
}

/// The groups of an HTTP SD document: sources `<url>:<index>`, `__meta_url` added.
pub fn parse_groups(url: &str, body: &[u8]) -> Result<Vec<TargetGroup>, String> {
    let docs: Vec<Option<GroupDoc>> = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    docs.into_iter()
        .enumerate()
        .map(|(i, d)| {
            let d = d.ok_or("nil target group item found")?;
            let mut labels = d.labels.unwrap_or_default();
            labels.insert("__meta_url".into(), url.to_string());
            Ok(TargetGroup::from_addresses(
                format!("{url}:{i}"),
                &d.targets,
                labels,
            ))
        })
        .collect()
}

fn content_type_ok(ct: &str) -> bool {
    let ct = ct.trim().to_ascii_lowercase();
    let Some(rest) = ct.strip_prefix("application/json") else {
        return false;
    };
    match rest.strip_prefix(';') {
        None => rest.is_empty(),
        Some(r) => matches!(r.trim_start(), "charset=utf-8" | "charset=\"utf-8\""),
    }
}

async fn fetch(c: &HttpSdConfig, client: &reqwest::Client) -> Result<Vec<TargetGroup>, String> {
    let mut req = client
        .get(&c.url)
        .timeout(c.refresh_interval)
        .header("Accept", "application/json")
        .header(
            "X-Prometheus-Refresh-Interval-Seconds",
            format!("{}", c.refresh_interval.as_secs_f64()),
        );
    if let Some(h) = c.http.authorization_header()? {
        req = req.header("Authorization", h);
    }
    let mut resp = req
        .send()
        .await
        .map_err(|e| super::client::error_chain(&e))?;
    if resp.status() != reqwest::StatusCode::OK {
        return Err(format!("server returned HTTP status {}", resp.status()));
    }
    let ct = resp
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_default();
    if !content_type_ok(&ct) {
        return Err(format!("unsupported content type {ct:?}"));
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| e.to_string())? {
        if body.len() + chunk.len() > MAX_BODY {
            return Err(format!("response larger than {MAX_BODY} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    parse_groups(&c.url, &body)
}

/// Runs the discovery of one entry on a task.
pub(crate) fn start(c: HttpSdConfig, up: Updater) -> tokio::task::AbortHandle {
    tokio::spawn(async move {
        let client = match c.http.client() {
            Ok(cl) => cl,
            Err(e) => {
                up.error(e);
                return;
            }
        };
        let every = c.refresh_interval;
        super::refresh_loop(up, every, true, || async {
            match fetch(&c, &client).await {
                Ok(g) => (g, vec![]),
                Err(e) => (vec![], vec![e]),
            }
        })
        .await
    })
    .abort_handle()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_is_checked_as_prometheus_checks_it() {
        let c: HttpSdConfig = serde_yaml::from_str(
            "{url: 'http://h:1/sd', refresh_interval: 15s, authorization: {credentials: t}}",
        )
        .unwrap();
        assert_eq!(c.refresh_interval, Duration::from_secs(15));
        assert_eq!(
            c.http.authorization_header().unwrap().as_deref(),
            Some("Bearer t")
        );
        for (y, want) in [
            ("{refresh_interval: 1m}", "URL is missing"),
            ("{url: 'ftp://h/x'}", "URL scheme must be 'http' or 'https'"),
            ("{url: 'http://h/x', foo: 1}", "unknown field `foo`"),
            ("{url: 'http://h/x', oauth2: {client_id: a}}", "oauth2"),
            (
                "{url: 'http://h/x', basic_auth: {username: a}, bearer_token: b}",
                "at most one of basic_auth",
            ),
        ] {
            let e = serde_yaml::from_str::<HttpSdConfig>(y)
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{y}: {e}");
        }
    }

    #[test]
    fn documents_become_groups_with_meta_url() {
        let g = parse_groups(
            "http://sd/x",
            br#"[{"targets":["a:1","b:2"],"labels":{"env":"p"}},{"targets":[]}]"#,
        )
        .unwrap();
        assert_eq!(g.len(), 2);
        assert_eq!(g[0].source, "http://sd/x:0");
        assert_eq!(g[0].targets[1]["__address__"], "b:2");
        assert_eq!(g[0].labels["env"], "p");
        assert_eq!(g[1].labels["__meta_url"], "http://sd/x");
        for bad in [
            &b"[null]"[..],
            b"{}",
            b"[{\"targets\":[1]}]",
            b"[{\"x\":[]}]",
            b"nope",
        ] {
            assert!(
                parse_groups("u", bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn content_types_as_prometheus_accepts_them() {
        for ok in [
            "application/json",
            "Application/JSON; charset=utf-8",
            "application/json;charset=\"utf-8\"",
        ] {
            assert!(content_type_ok(ok), "{ok}");
        }
        for bad in [
            "text/plain",
            "application/json; charset=latin1",
            "application/jsonx",
            "",
        ] {
            assert!(!content_type_ok(bad), "{bad}");
        }
    }
}
