//! The HTTP-client settings of the discovery mechanisms that talk HTTP (`http_sd_configs`,
//! `kubernetes_sd_configs`): Prometheus' inline `http_config` fields, checked as Prometheus
//! checks them, and the client and `Authorization` header they make.

use std::collections::BTreeMap;
use std::path::Path;

use serde::de::{DeserializeOwned, Error as _};
use serde::{Deserialize, Deserializer};

use crate::config::http::{check_http_auth, join_dir, resolve_secret_files, Secret};
use crate::config::http::{Authorization, BasicAuth, TlsConfig};

/// Prometheus' `http_config` block, inline in an SD entry.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpClientConfig {
    /// Basic auth.
    #[serde(default)]
    pub basic_auth: Option<BasicAuth>,
    /// `Authorization` header.
    #[serde(default)]
    pub authorization: Option<Authorization>,
    /// Deprecated spelling of `authorization: {credentials: ...}`.
    #[serde(default)]
    pub bearer_token: Option<Secret>,
    /// Deprecated spelling of `authorization: {credentials_file: ...}`.
    #[serde(default)]
    pub bearer_token_file: Option<String>,
    /// OAuth 2.0: not implemented, refused at load.
    #[serde(default)]
    pub oauth2: Option<serde_yaml::Value>,
    /// TLS settings.
    #[serde(default)]
    pub tls_config: Option<TlsConfig>,
    /// HTTP proxy for every request.
    #[serde(default)]
    pub proxy_url: Option<String>,
    /// Hosts that bypass `proxy_url` (comma-separated).
    #[serde(default)]
    pub no_proxy: Option<String>,
    /// Take the proxy from `HTTP_PROXY`/`HTTPS_PROXY`/`NO_PROXY`.
    #[serde(default)]
    pub proxy_from_environment: bool,
    /// Headers sent to the proxy on CONNECT: not implemented, refused at load.
    #[serde(default)]
    pub proxy_connect_header: Option<serde_yaml::Value>,
    /// Follow redirects (true).
    #[serde(default = "yes")]
    pub follow_redirects: bool,
    /// HTTP/2 (true); inferdb's client speaks HTTP/1.1 to these servers.
    #[serde(default = "yes")]
    pub enable_http2: bool,
    /// Extra headers: `name: {values: [...]}` (also `secrets`, `files`).
    #[serde(default)]
    pub http_headers: Option<BTreeMap<String, HeaderValues>>,
}

fn yes() -> bool {
    true
}

/// Headers `http_headers` may not set (lower case), as Prometheus refuses them: they change the
/// connection, or the client sets them itself.
const RESERVED_HEADERS: &[&str] = &[
    "authorization",
    "host",
    "content-encoding",
    "content-length",
    "content-type",
    "user-agent",
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "www-authenticate",
    "accept-encoding",
    "x-prometheus-remote-write-version",
    "x-prometheus-remote-read-version",
    "x-prometheus-scrape-timeout-seconds",
    "x-amz-date",
    "x-amz-security-token",
    "x-amz-content-sha256",
];

/// The values of one `http_headers` entry.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeaderValues {
    /// Plain values.
    #[serde(default)]
    pub values: Vec<String>,
    /// Secret values (sent the same way, never printed).
    #[serde(default)]
    pub secrets: Vec<Secret>,
    /// Files whose content is a value.
    #[serde(default)]
    pub files: Vec<String>,
}

/// Deserialises an SD entry whose own fields are `O` and whose other fields are the inline
/// [`HttpClientConfig`]; a field neither knows is refused with its name.
pub(crate) fn with_http_config<'de, D, O>(
    d: D,
    own: &[&str],
) -> Result<(O, HttpClientConfig), D::Error>
where
    D: Deserializer<'de>,
    O: DeserializeOwned,
{
    let all = serde_yaml::Mapping::deserialize(d)?;
    let (mut mine, mut rest) = (serde_yaml::Mapping::new(), serde_yaml::Mapping::new());
    for (k, v) in all {
        if k.as_str().is_some_and(|k| own.contains(&k)) {
            mine.insert(k, v);
        } else {
            rest.insert(k, v);
        }
    }
    let o = serde_yaml::from_value(serde_yaml::Value::Mapping(mine)).map_err(D::Error::custom)?;
    let h: HttpClientConfig =
        serde_yaml::from_value(serde_yaml::Value::Mapping(rest)).map_err(D::Error::custom)?;
    h.validate().map_err(D::Error::custom)?;
    Ok((o, h))
}

impl HttpClientConfig {
    /// The settings of an entry that sets none (redirects followed, HTTP/2 allowed).
    pub fn default_settings() -> Self {
        HttpClientConfig {
            follow_redirects: true,
            enable_http2: true,
            ..Default::default()
        }
    }

