//! HTTPS from the `tls_server_config` section of a Prometheus-style web configuration file,
//! served with rustls (ring provider) and hyper.
//!
//! Settings follow Prometheus' exporter-toolkit: `cert_file`/`key_file` (or inline
//! `cert`/`key`), `client_auth_type` and `client_ca_file`, `min_version`/`max_version`,
//! `cipher_suites`, `curve_preferences`, `prefer_server_cipher_suites`. What rustls cannot do
//! (TLS 1.0/1.1, CBC or RSA-key-exchange suites, P-521, requesting a client certificate without
//! verifying it) is refused at start with a message saying so, never silently weakened.

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use rustls::crypto::{ring as provider, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig, SupportedCipherSuite};
use serde::Deserialize;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

use super::auth::WebConfigError;

/// The `tls_server_config` section as written in the file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsServerConfig {
    /// PEM certificate chain file, server certificate first.
    #[serde(default)]
    pub cert_file: Option<String>,
    /// PEM private key file.
    #[serde(default)]
    pub key_file: Option<String>,
    /// Inline PEM certificate chain (instead of `cert_file`).
    #[serde(default)]
    pub cert: Option<String>,
    /// Inline PEM private key (instead of `key_file`).
    #[serde(default)]
    pub key: Option<String>,
    /// `NoClientCert` (default), `VerifyClientCertIfGiven` or `RequireAndVerifyClientCert`.
    #[serde(default)]
    pub client_auth_type: Option<String>,
    /// PEM file of the CAs that sign client certificates.
    #[serde(default)]
    pub client_ca_file: Option<String>,
    /// Client certificate SANs allowed in (refused: not implemented).
    #[serde(default)]
    pub client_allowed_sans: Option<Vec<String>>,
    /// `TLS12` (default) or `TLS13`.
    #[serde(default)]
    pub min_version: Option<String>,
    /// `TLS12` or `TLS13` (default).
    #[serde(default)]
    pub max_version: Option<String>,
    /// TLS 1.2 suites by Go name; TLS 1.3 suites are not configurable (as in Go).
    #[serde(default)]
    pub cipher_suites: Option<Vec<String>>,
    /// Key exchange groups by Go name (`X25519`, `CurveP256`, `CurveP384`).
    #[serde(default)]
    pub curve_preferences: Option<Vec<String>>,
    /// Whether the server's suite order wins over the client's.
    #[serde(default)]
    pub prefer_server_cipher_suites: Option<bool>,
}

fn unsupported(msg: impl Into<String>) -> WebConfigError {
    WebConfigError::Unsupported(format!("tls_server_config: {}", msg.into()))
}

fn read_pem(path: &str, base: &Path, what: &str) -> Result<Vec<u8>, WebConfigError> {
    let p = base.join(path);
    std::fs::read(&p).map_err(|source| WebConfigError::Io {
        path: format!("{what} {}", p.display()),
        source,
    })
}

/// A TLS version by its exporter-toolkit name; `None` for the ones rustls cannot serve.
fn version(name: &str, key: &str) -> Result<u8, WebConfigError> {
    match name {
        "TLS12" => Ok(12),
        "TLS13" => Ok(13),
        "TLS10" | "TLS11" => Err(unsupported(format!(
            "{key}: {name} is not available (inferdb's TLS stack, rustls, serves TLS 1.2 and 1.3 only); use TLS12 or TLS13"
        ))),
        other => Err(unsupported(format!(
            "{key}: unknown TLS version {other:?} (expected TLS12 or TLS13)"
        ))),
    }
}

/// The rustls TLS 1.2 suite for a Go cipher suite name.
fn suite(name: &str) -> Result<SupportedCipherSuite, WebConfigError> {
    use provider::cipher_suite as cs;
    Ok(match name {
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256" => cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384" => cs::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305" | "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256" => {
            cs::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256
        }
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256" => cs::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384" => cs::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305" | "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256" => {
            cs::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256
        }
        "TLS_AES_128_GCM_SHA256" | "TLS_AES_256_GCM_SHA384" | "TLS_CHACHA20_POLY1305_SHA256" => {
            return Err(unsupported(format!(
                "cipher_suites: {name} is a TLS 1.3 suite; TLS 1.3 suites are not configurable (as in Prometheus)"
            )))
        }
        other => {
            return Err(unsupported(format!(
                "cipher_suites: {other} is not available (rustls offers only ECDHE with AES-GCM or ChaCha20-Poly1305 for TLS 1.2)"
            )))
        }
    })
}

