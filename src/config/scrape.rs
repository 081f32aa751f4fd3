//! `scrape_configs` entries (jobs) and their target sources: `static_configs` and
//! `file_sd_configs` here, `http_sd_configs`, `dns_sd_configs` and `kubernetes_sd_configs` with their mechanisms in
//! [`crate::discovery`]. Service discoveries inferdb does not implement are refused by name.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use super::http::{join_dir, resolve_secret_files, Authorization, BasicAuth, Secret, TlsConfig};
use super::{ByteSize, ConfigError, GlobalConfig, PromDuration};
use crate::model::relabel::RelabelConfig;

fn default_path() -> String {
    "/metrics".into()
}
fn default_scheme() -> String {
    "http".into()
}
fn default_true() -> bool {
    true
}

/// `static_configs:` entry.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct StaticConfig {
    /// `host:port` addresses.
    #[serde(default)]
    pub targets: Vec<String>,
    /// Labels for every target of the group.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

/// `file_sd_configs:` entry: JSON or YAML files of target groups.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSdConfig {
    /// File paths; the last path element may contain `*`.
    pub files: Vec<String>,
    /// How often to re-read the files (5m).
    #[serde(default)]
    pub refresh_interval: Option<PromDuration>,
}

macro_rules! scrape_config {
    ($($sd:ident),* $(,)?) => {
        /// One `scrape_configs:` entry (a job).
        #[derive(Debug, Clone, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct ScrapeConfig {
            /// The job name (`job` label).
            pub job_name: String,
            /// Interval (global default).
            #[serde(default)]
            pub scrape_interval: Option<PromDuration>,
            /// Timeout (global default, at most the interval).
            #[serde(default)]
            pub scrape_timeout: Option<PromDuration>,
            /// Path (`/metrics`).
            #[serde(default = "default_path")]
            pub metrics_path: String,
            /// `http` or `https`.
            #[serde(default = "default_scheme")]
            pub scheme: String,
            /// URL query parameters.
            #[serde(default)]
            pub params: BTreeMap<String, Vec<String>>,
            /// Keep the page's labels on conflicts with target labels.
            #[serde(default)]
            pub honor_labels: bool,
            /// Keep the page's timestamps (true).
            #[serde(default = "default_true")]
            pub honor_timestamps: bool,
            /// Accepted, unused.
            #[serde(default)]
            pub track_timestamps_staleness: Option<bool>,
            /// Ask for gzip (true).
            #[serde(default = "default_true")]
            pub enable_compression: bool,
            /// Follow redirects (true).
            #[serde(default = "default_true")]
            pub follow_redirects: bool,
            /// Accepted, unused.
            #[serde(default)]
            pub enable_http2: Option<bool>,
            /// More samples than this fail the scrape (0 = no limit).
            #[serde(default)]
            pub sample_limit: Option<u64>,
            /// More labels on a series than this fail the scrape (0 = no limit).
            #[serde(default)]
            pub label_limit: Option<u64>,
            /// Accepted, unused.
            #[serde(default)]
            pub label_name_length_limit: Option<u64>,
            /// Accepted, unused.
            #[serde(default)]
            pub label_value_length_limit: Option<u64>,
            /// Accepted, unused.
            #[serde(default)]
            pub target_limit: Option<u64>,
            /// How many dropped targets `/api/v1/targets` keeps for this job (0 = all).
            #[serde(default)]
            pub keep_dropped_targets: Option<u64>,
            /// Larger bodies fail the scrape.
            #[serde(default)]
            pub body_size_limit: Option<ByteSize>,
            /// Accepted, unused.
            #[serde(default)]
            pub scrape_protocols: Option<Vec<String>>,
            /// Accepted, unused.
            #[serde(default)]
            pub fallback_scrape_protocol: Option<String>,
            /// Accepted, unused.
            #[serde(default)]
            pub scrape_classic_histograms: Option<bool>,
            /// Accepted, unused.
            #[serde(default)]
            pub always_scrape_classic_histograms: Option<bool>,
            /// Accepted, unused.
            #[serde(default)]
            pub convert_classic_histograms_to_nhcb: Option<bool>,
            /// Accepted, unused.
            #[serde(default)]
            pub native_histogram_bucket_limit: Option<u64>,
            /// Accepted, unused.
            #[serde(default)]
            pub native_histogram_min_bucket_factor: Option<f64>,
            /// Accepted, unused.
            #[serde(default)]
            pub metric_name_validation_scheme: Option<String>,
            /// Accepted, unused.
            #[serde(default)]
            pub metric_name_escaping_scheme: Option<String>,
            /// Accepted, unused.
            #[serde(default)]
            pub scrape_failure_log_file: Option<String>,
            /// HTTP proxy for every scrape.
            #[serde(default)]
            pub proxy_url: Option<String>,
            /// Hosts that bypass `proxy_url` (comma-separated).
            #[serde(default)]
            pub no_proxy: Option<String>,
            /// Take the proxy from `HTTP_PROXY`/`HTTPS_PROXY`/`NO_PROXY`.
            #[serde(default)]
            pub proxy_from_environment: bool,
            /// Extra request headers: `name: {values: [...], secrets: [...], files: [...]}`.
            #[serde(default)]
            pub http_headers: Option<BTreeMap<String, crate::discovery::client::HeaderValues>>,
            /// OAuth 2.0: not implemented, refused at load.
            #[serde(default)]
            pub oauth2: Option<serde_yaml::Value>,
            /// Older spelling of `authorization: {credentials: ...}`, turned into it at load.
            #[serde(default)]
            pub bearer_token: Option<Secret>,
            /// Older spelling of `authorization: {credentials_file: ...}`, turned into it at load.
            #[serde(default)]
            pub bearer_token_file: Option<String>,
            /// Static targets.
            #[serde(default)]
            pub static_configs: Vec<StaticConfig>,
            /// File service discovery.
            #[serde(default)]
            pub file_sd_configs: Vec<FileSdConfig>,
            /// HTTP service discovery.
            #[serde(default)]
            pub http_sd_configs: Vec<crate::discovery::http::HttpSdConfig>,
            /// DNS service discovery.
            #[serde(default)]
            pub dns_sd_configs: Vec<crate::discovery::dns::DnsSdConfig>,
            /// Kubernetes service discovery.
            #[serde(default)]
            pub kubernetes_sd_configs: Vec<crate::discovery::kubernetes::KubernetesSdConfig>,
            /// Basic auth.
            #[serde(default)]
            pub basic_auth: Option<BasicAuth>,
            /// Authorization header.
            #[serde(default)]
            pub authorization: Option<Authorization>,
            /// TLS settings.
            #[serde(default)]
            pub tls_config: Option<TlsConfig>,
            /// Rules applied to targets before scraping.
            #[serde(default)]
            pub relabel_configs: Vec<RelabelConfig>,
            /// Rules applied to scraped series before storing.
            #[serde(default)]
            pub metric_relabel_configs: Vec<RelabelConfig>,
            $(
                #[serde(default)]
                $sd: Option<serde_yaml::Value>,
            )*
        }

        impl ScrapeConfig {
            pub(crate) fn unimplemented_sections(&self) -> Vec<&'static str> {
                let mut v = vec![];
                $( if self.$sd.is_some() { v.push(stringify!($sd)); } )*
                v
            }
        }
    };
}

