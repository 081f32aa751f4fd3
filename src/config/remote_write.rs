//! The `remote_write` section of `prometheus.yml`, read as Prometheus reads it.
//!
//! ```yaml
//! remote_write:
//!   - url: https://mimir.example/api/v1/push
//!     name: mimir                # default: derived from the url
//!     remote_timeout: 30s
//!     headers: {X-Scope-OrgID: fleet}
//!     basic_auth: {username: u, password_file: /run/secrets/pw}
//!     # or: authorization: {type: Bearer, credentials_file: /run/secrets/token}
//!     write_relabel_configs:
//!       - {source_labels: [__name__], regex: 'go_.*', action: drop}
//!     queue_config:
//!       capacity: 2500
//!       min_shards: 1
//!       max_shards: 200
//!       max_samples_per_send: 500
//!       batch_send_deadline: 5s
//!       min_backoff: 30ms
//!       max_backoff: 5s
//!       retry_on_http_429: false
//! ```
//!
//! Defaults are Prometheus 2.42's. Settings inferdb does not implement (TLS client settings,
//! proxies, OAuth2, SigV4, metadata sending) are refused by name rather than ignored, except
//! `metadata_config`, `send_exemplars` and `send_native_histograms`, which are accepted and
//! have nothing to act on.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use super::http::{
    bearer_to_authorization, check_http_auth, resolve_secret_files, Authorization, BasicAuth,
    Secret,
};
use super::{ConfigError, PromDuration};
use crate::model::relabel::RelabelConfig;

/// One `remote_write` entry.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoteWriteConfig {
    /// Where to POST.
    pub url: String,
    /// Name in metrics and logs, and of the folder keeping the read position; unique.
    #[serde(default)]
    pub name: Option<String>,
    /// Timeout of one request (30s).
    #[serde(default = "default_timeout")]
    pub remote_timeout: PromDuration,
    /// Extra request headers.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// HTTP basic authentication.
    #[serde(default)]
    pub basic_auth: Option<BasicAuth>,
    /// An `Authorization` header of the given type (Bearer by default).
    #[serde(default)]
    pub authorization: Option<Authorization>,
    /// Older spelling of `authorization: {credentials: ...}`, turned into it at load.
    #[serde(default)]
    pub bearer_token: Option<Secret>,
    /// Older spelling of `authorization: {credentials_file: ...}`, turned into it at load.
    #[serde(default)]
    pub bearer_token_file: Option<String>,
    /// Relabelling applied to every series before it leaves.
    #[serde(default)]
    pub write_relabel_configs: Vec<RelabelConfig>,
    /// Queue and shard settings.
    #[serde(default)]
    pub queue_config: QueueConfig,
    /// Accepted; inferdb sends no metadata.
    #[serde(default)]
    pub metadata_config: Option<serde_yaml::Value>,
    /// Accepted; inferdb stores no exemplars.
    #[serde(default)]
    pub send_exemplars: Option<bool>,
    /// Accepted; inferdb stores no native histograms.
    #[serde(default)]
    pub send_native_histograms: Option<bool>,
}

/// `queue_config:`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QueueConfig {
    /// Samples buffered per shard (2500).
    pub capacity: usize,
    /// Shards to start with and at least (1).
    pub min_shards: usize,
    /// Shards at most (200).
    pub max_shards: usize,
    /// Samples per request at most (500).
    pub max_samples_per_send: usize,
    /// How long a partial batch waits before it is sent (5s).
    pub batch_send_deadline: PromDuration,
    /// First retry delay (30ms), doubled per retry ...
    pub min_backoff: PromDuration,
    /// ... up to this (5s).
    pub max_backoff: PromDuration,
    /// Retry on 429 Too Many Requests instead of dropping the batch (false).
    pub retry_on_http_429: bool,
    /// Accepted, unused (inferdb never drops old samples while the remote is down).
    pub sample_age_limit: Option<PromDuration>,
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            capacity: 2500,
            min_shards: 1,
            max_shards: 200,
            max_samples_per_send: 500,
            batch_send_deadline: PromDuration(Duration::from_secs(5)),
            min_backoff: PromDuration(Duration::from_millis(30)),
            max_backoff: PromDuration(Duration::from_secs(5)),
            retry_on_http_429: false,
            sample_age_limit: None,
        }
    }
}

