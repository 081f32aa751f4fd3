//! The Prometheus-compatible configuration file (`prometheus.yml`): [`Config`], its `global`
//! section, loading and checking.
//!
//! `global`, `scrape_configs` ([`scrape`]), `remote_write` ([`remote_write`]), `rule_files`
//! and `alerting` ([`alerting`]) are typed and read as Prometheus reads them; the HTTP-client
//! settings they share are in [`http`]. Unknown fields are refused with their name and line.
//! Sections inferdb does not implement (remote_read, storage, tracing, otlp, runtime, service
//! discoveries other than static and file) are accepted, named in one warning
//! ([`Config::warnings`]) and ignored. `rule_files` are run by the rule manager
//! (`rules::manager`), `alerting` by the notifier (`notifier`).

pub mod alerting;
pub mod http;
pub mod masked;
pub mod remote_write;
pub mod scrape;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer};

pub use alerting::AlertingConfig;
pub use remote_write::RemoteWriteConfig;
pub use scrape::{FileSdConfig, ScrapeConfig, StaticConfig};

/// A configuration error; the message names the field and line where serde_yaml knows them.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("reading {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// YAML that does not parse or has unknown / wrongly typed fields.
    #[error("parsing YAML: {0}")]
    Yaml(String),
    /// A well-formed file whose values do not make sense.
    #[error("{0}")]
    Invalid(String),
}

/// A Prometheus duration (`15s`, `1m30s`, `500ms`, `1h`, `2d`, `1w`, `1y`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct PromDuration(pub Duration);

/// Parses a Prometheus duration string (`model.ParseDuration`, Go's messages).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    inferdb_query::parser::parse_model_duration_ms(s).map(|ms| Duration::from_millis(ms as u64))
}

impl<'de> Deserialize<'de> for PromDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        parse_duration(&s)
            .map(PromDuration)
            .map_err(serde::de::Error::custom)
    }
}

/// A byte size as Prometheus writes it (`50MB`, `1GB`, `512KiB`, `0` = no limit); base 1024.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ByteSize(pub u64);

/// Parses a byte size.
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let n_end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let n: u64 = s[..n_end]
        .parse()
        .map_err(|_| format!("invalid size {s:?}"))?;
    let mult: u64 = match s[n_end..].trim() {
        "" | "B" => 1,
        "KB" | "KiB" | "K" => 1 << 10,
        "MB" | "MiB" | "M" => 1 << 20,
        "GB" | "GiB" | "G" => 1 << 30,
        "TB" | "TiB" | "T" => 1 << 40,
        "PB" | "PiB" | "P" => 1 << 50,
        _ => return Err(format!("invalid size {s:?}")),
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("size out of range {s:?}"))
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            N(u64),
            S(String),
        }
        match Raw::deserialize(d)? {
            Raw::N(n) => Ok(ByteSize(n)),
            Raw::S(s) => parse_bytes(&s)
                .map(ByteSize)
                .map_err(serde::de::Error::custom),
        }
    }
}

/// The whole file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Defaults for every job.
    #[serde(default)]
    pub global: GlobalConfig,
    /// The jobs.
    #[serde(default)]
    pub scrape_configs: Vec<ScrapeConfig>,
    /// Other files of scrape configs (Prometheus 2.43+), glob patterns in the last path
    /// element allowed; read and appended, their jobs' files relative to their own folder.
    #[serde(default)]
    pub scrape_config_files: Vec<String>,
    /// Rule files (globs in the last path element allowed), relative to the file's folder.
    #[serde(default, deserialize_with = "null_as_default")]
    pub rule_files: Vec<String>,
    /// Where alerts go.
    #[serde(default, deserialize_with = "null_as_default")]
    pub alerting: AlertingConfig,
    /// Remote-write targets; relative secret files already resolved against the file's folder.
    #[serde(default, deserialize_with = "null_as_default")]
    pub remote_write: Vec<RemoteWriteConfig>,
    #[serde(default)]
    remote_read: Option<serde_yaml::Value>,
    #[serde(default)]
    storage: Option<serde_yaml::Value>,
    #[serde(default)]
    tracing: Option<serde_yaml::Value>,
    #[serde(default)]
    otlp: Option<serde_yaml::Value>,
    #[serde(default)]
    runtime: Option<serde_yaml::Value>,
    /// Sections that were accepted but are not implemented: one line for the log.
    #[serde(skip)]
    pub warnings: Vec<String>,
}