    /// Prometheus' checks, and refusals of what inferdb does not implement.
    pub fn validate(&self) -> Result<(), String> {
        check_http_auth(
            self.basic_auth.as_ref(),
            self.authorization.as_ref(),
            self.bearer_token.as_ref(),
            self.bearer_token_file.as_deref(),
        )?;
        if self.oauth2.is_some() {
            return Err("oauth2 is not supported by inferdb".into());
        }
        if self.proxy_connect_header.is_some() {
            return Err("proxy_connect_header is not supported by inferdb".into());
        }
        if self.proxy_from_environment && (self.proxy_url.is_some() || self.no_proxy.is_some()) {
            return Err(
                "if proxy_from_environment is configured, proxy_url must not be configured".into(),
            );
        }
        if self.no_proxy.is_some() && self.proxy_url.is_none() {
            return Err("if no_proxy is configured, proxy_url must also be configured".into());
        }
        for name in self.http_headers.iter().flat_map(|h| h.keys()) {
            if RESERVED_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
                return Err(format!("setting header {name:?} is not allowed"));
            }
        }
        Ok(())
    }

    /// Makes relative file names relative to `dir` (the configuration file's folder).
    pub fn set_directory(&mut self, dir: &Path) {
        resolve_secret_files(self.basic_auth.as_mut(), self.authorization.as_mut(), dir);
        if let Some(f) = &mut self.bearer_token_file {
            join_dir(dir, f);
        }
        if let Some(t) = &mut self.tls_config {
            t.resolve_files(dir);
        }
    }

    /// The `Authorization` header value, if any (secret files are read now, so a rotated
    /// token is picked up on the next request).
    pub fn authorization_header(&self) -> Result<Option<String>, String> {
        let read = |f: &str| {
            std::fs::read_to_string(f)
                .map(|s| s.trim().to_string())
                .map_err(|e| format!("unable to read {f}: {e}"))
        };
        if let Some(b) = &self.basic_auth {
            let pw = match (&b.password, &b.password_file) {
                (Some(p), _) => p.expose().to_owned(),
                (None, Some(f)) => read(f)?,
                _ => String::new(),
            };
            use base64::Engine as _;
            let enc =
                base64::engine::general_purpose::STANDARD.encode(format!("{}:{pw}", b.username));
            return Ok(Some(format!("Basic {enc}")));
        }
        if let Some(a) = &self.authorization {
            let cred = match (&a.credentials, &a.credentials_file) {
                (Some(c), _) => c.expose().to_owned(),
                (None, Some(f)) => read(f)?,
                _ => String::new(),
            };
            return Ok(Some(format!("{} {cred}", a.scheme())));
        }
        if let Some(t) = &self.bearer_token {
            return Ok(Some(format!("Bearer {}", t.expose())));
        }
        if let Some(f) = &self.bearer_token_file {
            return Ok(Some(format!("Bearer {}", read(f)?)));
        }
        Ok(None)
    }

    /// `b` with the proxy (`proxy_url` and `no_proxy`, or the environment's with
    /// `proxy_from_environment`, else none) and the `http_headers` of these settings (header
    /// files are read now).
    pub fn proxy_and_headers(
        &self,
        mut b: reqwest::ClientBuilder,
    ) -> Result<reqwest::ClientBuilder, String> {
        if !self.proxy_from_environment {
            b = b.no_proxy();
        }
        if let Some(p) = &self.proxy_url {
            let mut proxy = reqwest::Proxy::all(p).map_err(|e| format!("proxy_url {p}: {e}"))?;
            if let Some(np) = &self.no_proxy {
                proxy = proxy.no_proxy(reqwest::NoProxy::from_string(np));
            }
            b = b.proxy(proxy);
        }
        if let Some(hs) = &self.http_headers {
            let mut map = reqwest::header::HeaderMap::new();
            for (name, vals) in hs {
                let n = reqwest::header::HeaderName::from_bytes(name.as_bytes())
                    .map_err(|e| format!("http_headers {name}: {e}"))?;
                let mut all: Vec<String> = vals.values.clone();
                all.extend(vals.secrets.iter().map(|s| s.expose().to_owned()));
                for f in &vals.files {
                    all.push(
                        std::fs::read_to_string(f)
                            .map_err(|e| format!("http_headers {name} file {f}: {e}"))?
                            .trim()
                            .to_string(),
                    );
                }
                // one field with the values joined by ", " (RFC 9110 5.3: the same as one
                // line per value, which the client's default headers cannot carry)
                if all.is_empty() {
                    continue;
                }
                let v = reqwest::header::HeaderValue::from_str(&all.join(", "))
                    .map_err(|e| format!("http_headers {name}: {e}"))?;
                map.insert(n, v);
            }
            b = b.default_headers(map);
        }
        Ok(b)
    }

    /// A client with these settings (TLS, proxy, redirects, headers; no credentials: see
    /// [`HttpClientConfig::authorization_header`]).
    pub fn client(&self) -> Result<reqwest::Client, String> {
        let mut b = reqwest::Client::builder()
            .user_agent(concat!("inferdb/", env!("CARGO_PKG_VERSION")))
            .pool_max_idle_per_host(2);
        if !self.follow_redirects {
            b = b.redirect(reqwest::redirect::Policy::none());
        }
        b = self.proxy_and_headers(b)?;
        if let Some(tls) = &self.tls_config {
            if tls.insecure_skip_verify {
                b = b.danger_accept_invalid_certs(true);
            }
            let ca_pem = match (&tls.ca, &tls.ca_file) {
                (Some(c), _) => Some(c.clone().into_bytes()),
                (None, Some(f)) => Some(std::fs::read(f).map_err(|e| format!("ca_file {f}: {e}"))?),
                _ => None,
            };
            if let Some(pem) = ca_pem {
                for c in reqwest::Certificate::from_pem_bundle(&pem)
                    .map_err(|e| format!("ca certificate: {e}"))?
                {
                    b = b.add_root_certificate(c);
                }
            }
            if let (Some(cert), Some(key)) = (&tls.cert_file, &tls.key_file) {
                let mut pem = std::fs::read(cert).map_err(|e| format!("cert_file {cert}: {e}"))?;
                pem.extend(std::fs::read(key).map_err(|e| format!("key_file {key}: {e}"))?);
                b = b.identity(
                    reqwest::Identity::from_pem(&pem).map_err(|e| format!("client cert: {e}"))?,
                );
            }
        }
        b.build().map_err(|e| e.to_string())
    }
}

/// An error with its causes (`error sending request: ...: connection refused`).
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}
