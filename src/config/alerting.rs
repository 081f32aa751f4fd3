//! The `alerting` section: which Alertmanagers receive alerts and how alerts are relabelled
//! before they are sent, read as Prometheus 3 reads it.
//!
//! ```yaml
//! alerting:
//!   alert_relabel_configs:
//!     - {source_labels: [severity], regex: debug, action: drop}
//!   alertmanagers:
//!     - static_configs: [{targets: ['localhost:9093']}]
//!       scheme: http          # default
//!       path_prefix: /        # default
//!       timeout: 10s          # default
//!       api_version: v2       # default; the only version Prometheus 3 speaks
//! ```

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use super::http::{
    bearer_to_authorization, check_http_auth, join_dir, resolve_secret_files, Authorization,
    BasicAuth, Secret, TlsConfig,
};
use super::scrape::{with_other_sds, FileSdConfig, StaticConfig};
use super::{ConfigError, PromDuration};
use crate::discovery::client::{HeaderValues, HttpClientConfig};
use crate::model::relabel::RelabelConfig;

/// `alerting:`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlertingConfig {
    /// Rules applied to every alert (after external labels) before it is sent.
    #[serde(default)]
    pub alert_relabel_configs: Vec<RelabelConfig>,
    /// The Alertmanagers to send to.
    #[serde(default)]
    pub alertmanagers: Vec<AlertmanagerConfig>,
}

impl AlertingConfig {
    /// Whether the section asks for anything.
    pub fn is_empty(&self) -> bool {
        self.alert_relabel_configs.is_empty() && self.alertmanagers.is_empty()
    }

    /// Makes the relative file paths (file SD files, secret files, TLS files) relative to
    /// `dir`, the configuration file's folder.
    pub fn set_directory(&mut self, dir: &Path) {
        for am in &mut self.alertmanagers {
            for f in &mut am.file_sd_configs {
                for file in &mut f.files {
                    join_dir(dir, file);
                }
            }
            resolve_secret_files(am.basic_auth.as_mut(), am.authorization.as_mut(), dir);
            if let Some(f) = &mut am.bearer_token_file {
                join_dir(dir, f);
            }
            if let Some(t) = &mut am.tls_config {
                t.resolve_files(dir);
            }
            for h in am.http_headers.iter_mut().flat_map(|h| h.values_mut()) {
                for f in &mut h.files {
                    join_dir(dir, f);
                }
            }
            for h in &mut am.http_sd_configs {
                h.http.set_directory(dir);
            }
            for k in &mut am.kubernetes_sd_configs {
                k.set_directory(dir);
            }
        }
    }

    /// Refuses what Prometheus refuses; messages name the entry.
    pub(super) fn check(&mut self) -> Result<(), ConfigError> {
        for r in &self.alert_relabel_configs {
            r.validate()
                .map_err(|e| ConfigError::Invalid(format!("alert_relabel_configs: {e}")))?;
        }
        for (i, am) in self.alertmanagers.iter_mut().enumerate() {
            let bad = |m: String| ConfigError::Invalid(format!("alertmanagers[{i}]: {m}"));
            if am.api_version != "v2" {
                return Err(bad(format!(
                    "expected Alertmanager api version to be one of [v2] but got {}",
                    am.api_version
                )));
            }
            if am.scheme != "http" && am.scheme != "https" {
                return Err(bad(format!("unknown scheme {:?}", am.scheme)));
            }
            if am.timeout.0.is_zero() {
                return Err(bad("timeout must be greater than zero".into()));
            }
            check_http_auth(
                am.basic_auth.as_ref(),
                am.authorization.as_ref(),
                am.bearer_token.as_ref(),
                am.bearer_token_file.as_deref(),
            )
            .map_err(bad)?;
            bearer_to_authorization(
                &mut am.authorization,
                &mut am.bearer_token,
                &mut am.bearer_token_file,
            );
            for r in am.relabel_configs.iter().chain(&am.alert_relabel_configs) {
                r.validate().map_err(bad)?;
            }
            if let Some(s) = am.unimplemented_sections().first() {
                return Err(bad(format!(
                    "{s} is not supported by inferdb (service discovery: static_configs, file_sd_configs, http_sd_configs, dns_sd_configs, kubernetes_sd_configs)"
                )));
            }
            am.http_client_config().validate().map_err(bad)?;
        }
        Ok(())
    }
}

