//! The HTTP-client settings that `scrape_configs` and `remote_write` entries share (Prometheus'
//! `http_config`): `basic_auth`, `authorization`, the older `bearer_token`/`bearer_token_file`
//! and `tls_config`, with the checks Prometheus makes on them and the reading of their secret
//! files. Secret values are [`Secret`]s, which never print.

use std::fmt;
use std::path::Path;

use serde::Deserialize;

/// A secret setting (a password, credentials, a token), as Prometheus' `Secret`: `Debug` and
/// `Display` print `<secret>`, so no log line, error or debug dump shows the value; only
/// [`Secret::expose`] gives it, for the request that needs it.
#[derive(Clone, PartialEq, Eq, Hash, Default, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// What Prometheus prints in place of a secret.
    pub const MASK: &'static str = "<secret>";

    /// Wraps `s`.
    pub fn new(s: impl Into<String>) -> Secret {
        Secret(s.into())
    }

    /// The value itself, for the request that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether it is empty (Prometheus treats an empty secret as not given).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(Secret::MASK)
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(Secret::MASK)
    }
}

/// `basic_auth:`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BasicAuth {
    /// User name.
    pub username: String,
    /// Password given inline.
    #[serde(default)]
    pub password: Option<Secret>,
    /// File holding the password.
    #[serde(default)]
    pub password_file: Option<String>,
}

/// `authorization:`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Authorization {
    /// The scheme (`Bearer` when not given).
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    /// The credentials inline.
    #[serde(default)]
    pub credentials: Option<Secret>,
    /// File holding the credentials.
    #[serde(default)]
    pub credentials_file: Option<String>,
}

impl Authorization {
    /// The scheme: `type` (trimmed), else `Bearer`.
    pub fn scheme(&self) -> &str {
        match self.kind.as_deref().map(str::trim) {
            Some(t) if !t.is_empty() => t,
            _ => "Bearer",
        }
    }
}

/// `tls_config:`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// CA certificate (PEM) to verify the server with.
    #[serde(default)]
    pub ca_file: Option<String>,
    /// CA certificate inline.
    #[serde(default)]
    pub ca: Option<String>,
    /// Client certificate (PEM).
    #[serde(default)]
    pub cert_file: Option<String>,
    /// Client key (PEM).
    #[serde(default)]
    pub key_file: Option<String>,
    /// Server name for SNI and verification.
    #[serde(default)]
    pub server_name: Option<String>,
    /// Skip certificate verification.
    #[serde(default)]
    pub insecure_skip_verify: bool,
    /// Accepted, unused.
    #[serde(default)]
    pub min_version: Option<String>,
    /// Accepted, unused.
    #[serde(default)]
    pub max_version: Option<String>,
}

/// Refuses what Prometheus refuses in the authentication settings: both `basic_auth` and
/// `authorization`, a secret given both inline and as a file, and `authorization` of type
/// `Basic`. The message is Prometheus', without a prefix.
pub fn check_auth(
    basic_auth: Option<&BasicAuth>,
    authorization: Option<&Authorization>,
) -> Result<(), String> {
    check_http_auth(basic_auth, authorization, None, None)
}

