//! `inferdb serve`: opens the store, scrapes the configured targets (and the machine's GPUs),
//! and serves the Prometheus-compatible HTTP API. Prometheus' own flag names are accepted, so
//! a Prometheus container's command line works unchanged.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Context};
use inferdb_query::EngineOptions;
use inferdb_storage::{Db, Labels, Options};
use tokio::sync::watch;

/// The models `--demo` serves, server i the i-th (modulo): two, so per-model views show more
/// than one line.
const DEMO_MODELS: &[&str] = &[crate::sim::DEFAULT_MODEL, "Qwen/Qwen2.5-7B-Instruct"];

use super::duration_ms;
use crate::api::{self, ApiConfig, ApiState, DbBackend, MetricMetadata, ScrapeStatus, TargetInfo};
use crate::config::Config;
use crate::config::{parse_bytes, ScrapeConfig};
use crate::model::sink::SampleSink;
use crate::rules::manager::{ManagerOptions, RuleManager};
use crate::scrape::ScrapeManager;

/// Arguments of `inferdb serve`.
#[derive(Debug, Clone, clap::Args)]
#[command(after_help = "Examples:
  inferdb serve --demo
  inferdb serve --scrape http://localhost:8000/metrics
  inferdb serve --config.file prometheus.yml --data-dir /var/lib/inferdb --web.listen-address 0.0.0.0:9090")]