/// Calls the macro `$m` with `$extra` and the names of the service discoveries no part of
/// inferdb implements.
macro_rules! with_other_sds {
    ($m:ident $(, $extra:ident)*) => {
        $m!(
            $($extra,)*
            azure_sd_configs,
            consul_sd_configs,
            digitalocean_sd_configs,
            docker_sd_configs,
            dockerswarm_sd_configs,
            ec2_sd_configs,
            eureka_sd_configs,
            gce_sd_configs,
            hetzner_sd_configs,
            ionos_sd_configs,
            kuma_sd_configs,
            lightsail_sd_configs,
            linode_sd_configs,
            marathon_sd_configs,
            nerve_sd_configs,
            nomad_sd_configs,
            openstack_sd_configs,
            ovhcloud_sd_configs,
            puppetdb_sd_configs,
            scaleway_sd_configs,
            serverset_sd_configs,
            triton_sd_configs,
            uyuni_sd_configs,
            vultr_sd_configs,
            stackit_sd_configs,
        );
    };
}

pub(crate) use with_other_sds;

// jobs refuse the service discoveries inferdb lacks, naming them
with_other_sds!(scrape_config);

impl ScrapeConfig {
    /// The effective interval.
    pub fn interval(&self, g: &GlobalConfig) -> Duration {
        self.scrape_interval.unwrap_or(g.scrape_interval).0
    }
    /// The effective timeout: the job's, else the global one capped at the interval.
    pub fn timeout(&self, g: &GlobalConfig) -> Duration {
        match self.scrape_timeout {
            Some(t) => t.0,
            None => g.timeout().min(self.interval(g)),
        }
    }
    /// Makes the job's relative file paths (`file_sd_configs` files, `password_file`,
    /// `credentials_file`, `bearer_token_file`, `tls_config` `ca_file`/`cert_file`/`key_file`) relative to `dir`,
    /// the folder of the file that holds the job, as Prometheus' `SetDirectory` does.
    pub fn set_directory(&mut self, dir: &Path) {
        for f in &mut self.file_sd_configs {
            for file in &mut f.files {
                join_dir(dir, file);
            }
        }
        for h in &mut self.http_sd_configs {
            h.http.set_directory(dir);
        }
        for k in &mut self.kubernetes_sd_configs {
            k.set_directory(dir);
        }
        resolve_secret_files(self.basic_auth.as_mut(), self.authorization.as_mut(), dir);
        if let Some(f) = &mut self.bearer_token_file {
            join_dir(dir, f);
        }
        if let Some(t) = &mut self.tls_config {
            t.resolve_files(dir);
        }
        for h in self.http_headers.iter_mut().flat_map(|h| h.values_mut()) {
            for f in &mut h.files {
                join_dir(dir, f);
            }
        }
    }