/// `global:`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GlobalConfig {
    /// Default scrape interval (1m).
    #[serde(default = "default_interval")]
    pub scrape_interval: PromDuration,
    /// Default scrape timeout (10s, at most the interval).
    #[serde(default)]
    pub scrape_timeout: Option<PromDuration>,
    /// Default rule evaluation interval (1m).
    #[serde(default = "default_interval")]
    pub evaluation_interval: PromDuration,
    /// Default offset of rule queries back from the evaluation time (0).
    #[serde(default)]
    pub rule_query_offset: PromDuration,
    /// Labels added to series when they leave inferdb (remote write, federation).
    #[serde(default)]
    pub external_labels: BTreeMap<String, String>,
    /// Accepted, unused.
    #[serde(default)]
    pub query_log_file: Option<String>,
    /// Accepted, unused.
    #[serde(default)]
    pub scrape_failure_log_file: Option<String>,
    /// Accepted, unused (inferdb always offers the Prometheus 3 set).
    #[serde(default)]
    pub scrape_protocols: Option<Vec<String>>,
    /// Default body size limit.
    #[serde(default)]
    pub body_size_limit: Option<ByteSize>,
    /// Default sample limit.
    #[serde(default)]
    pub sample_limit: Option<u64>,
    /// Default label limit.
    #[serde(default)]
    pub label_limit: Option<u64>,
    /// Default label-name length limit.
    #[serde(default)]
    pub label_name_length_limit: Option<u64>,
    /// Default label-value length limit.
    #[serde(default)]
    pub label_value_length_limit: Option<u64>,
    /// Accepted, unused.
    #[serde(default)]
    pub target_limit: Option<u64>,
    /// Accepted, unused.
    #[serde(default)]
    pub keep_dropped_targets: Option<u64>,
    /// Accepted, unused.
    #[serde(default)]
    pub metric_name_validation_scheme: Option<String>,
    /// Accepted, unused.
    #[serde(default)]
    pub metric_name_escaping_scheme: Option<String>,
    /// Accepted, unused.
    #[serde(default)]
    pub convert_classic_histograms_to_nhcb: Option<bool>,
    /// Accepted, unused.
    #[serde(default)]
    pub always_scrape_classic_histograms: Option<bool>,
}

fn default_interval() -> PromDuration {
    PromDuration(Duration::from_secs(60))
}

/// Reads an explicit YAML `null` (a key with nothing after it) as the type's default, as Go's
/// YAML decoder leaves the field unset.
fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

impl GlobalConfig {
    /// The effective default timeout: as given, else 10s capped at the interval.
    pub fn timeout(&self) -> Duration {
        match self.scrape_timeout {
            Some(t) => t.0,
            None => Duration::from_secs(10).min(self.scrape_interval.0),
        }
    }
}

impl Default for GlobalConfig {
    fn default() -> Self {
        serde_yaml::from_str("{}").expect("empty global config deserialises")
    }
}

