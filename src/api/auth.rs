//! Prometheus-style web configuration (`--web.config.file`): HTTP basic auth with bcrypt
//! hashes (every endpoint then requires a valid user) and HTTPS from `tls_server_config`
//! (see [`super::tls`]); settings inferdb cannot honour are refused at start, so a
//! configuration meant to encrypt never silently serves plain text.

use std::collections::{BTreeMap, HashSet};
use std::hash::{BuildHasher, RandomState};
use std::path::Path;
use std::sync::{Arc, Mutex};

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use serde::Deserialize;

use crate::config::http::Secret;

/// Why a web configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum WebConfigError {
    /// The file could not be read.
    #[error("reading {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The YAML is malformed or has unknown fields.
    #[error("parsing web configuration: {0}")]
    Yaml(String),
    /// A setting inferdb does not implement.
    #[error("{0}")]
    Unsupported(String),
    /// A password hash is not bcrypt.
    #[error("basic_auth_users: user {0:?}: the password must be a bcrypt hash ($2y$...)")]
    BadHash(String),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWebConfig {
    #[serde(default)]
    tls_server_config: Option<super::tls::TlsServerConfig>,
    #[serde(default)]
    http_server_config: Option<serde_yaml::Value>,
    #[serde(default)]
    basic_auth_users: BTreeMap<String, Secret>,
}

/// The parsed web configuration.
#[derive(Debug, Clone, Default)]
pub struct WebConfig {
    /// User name to bcrypt hash (a secret in Prometheus too: never printed).
    pub basic_auth_users: BTreeMap<String, Secret>,
    /// The TLS server settings, built; `None`: plain HTTP.
    pub tls: Option<Arc<rustls::ServerConfig>>,
}

impl WebConfig {
    /// Parses the YAML text of a web configuration file; files it names are read relative to
    /// the current folder.
    pub fn parse(text: &str) -> Result<WebConfig, WebConfigError> {
        Self::parse_in(text, Path::new("."))
    }

    /// Parses the YAML text of a web configuration file whose relative file names are taken
    /// relative to `base`.
    pub fn parse_in(text: &str, base: &Path) -> Result<WebConfig, WebConfigError> {
        let raw: RawWebConfig = if text.trim().is_empty() {
            RawWebConfig {
                tls_server_config: None,
                http_server_config: None,
                basic_auth_users: BTreeMap::new(),
            }
        } else {
            serde_yaml::from_str(text).map_err(|e| WebConfigError::Yaml(e.to_string()))?
        };
        let tls = match &raw.tls_server_config {
            Some(t) => t.build(base)?,
            None => None,
        };
        if raw.http_server_config.is_some() {
            tracing::warn!("web configuration: http_server_config is ignored");
        }
        for (user, hash) in &raw.basic_auth_users {
            let hash = hash.expose();
            if !(hash.starts_with("$2a$") || hash.starts_with("$2b$") || hash.starts_with("$2y$")) {
                return Err(WebConfigError::BadHash(user.clone()));
            }
        }
        Ok(WebConfig {
            basic_auth_users: raw.basic_auth_users,
            tls,
        })
    }

    /// Reads and parses a web configuration file.
    pub fn load(path: &Path) -> Result<WebConfig, WebConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| WebConfigError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse_in(&text, path.parent().unwrap_or(Path::new(".")))
    }
}

/// Checks credentials against bcrypt hashes, remembering (as keyed hashes, not the passwords)
/// the pairs that verified, since bcrypt is deliberately slow.
#[derive(Debug)]
pub struct BasicAuth {
    users: BTreeMap<String, Secret>,
    good: Mutex<HashSet<u64>>,
    keys: RandomState,
}

impl BasicAuth {
    /// An authenticator for `users` (name to bcrypt hash).
    pub fn new(users: BTreeMap<String, Secret>) -> Self {
        BasicAuth {
            users,
            good: Mutex::new(HashSet::new()),
            keys: RandomState::new(),
        }
    }

    /// Whether `Authorization: <header>` names a user with the right password.
    pub fn check(&self, header: Option<&str>) -> bool {
        let Some(b64) = header.and_then(|h| h.strip_prefix("Basic ")) else {
            return false;
        };
        let Ok(raw) = base64::engine::general_purpose::STANDARD.decode(b64.trim()) else {
            return false;
        };
        let Ok(raw) = String::from_utf8(raw) else {
            return false;
        };
        let Some((user, pass)) = raw.split_once(':') else {
            return false;
        };
        let Some(hash) = self.users.get(user) else {
            return false;
        };
        let key = self.keys.hash_one((user, pass, hash));
        if self.good.lock().map(|g| g.contains(&key)).unwrap_or(false) {
            return true;
        }
        let ok = bcrypt::verify(pass, hash.expose()).unwrap_or(false);
        if ok {
            if let Ok(mut g) = self.good.lock() {
                if g.len() > 1024 {
                    g.clear();
                }
                g.insert(key);
            }
        }
        ok
    }
}

/// Middleware: answers 401 with a `WWW-Authenticate` challenge unless the request carries
/// valid credentials.
pub(crate) async fn require(
    State(auth): State<Arc<BasicAuth>>,
    req: Request,
    next: Next,
) -> Response {
    let header = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|h| h.to_str().ok())
        .map(str::to_owned);
    let a = auth.clone();
    let ok = tokio::task::spawn_blocking(move || a.check(header.as_deref()))
        .await
        .unwrap_or(false);
    if ok {
        return next.run(req).await;
    }
    let mut r = (StatusCode::UNAUTHORIZED, "Unauthorized\n").into_response();
    r.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Basic realm=\"inferdb\""),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_checks() {
        let hash = bcrypt::hash("secret", 4).unwrap();
        let cfg = WebConfig::parse(&format!("basic_auth_users:\n  alice: '{hash}'\n")).unwrap();
        // the hashes are secrets, as in Prometheus' web config: no debug dump shows them
        let dump = format!("{cfg:?}");
        assert!(!dump.contains(&hash) && dump.contains("<secret>"), "{dump}");
        let auth = BasicAuth::new(cfg.basic_auth_users);
        assert!(!format!("{auth:?}").contains(&hash));
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        assert!(auth.check(Some(&format!("Basic {}", b64("alice:secret")))));
        // cached path gives the same answer
        assert!(auth.check(Some(&format!("Basic {}", b64("alice:secret")))));
        assert!(!auth.check(Some(&format!("Basic {}", b64("alice:wrong")))));
        assert!(!auth.check(Some(&format!("Basic {}", b64("bob:secret")))));
        assert!(!auth.check(Some("Bearer x")));
        assert!(!auth.check(None));
        assert!(WebConfig::parse("basic_auth_users:\n  bob: plain\n").is_err());
        // a certificate file that is not there
        assert!(WebConfig::parse(
            "tls_server_config:\n  cert_file: /nonexistent/a\n  key_file: /nonexistent/b\n"
        )
        .is_err());
        assert!(WebConfig::parse("tls_server_config:\n  bogus: 1\n").is_err());
        // as Prometheus: no certificate and key, no TLS
        assert!(
            WebConfig::parse("tls_server_config:\n  min_version: TLS12\n")
                .unwrap()
                .tls
                .is_none()
        );
        assert!(WebConfig::parse("nonsense: 1\n").is_err());
        assert!(WebConfig::parse("").unwrap().basic_auth_users.is_empty());
    }
}