    /// The job's proxy and header settings in the shape inferdb's HTTP clients are built
    /// from ([`crate::discovery::client::HttpClientConfig`]), for their checks and for
    /// [`crate::discovery::client::HttpClientConfig::proxy_and_headers`].
    pub fn proxy_and_headers(&self) -> crate::discovery::client::HttpClientConfig {
        crate::discovery::client::HttpClientConfig {
            proxy_url: self.proxy_url.clone(),
            no_proxy: self.no_proxy.clone(),
            proxy_from_environment: self.proxy_from_environment,
            http_headers: self.http_headers.clone(),
            ..crate::discovery::client::HttpClientConfig::default_settings()
        }
    }

    /// Whether the job's requests must go through a proxy or carry extra headers (then every
    /// scrape goes through the job's `reqwest` client, which applies them).
    pub fn has_proxy_or_headers(&self) -> bool {
        self.proxy_url.is_some() || self.proxy_from_environment || self.http_headers.is_some()
    }

    /// A job scraping `urls` (quick start without a file): `http://host:port/path`.
    pub fn from_urls(job: &str, urls: &[String]) -> Result<Vec<ScrapeConfig>, ConfigError> {
        let mut out = vec![];
        for (i, u) in urls.iter().enumerate() {
            let (scheme, rest) = u
                .split_once("://")
                .ok_or_else(|| ConfigError::Invalid(format!("URL without scheme: {u:?}")))?;
            let (host, path) = match rest.find('/') {
                Some(p) => (&rest[..p], &rest[p..]),
                None => (rest, "/metrics"),
            };
            let yaml = format!(
                "job_name: {job:?}\nscheme: {scheme:?}\nmetrics_path: {path:?}\nstatic_configs: [{{targets: [{host:?}]}}]\n"
            );
            let mut c: ScrapeConfig =
                serde_yaml::from_str(&yaml).map_err(|e| ConfigError::Yaml(e.to_string()))?;
            if i > 0 || urls.len() > 1 {
                c.job_name = if i == 0 {
                    job.to_string()
                } else {
                    format!("{job}-{i}")
                };
            }
            out.push(c);
        }
        Ok(out)
    }
}