impl Config {
    /// Parses a configuration from YAML text; relative file paths stay as written (relative
    /// to the current folder); [`Config::load`] makes them relative to the file's folder.
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        let mut c: Config =
            serde_yaml::from_str(text).map_err(|e| ConfigError::Yaml(e.to_string()))?;
        c.check(Path::new("."))?;
        Ok(c)
    }

    /// Reads and parses a configuration file (and its `scrape_config_files`); relative file
    /// paths in it are made relative to the file's folder, as Prometheus' `SetDirectory` does.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let mut c: Config = serde_yaml::from_str(&text)
            .map_err(|e| ConfigError::Yaml(format!("{}: {e}", path.display())))?;
        let base = path.parent().unwrap_or(Path::new("."));
        let mut extra = vec![];
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Extra {
            #[serde(default)]
            scrape_configs: Vec<ScrapeConfig>,
        }
        for f in c.scrape_config_files.clone() {
            for p in glob_files(&base.join(&f)) {
                let t = std::fs::read_to_string(&p).map_err(|source| ConfigError::Io {
                    path: p.clone(),
                    source,
                })?;
                let mut e: Extra = serde_yaml::from_str(&t)
                    .map_err(|e| ConfigError::Yaml(format!("{}: {e}", p.display())))?;
                for sc in &mut e.scrape_configs {
                    sc.set_directory(p.parent().unwrap_or(Path::new(".")));
                }
                extra.extend(e.scrape_configs);
            }
        }
        for sc in &mut c.scrape_configs {
            sc.set_directory(base);
        }
        c.scrape_configs.extend(extra);
        for f in &mut c.rule_files {
            http::join_dir(base, f);
        }
        c.alerting.set_directory(base);
        c.check(base)?;
        Ok(c)
    }

    /// Checks what serde cannot; `base` resolves `remote_write`'s relative secret files.
    fn check(&mut self, base: &Path) -> Result<(), ConfigError> {
        let g = &self.global;
        if g.timeout() > g.scrape_interval.0 {
            return Err(ConfigError::Invalid(
                "global scrape timeout greater than scrape interval".into(),
            ));
        }
        for k in g.external_labels.keys() {
            if !valid_label_name(k) {
                return Err(ConfigError::Invalid(format!(
                    "{k:?} is not a valid label name in external_labels"
                )));
            }
        }
        for f in &self.scrape_config_files {
            // Prometheus: `*` only in the last path element
            if f.find('*').is_some_and(|i| f[i..].contains('/')) {
                return Err(ConfigError::Invalid(format!(
                    "invalid scrape config file path {f:?}"
                )));
            }
        }
        let mut seen = std::collections::HashSet::new();
        let mut unimpl: Vec<String> = vec![];
        for f in &self.rule_files {
            if f.find('*').is_some_and(|i| f[i..].contains('/')) {
                return Err(ConfigError::Invalid(format!(
                    "invalid rule file path {f:?}"
                )));
            }
        }
        self.alerting.check()?;
        remote_write::check_all(&mut self.remote_write, base)?;
        let g = &self.global;
        for (name, present) in [
            ("remote_read", self.remote_read.is_some()),
            ("storage", self.storage.is_some()),
            ("tracing", self.tracing.is_some()),
            ("otlp", self.otlp.is_some()),
            ("runtime", self.runtime.is_some()),
        ] {
            if present {
                unimpl.push(name.to_string());
            }
        }
        for sc in &mut self.scrape_configs {
            if sc.job_name.is_empty() {
                return Err(ConfigError::Invalid("job_name is empty".into()));
            }
            if !seen.insert(sc.job_name.clone()) {
                return Err(ConfigError::Invalid(format!(
                    "found multiple scrape configs with job name {:?}",
                    sc.job_name
                )));
            }
            let (iv, to) = (sc.interval(g), sc.timeout(g));
            if iv.is_zero() {
                return Err(ConfigError::Invalid(format!(
                    "job {:?}: scrape interval must be greater than zero",
                    sc.job_name
                )));
            }
            if to > iv {
                return Err(ConfigError::Invalid(format!(
                    "job {:?}: scrape timeout greater than scrape interval",
                    sc.job_name
                )));
            }
            if sc.scheme != "http" && sc.scheme != "https" {
                return Err(ConfigError::Invalid(format!(
                    "job {:?}: unknown scheme {:?}",
                    sc.job_name, sc.scheme
                )));
            }
            http::check_http_auth(
                sc.basic_auth.as_ref(),
                sc.authorization.as_ref(),
                sc.bearer_token.as_ref(),
                sc.bearer_token_file.as_deref(),
            )
            .map_err(|e| ConfigError::Invalid(format!("job {:?}: {e}", sc.job_name)))?;
            http::bearer_to_authorization(
                &mut sc.authorization,
                &mut sc.bearer_token,
                &mut sc.bearer_token_file,
            );
            if sc.oauth2.is_some() {
                return Err(ConfigError::Invalid(format!(
                    "job {:?}: oauth2 is not supported by inferdb",
                    sc.job_name
                )));
            }
            sc.proxy_and_headers()
                .validate()
                .map_err(|e| ConfigError::Invalid(format!("job {:?}: {e}", sc.job_name)))?;
            for r in sc.relabel_configs.iter().chain(&sc.metric_relabel_configs) {
                r.validate()
                    .map_err(|e| ConfigError::Invalid(format!("job {:?}: {e}", sc.job_name)))?;
            }
            if let Some(s) = sc.unimplemented_sections().first() {
                return Err(ConfigError::Invalid(format!(
                    "job {:?}: {s} is not supported by inferdb (service discovery: static_configs, file_sd_configs, http_sd_configs, dns_sd_configs, kubernetes_sd_configs)",
                    sc.job_name
                )));
            }
        }
        if !unimpl.is_empty() {
            self.warnings.push(format!(
                "configuration sections not implemented by inferdb and ignored: {}",
                unimpl.join(", ")
            ));
        }
        Ok(())
    }
}