fn default_timeout() -> PromDuration {
    PromDuration(Duration::from_secs(30))
}

/// Headers a `headers:` map may not set (the protocol's own), as in Prometheus.
const RESERVED_HEADERS: [&str; 5] = [
    "authorization",
    "content-encoding",
    "content-type",
    "user-agent",
    "x-prometheus-remote-write-version",
];

impl RemoteWriteConfig {
    /// The name used in metrics, logs and the position folder: `name`, else a hash of the
    /// url (stable across restarts and reloads).
    pub fn queue_name(&self) -> String {
        match &self.name {
            Some(n) if !n.is_empty() => n.clone(),
            _ => {
                let d = md5::compute(self.url.as_bytes());
                format!("{:x}", d)[..6].to_string()
            }
        }
    }

    fn check(&mut self, base: &Path) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError::Invalid(format!("remote_write: {m}")));
        match reqwest::Url::parse(&self.url) {
            Ok(u) if u.scheme() == "http" || u.scheme() == "https" => {}
            Ok(u) => {
                return bad(format!(
                    "url {:?}: unsupported scheme {:?}",
                    self.url,
                    u.scheme()
                ))
            }
            Err(e) => return bad(format!("url {:?}: {e}", self.url)),
        }
        if let Some(n) = &self.name {
            if n.is_empty()
                || !n
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
                || n.starts_with('.')
            {
                return bad(format!(
                    "name {n:?}: use letters, digits, '-', '_' and '.' (it names a folder)"
                ));
            }
        }
        for k in self.headers.keys() {
            if RESERVED_HEADERS.contains(&k.to_ascii_lowercase().as_str()) {
                return bad(format!("{k} is a reserved header. It must not be changed"));
            }
        }
        check_http_auth(
            self.basic_auth.as_ref(),
            self.authorization.as_ref(),
            self.bearer_token.as_ref(),
            self.bearer_token_file.as_deref(),
        )
        .or_else(bad)?;
        bearer_to_authorization(
            &mut self.authorization,
            &mut self.bearer_token,
            &mut self.bearer_token_file,
        );
        resolve_secret_files(self.basic_auth.as_mut(), self.authorization.as_mut(), base);
        for r in &self.write_relabel_configs {
            r.validate().or_else(bad)?;
        }
        let q = &mut self.queue_config;
        if q.max_samples_per_send == 0 {
            return bad("queue_config.max_samples_per_send must be positive".into());
        }
        if q.min_shards == 0 {
            q.min_shards = 1;
        }
        if q.max_shards < q.min_shards {
            return bad("queue_config.max_shards must be at least min_shards".into());
        }
        if q.capacity < q.max_samples_per_send {
            // Prometheus warns and lets capacity win; a shard needs room for one batch
            q.capacity = q.max_samples_per_send;
        }
        if q.min_backoff.0.is_zero() {
            q.min_backoff = PromDuration(Duration::from_millis(1));
        }
        if q.max_backoff < q.min_backoff {
            q.max_backoff = q.min_backoff;
        }
        Ok(())
    }

    /// The `user:password` of basic auth, reading `password_file` now.
    pub fn basic_credentials(&self) -> Result<Option<(String, String)>, ConfigError> {
        let Some(b) = &self.basic_auth else {
            return Ok(None);
        };
        let pw = match (&b.password, &b.password_file) {
            (Some(p), _) => p.expose().to_owned(),
            (None, Some(f)) => read_secret(Path::new(f))?,
            (None, None) => String::new(),
        };
        Ok(Some((b.username.clone(), pw)))
    }

    /// The `Authorization` header value, reading `credentials_file` now.
    pub fn authorization_header(&self) -> Result<Option<String>, ConfigError> {
        let Some(a) = &self.authorization else {
            return Ok(None);
        };
        let cred = match (&a.credentials, &a.credentials_file) {
            (Some(c), _) => c.expose().to_owned(),
            (None, Some(f)) => read_secret(Path::new(f))?,
            (None, None) => String::new(),
        };
        Ok(Some(format!("{} {cred}", a.scheme())))
    }
}

fn read_secret(p: &Path) -> Result<String, ConfigError> {
    let s = std::fs::read_to_string(p).map_err(|source| ConfigError::Io {
        path: p.to_path_buf(),
        source,
    })?;
    Ok(s.trim_end_matches(['\n', '\r']).to_string())
}