impl TlsServerConfig {
    /// Builds the rustls server configuration, reading certificate and key files relative to
    /// `base` (the web configuration file's folder, as Prometheus resolves them).
    pub fn build(&self, base: &Path) -> Result<Option<Arc<ServerConfig>>, WebConfigError> {
        let blank = |s: &Option<String>| s.as_deref().is_none_or(|v| v.trim().is_empty());
        if blank(&self.cert_file) && blank(&self.key_file) && blank(&self.cert) && blank(&self.key)
        {
            // as Prometheus: a TLS section without certificate and key leaves TLS off
            tracing::warn!("tls_server_config without a certificate and key: serving plain HTTP");
            return Ok(None);
        }
        let cert_pem = match (&self.cert_file, &self.cert) {
            (Some(_), Some(_)) => return Err(unsupported("set cert_file or cert, not both")),
            (Some(f), None) => read_pem(f, base, "cert_file")?,
            (None, Some(c)) => c.clone().into_bytes(),
            (None, None) => return Err(unsupported("missing cert_file")),
        };
        let key_pem = match (&self.key_file, &self.key) {
            (Some(_), Some(_)) => return Err(unsupported("set key_file or key, not both")),
            (Some(f), None) => read_pem(f, base, "key_file")?,
            (None, Some(k)) => k.clone().into_bytes(),
            (None, None) => return Err(unsupported("missing key_file")),
        };
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
            .collect::<Result<_, _>>()
            .map_err(|e| unsupported(format!("certificate: {e}")))?;
        if certs.is_empty() {
            return Err(unsupported("certificate: no PEM CERTIFICATE block found"));
        }
        let key = PrivateKeyDer::from_pem_slice(&key_pem)
            .map_err(|e| unsupported(format!("private key: {e}")))?;

        let min = version(
            self.min_version.as_deref().unwrap_or("TLS12"),
            "min_version",
        )?;
        let max = version(
            self.max_version.as_deref().unwrap_or("TLS13"),
            "max_version",
        )?;
        if min > max {
            return Err(unsupported("min_version is above max_version"));
        }
        let mut versions: Vec<&'static rustls::SupportedProtocolVersion> = Vec::new();
        if min <= 12 {
            versions.push(&rustls::version::TLS12);
        }
        if max >= 13 {
            versions.push(&rustls::version::TLS13);
        }

        if self
            .client_allowed_sans
            .as_ref()
            .is_some_and(|s| !s.is_empty())
        {
            return Err(unsupported(
                "client_allowed_sans is not implemented; use client_ca_file with a dedicated CA",
            ));
        }

        let mut prov: CryptoProvider = provider::default_provider();
        if let Some(names) = self.cipher_suites.as_ref().filter(|n| !n.is_empty()) {
            let mut tls12 = Vec::new();
            for n in names {
                let s = suite(n)?;
                if !tls12.contains(&s) {
                    tls12.push(s);
                }
            }
            let mut suites: Vec<SupportedCipherSuite> = prov
                .cipher_suites
                .iter()
                .copied()
                .filter(|s| s.version() == &rustls::version::TLS13)
                .collect();
            suites.extend(tls12);
            prov.cipher_suites = suites;
        }
        if let Some(names) = self.curve_preferences.as_ref().filter(|n| !n.is_empty()) {
            use provider::kx_group as kx;
            let mut groups: Vec<&'static dyn rustls::crypto::SupportedKxGroup> = Vec::new();
            for n in names {
                groups.push(match n.as_str() {
                    "X25519" => kx::X25519,
                    "CurveP256" => kx::SECP256R1,
                    "CurveP384" => kx::SECP384R1,
                    other => {
                        return Err(unsupported(format!(
                            "curve_preferences: {other} is not available (X25519, CurveP256, CurveP384)"
                        )))
                    }
                });
            }
            prov.kx_groups = groups;
        }
        let prov = Arc::new(prov);

        let builder = ServerConfig::builder_with_provider(prov.clone())
            .with_protocol_versions(&versions)
            .map_err(|e| unsupported(e.to_string()))?;
        let auth_type = self.client_auth_type.as_deref().unwrap_or("NoClientCert");
        let roots = || -> Result<Arc<RootCertStore>, WebConfigError> {
            let Some(f) = &self.client_ca_file else {
                return Err(unsupported(format!(
                    "client_auth_type {auth_type} needs client_ca_file"
                )));
            };
            let pem = read_pem(f, base, "client_ca_file")?;
            let mut store = RootCertStore::empty();
            for c in CertificateDer::pem_slice_iter(&pem) {
                let c = c.map_err(|e| unsupported(format!("client_ca_file: {e}")))?;
                store
                    .add(c)
                    .map_err(|e| unsupported(format!("client_ca_file: {e}")))?;
            }
            if store.is_empty() {
                return Err(unsupported("client_ca_file: no CA certificate found"));
            }
            Ok(Arc::new(store))
        };
        let builder = match auth_type {
            "" | "NoClientCert" => {
                if self.client_ca_file.is_some() {
                    tracing::warn!(
                        "tls_server_config: client_ca_file is unused with client_auth_type NoClientCert"
                    );
                }
                builder.with_no_client_auth()
            }
            "RequireAndVerifyClientCert" | "VerifyClientCertIfGiven" => {
                let v = WebPkiClientVerifier::builder_with_provider(roots()?, prov.clone());
                let v = if auth_type == "VerifyClientCertIfGiven" {
                    v.allow_unauthenticated()
                } else {
                    v
                };
                let v = v
                    .build()
                    .map_err(|e| unsupported(format!("client_ca_file: {e}")))?;
                builder.with_client_cert_verifier(v)
            }
            "RequestClientCert" | "RequireAnyClientCert" => {
                return Err(unsupported(format!(
                    "client_auth_type {auth_type} (a client certificate taken without verification) is not supported; use VerifyClientCertIfGiven or RequireAndVerifyClientCert with client_ca_file"
                )))
            }
            other => {
                return Err(unsupported(format!(
                    "unknown client_auth_type {other:?} (NoClientCert, VerifyClientCertIfGiven, RequireAndVerifyClientCert)"
                )))
            }
        };
        let mut cfg = builder
            .with_single_cert(certs, key)
            .map_err(|e| unsupported(format!("certificate and key: {e}")))?;
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        cfg.ignore_client_order = self.prefer_server_cipher_suites.unwrap_or(false);
        Ok(Some(Arc::new(cfg)))
    }
}