/// The files a `scrape_config_files` entry names, as Go's `filepath.Glob` finds them: a
/// pattern (`*` and `?`, in the last path element only, as Prometheus requires) gives the
/// matching files in name order, a plain path gives itself if it exists; no match is no
/// file, not an error.
fn glob_files(pattern: &Path) -> Vec<PathBuf> {
    let name = pattern.file_name().map(|n| n.to_string_lossy());
    let Some(name) = name.filter(|n| n.contains(['*', '?'])) else {
        return pattern
            .exists()
            .then(|| pattern.to_path_buf())
            .into_iter()
            .collect();
    };
    let dir = pattern.parent().unwrap_or(Path::new("."));
    let Ok(rd) = std::fs::read_dir(if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    }) else {
        return vec![];
    };
    let mut v: Vec<PathBuf> = rd
        .filter_map(|e| e.ok())
        .filter(|e| glob_match(&name, &e.file_name().to_string_lossy()))
        .map(|e| dir.join(e.file_name()))
        .collect();
    v.sort();
    v
}

/// Whether `name` matches `pattern`, where `*` is any run of characters and `?` any one.
pub(crate) fn glob_match(pattern: &str, name: &str) -> bool {
    // '*' and '?' only, which is what file_sd patterns use in practice.
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    let (mut pi, mut ni, mut star, mut mark) = (0usize, 0usize, None::<usize>, 0usize);
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ni;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ni = mark;
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == '*' {
        pi += 1;
    }
    pi == p.len()
}

