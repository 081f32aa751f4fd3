//! The HTTP-client settings that `scrape_configs` and `remote_write` entries share (Prometheus'
//! `http_config`): `basic_auth`, `authorization` and `tls_config`, with the checks Prometheus
//! makes on them and the reading of their secret files.

use std::path::Path;

use serde::Deserialize;

/// `basic_auth:`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BasicAuth {
    /// User name.
    pub username: String,
    /// Password given inline.
    #[serde(default)]
    pub password: Option<String>,
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
    pub credentials: Option<String>,
    /// File holding the credentials.
    #[serde(default)]
    pub credentials_file: Option<String>,
}

impl Authorization {
    /// The scheme: `type`, else `Bearer`.
    pub fn scheme(&self) -> &str {
        self.kind.as_deref().unwrap_or("Bearer")
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
/// `Basic`. The message names the settings, without a prefix.
pub fn check_auth(
    basic_auth: Option<&BasicAuth>,
    authorization: Option<&Authorization>,
) -> Result<(), String> {
    if basic_auth.is_some() && authorization.is_some() {
        return Err("at most one of basic_auth and authorization may be configured".into());
    }
    if let Some(b) = basic_auth {
        if b.password.is_some() && b.password_file.is_some() {
            return Err("at most one of basic_auth password and password_file".into());
        }
    }
    if let Some(a) = authorization {
        if a.credentials.is_some() && a.credentials_file.is_some() {
            return Err("at most one of authorization credentials and credentials_file".into());
        }
        if a.kind
            .as_deref()
            .is_some_and(|t| t.eq_ignore_ascii_case("basic"))
        {
            return Err(
                "authorization type cannot be set to \"basic\", use \"basic_auth\" instead".into(),
            );
        }
    }
    Ok(())
}

/// Joins a relative file path onto `base` (the configuration file's folder), as Prometheus'
/// `config.JoinDir` does; empty and absolute paths are left alone.
pub fn join_dir(base: &Path, file: &mut String) {
    if !file.is_empty() && Path::new(file.as_str()).is_relative() {
        *file = base.join(&*file).to_string_lossy().into_owned();
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
                "at most one of basic_auth and authorization",
            ),
            (
                "{basic_auth: {username: a, password: p, password_file: f}}",
                "password and password_file",
            ),
            (
                "{authorization: {credentials: c, credentials_file: f}}",
                "credentials and credentials_file",
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
}