/// What Go's TLS server answers a plain-HTTP request on an HTTPS port.
const PLAIN_HTTP_ANSWER: &[u8] =
    b"HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n";

/// Serves `app` over HTTPS on `listener` until `shutdown` completes, within `limits`: a
/// client that speaks plain HTTP gets Go's answer, a handshake has 10 s.
pub async fn serve_tls(
    listener: TcpListener,
    app: Router,
    tls: Arc<ServerConfig>,
    limits: super::conn::ConnLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    super::conn::serve(listener, app, limits, shutdown, move |mut tcp, peer| {
        let acceptor = acceptor.clone();
        async move {
            // A TLS connection starts with a handshake record (0x16); anything else is most
            // likely plain HTTP: say so, as Prometheus (Go) does, and close.
            let mut first = [0u8; 1];
            match tokio::time::timeout(Duration::from_secs(10), tcp.peek(&mut first)).await {
                Ok(Ok(1)) if first[0] != 0x16 => {
                    let _ = tcp.write_all(PLAIN_HTTP_ANSWER).await;
                    let _ = tcp.shutdown().await;
                    return None;
                }
                Ok(Ok(1)) => {}
                _ => return None,
            }
            match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(tcp)).await {
                Ok(Ok(s)) => Some(s),
                Ok(Err(e)) => {
                    tracing::debug!("TLS handshake with {peer}: {e}");
                    None
                }
                Err(_) => {
                    tracing::debug!("TLS handshake with {peer}: timed out");
                    None
                }
            }
        }
    })
    .await
}