pub struct ServeArgs {
    /// A Prometheus configuration file (global, scrape_configs); reloaded on SIGHUP.
    #[arg(long = "config.file", value_name = "FILE")]
    pub config_file: Option<PathBuf>,
    /// Where the data lives.
    #[arg(
        long = "data-dir",
        alias = "storage.tsdb.path",
        value_name = "DIR",
        default_value = "data"
    )]
    pub data_dir: PathBuf,
    /// Address to serve the HTTP API on: HOST:PORT, or :PORT for every interface.
    #[arg(
        long = "web.listen-address",
        value_name = "HOST:PORT",
        default_value = "127.0.0.1:9090"
    )]
    pub listen: String,
    /// The URL under which inferdb is reachable from outside (behind a reverse proxy), used in
    /// the URLs it generates; its path is the default route prefix. Default:
    /// http://<hostname>:<port>/.
    #[arg(long = "web.external-url", value_name = "URL")]
    pub external_url: Option<String>,
    /// Prefix of every HTTP endpoint (e.g. /prometheus); `/` redirects there. Default: the
    /// path of --web.external-url.
    #[arg(long = "web.route-prefix", value_name = "PATH")]
    pub route_prefix: Option<String>,
    /// Comma-separated features to enable. Known: remote-write-receiver (as
    /// --web.enable-remote-write-receiver), promql-experimental-functions (always on in
    /// inferdb), promql-at-modifier and promql-negative-offset (permanently on, no-ops).
    /// Unknown names are logged and ignored, as Prometheus does.
    #[arg(long = "enable-feature", value_name = "NAME[,NAME...]")]
    pub enable_feature: Vec<String>,
    /// Compress the WAL's records (on by default, as Prometheus): each record stored
    /// compressed when that makes it smaller. =false or --no-storage.tsdb.wal-compression
    /// writes them plain. A WAL written either way, or switched between restarts, replays.
    #[arg(
        long = "storage.tsdb.wal-compression",
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_value = "true",
        default_missing_value = "true",
        action = clap::ArgAction::Set,
        overrides_with = "no_wal_compression"
    )]
    pub wal_compression: bool,
    /// Write the WAL uncompressed (the same as --storage.tsdb.wal-compression=false).
    #[arg(
        long = "no-storage.tsdb.wal-compression",
        overrides_with = "wal_compression"
    )]
    pub no_wal_compression: bool,
    /// The WAL compression algorithm, used when --storage.tsdb.wal-compression is on.
    #[arg(
        long = "storage.tsdb.wal-compression-type",
        value_name = "TYPE",
        default_value = "snappy",
        value_parser = ["snappy", "zstd"]
    )]
    pub wal_compression_type: String,
    /// Scrape this URL (repeatable), without a configuration file.
    #[arg(long = "scrape", value_name = "URL")]
    pub scrape: Vec<String>,
    /// Start the built-in vLLM simulator and scrape it.
    #[arg(long)]
    pub demo: bool,
    /// Simulated vLLM servers for --demo.
    #[arg(long = "demo.servers", default_value_t = 2, value_name = "N")]
    pub demo_servers: usize,
    /// Scenario plans of the --demo servers (see `inferdb simulate --scenario`): the i-th for
    /// server i, the last for the rest; default: the demo cycle.
    #[arg(long = "demo.scenario", value_name = "PLAN", value_parser = super::simulate::parse_plan)]
    pub demo_scenario: Vec<crate::sim::ScenarioPlan>,
    /// First port of the --demo simulator (0: any free port).
    #[arg(long = "demo.port", default_value_t = super::SIM_PORT, value_name = "PORT")]
    pub demo_port: u16,
    /// How long to keep data (e.g. 15d, 1y).
    #[arg(
        long = "storage.tsdb.retention.time",
        value_name = "DURATION",
        default_value = "15d"
    )]
    pub retention_time: String,
    /// The time span of a block cut from the head (Prometheus' hidden flag of the same name;
    /// for tests: short blocks make cuts and compactions happen within seconds).
    #[arg(
        long = "storage.tsdb.min-block-duration",
        value_name = "DURATION",
        default_value = "2h",
        hide = true
    )]
    pub min_block_duration: String,
    /// The most bytes of blocks to keep (e.g. 10GB, 512MB); none by default.
    #[arg(long = "storage.tsdb.retention.size", value_name = "BYTES")]
    pub retention_size: Option<String>,
    /// The longest a query may run.
    #[arg(long = "query.timeout", value_name = "DURATION", default_value = "2m")]
    pub query_timeout: String,
    /// The most samples a query may load at once.
    #[arg(
        long = "query.max-samples",
        value_name = "N",
        default_value_t = 50_000_000
    )]
    pub query_max_samples: usize,
    /// How far back an instant selector looks for a sample.
    #[arg(
        long = "query.lookback-delta",
        value_name = "DURATION",
        default_value = "5m"
    )]
    pub query_lookback_delta: String,
    /// The most memory kept for range-query results, so that a dashboard's refresh evaluates
    /// only the steps it has not seen (bytes, with units such as 512MB); 0 keeps no query
    /// results at all.
    #[arg(
        long = "query.result-cache-size",
        value_name = "BYTES",
        default_value = crate::api::result_cache::DEFAULT_SIZE
    )]
    pub query_result_cache_size: String,
    /// Metric-rename bridging in PromQL evaluation.
    #[command(flatten)]
    pub aliases: crate::metric_aliases::AliasArgs,
    /// Queries evaluated at once; more wait in line.
    #[arg(long = "query.max-concurrency", value_name = "N", default_value_t = 20)]
    pub query_max_concurrency: usize,
    /// The largest request body accepted, in bytes.
    #[arg(long = "web.max-request-bytes", value_name = "BYTES", default_value_t = 8 << 20)]
    pub max_request_bytes: usize,
    /// The most HTTP connections open at once (idle ones are closed first when full).
    #[arg(long = "web.max-connections", value_name = "N", default_value_t = 512)]
    pub max_connections: usize,
    /// How long a request may take to arrive and an idle connection may stay open.
    #[arg(
        long = "web.read-timeout",
        value_name = "DURATION",
        default_value = "5m"
    )]
    pub read_timeout: String,
    /// A Prometheus web configuration file (basic_auth_users with bcrypt hashes,
    /// tls_server_config for HTTPS).
    #[arg(long = "web.config.file", value_name = "FILE")]
    pub web_config_file: Option<PathBuf>,
    /// Allow POST /-/reload.
    #[arg(long = "web.enable-lifecycle")]
    pub enable_lifecycle: bool,
    /// Enable the TSDB admin endpoints (/api/v1/admin/tsdb/snapshot, delete_series,
    /// clean_tombstones).
    #[arg(long = "web.enable-admin-api")]
    pub enable_admin_api: bool,
    /// Accept Prometheus remote write on /api/v1/write.
    #[arg(long = "web.enable-remote-write-receiver")]
    pub enable_remote_write_receiver: bool,
    /// Do not sample the machine's GPUs through NVML.
    #[arg(long = "no-gpu")]
    pub no_gpu: bool,
    /// GPU sampling interval.
    #[arg(long = "gpu.interval", value_name = "DURATION", default_value = "15s")]
    pub gpu_interval: String,
    /// How long a shutdown waits for the remote_write queues to send what they hold.
    #[arg(
        long = "storage.remote.flush-deadline",
        value_name = "DURATION",
        default_value = "1m"
    )]
    pub remote_flush_deadline: String,
    /// How many alerts waiting for Alertmanager are kept; the oldest are dropped beyond it.
    #[arg(
        long = "alertmanager.notification-queue-capacity",
        value_name = "N",
        default_value_t = crate::notifier::DEFAULT_QUEUE_CAPACITY
    )]
    pub notification_queue_capacity: usize,
    /// Send the alerts still queued for Alertmanager when shutting down (otherwise they are
    /// dropped).
    #[arg(
        long = "alertmanager.drain-notification-queue-on-shutdown",
        value_name = "BOOL",
        default_value_t = true,
        action = clap::ArgAction::Set
    )]
    pub drain_notification_queue: bool,
    /// Max time to tolerate an outage for restoring the "for" state of alerts.
    #[arg(
        long = "rules.alert.for-outage-tolerance",
        value_name = "DURATION",
        default_value = "1h"
    )]
    pub rules_for_outage_tolerance: String,
    /// Minimum duration between an alert and its restored "for" state; maintained only for
    /// alerts whose "for" is longer than this.
    #[arg(
        long = "rules.alert.for-grace-period",
        value_name = "DURATION",
        default_value = "10m"
    )]
    pub rules_for_grace_period: String,
    /// Minimum time to wait before resending a firing alert to Alertmanager.
    #[arg(
        long = "rules.alert.resend-delay",
        value_name = "DURATION",
        default_value = "1m"
    )]
    pub rules_resend_delay: String,
    /// Prometheus' console template flags: refused (inferdb serves no console templates).
    #[arg(
        long = "web.console.libraries",
        alias = "web.console.templates",
        hide = true,
        value_name = "DIR"
    )]
    pub console: Vec<String>,
}