/// [`check_auth`] with the older `bearer_token` and `bearer_token_file` too, in the order and
/// with the messages of Prometheus' `HTTPClientConfig.Validate` (empty values count as not
/// given, as there).
pub fn check_http_auth(
    basic_auth: Option<&BasicAuth>,
    authorization: Option<&Authorization>,
    bearer_token: Option<&Secret>,
    bearer_token_file: Option<&str>,
) -> Result<(), String> {
    let token = bearer_token.is_some_and(|t| !t.is_empty());
    let token_file = bearer_token_file.is_some_and(|f| !f.is_empty());
    if token && token_file {
        return Err("at most one of bearer_token & bearer_token_file must be configured".into());
    }
    if basic_auth.is_some() && (token || token_file) {
        return Err(
            "at most one of basic_auth, oauth2, bearer_token & bearer_token_file must be configured"
                .into(),
        );
    }
    if let Some(b) = basic_auth {
        if b.password.as_ref().is_some_and(|p| !p.is_empty())
            && b.password_file.as_deref().is_some_and(|f| !f.is_empty())
        {
            return Err(
                "at most one of basic_auth password & password_file must be configured".into(),
            );
        }
    }
    if let Some(a) = authorization {
        if token || token_file {
            return Err(
                "authorization is not compatible with bearer_token & bearer_token_file".into(),
            );
        }
        if a.credentials.as_ref().is_some_and(|c| !c.is_empty())
            && a.credentials_file.as_deref().is_some_and(|f| !f.is_empty())
        {
            return Err(
                "at most one of authorization credentials & credentials_file must be configured"
                    .into(),
            );
        }
        if a.scheme().eq_ignore_ascii_case("basic") {
            return Err(
                "authorization type cannot be set to \"basic\", use \"basic_auth\" instead".into(),
            );
        }
        if basic_auth.is_some() {
            return Err(
                "at most one of basic_auth, oauth2 & authorization must be configured".into(),
            );
        }
    }
    Ok(())
}

/// Turns `bearer_token` / `bearer_token_file` into `authorization: {type: Bearer, credentials
/// / credentials_file}`, as Prometheus does once the settings are checked, so that the rest of
/// inferdb knows one form. Call after [`check_http_auth`].
pub fn bearer_to_authorization(
    authorization: &mut Option<Authorization>,
    bearer_token: &mut Option<Secret>,
    bearer_token_file: &mut Option<String>,
) {
    let token = bearer_token.take().filter(|t| !t.is_empty());
    let file = bearer_token_file.take().filter(|f| !f.is_empty());
    if authorization.is_some() {
        return;
    }
    if token.is_some() || file.is_some() {
        *authorization = Some(Authorization {
            kind: Some("Bearer".into()),
            credentials: token,
            credentials_file: file,
        });
    }
}

/// Joins a relative file path onto `base` (the configuration file's folder), as Prometheus'
/// `config.JoinDir` does with Go's `filepath.Join`: the result is cleaned lexically, so
/// `./rules.yml` beside `./prometheus.yml` is `rules.yml`, as Prometheus names it in its API.
/// Empty and absolute paths are left alone.
pub fn join_dir(base: &Path, file: &mut String) {
    if !file.is_empty() && Path::new(file.as_str()).is_relative() {
        let base = base.to_string_lossy();
        *file = if base.is_empty() {
            clean_path(file)
        } else {
            clean_path(&format!("{base}/{file}"))
        };
    }
}

/// Go's `filepath.Clean` on Unix: one `/` between elements, `.` elements dropped, each `..`
/// removing the element before it (and dropped at the root), `.` for an empty result.
fn clean_path(path: &str) -> String {
    let rooted = path.starts_with('/');
    let mut out: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => match out.last() {
                Some(&last) if last != ".." => {
                    out.pop();
                }
                _ if rooted => {}
                _ => out.push(".."),
            },
            p => out.push(p),
        }
    }
    let joined = out.join("/");
    match (rooted, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".to_owned(),
        (false, false) => joined,
    }
}

/// Makes the relative secret files of `basic_auth` and `authorization` relative to `base`
/// (the configuration file's folder), as Prometheus does.
pub fn resolve_secret_files(
    basic_auth: Option<&mut BasicAuth>,
    authorization: Option<&mut Authorization>,
    base: &Path,
) {
    let files = basic_auth
        .and_then(|b| b.password_file.as_mut())
        .into_iter()
        .chain(authorization.and_then(|a| a.credentials_file.as_mut()));
    for f in files {
        join_dir(base, f);
    }
}