fn valid_label_name(s: &str) -> bool {
    let mut c = s.chars();
    matches!(c.next(), Some(ch) if ch.is_ascii_alphabetic() || ch == '_')
        && c.all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    const VLLM: &str = r#"
global:
  scrape_interval: 5s
  evaluation_interval: 30s
  external_labels:
    cluster: prod
rule_files:
  - rules.yml
alerting:
  alertmanagers:
    - static_configs: [{targets: ['localhost:9093']}]
scrape_configs:
  - job_name: vllm
    scrape_interval: 1s
    metrics_path: /metrics
    static_configs:
      - targets: ['localhost:8000', 'localhost:8001']
        labels:
          model: llama
    metric_relabel_configs:
      - source_labels: [__name__]
        regex: 'python_.*'
        action: drop
  - job_name: dcgm
    scheme: https
    params:
      collect[]: [a, b]
    basic_auth: {username: u, password: p}
    tls_config: {insecure_skip_verify: true}
    static_configs:
      - targets: ['gpu:9400']
"#;

    #[test]
    fn parses_a_vllm_config() {
        let c = Config::parse(VLLM).unwrap();
        assert_eq!(c.global.scrape_interval.0, Duration::from_secs(5));
        assert_eq!(c.global.timeout(), Duration::from_secs(5));
        assert_eq!(c.global.external_labels.get("cluster").unwrap(), "prod");
        assert_eq!(c.global.evaluation_interval.0, Duration::from_secs(30));
        assert_eq!(c.global.rule_query_offset.0, Duration::ZERO);
        assert_eq!(c.rule_files, ["rules.yml"]);
        assert_eq!(c.alerting.alertmanagers.len(), 1);
        let v = &c.scrape_configs[0];
        assert_eq!(v.interval(&c.global), Duration::from_secs(1));
        // global timeout (10s) capped at the job's interval
        assert_eq!(v.timeout(&c.global), Duration::from_secs(1));
        assert_eq!(v.static_configs[0].targets.len(), 2);
        assert_eq!(v.metric_relabel_configs.len(), 1);
        assert!(v.honor_timestamps);
        assert!(!v.honor_labels);
        let d = &c.scrape_configs[1];
        assert_eq!(d.scheme, "https");
        assert_eq!(d.params["collect[]"], vec!["a", "b"]);
        assert!(d.tls_config.as_ref().unwrap().insecure_skip_verify);
        assert_eq!(d.interval(&c.global), Duration::from_secs(5));
        // rule files are evaluated and alerts sent: nothing here is ignored
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    }

    /// Service discoveries inferdb lacks are refused by name, not ignored.
    #[test]
    fn other_service_discoveries_are_refused_by_name() {
        for kind in ["consul_sd_configs", "ec2_sd_configs", "docker_sd_configs"] {
            let y = format!("scrape_configs:\n  - job_name: j\n    {kind}: [{{}}]\n");
            let e = Config::parse(&y).unwrap_err().to_string();
            assert!(e.contains(kind) && e.contains("not supported"), "{e}");
        }
        let ok = "scrape_configs:\n  - job_name: j\n    http_sd_configs: [{url: 'http://h/sd'}]\n    dns_sd_configs: [{names: [a.b]}]\n";
        let c = Config::parse(ok).unwrap();
        assert_eq!(c.scrape_configs[0].http_sd_configs.len(), 1);
        assert_eq!(c.scrape_configs[0].dns_sd_configs.len(), 1);
    }

    #[test]
    fn refuses_unknown_fields_with_name_and_line() {
        let e = Config::parse("global:\n  scrape_interval: 5s\n  scrape_intervall: 3s\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("scrape_intervall"), "{e}");
        assert!(e.contains("line 3"), "{e}");
        let e = Config::parse("scrape_configs:\n  - job_name: a\n    static_config: []\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("static_config"), "{e}");
        assert!(e.contains("line 3"), "{e}");
        let e = Config::parse("bogus: 1\n").unwrap_err().to_string();
        assert!(e.contains("bogus"), "{e}");
    }

    #[test]
    fn refuses_bad_values() {
        for (yaml, what) in [
            ("global: {scrape_interval: 5x}", "duration"),
            (
                "scrape_configs: [{job_name: a, scrape_interval: 1s, scrape_timeout: 2s}]",
                "timeout greater",
            ),
            ("scrape_configs: [{job_name: a}, {job_name: a}]", "multiple"),
            ("scrape_configs: [{job_name: a, scheme: ftp}]", "scheme"),
            (
                "scrape_configs: [{job_name: a, relabel_configs: [{action: hashmod, target_label: x}]}]",
                "modulus",
            ),
            (
                "scrape_configs: [{job_name: a, basic_auth: {username: u}, authorization: {credentials: c}}]",
                "job \"a\": at most one of basic_auth, oauth2 & authorization must be configured",
            ),
            (
                "scrape_configs: [{job_name: a, authorization: {type: basic, credentials: c}}]",
                "use \"basic_auth\" instead",
            ),
        ] {
            let e = Config::parse(yaml).unwrap_err().to_string();
            assert!(e.contains(what), "{yaml}: {e}");
        }
    }

    #[test]
    fn durations_and_sizes() {
        assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2d").unwrap(), Duration::from_secs(172_800));
        assert!(parse_duration("1.5s").is_err());
        assert!(parse_duration("").is_err());
        assert_eq!(parse_bytes("50MB").unwrap(), 50 << 20);
        assert_eq!(parse_bytes("0").unwrap(), 0);
        assert!(parse_bytes("5XB").is_err());
    }

    /// Prometheus joins every relative file path of a job onto the folder of the file that
    /// holds the job (`SetDirectory`), not onto the current folder.
    #[test]
    fn relative_files_resolve_against_the_config_folder() {
        use crate::discovery::file::read_file_sd;
        use crate::scrape::target::Auth;
        let d = tempfile::tempdir().unwrap();
        let etc = d.path().join("etc");
        std::fs::create_dir_all(etc.join("jobs.d")).unwrap();
        std::fs::write(etc.join("pw"), "secret\n").unwrap();
        std::fs::write(etc.join("jobs.d/token"), "tok\n").unwrap();
        std::fs::write(etc.join("sd.yml"), "- targets: ['a:1']\n").unwrap();
        std::fs::write(
            etc.join("prometheus.yml"),
            r#"scrape_config_files: [jobs.d/extra.yml]
scrape_configs:
  - job_name: main
    basic_auth: {username: u, password_file: pw}
    tls_config: {ca_file: ca.pem, cert_file: /abs/c.pem, key_file: k.pem}
    file_sd_configs: [{files: [sd.yml]}]
"#,
        )
        .unwrap();
        std::fs::write(
            etc.join("jobs.d/extra.yml"),
            r#"scrape_configs:
  - job_name: extra
    authorization: {credentials_file: token}
    tls_config: {ca_file: ca.pem}
    file_sd_configs: [{files: ['../sd.yml']}]
"#,
        )
        .unwrap();
        // the current folder is not the configuration's
        assert_ne!(std::env::current_dir().unwrap(), etc);
        let c = Config::load(&etc.join("prometheus.yml")).unwrap();
        let (main, extra) = (&c.scrape_configs[0], &c.scrape_configs[1]);
        match Auth::from_config(main).unwrap() {
            Auth::Basic(u, pw) => assert_eq!(
                (u.as_str(), pw.as_ref().map(http::Secret::expose)),
                ("u", Some("secret"))
            ),
            o => panic!("{o:?}"),
        }
        match Auth::from_config(extra).unwrap() {
            Auth::Header(h) => assert_eq!(h.expose(), "Bearer tok"),
            o => panic!("{o:?}"),
        }
        let tls = main.tls_config.as_ref().unwrap();
        let s = |p: &Path| Some(p.to_string_lossy().into_owned());
        assert_eq!(tls.ca_file, s(&etc.join("ca.pem")));
        assert_eq!(tls.cert_file.as_deref(), Some("/abs/c.pem"));
        assert_eq!(tls.key_file, s(&etc.join("k.pem")));
        let extra_tls = extra.tls_config.as_ref().unwrap();
        assert_eq!(extra_tls.ca_file, s(&etc.join("jobs.d/ca.pem")));
        for sc in [main, extra] {
            let (groups, errs) = read_file_sd(&sc.file_sd_configs[0].files);
            assert!(errs.is_empty(), "{errs:?}");
            assert_eq!(groups[0].targets[0]["__address__"], "a:1");
        }
    }

    /// `scrape_config_files` entries are globs (Go's `filepath.Glob`): every match is read,
    /// in name order, and a pattern or path matching nothing adds no job and is no error.
    #[test]
    fn scrape_config_files_are_globs() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("jobs.d")).unwrap();
        for j in ["b", "a"] {
            std::fs::write(
                d.path().join(format!("jobs.d/{j}.yml")),
                format!("scrape_configs: [{{job_name: {j}}}]\n"),
            )
            .unwrap();
        }
        std::fs::write(d.path().join("jobs.d/c.txt"), "not yaml: [").unwrap();
        let cfg = d.path().join("prometheus.yml");
        std::fs::write(
            &cfg,
            "scrape_config_files: ['jobs.d/*.yml', 'none.d/*.yml', missing.yml]\n",
        )
        .unwrap();
        let c = Config::load(&cfg).unwrap();
        let jobs: Vec<_> = c
            .scrape_configs
            .iter()
            .map(|s| s.job_name.as_str())
            .collect();
        assert_eq!(jobs, ["a", "b"]);
        let e = Config::parse("scrape_config_files: ['*/jobs.yml']\n").unwrap_err();
        assert!(
            e.to_string().contains("invalid scrape config file path"),
            "{e}"
        );
    }

    #[test]
    fn rule_and_alerting_defaults() {
        let c = Config::parse("rule_files:\nalerting:\nremote_write:\n").unwrap();
        assert_eq!(c.global.evaluation_interval.0, Duration::from_secs(60));
        assert_eq!(c.global.rule_query_offset.0, Duration::ZERO);
        assert!(c.rule_files.is_empty() && c.alerting.is_empty() && c.remote_write.is_empty());
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        let c = Config::parse("global: {rule_query_offset: 30s}").unwrap();
        assert_eq!(c.global.rule_query_offset.0, Duration::from_secs(30));
        let e = Config::parse("rule_files: ['*/rules.yml']").unwrap_err();
        assert!(e.to_string().contains("invalid rule file path"), "{e}");
    }

    /// `load` makes rule files, Alertmanager and remote-write files relative to the
    /// configuration's folder; `remote_write` entries are checked as part of the file.
    #[test]
    fn load_resolves_rule_alerting_and_remote_write_files() {
        let d = tempfile::tempdir().unwrap();
        let cfg = d.path().join("prometheus.yml");
        std::fs::write(
            &cfg,
            r#"rule_files: [rules/*.yml, /abs/r.yml]
alerting:
  alertmanagers: [{file_sd_configs: [{files: [am.yml]}], authorization: {credentials_file: tok}}]
remote_write: [{url: 'http://r/api/v1/write', basic_auth: {username: u, password_file: pw}}]
"#,
        )
        .unwrap();
        let c = Config::load(&cfg).unwrap();
        let at = |f: &str| d.path().join(f).to_string_lossy().into_owned();
        assert_eq!(c.rule_files, [at("rules/*.yml"), "/abs/r.yml".into()]);
        let am = &c.alerting.alertmanagers[0];
        assert_eq!(am.file_sd_configs[0].files, [at("am.yml")]);
        let tok = am.authorization.as_ref().unwrap().credentials_file.clone();
        assert_eq!(tok, Some(at("tok")));
        let pw = c.remote_write[0].basic_auth.as_ref().unwrap();
        assert_eq!(pw.password_file, Some(at("pw")));
        let e =
            Config::parse("remote_write: [{url: 'http://x/'}, {url: 'http://x/'}]").unwrap_err();
        assert!(e.to_string().contains("multiple remote write"), "{e}");
    }

    /// `bearer_token` and `bearer_token_file` are read as Prometheus 2.42 reads them in jobs,
    /// remote write and Alertmanagers: turned into `authorization` (files relative to the
    /// configuration's folder); no secret shows in a debug dump of the loaded configuration.
    #[test]
    fn bearer_tokens_become_authorization_and_secrets_never_print() {
        use crate::config::http::Secret;
        let d = tempfile::tempdir().unwrap();
        let cfg = d.path().join("prometheus.yml");
        std::fs::write(
            &cfg,
            r#"scrape_configs:
  - {job_name: a, bearer_token: tok-a1}
  - {job_name: b, bearer_token_file: tok.txt}
  - {job_name: c, basic_auth: {username: u, password: pw-c3}}
remote_write: [{url: 'http://r/', bearer_token: tok-rw4}, {url: 'http://s/', bearer_token_file: rw.txt}]
alerting:
  alertmanagers: [{static_configs: [{targets: [am]}], bearer_token: tok-am5}, {basic_auth: {username: u, password: pw-am6}}]
"#,
        )
        .unwrap();
        let c = Config::load(&cfg).unwrap();
        let at = |f: &str| Some(d.path().join(f).to_string_lossy().into_owned());
        let cred = |a: &Option<http::Authorization>| {
            let a = a.as_ref().unwrap();
            assert_eq!(a.scheme(), "Bearer");
            (
                a.credentials.as_ref().map(|s| s.expose().to_string()),
                a.credentials_file.clone(),
            )
        };
        let sc = &c.scrape_configs;
        assert_eq!(cred(&sc[0].authorization), (Some("tok-a1".into()), None));
        assert_eq!(cred(&sc[1].authorization), (None, at("tok.txt")));
        assert!(sc[0].bearer_token.is_none() && sc[1].bearer_token_file.is_none());
        let rw = &c.remote_write;
        assert_eq!(cred(&rw[0].authorization), (Some("tok-rw4".into()), None));
        assert_eq!(cred(&rw[1].authorization), (None, at("rw.txt")));
        assert_eq!(
            rw[0].authorization_header().unwrap().as_deref(),
            Some("Bearer tok-rw4")
        );
        let am = &c.alerting.alertmanagers;
        assert_eq!(cred(&am[0].authorization), (Some("tok-am5".into()), None));
        let dump = format!("{c:?}");
        for s in ["tok-a1", "pw-c3", "tok-rw4", "tok-am5", "pw-am6"] {
            assert!(!dump.contains(s), "{s} in {dump}");
        }
        assert!(dump.contains(Secret::MASK));
        for (y, want) in [
            (
                "scrape_configs: [{job_name: a, bearer_token: t, authorization: {credentials: c}}]",
                "job \"a\": authorization is not compatible with bearer_token & bearer_token_file",
            ),
            (
                "remote_write: [{url: 'http://r/', bearer_token: t, bearer_token_file: f}]",
                "at most one of bearer_token & bearer_token_file must be configured",
            ),
            (
                "alerting: {alertmanagers: [{bearer_token: t, basic_auth: {username: u}}]}",
                "at most one of basic_auth, oauth2, bearer_token & bearer_token_file must be configured",
            ),
            (
                "scrape_configs: [{job_name: a, oauth2: {client_id: i, client_secret: s, token_url: 'http://t/'}}]",
                "job \"a\": oauth2 is not supported by inferdb",
            ),
        ] {
            let e = Config::parse(y).unwrap_err().to_string();
            assert!(e.contains(want), "{y}: {e}");
        }
    }

    #[test]
    fn from_urls_quick_start() {
        let c = ScrapeConfig::from_urls("vllm", &["http://localhost:8000/metrics".into()]).unwrap();
        assert_eq!(c[0].job_name, "vllm");
        assert_eq!(c[0].static_configs[0].targets, vec!["localhost:8000"]);
        assert_eq!(c[0].metrics_path, "/metrics");
    }
}