/// What `--enable-feature` turned on.
#[derive(Debug, Default, Clone, Copy)]
struct Features {
    remote_write_receiver: bool,
}

/// Reads `--enable-feature` values (comma-separated, repeatable) and logs each as Prometheus
/// does: known ones at info, retired ones as no-ops, unknown ones as a warning.
fn features(values: &[String]) -> Features {
    let mut f = Features::default();
    for o in values.iter().flat_map(|v| v.split(',')) {
        match o {
            "" => {}
            "remote-write-receiver" => {
                f.remote_write_receiver = true;
                tracing::warn!(
                    "Remote write receiver enabled via feature flag remote-write-receiver. \
                     This is DEPRECATED. Use --web.enable-remote-write-receiver."
                );
            }
            "promql-experimental-functions" => {
                tracing::info!("Experimental PromQL functions enabled (always on in inferdb)")
            }
            "promql-at-modifier" | "promql-negative-offset" => tracing::warn!(
                option = o,
                "This option for --enable-feature is now permanently enabled and therefore a no-op."
            ),
            _ => tracing::warn!(option = o, "Unknown option for --enable-feature"),
        }
    }
    f
}

/// Binds `--web.listen-address`: `HOST:PORT` as resolved, or `:PORT` on every interface as
/// Prometheus does (IPv6 and IPv4 where the machine has IPv6, IPv4 otherwise).
pub async fn bind_listen(addr: &str) -> anyhow::Result<tokio::net::TcpListener> {
    let flag = || format!("--web.listen-address {addr:?}");
    if let Some(port) = addr.strip_prefix(':') {
        let port: u16 = port
            .parse()
            .map_err(|_| anyhow!("{}: {port:?} is not a port number", flag()))?;
        let any6 = SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, port));
        return match tokio::net::TcpListener::bind(any6).await {
            Ok(l) => Ok(l),
            Err(_) => tokio::net::TcpListener::bind(SocketAddr::from(([0, 0, 0, 0], port)))
                .await
                .with_context(flag),
        };
    }
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host(addr)
        .await
        .with_context(flag)?
        .collect();
    let mut last = None;
    for a in &addrs {
        match tokio::net::TcpListener::bind(a).await {
            Ok(l) => return Ok(l),
            Err(e) => last = Some(e),
        }
    }
    match last {
        Some(e) if e.kind() == std::io::ErrorKind::AddrInUse => Err(anyhow!(
            "{}: address already in use (another server on that port? choose another with \
             --web.listen-address)",
            flag()
        )),
        Some(e) => Err(anyhow::Error::new(e).context(flag())),
        None => Err(anyhow!("{}: resolves to nothing", flag())),
    }
}