/// Checks the `remote_write` entries as Prometheus does and applies its adjustments; `base`
/// resolves relative secret files. Names must be unique, and so must urls without a name.
pub(super) fn check_all(list: &mut [RemoteWriteConfig], base: &Path) -> Result<(), ConfigError> {
    let mut names = std::collections::HashSet::new();
    for c in list {
        c.check(base)?;
        if !names.insert(c.queue_name()) {
            return Err(ConfigError::Invalid(format!(
                "remote_write: found multiple remote write configs with the name {:?} (give each a distinct name)",
                c.queue_name()
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(y: &str) -> Result<Vec<RemoteWriteConfig>, ConfigError> {
        let mut list: Vec<RemoteWriteConfig> =
            serde_yaml::from_str(y).map_err(|e| ConfigError::Yaml(format!("remote_write: {e}")))?;
        check_all(&mut list, Path::new("/etc/inferdb"))?;
        Ok(list)
    }

    #[test]
    fn defaults_are_prometheus_ones() {
        let c = p("- url: http://localhost:9090/api/v1/write").unwrap();
        assert_eq!(c.len(), 1);
        let q = &c[0].queue_config;
        assert_eq!(
            (
                q.capacity,
                q.min_shards,
                q.max_shards,
                q.max_samples_per_send
            ),
            (2500, 1, 200, 500)
        );
        assert_eq!(q.batch_send_deadline.0, Duration::from_secs(5));
        assert_eq!(q.min_backoff.0, Duration::from_millis(30));
        assert_eq!(q.max_backoff.0, Duration::from_secs(5));
        assert!(!q.retry_on_http_429);
        assert_eq!(c[0].remote_timeout.0, Duration::from_secs(30));
        assert_eq!(c[0].queue_name().len(), 6);
    }

    #[test]
    fn reads_every_field() {
        let c = p(r#"
- url: https://m.example/api/v1/push
  name: mimir
  remote_timeout: 10s
  headers: {X-Scope-OrgID: fleet}
  basic_auth: {username: u, password_file: pw}
  write_relabel_configs:
    - {source_labels: [__name__], regex: 'go_.*', action: drop}
  queue_config: {capacity: 10, min_shards: 2, max_shards: 4, max_samples_per_send: 5,
                 batch_send_deadline: 1s, min_backoff: 10ms, max_backoff: 1s, retry_on_http_429: true}
- url: http://b/api/v1/write
  authorization: {credentials: tok}
"#)
        .unwrap();
        assert_eq!(c[0].queue_name(), "mimir");
        assert_eq!(c[0].headers["X-Scope-OrgID"], "fleet");
        assert_eq!(
            c[0].basic_auth.as_ref().unwrap().password_file.as_deref(),
            Some("/etc/inferdb/pw")
        );
        assert_eq!(c[0].write_relabel_configs.len(), 1);
        assert!(c[0].queue_config.retry_on_http_429);
        assert_eq!(c[0].queue_config.max_shards, 4);
        assert_eq!(
            c[1].authorization_header().unwrap().as_deref(),
            Some("Bearer tok")
        );
    }

    #[test]
    fn refuses_what_prometheus_refuses() {
        for (y, want) in [
            ("- url: ftp://x/", "scheme"),
            (
                "- url: http://x/\n  headers: {User-Agent: me}",
                "reserved header",
            ),
            (
                "- url: http://x/\n  basic_auth: {username: a}\n  authorization: {credentials: b}",
                "at most one",
            ),
            (
                "- url: http://x/\n  authorization: {type: Basic, credentials: b}",
                "basic_auth",
            ),
            ("- url: http://x/\n- url: http://x/", "multiple"),
            (
                "- url: http://x/\n  queue_config: {min_shards: 5, max_shards: 2}",
                "max_shards",
            ),
            (
                "- url: http://x/\n  tls_config: {insecure_skip_verify: true}",
                "tls_config",
            ),
            (
                "- url: http://x/\n  write_relabel_configs: [{action: replace}]",
                "target_label",
            ),
            ("- url: http://x/\n  name: ../up", "name"),
        ] {
            let e = p(y).unwrap_err().to_string();
            assert!(e.contains(want), "{y}: {e}");
        }
    }
}