impl AlertmanagerConfig {
    /// The HTTP-client settings of the entry, in the shape every HTTP client of inferdb is
    /// built from (after load, `bearer_token` is already `authorization`).
    pub fn http_client_config(&self) -> HttpClientConfig {
        HttpClientConfig {
            basic_auth: self.basic_auth.clone(),
            authorization: self.authorization.clone(),
            bearer_token: self.bearer_token.clone(),
            bearer_token_file: self.bearer_token_file.clone(),
            tls_config: self.tls_config.clone(),
            proxy_url: self.proxy_url.clone(),
            no_proxy: self.no_proxy.clone(),
            proxy_from_environment: self.proxy_from_environment,
            follow_redirects: self.follow_redirects,
            enable_http2: self.enable_http2.unwrap_or(true),
            http_headers: self.http_headers.clone(),
            ..HttpClientConfig::default_settings()
        }
    }
}

fn default_scheme() -> String {
    "http".into()
}
fn default_path_prefix() -> String {
    "/".into()
}
fn default_timeout() -> PromDuration {
    PromDuration(Duration::from_secs(10))
}
fn default_api_version() -> String {
    "v2".into()
}
fn default_true() -> bool {
    true
}

macro_rules! alertmanager_config {
    ($($sd:ident),* $(,)?) => {
        /// One `alertmanagers:` entry: how to find a set of Alertmanagers and talk to them.
        #[derive(Debug, Clone, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct AlertmanagerConfig {
            /// Static Alertmanager addresses.
            #[serde(default)]
            pub static_configs: Vec<StaticConfig>,
            /// File service discovery of Alertmanagers.
            #[serde(default)]
            pub file_sd_configs: Vec<FileSdConfig>,
            /// `http` or `https`.
            #[serde(default = "default_scheme")]
            pub scheme: String,
            /// Prefix of the path alerts are posted to (`/`).
            #[serde(default = "default_path_prefix")]
            pub path_prefix: String,
            /// Timeout of one send (10s).
            #[serde(default = "default_timeout")]
            pub timeout: PromDuration,
            /// The Alertmanager API version (`v2`, the only one Prometheus 3 accepts).
            #[serde(default = "default_api_version")]
            pub api_version: String,
            /// Basic auth.
            #[serde(default)]
            pub basic_auth: Option<BasicAuth>,
            /// Authorization header.
            #[serde(default)]
            pub authorization: Option<Authorization>,
            /// Older spelling of `authorization: {credentials: ...}`, turned into it at load.
            #[serde(default)]
            pub bearer_token: Option<Secret>,
            /// Older spelling of `authorization: {credentials_file: ...}`, turned into it at load.
            #[serde(default)]
            pub bearer_token_file: Option<String>,
            /// TLS settings.
            #[serde(default)]
            pub tls_config: Option<TlsConfig>,
            /// Follow redirects (true).
            #[serde(default = "default_true")]
            pub follow_redirects: bool,
            /// Accepted, unused.
            #[serde(default)]
            pub enable_http2: Option<bool>,
            /// Rules applied to the discovered Alertmanagers.
            #[serde(default)]
            pub relabel_configs: Vec<RelabelConfig>,
            /// Rules applied to the alerts sent to these Alertmanagers.
            #[serde(default)]
            pub alert_relabel_configs: Vec<RelabelConfig>,
            /// HTTP proxy for every request.
            #[serde(default)]
            pub proxy_url: Option<String>,
            /// Hosts that bypass `proxy_url` (comma-separated).
            #[serde(default)]
            pub no_proxy: Option<String>,
            /// Take the proxy from `HTTP_PROXY`/`HTTPS_PROXY`/`NO_PROXY`.
            #[serde(default)]
            pub proxy_from_environment: bool,
            /// Extra request headers.
            #[serde(default)]
            pub http_headers: Option<BTreeMap<String, HeaderValues>>,
            /// HTTP service discovery of Alertmanagers.
            #[serde(default)]
            pub http_sd_configs: Vec<crate::discovery::http::HttpSdConfig>,
            /// DNS service discovery of Alertmanagers.
            #[serde(default)]
            pub dns_sd_configs: Vec<crate::discovery::dns::DnsSdConfig>,
            /// Kubernetes service discovery of Alertmanagers.
            #[serde(default)]
            pub kubernetes_sd_configs: Vec<crate::discovery::kubernetes::KubernetesSdConfig>,
            #[serde(default)]
            oauth2: Option<serde_yaml::Value>,
            #[serde(default)]
            sigv4: Option<serde_yaml::Value>,
            #[serde(default)]
            proxy_connect_header: Option<serde_yaml::Value>,
            $(
                #[serde(default)]
                $sd: Option<serde_yaml::Value>,
            )*
        }

        impl AlertmanagerConfig {
            /// The settings given that inferdb does not implement: refused at load.
            pub(crate) fn unimplemented_sections(&self) -> Vec<&'static str> {
                let mut v = vec![];
                for (name, present) in [
                    ("oauth2", self.oauth2.is_some()),
                    ("sigv4", self.sigv4.is_some()),
                    ("proxy_connect_header", self.proxy_connect_header.is_some()),
                ] {
                    if present {
                        v.push(name);
                    }
                }
                $( if self.$sd.is_some() { v.push(stringify!($sd)); } )*
                v
            }
        }
    };
}