/// Logs where the server listens (the URL to open in a browser).
fn log_listening(cfg: &ApiConfig, listen: SocketAddr) {
    let scheme = if cfg.tls.is_some() { "https" } else { "http" };
    let mut addr = listen;
    if addr.ip().is_unspecified() {
        addr.set_ip(if addr.is_ipv4() {
            std::net::Ipv4Addr::LOCALHOST.into()
        } else {
            std::net::Ipv6Addr::LOCALHOST.into()
        });
    }
    tracing::info!(
        address = %listen,
        url = %format!("{scheme}://{addr}{}/", cfg.web.prefix()),
        external_url = cfg.web.external_url(),
        "Listening and serving HTTP (web UI and API: open url in a browser)"
    );
}

/// What the API shows of the scraper, and how it reloads the configuration.
struct ScrapeView {
    mgr: Arc<ScrapeManager>,
    db: Arc<Db>,
    configs: watch::Sender<Config>,
    load: Arc<dyn Fn() -> anyhow::Result<Config> + Send + Sync>,
    rules: Arc<RuleManager>,
    /// `global.evaluation_interval` in milliseconds: the API's default subquery step.
    subquery_step: Arc<AtomicI64>,
    result_cache: Arc<api::result_cache::ResultCache>,
}

/// The default subquery step a configuration gives (its `global.evaluation_interval`), as
/// Prometheus sets it for every query at each load.
fn subquery_step_ms(cfg: &Config) -> i64 {
    i64::try_from(cfg.global.evaluation_interval.0.as_millis()).unwrap_or(i64::MAX)
}

impl ScrapeStatus for ScrapeView {
    fn targets(&self) -> Vec<TargetInfo> {
        self.mgr
            .targets()
            .into_iter()
            .map(|t| TargetInfo {
                discovered_labels: Labels::from_pairs(t.target.discovered_labels.clone()),
                labels: t.target.labels.clone(),
                scrape_pool: t.target.job.clone(),
                scrape_url: t.target.url.clone(),
                last_error: t.state.last_error.clone().unwrap_or_default(),
                last_scrape_ms: t.state.last_scrape_ms.unwrap_or(0),
                last_scrape_duration_s: t.state.last_duration.as_secs_f64(),
                health: t.state.health.as_str().to_string(),
                scrape_interval_ms: t.target.interval.as_millis() as i64,
                scrape_timeout_ms: t.target.timeout.as_millis() as i64,
            })
            .collect()
    }

    fn dropped_targets(&self) -> Vec<crate::api::DroppedTargets> {
        self.mgr
            .dropped_targets()
            .into_iter()
            .map(|(pool, (count, list))| crate::api::DroppedTargets {
                scrape_pool: pool,
                count,
                discovered_labels: list.into_iter().map(Labels::from_pairs).collect(),
            })
            .collect()
    }

    fn metadata(&self) -> Vec<MetricMetadata> {
        let mut out = Vec::new();
        for (name, list) in self.mgr.metadata() {
            for m in list {
                out.push(MetricMetadata {
                    metric: name.clone(),
                    typ: m.kind,
                    help: m.help,
                    unit: m.unit,
                });
            }
        }
        out
    }

    fn target_metadata(&self) -> Vec<crate::api::TargetMetadata> {
        self.mgr
            .targets()
            .into_iter()
            .map(|t| crate::api::TargetMetadata {
                target: t.target.labels.clone(),
                metadata: t
                    .state
                    .metadata
                    .iter()
                    .map(|(name, m)| MetricMetadata {
                        metric: name.clone(),
                        typ: m.kind.clone(),
                        help: m.help.clone(),
                        unit: m.unit.clone(),
                    })
                    .collect(),
            })
            .collect()
    }

    fn external_labels(&self) -> Vec<(String, String)> {
        let c = self.configs.borrow();
        c.global
            .external_labels
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    fn self_metrics(&self) -> String {
        let mut o = String::new();
        crate::metrics::write_db_metrics(&mut o, &self.db);
        self.mgr.write_metrics(&mut o);
        o
    }

    /// Called on a blocking thread (SIGHUP, `/-/reload`): rule files are read and checked
    /// before anything is applied, so a broken one refuses the whole reload.
    fn reload(&self) -> Result<(), String> {
        let res = (self.load)().map_err(|e| format!("{e:#}")).and_then(|cfg| {
            let rules = self
                .rules
                .prepare(&cfg)
                .map_err(|e| format!("error loading rules, previous rule set restored: {e}"))?;
            Ok((cfg, rules))
        });
        crate::metrics::record_config_reload(res.is_ok());
        match res {
            Ok((cfg, rules)) => {
                let step = subquery_step_ms(&cfg);
                if self.subquery_step.swap(step, Ordering::Relaxed) != step {
                    // cached steps were evaluated with the old default subquery step
                    self.result_cache.clear();
                }
                self.configs.send_replace(cfg);
                tokio::runtime::Handle::current().block_on(self.rules.apply(rules));
                tracing::info!("Completed loading of configuration file");
                Ok(())
            }
            Err(e) => {
                tracing::error!(err = %e, "Error reloading config");
                Err(e)
            }
        }
    }
}

/// Completes on SIGINT (Ctrl-C) or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}

impl ServeArgs {
    /// Runs the server until SIGINT/SIGTERM.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .context("starting the async runtime")?;
        let r = rt.block_on(self.run_async());
        // a store still opening when a signal stopped the server is left to the exit
        rt.shutdown_timeout(Duration::from_secs(1));
        r?;
        Ok(ExitCode::SUCCESS)
    }

