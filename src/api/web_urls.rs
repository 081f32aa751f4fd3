//! Where the server is reachable: the external URL (`--web.external-url`) used in every URL
//! inferdb generates for others (UI links, alert generator URLs, target pages), and the route
//! prefix (`--web.route-prefix`) every endpoint is served under. Both are computed as
//! Prometheus computes them; the UI, the API and the rule notifier read them from here
//! ([`super::ApiConfig::web`]).

use thiserror::Error;

/// A bad `--web.external-url`.
#[derive(Debug, Error)]
pub enum WebUrlError {
    /// The text is not an absolute http(s) URL.
    #[error("--web.external-url {0:?}: {1}")]
    Invalid(String, String),
}

/// The external URL and the route prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebUrls {
    /// Scheme, host, port and path, without a trailing `/` (e.g. `https://mon.example/prom`).
    external: String,
    /// `""` for the root, else `/segment...` without a trailing `/`.
    prefix: String,
}

impl Default for WebUrls {
    fn default() -> Self {
        WebUrls {
            external: "http://localhost:9090".into(),
            prefix: String::new(),
        }
    }
}

/// The machine's host name (what Go's `os.Hostname` reads on Linux), `localhost` if unknown.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

impl WebUrls {
    /// Prometheus' rules: without `external_url`, `http://<hostname>:<listen port>/`; the URL
    /// must be absolute http(s) and its path loses trailing slashes. Without `route_prefix` the
    /// prefix is the external URL's path; either way it becomes `/` + the path trimmed of
    /// slashes (`""` here for the root).
    pub fn new(
        external_url: Option<&str>,
        route_prefix: Option<&str>,
        listen_port: u16,
    ) -> Result<Self, WebUrlError> {
        let text = match external_url {
            Some(u) => u.to_string(),
            None => format!("http://{}:{listen_port}/", hostname()),
        };
        let bad = |m: &str| WebUrlError::Invalid(text.clone(), m.to_string());
        if text.starts_with(['"', '\'']) || text.ends_with(['"', '\'']) {
            return Err(bad("URL must not begin or end with quotes"));
        }
        let mut u = url::Url::parse(&text).map_err(|e| bad(&e.to_string()))?;
        if !matches!(u.scheme(), "http" | "https") || u.host_str().is_none() {
            return Err(bad("must be an absolute http:// or https:// URL"));
        }
        let path = u.path().trim_end_matches('/').to_string();
        u.set_path(&path);
        u.set_query(None);
        u.set_fragment(None);
        let external = u.as_str().trim_end_matches('/').to_string();
        let prefix_src = route_prefix.unwrap_or(&path);
        let trimmed = prefix_src.trim_matches('/');
        let prefix = if trimmed.is_empty() {
            String::new()
        } else {
            format!("/{trimmed}")
        };
        Ok(WebUrls { external, prefix })
    }

    /// The route prefix: `""` for the root, else `/segment...` without a trailing `/`.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The route prefix as Prometheus shows it (`/` for the root).
    pub fn prefix_display(&self) -> &str {
        if self.prefix.is_empty() {
            "/"
        } else {
            &self.prefix
        }
    }

    /// A path of this server as its own pages must link to it: the prefix + `path` (which
    /// starts with `/`).
    pub fn path(&self, path: &str) -> String {
        format!("{}{path}", self.prefix)
    }

    /// The external URL without a trailing `/`.
    pub fn external_url(&self) -> &str {
        &self.external
    }

    /// An absolute URL for others: the external URL + `path` (which starts with `/`).
    pub fn external(&self, path: &str) -> String {
        format!("{}{path}", self.external)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_follows_the_external_path_unless_given() {
        let w = WebUrls::new(Some("https://mon.example:8443/prom/"), None, 9090).unwrap();
        assert_eq!(w.external_url(), "https://mon.example:8443/prom");
        assert_eq!(w.prefix(), "/prom");
        assert_eq!(w.path("/api/v1/query"), "/prom/api/v1/query");
        assert_eq!(w.external("/graph"), "https://mon.example:8443/prom/graph");
        let w = WebUrls::new(Some("http://h/a/b"), Some("x/"), 9090).unwrap();
        assert_eq!(w.prefix(), "/x");
        let w = WebUrls::new(Some("http://h/a"), Some("/"), 9090).unwrap();
        assert_eq!((w.prefix(), w.prefix_display()), ("", "/"));
    }

    #[test]
    fn default_is_the_host_and_listen_port() {
        let w = WebUrls::new(None, None, 9191).unwrap();
        assert!(w.external_url().starts_with("http://"));
        assert!(w.external_url().ends_with(":9191"), "{}", w.external_url());
        assert_eq!(w.prefix(), "");
    }

    #[test]
    fn refuses_what_prometheus_refuses() {
        for bad in ["\"http://h/\"", "not a url", "ftp://h/", "/just/a/path"] {
            assert!(WebUrls::new(Some(bad), None, 9090).is_err(), "{bad}");
        }
    }
}