impl TlsConfig {
    /// Makes the relative `ca_file`, `cert_file` and `key_file` relative to `base` (the
    /// configuration file's folder), as Prometheus does.
    pub fn resolve_files(&mut self, base: &Path) {
        for f in [&mut self.ca_file, &mut self.cert_file, &mut self.key_file]
            .into_iter()
            .flatten()
        {
            join_dir(base, f);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth(y: &str) -> (Option<BasicAuth>, Option<Authorization>) {
        #[derive(Deserialize)]
        struct Both {
            basic_auth: Option<BasicAuth>,
            authorization: Option<Authorization>,
        }
        let b: Both = serde_yaml::from_str(y).unwrap();
        (b.basic_auth, b.authorization)
    }

    #[test]
    fn refuses_what_prometheus_refuses() {
        for (y, want) in [
            (
                "{basic_auth: {username: a}, authorization: {credentials: b}}",
                "at most one of basic_auth, oauth2 & authorization must be configured",
            ),
            (
                "{basic_auth: {username: a, password: p, password_file: f}}",
                "at most one of basic_auth password & password_file must be configured",
            ),
            (
                "{authorization: {credentials: c, credentials_file: f}}",
                "at most one of authorization credentials & credentials_file must be configured",
            ),
            (
                "{authorization: {type: Basic, credentials: c}}",
                "basic_auth",
            ),
        ] {
            let (b, a) = auth(y);
            let e = check_auth(b.as_ref(), a.as_ref()).unwrap_err();
            assert!(e.contains(want), "{y}: {e}");
        }
        let (b, a) = auth("{basic_auth: {username: a, password_file: f}}");
        assert_eq!(check_auth(b.as_ref(), a.as_ref()), Ok(()));
        let (b, a) = auth("{authorization: {credentials_file: f}}");
        assert_eq!(check_auth(b.as_ref(), a.as_ref()), Ok(()));
        assert_eq!(a.unwrap().scheme(), "Bearer");
    }

    #[derive(Deserialize)]
    struct WithBearer {
        basic_auth: Option<BasicAuth>,
        authorization: Option<Authorization>,
        bearer_token: Option<Secret>,
        bearer_token_file: Option<String>,
    }

    fn check_bearer(y: &str) -> Result<Option<Authorization>, String> {
        let mut w: WithBearer = serde_yaml::from_str(y).unwrap();
        check_http_auth(
            w.basic_auth.as_ref(),
            w.authorization.as_ref(),
            w.bearer_token.as_ref(),
            w.bearer_token_file.as_deref(),
        )?;
        bearer_to_authorization(
            &mut w.authorization,
            &mut w.bearer_token,
            &mut w.bearer_token_file,
        );
        assert!(w.bearer_token.is_none() && w.bearer_token_file.is_none());
        Ok(w.authorization)
    }

    /// Messages as `promtool check config` 2.42 prints them for the same settings.
    #[test]
    fn bearer_token_as_prometheus_reads_it() {
        for (y, want) in [
            (
                "{bearer_token: a, bearer_token_file: b}",
                "at most one of bearer_token & bearer_token_file must be configured",
            ),
            (
                "{bearer_token: a, basic_auth: {username: u}}",
                "at most one of basic_auth, oauth2, bearer_token & bearer_token_file must be configured",
            ),
            (
                "{bearer_token_file: a, authorization: {credentials: c}}",
                "authorization is not compatible with bearer_token & bearer_token_file",
            ),
        ] {
            assert_eq!(check_bearer(y).unwrap_err(), want, "{y}");
        }
        let a = check_bearer("{bearer_token: tok}").unwrap().unwrap();
        assert_eq!(
            (a.scheme(), a.credentials.as_ref().map(Secret::expose)),
            ("Bearer", Some("tok"))
        );
        let a = check_bearer("{bearer_token_file: /t}").unwrap().unwrap();
        assert_eq!(a.credentials_file.as_deref(), Some("/t"));
        assert!(a.credentials.is_none());
        // empty values are not given, as in Prometheus
        assert!(check_bearer("{bearer_token: '', bearer_token_file: f}").is_ok());
        assert!(check_bearer("{bearer_token: ''}").unwrap().is_none());
    }

    #[test]
    fn secrets_never_print() {
        let (b, a) = auth("{basic_auth: {username: u, password: hunter2}}");
        let dump = format!("{b:?} {a:?}");
        assert!(
            !dump.contains("hunter2") && dump.contains("<secret>"),
            "{dump}"
        );
        assert_eq!(b.unwrap().password.unwrap().expose(), "hunter2");
        let s = Secret::new("x");
        assert_eq!(format!("{s} {s:?}"), "<secret> <secret>");
    }

    #[test]
    fn secret_files_are_relative_to_the_config_folder() {
        let (mut b, mut a) = auth(
            "{basic_auth: {username: a, password_file: pw}, authorization: {credentials_file: /abs/tok}}",
        );
        resolve_secret_files(b.as_mut(), a.as_mut(), Path::new("/etc/inferdb"));
        assert_eq!(b.unwrap().password_file.as_deref(), Some("/etc/inferdb/pw"));
        assert_eq!(a.unwrap().credentials_file.as_deref(), Some("/abs/tok"));
    }

    #[test]
    fn tls_files_are_relative_to_the_config_folder() {
        let mut t: TlsConfig =
            serde_yaml::from_str("{ca_file: ca.pem, cert_file: sub/c.pem, key_file: /k.pem}")
                .unwrap();
        t.resolve_files(Path::new("/etc/inferdb"));
        assert_eq!(t.ca_file.as_deref(), Some("/etc/inferdb/ca.pem"));
        assert_eq!(t.cert_file.as_deref(), Some("/etc/inferdb/sub/c.pem"));
        assert_eq!(t.key_file.as_deref(), Some("/k.pem"));
        let mut empty = String::new();
        join_dir(Path::new("/etc"), &mut empty);
        assert_eq!(empty, "");
    }

    /// The cases of Go's `TestClean` (path/filepath, Unix) and `config.JoinDir` on them.
    #[test]
    fn paths_are_cleaned_as_go_does() {
        for (input, want) in [
            ("abc", "abc"),
            ("abc/def", "abc/def"),
            ("a/b/c", "a/b/c"),
            (".", "."),
            ("..", ".."),
            ("../..", "../.."),
            ("../../abc", "../../abc"),
            ("/abc", "/abc"),
            ("/", "/"),
            ("", "."),
            ("abc/", "abc"),
            ("/abc/", "/abc"),
            ("abc//def//ghi", "abc/def/ghi"),
            ("//abc", "/abc"),
            ("abc/./def", "abc/def"),
            ("/./abc/def", "/abc/def"),
            ("abc/.", "abc"),
            ("abc/def/ghi/../jkl", "abc/def/jkl"),
            ("abc/def/../ghi/../jkl", "abc/jkl"),
            ("abc/def/..", "abc"),
            ("abc/def/../..", "."),
            ("/abc/def/../..", "/"),
            ("abc/def/../../..", ".."),
            ("/abc/def/../../..", "/"),
            ("abc/def/../../../ghi/jkl/../../../mno", "../../mno"),
            ("/../abc", "/abc"),
            ("abc/./../def", "def"),
            ("abc//./../def", "def"),
            ("abc/../../././../def", "../../def"),
        ] {
            assert_eq!(clean_path(input), want, "{input:?}");
        }
        for (base, file, want) in [
            (".", "./rules.yml", "rules.yml"),
            ("", "rules/*.yml", "rules/*.yml"),
            ("/etc/prometheus/", "../rules/a.yml", "/etc/rules/a.yml"),
            ("./conf", "x.yml", "conf/x.yml"),
            ("/etc", "/abs.yml", "/abs.yml"),
        ] {
            let mut f = file.to_owned();
            join_dir(Path::new(base), &mut f);
            assert_eq!(f, want, "{base:?} + {file:?}");
        }
    }
}