    /// The API settings these flags give.
    pub fn api_config(&self, listen: SocketAddr) -> anyhow::Result<ApiConfig> {
        let timeout_ms = duration_ms("query.timeout", &self.query_timeout)?;
        let lookback_ms = duration_ms("query.lookback-delta", &self.query_lookback_delta)?;
        let mut flags = BTreeMap::new();
        flags.insert(
            "config.file".into(),
            self.config_file
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
        );
        flags.insert(
            "storage.tsdb.path".into(),
            self.data_dir.display().to_string(),
        );
        flags.insert("web.listen-address".into(), self.listen.clone());
        let web = crate::api::WebUrls::new(
            self.external_url.as_deref(),
            self.route_prefix.as_deref(),
            listen.port(),
        )?;
        flags.insert("web.external-url".into(), web.external_url().to_string());
        flags.insert("web.route-prefix".into(), web.prefix_display().to_string());
        flags.insert("enable-feature".into(), self.enable_feature.join(","));
        flags.insert(
            "storage.tsdb.retention.time".into(),
            self.retention_time.clone(),
        );
        flags.insert(
            "storage.tsdb.retention.size".into(),
            self.retention_size.clone().unwrap_or_else(|| "0B".into()),
        );
        flags.insert(
            "storage.tsdb.wal-compression".into(),
            (self.wal_compression() != inferdb_storage::wal::Compression::None).to_string(),
        );
        flags.insert(
            "storage.tsdb.wal-compression-type".into(),
            self.wal_compression_type.clone(),
        );
        flags.insert("query.timeout".into(), self.query_timeout.clone());
        flags.insert(
            "query.max-samples".into(),
            self.query_max_samples.to_string(),
        );
        flags.insert(
            "query.lookback-delta".into(),
            self.query_lookback_delta.clone(),
        );
        flags.insert(
            "query.result-cache-size".into(),
            self.query_result_cache_size.clone(),
        );
        flags.insert(
            "query.max-concurrency".into(),
            self.query_max_concurrency.to_string(),
        );
        flags.insert(
            "web.enable-lifecycle".into(),
            self.enable_lifecycle.to_string(),
        );
        flags.insert(
            "web.enable-admin-api".into(),
            self.enable_admin_api.to_string(),
        );
        flags.insert(
            "web.enable-remote-write-receiver".into(),
            self.enable_remote_write_receiver.to_string(),
        );
        flags.insert(
            "web.max-connections".into(),
            self.max_connections.to_string(),
        );
        flags.insert("web.read-timeout".into(), self.read_timeout.clone());
        flags.insert(
            "alertmanager.notification-queue-capacity".into(),
            self.notification_queue_capacity.to_string(),
        );
        flags.insert(
            "alertmanager.drain-notification-queue-on-shutdown".into(),
            self.drain_notification_queue.to_string(),
        );
        flags.insert(
            "rules.alert.for-outage-tolerance".into(),
            self.rules_for_outage_tolerance.clone(),
        );
        flags.insert(
            "rules.alert.for-grace-period".into(),
            self.rules_for_grace_period.clone(),
        );
        flags.insert(
            "rules.alert.resend-delay".into(),
            self.rules_resend_delay.clone(),
        );
        if self.max_connections == 0 {
            return Err(anyhow!("--web.max-connections must be at least 1"));
        }
        let read_timeout_ms = duration_ms("web.read-timeout", &self.read_timeout)?;
        if read_timeout_ms <= 0 {
            return Err(anyhow!("--web.read-timeout must be positive"));
        }
        let conn_limits = crate::api::conn::ConnLimits {
            max_connections: self.max_connections,
            read_timeout: Duration::from_millis(read_timeout_ms as u64),
            ..Default::default()
        };
        let web_config = match &self.web_config_file {
            Some(p) => crate::api::auth::WebConfig::load(p)
                .with_context(|| format!("--web.config.file {}", p.display()))?,
            None => crate::api::auth::WebConfig::default(),
        };
        Ok(ApiConfig {
            listen,
            query_timeout: Duration::from_millis(timeout_ms.max(1) as u64),
            max_samples: self.query_max_samples,
            lookback_delta_ms: lookback_ms.max(1),
            max_concurrency: self.query_max_concurrency.max(1),
            max_body_bytes: self.max_request_bytes,
            enable_lifecycle: self.enable_lifecycle,
            enable_admin_api: self.enable_admin_api,
            flags,
            storage_retention: self.retention_time.clone(),
            config_yaml: String::new(),
            basic_auth_users: web_config.basic_auth_users,
            tls: web_config.tls,
            web,
            conn_limits,
        })
    }