with_other_sds!(alertmanager_config);

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use std::time::Duration;

    #[test]
    fn reads_alertmanagers_with_prometheus_defaults() {
        let c = Config::parse(
            r#"
alerting:
  alert_relabel_configs:
    - {source_labels: [severity], regex: debug, action: drop}
  alertmanagers:
    - static_configs: [{targets: ['am1:9093', 'am2:9093']}]
    - scheme: https
      path_prefix: /am
      timeout: 3s
      basic_auth: {username: u, password: p}
      tls_config: {insecure_skip_verify: true}
      relabel_configs: [{source_labels: [__address__], regex: 'am2.*', action: drop}]
      file_sd_configs: [{files: [am.yml]}]
"#,
        )
        .unwrap();
        let a = &c.alerting;
        assert_eq!(a.alert_relabel_configs.len(), 1);
        let (d, e) = (&a.alertmanagers[0], &a.alertmanagers[1]);
        assert_eq!(d.static_configs[0].targets, ["am1:9093", "am2:9093"]);
        assert_eq!(
            (
                d.scheme.as_str(),
                d.path_prefix.as_str(),
                d.api_version.as_str()
            ),
            ("http", "/", "v2")
        );
        assert_eq!(d.timeout.0, Duration::from_secs(10));
        assert_eq!(
            (e.scheme.as_str(), e.path_prefix.as_str()),
            ("https", "/am")
        );
        assert_eq!(e.timeout.0, Duration::from_secs(3));
        assert_eq!(e.basic_auth.as_ref().unwrap().username, "u");
        assert!(e.tls_config.as_ref().unwrap().insecure_skip_verify);
        assert_eq!(e.relabel_configs.len(), 1);
        assert_eq!(e.file_sd_configs[0].files, ["am.yml"]);
    }

    #[test]
    fn refuses_what_prometheus_refuses() {
        for (yaml, want) in [
            ("alerting: {alertmanagers: [{api_version: v1}]}", "api version"),
            ("alerting: {alertmanagers: [{scheme: ftp}]}", "scheme"),
            (
                "alerting: {alertmanagers: [{basic_auth: {username: u}, authorization: {credentials: c}}]}",
                "at most one",
            ),
            (
                "alerting: {alert_relabel_configs: [{action: replace}]}",
                "alert_relabel_configs",
            ),
            ("alerting: {alertmanagers: [{static_config: []}]}", "static_config"),
            ("alerting: {bogus: 1}", "bogus"),
        ] {
            let e = Config::parse(yaml).unwrap_err().to_string();
            assert!(e.contains(want), "{yaml}: {e}");
        }
    }

    #[test]
    fn discoveries_and_client_settings_inferdb_lacks_are_refused() {
        for (yaml, want) in [
            (
                "{consul_sd_configs: [{server: 'c:8500'}]}",
                "consul_sd_configs is not supported",
            ),
            ("{oauth2: {client_id: x}}", "oauth2 is not supported"),
            ("{sigv4: {region: eu}}", "sigv4 is not supported"),
            (
                "{no_proxy: 'a'}",
                "no_proxy is configured, proxy_url must also",
            ),
        ] {
            let e = Config::parse(&format!("alerting: {{alertmanagers: [{yaml}]}}"))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("alertmanagers[0]") && e.contains(want),
                "{yaml}: {e}"
            );
        }
        let c = Config::parse(
            r#"
alerting:
  alertmanagers:
    - kubernetes_sd_configs: [{role: pod}]
      dns_sd_configs: [{names: [am.example], type: A, port: 9093}]
      http_sd_configs: [{url: 'http://sd/'}]
      proxy_url: 'http://proxy:3128'
      http_headers: {X-Team: {values: [infra]}}
"#,
        )
        .unwrap();
        let am = &c.alerting.alertmanagers[0];
        assert_eq!(
            (
                am.kubernetes_sd_configs.len(),
                am.dns_sd_configs.len(),
                am.http_sd_configs.len()
            ),
            (1, 1, 1)
        );
        let h = am.http_client_config();
        assert_eq!(h.proxy_url.as_deref(), Some("http://proxy:3128"));
        assert!(h.client().is_ok());
    }
}