    /// How the WAL is compressed, from the two WAL compression flags.
    pub fn wal_compression(&self) -> inferdb_storage::wal::Compression {
        use inferdb_storage::wal::Compression;
        if !self.wal_compression || self.no_wal_compression {
            return Compression::None;
        }
        // the parser admits only the names Compression knows
        Compression::from_name(&self.wal_compression_type).unwrap_or(Compression::Snappy)
    }

    /// Flags Prometheus has and inferdb refuses, with the reason.
    fn refuse_unsupported(&self) -> anyhow::Result<()> {
        if !self.console.is_empty() {
            anyhow::bail!(
                "--web.console.libraries/--web.console.templates: inferdb serves no console \
                 templates; leave these flags out"
            );
        }
        Ok(())
    }

    async fn run_async(self) -> anyhow::Result<()> {
        self.refuse_unsupported()?;
        let features = features(&self.enable_feature);
        let listener = bind_listen(&self.listen).await?;
        let listen = listener.local_addr()?;
        let mut api_cfg = self.api_config(listen)?;
        tracing::info!(version = env!("CARGO_PKG_VERSION"), "Starting inferdb");
        tracing::debug!(flags = ?api_cfg.flags, "Command-line flags");
        // serve from the start, as Prometheus: healthy, not ready, WAL replay progress
        let progress = inferdb_storage::ReplayProgress::new();
        let startup = api::startup::Startup::new();
        let (term_tx, term_rx) = watch::channel(false);
        tokio::spawn(async move {
            shutdown_signal().await;
            let _ = term_tx.send(true);
        });
        let terminated = |mut rx: watch::Receiver<bool>| async move {
            let _ = rx.wait_for(|s| *s).await;
        };
        let server = tokio::spawn(api::startup::serve(
            listener,
            api_cfg.clone(),
            progress.clone(),
            startup.clone(),
            terminated(term_rx.clone()),
        ));
        log_listening(&api_cfg, listen);
        let metric_aliases = self.aliases.load()?;
        let retention_ms = duration_ms("storage.tsdb.retention.time", &self.retention_time)?;
        let block_ms = duration_ms("storage.tsdb.min-block-duration", &self.min_block_duration)?;
        anyhow::ensure!(
            block_ms > 0,
            "--storage.tsdb.min-block-duration must be positive"
        );
        let result_cache_bytes = parse_bytes(&self.query_result_cache_size)
            .map_err(|e| anyhow!("--query.result-cache-size: {e}"))?;
        let retention_bytes = match &self.retention_size {
            None => None,
            Some(s) => {
                Some(parse_bytes(s).map_err(|e| anyhow!("--storage.tsdb.retention.size: {e}"))?)
            }
        };

        // the simulator first, so its servers can join the scrape configuration
        let mut demo_targets: Vec<String> = Vec::new();
        let _sim = if self.demo {
            let sim = crate::sim::Simulator::start(
                "127.0.0.1",
                self.demo_port,
                crate::sim::SimOptions {
                    servers: self.demo_servers.max(1),
                    models: DEMO_MODELS.iter().map(|m| m.to_string()).collect(),
                    scenarios: self.demo_scenario.clone(),
                    ..Default::default()
                },
            )
            .await
            .map_err(|e| super::sim_start_error(e, "--demo.port"))?;
            demo_targets = sim.addrs().iter().map(|a| a.to_string()).collect();
            tracing::info!(
                servers = demo_targets.len(),
                "demo: simulated vLLM servers on {demo_targets:?}"
            );
            Some(sim)
        } else {
            None
        };
        let config_file = self.config_file.clone();
        let urls = self.scrape.clone();
        let load = move || -> anyhow::Result<Config> {
            let mut cfg = match &config_file {
                Some(p) => Config::load(p)
                    .map_err(|e| super::path_error(p, "loading the configuration", e))?,
                None => {
                    // quick start: scrape every 15 s (Prometheus' example configuration)
                    let mut c = Config::default();
                    c.global.scrape_interval = crate::config::PromDuration(Duration::from_secs(15));
                    c
                }
            };
            if !urls.is_empty() {
                cfg.scrape_configs.extend(
                    ScrapeConfig::from_urls("inferdb-scrape", &urls)
                        .map_err(|e| anyhow!("--scrape: {e}"))?,
                );
            }
            if !demo_targets.is_empty() {
                let mut job = ScrapeConfig::from_urls(
                    "vllm",
                    &[format!("http://{}/metrics", demo_targets[0])],
                )
                .map_err(|e| anyhow!("--demo: {e}"))?;
                if let Some(j) = job.first_mut() {
                    if let Some(sc) = j.static_configs.first_mut() {
                        sc.targets = demo_targets.clone();
                    }
                }
                cfg.scrape_configs.extend(job);
            }
            Ok(cfg)
        };
        let cfg = load()?;
        crate::metrics::record_config_reload(true);
        if let Some(p) = &self.config_file {
            api_cfg.config_yaml =
                crate::config::masked::masked_yaml(&std::fs::read_to_string(p).unwrap_or_default());
        }
        if cfg.scrape_configs.is_empty() {
            tracing::warn!("nothing to scrape: give --config.file, --scrape URL or --demo");
        }

        let dir = self.data_dir.clone();
        let replay = progress.clone();
        let wal_compression = self.wal_compression();
        let opening = tokio::task::spawn_blocking(move || {
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            Db::open(
                &dir,
                Options {
                    retention_ms: Some(retention_ms),
                    retention_bytes,
                    block_duration_ms: block_ms,
                    // at least four chances to cut a block while its range is due
                    maintenance_interval: Duration::from_millis((block_ms / 4) as u64)
                        .clamp(Duration::from_secs(1), Duration::from_secs(30)),
                    replay_progress: Some(replay),
                    events: Some(crate::metrics::storage_event_hook()),
                    wal_compression,
                    ..Options::default()
                },
            )
            .map_err(|e| super::store_error(&dir, e))
        });
        let db = tokio::select! {
            db = opening => db??,
            _ = terminated(term_rx.clone()) => {
                tracing::warn!("Received termination request while opening the store; exiting");
                let _ = server.await;
                return Ok(());
            }
        };
        let db = Arc::new(db);
        tracing::info!(dir = %self.data_dir.display(), series = db.stats().head_series, "store open");

        // rules read the store through the same engine options as /api/v1/query
        let engine_opts = EngineOptions {
            lookback_delta_ms: api_cfg.lookback_delta_ms,
            max_samples: api_cfg.max_samples,
            timeout: api_cfg.query_timeout,
            metric_aliases,
            ..EngineOptions::default()
        };
        let rules = RuleManager::new(
            db.clone(),
            engine_opts.clone(),
            ManagerOptions {
                outage_tolerance_ms: duration_ms(
                    "rules.alert.for-outage-tolerance",
                    &self.rules_for_outage_tolerance,
                )?,
                for_grace_period_ms: duration_ms(
                    "rules.alert.for-grace-period",
                    &self.rules_for_grace_period,
                )?,
                resend_delay_ms: duration_ms("rules.alert.resend-delay", &self.rules_resend_delay)?,
                external_url: api_cfg.web.external_url().to_string(),
            },
        );
        if self.demo {
            // the vLLM rule pack evaluates over the simulated servers wherever the binary runs
            rules.add_embedded(
                crate::rules::pack::VLLM_RULES_FILE,
                crate::rules::pack::VLLM_RULES,
            );
        }
        let prepared = rules
            .prepare(&cfg)
            .map_err(|e| anyhow!("error loading rules: {e}"))?;
        rules.apply(prepared).await;

        let sink: Arc<dyn SampleSink> = db.clone();
        let mgr = Arc::new(ScrapeManager::new(sink.clone()));
        let (cfg_tx, cfg_rx) = watch::channel(cfg);
        let (stop_tx, stop_rx) = watch::channel(false);
        let stopped = |mut rx: watch::Receiver<bool>| async move {
            let _ = rx.wait_for(|s| *s).await;
        };
        let scraper = crate::scrape::manager::spawn_on_own_thread(
            mgr.clone(),
            cfg_rx,
            stopped(stop_rx.clone()),
        )
        .context("starting the scrape thread")?;
        let gpu = if self.no_gpu {
            None
        } else {
            let interval = Duration::from_millis(
                duration_ms("gpu.interval", &self.gpu_interval)?.max(100) as u64,
            );
            tokio::task::spawn_blocking(crate::gpu::open_default)
                .await
                .ok()
                .flatten()
                .map(|sampler| {
                    tokio::spawn(crate::gpu::run_gpu_sampler(
                        sampler,
                        sink.clone(),
                        crate::gpu::GpuOptions::local(interval),
                        stopped(stop_rx.clone()),
                    ))
                })
        };

        let remote_flush = Duration::from_millis(
            duration_ms("storage.remote.flush-deadline", &self.remote_flush_deadline)?.max(0)
                as u64,
        );
        let remote_write = Arc::new(crate::remote::sender::RemoteWriteManager::new(
            &self.data_dir,
        ));
        let remote_task = tokio::spawn(crate::remote::sender::follow_config(
            remote_write.clone(),
            cfg_tx.subscribe(),
            stopped(stop_rx.clone()),
        ));
        let notifier = crate::notifier::Notifier::new(crate::notifier::NotifierOptions {
            queue_capacity: self.notification_queue_capacity,
            drain_on_shutdown: self.drain_notification_queue,
            ..Default::default()
        });
        notifier
            .apply_config(&cfg_tx.borrow())
            .context("applying the alerting configuration")?;
        rules.set_sender(Arc::new(notifier.clone()));
        let notifier_task = tokio::spawn(crate::notifier::follow_config(
            notifier.clone(),
            cfg_tx.subscribe(),
            stopped(stop_rx.clone()),
        ));
        let result_cache = api::result_cache::ResultCache::new(result_cache_bytes as usize);
        let subquery_step = Arc::new(AtomicI64::new(subquery_step_ms(&cfg_tx.borrow())));
        let view = Arc::new(ScrapeView {
            mgr: mgr.clone(),
            db: db.clone(),
            configs: cfg_tx,
            load: Arc::new(load),
            rules: rules.clone(),
            subquery_step: subquery_step.clone(),
            result_cache: result_cache.clone(),
        });
        #[cfg(unix)]
        let hup_task = {
            let view = view.clone();
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
                .ok()
                .map(|mut hup| {
                    tokio::spawn(async move {
                        while hup.recv().await.is_some() {
                            let v = view.clone();
                            if let Err(e) = tokio::task::spawn_blocking(move || v.reload()).await {
                                tracing::error!(err = %e, "Error reloading config");
                            }
                        }
                    })
                })
        };

        {
            let c = result_cache.clone();
            crate::metrics::register_collector("query_result_cache", move |out| {
                c.write_metrics(out)
            });
        }
        let backend = DbBackend::new(db.clone(), engine_opts)
            .with_result_cache(result_cache)
            .with_default_subquery_step(subquery_step);
        let state = ApiState::new(Arc::new(backend), view, api_cfg);
        state.set_rules(rules.clone());
        state.set_remote(Arc::new(crate::remote::receiver::RemoteStore::new(
            db.clone(),
            crate::remote::receiver::RemoteOptions {
                write_enabled: self.enable_remote_write_receiver || features.remote_write_receiver,
                ..Default::default()
            },
        )));
        state.set_notifier(notifier.clone());
        state.set_wal_replay(progress);
        startup.ready(state);
        tracing::info!("Server is ready to receive web requests.");
        let served = server
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e)));
        tracing::info!("shutting down");
        let _ = stop_tx.send(true);
        #[cfg(unix)]
        if let Some(h) = hup_task {
            h.abort();
            let _ = h.await;
        }
        rules.stop().await;
        drop(rules);
        let _ = scraper.await;
        mgr.stop().await;
        let _ = notifier_task.await;
        notifier.stop().await;
        if let Some(g) = gpu {
            let _ = g.await;
        }
        drop(mgr);
        // the sender reads the WAL: it stops before the store checkpoints it away at close
        let _ = remote_task.await;
        remote_write.stop(remote_flush).await;
        served.context("serving HTTP")?;
        match Arc::try_unwrap(db) {
            Ok(db) => tokio::task::spawn_blocking(move || db.close())
                .await?
                .context("closing the store")?,
            Err(db) => {
                // something still holds the store (a query finishing): flush what we can
                db.sync().context("syncing the WAL")?;
            }
        }
        Ok(())
    }
}
