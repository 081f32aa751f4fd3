//! Targets: discovery from a configuration and the work of one scrape.
//!
//! [`discover`] turns the static and file service-discovery groups of a job into [`Target`]s
//! (after `relabel_configs`). [`ScrapeLoop::scrape_once`] fetches a target's page, parses it,
//! applies `metric_relabel_configs`, attaches the target labels, adds the synthetic series
//! (`up`, `scrape_duration_seconds`, ...) and staleness markers, and hands the batch to the
//! [`SampleSink`].

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use inferdb_storage::{stale_nan, Label, Labels};
use parking_lot::Mutex;

use super::http::{HttpTarget, Outcome, Page, PooledBuf, RequestSpec};
use crate::config::http::Secret;
use crate::config::{Config, ScrapeConfig};
use crate::discovery::file::read_file_sd;
use crate::discovery::TargetGroup;
use crate::metrics::{self, Counter, Histogram};
use crate::model::exposition::{self, Entry, Format, MetricType};
use crate::model::relabel::{relabel, LabelMap, RelabelConfig};
use crate::model::series_cache::{MetaLines, SeriesCache};
use crate::model::sink::{AppendStats, SampleSink, SeriesHandle, SinkError, SinkSample};

static EXCEEDED_BODY_SIZE: LazyLock<Counter> = LazyLock::new(|| {
    metrics::counter(
        "prometheus_target_scrapes_exceeded_body_size_limit_total",
        "Total number of scrapes that hit the body size limit.",
    )
});
static EXCEEDED_SAMPLE_LIMIT: LazyLock<Counter> = LazyLock::new(|| {
    metrics::counter(
        "prometheus_target_scrapes_exceeded_sample_limit_total",
        "Total number of scrapes that hit the sample limit and were rejected.",
    )
});
/// Counts a scrape that hit the body size limit.
pub(crate) fn note_body_size_exceeded() {
    EXCEEDED_BODY_SIZE.inc();
}

static SAMPLES_REJECTED: LazyLock<Counter> = LazyLock::new(|| {
    metrics::counter(
        "inferdb_target_scrapes_samples_rejected_total",
        "Scraped samples the store refused (out of order, duplicate timestamp, out of bounds).",
    )
});

/// The `Accept` header Prometheus 3 sends by default (OpenMetrics first, UTF-8 names allowed).
pub const ACCEPT_HEADER: &str = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,text/plain;version=0.0.4;q=0.2,*/*;q=0.1";

/// Body size limit used when the configuration sets none (Prometheus has none; a page this
/// large is a broken target, and reading it whole would only cost memory).
pub const DEFAULT_BODY_SIZE_LIMIT: u64 = 32 << 20;

/// A target to scrape, after relabelling.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    /// The job (scrape config) name.
    pub job: String,
    /// The URL scraped, query parameters included.
    pub url: String,
    /// Labels attached to every series of the target (`job`, `instance`, group labels).
    pub labels: Labels,
    /// The labels before relabelling (`__address__`, `__scheme__`, ...).
    pub discovered_labels: BTreeMap<String, String>,
    /// The interval.
    pub interval: Duration,
    /// The timeout.
    pub timeout: Duration,
}

impl Target {
    /// A key identifying the target within its job (URL and labels).
    pub fn key(&self) -> String {
        format!("{}|{}|{}", self.job, self.url, self.labels)
    }

    /// A stable offset within the interval, so targets spread over it and keep their phase
    /// across restarts (as Prometheus does).
    pub fn offset(&self, interval: Duration) -> Duration {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        // DefaultHasher::new() uses fixed keys: stable across runs of the same build.
        self.key().hash(&mut h);
        let ms = interval.as_millis().max(1) as u64;
        Duration::from_millis(h.finish() % ms)
    }
}

fn fmt_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if !ms.is_multiple_of(1000) {
        format!("{ms}ms")
    } else if !ms.is_multiple_of(60_000) || ms == 0 {
        format!("{}s", ms / 1000)
    } else {
        format!("{}m", ms / 60_000)
    }
}

/// The targets of one job from its static and file-SD groups, relabelled, read now (tests
/// and one-off uses; the scrape manager takes its groups from the discovery manager). Also
/// gives the errors of unreadable SD files.
pub fn discover(cfg: &Config, sc: &ScrapeConfig) -> (Vec<Target>, Vec<String>) {
    let mut groups: Vec<TargetGroup> = sc
        .static_configs
        .iter()
        .enumerate()
        .map(|(i, s)| TargetGroup::from_addresses(i.to_string(), &s.targets, s.labels.clone()))
        .collect();
    let mut errs = vec![];
    for f in &sc.file_sd_configs {
        let (gs, es) = read_file_sd(&f.files);
        groups.extend(gs);
        errs.extend(es);
    }
    (targets_from_groups(cfg, sc, &groups).0, errs)
}

/// The targets of one job's discovered groups after `relabel_configs` (Prometheus'
/// `TargetsFromGroup`), and the discovered labels of the targets relabelling dropped.
pub fn targets_from_groups(
    cfg: &Config,
    sc: &ScrapeConfig,
    groups: &[TargetGroup],
) -> (Vec<Target>, Vec<LabelMap>) {
    let mut out = vec![];
    let mut dropped = vec![];
    for grp in groups {
        let (t, d) = targets_from_group(cfg, sc, grp);
        out.extend(t);
        dropped.extend(d);
    }
    dedup_targets(&mut out);
    (out, dropped)
}

/// Drops the targets of a job that repeat an earlier one, as Prometheus does.
fn dedup_targets(targets: &mut Vec<Target>) {
    let mut seen = std::collections::HashSet::new();
    targets.retain(|t| seen.insert(t.key()));
}

/// [`targets_from_groups`] for one group, before duplicates are dropped.
pub fn targets_from_group(
    cfg: &Config,
    sc: &ScrapeConfig,
    grp: &TargetGroup,
) -> (Vec<Target>, Vec<LabelMap>) {
    let g = &cfg.global;
    let mut out = vec![];
    let mut dropped = vec![];
    for tl in &grp.targets {
        let mut l: LabelMap = LabelMap::new();
        // group labels, the target's own over them; empty values are no labels
        for (k, v) in grp.labels.iter().chain(tl) {
            if v.is_empty() {
                l.remove(k);
            } else {
                l.insert(k.clone(), v.clone());
            }
        }
        // the job's settings, where discovery did not set them
        for (k, v) in [
            ("job", sc.job_name.clone()),
            ("__scrape_interval__", fmt_duration(sc.interval(g))),
            ("__scrape_timeout__", fmt_duration(sc.timeout(g))),
            ("__metrics_path__", sc.metrics_path.clone()),
            ("__scheme__", sc.scheme.clone()),
        ] {
            if !v.is_empty() {
                l.entry(k.to_string()).or_insert(v);
            }
        }
        for (k, vs) in &sc.params {
            if let Some(v) = vs.first() {
                l.insert(format!("__param_{k}"), v.clone());
            }
        }
        let discovered = l.clone();
        if !relabel(&mut l, &sc.relabel_configs) {
            dropped.push(discovered);
            continue;
        }
        let Some(address) = l.get("__address__").filter(|a| !a.is_empty()).cloned() else {
            continue;
        };
        if !l.contains_key("instance") {
            l.insert("instance".into(), address.clone());
        }
        let interval = l
            .get("__scrape_interval__")
            .and_then(|s| crate::config::parse_duration(s).ok())
            .filter(|d| !d.is_zero())
            .unwrap_or(sc.interval(g));
        let timeout = l
            .get("__scrape_timeout__")
            .and_then(|s| crate::config::parse_duration(s).ok())
            .filter(|d| !d.is_zero())
            .unwrap_or(sc.timeout(g))
            .min(interval);
        let scheme = l
            .get("__scheme__")
            .cloned()
            .unwrap_or_else(|| "http".into());
        let path = l
            .get("__metrics_path__")
            .cloned()
            .unwrap_or_else(|| "/metrics".into());
        let mut url = if address.contains("://") {
            address.clone()
        } else {
            format!("{scheme}://{address}")
        };
        if !path.starts_with('/') {
            url.push('/');
        }
        url.push_str(&path);
        // query parameters: every value of params, with __param_ overrides for the first
        let mut query: Vec<(String, String)> = vec![];
        for (k, vs) in &sc.params {
            let first = l.get(&format!("__param_{k}")).cloned();
            for (i, v) in vs.iter().enumerate() {
                let v = if i == 0 {
                    first.clone().unwrap_or(v.clone())
                } else {
                    v.clone()
                };
                query.push((k.clone(), v));
            }
        }
        for (k, v) in &l {
            if let Some(p) = k.strip_prefix("__param_") {
                if !sc.params.contains_key(p) {
                    query.push((p.to_string(), v.clone()));
                }
            }
        }
        if !query.is_empty() {
            url.push(if url.contains('?') { '&' } else { '?' });
            let q: Vec<String> = query
                .iter()
                .map(|(k, v)| format!("{}={}", url_escape(k), url_escape(v)))
                .collect();
            url.push_str(&q.join("&"));
        }
        let labels = Labels::new(
            l.iter()
                .filter(|(k, _)| !k.starts_with("__"))
                .map(|(k, v)| Label::new(k.clone(), v.clone()))
                .collect(),
        );
        out.push(Target {
            job: sc.job_name.clone(),
            url,
            labels,
            discovered_labels: discovered,
            interval,
            timeout,
        });
    }
    (out, dropped)
}

fn url_escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            o.push(b as char);
        } else {
            let _ = write!(o, "%{b:02X}");
        }
    }
    o
}

/// Health of a target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// Not scraped yet.
    Unknown,
    /// The last scrape succeeded.
    Up,
    /// The last scrape failed.
    Down,
}

impl Health {
    /// `up`, `down` or `unknown`, as the targets API writes it.
    pub fn as_str(&self) -> &'static str {
        match self {
            Health::Unknown => "unknown",
            Health::Up => "up",
            Health::Down => "down",
        }
    }
}

/// Metadata of a metric family from HELP/TYPE/UNIT lines.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MetricMetadata {
    /// The type (`counter`, `gauge`, ...).
    pub kind: String,
    /// The help text.
    pub help: String,
    /// The unit, often empty.
    pub unit: String,
}

/// What the last scrape of a target did; shared with the API.
#[derive(Debug, Clone)]
pub struct TargetState {
    /// Health after the last scrape.
    pub health: Health,
    /// Why the last scrape failed.
    pub last_error: Option<String>,
    /// Start of the last scrape, ms since the epoch.
    pub last_scrape_ms: Option<i64>,
    /// How long the last scrape took.
    pub last_duration: Duration,
    /// Samples on the last page.
    pub samples_scraped: usize,
    /// Scrapes done.
    pub scrapes: u64,
    /// Scrapes failed.
    pub failures: u64,
    /// Metadata of the families on the last page.
    pub metadata: Arc<BTreeMap<String, MetricMetadata>>,
}

impl Default for TargetState {
    fn default() -> Self {
        TargetState {
            health: Health::Unknown,
            last_error: None,
            last_scrape_ms: None,
            last_duration: Duration::ZERO,
            samples_scraped: 0,
            scrapes: 0,
            failures: 0,
            metadata: Arc::new(BTreeMap::new()),
        }
    }
}

/// Per-job settings a scrape loop needs.
#[derive(Debug, Clone)]
pub struct ScrapeOptions {
    /// Keep the page's labels on conflicts.
    pub honor_labels: bool,
    /// Keep the page's timestamps.
    pub honor_timestamps: bool,
    /// Fail scrapes with more samples than this after relabelling (0 = none).
    pub sample_limit: u64,
    /// Fail scrapes where a series has more labels than this (0 = none).
    pub label_limit: u64,
    /// Fail scrapes with larger bodies (0 = none).
    pub body_size_limit: u64,
    /// Ask for gzip.
    pub enable_compression: bool,
    /// Every scrape through the job's `reqwest` client (a proxy or extra headers are set),
    /// never the lean HTTP/1.1 client.
    pub general_client_only: bool,
    /// Rules for scraped series.
    pub metric_relabel_configs: Vec<RelabelConfig>,
}

impl ScrapeOptions {
    /// The options of a job.
    pub fn from_config(cfg: &Config, sc: &ScrapeConfig) -> Self {
        let g = &cfg.global;
        let body = sc
            .body_size_limit
            .or(g.body_size_limit)
            .map(|b| b.0)
            .unwrap_or(DEFAULT_BODY_SIZE_LIMIT);
        ScrapeOptions {
            honor_labels: sc.honor_labels,
            honor_timestamps: sc.honor_timestamps,
            sample_limit: sc.sample_limit.or(g.sample_limit).unwrap_or(0),
            label_limit: sc.label_limit.or(g.label_limit).unwrap_or(0),
            body_size_limit: body,
            enable_compression: sc.enable_compression,
            general_client_only: sc.has_proxy_or_headers(),
            metric_relabel_configs: sc.metric_relabel_configs.clone(),
        }
    }
}

impl Default for ScrapeOptions {
    fn default() -> Self {
        ScrapeOptions {
            honor_labels: false,
            honor_timestamps: true,
            sample_limit: 0,
            label_limit: 0,
            body_size_limit: DEFAULT_BODY_SIZE_LIMIT,
            enable_compression: true,
            general_client_only: false,
            metric_relabel_configs: vec![],
        }
    }
}

/// Builds the HTTP client of a job (TLS, redirects, proxy, extra headers).
pub fn build_client(sc: &ScrapeConfig) -> Result<reqwest::Client, String> {
    let b = reqwest::Client::builder()
        .user_agent(concat!("inferdb/", env!("CARGO_PKG_VERSION")))
        .pool_max_idle_per_host(2)
        .tcp_nodelay(true);
    let mut b = sc.proxy_and_headers().proxy_and_headers(b)?;
    if !sc.follow_redirects {
        b = b.redirect(reqwest::redirect::Policy::none());
    }
    if !sc.enable_compression {
        b = b.no_gzip();
    }
    if let Some(tls) = &sc.tls_config {
        if tls.insecure_skip_verify {
            b = b.danger_accept_invalid_certs(true);
        }
        let ca_pem = match (&tls.ca, &tls.ca_file) {
            (Some(c), _) => Some(c.clone().into_bytes()),
            (None, Some(f)) => Some(std::fs::read(f).map_err(|e| format!("ca_file {f}: {e}"))?),
            _ => None,
        };
        if let Some(pem) = ca_pem {
            let certs = reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|e| format!("ca certificate: {e}"))?;
            for c in certs {
                b = b.add_root_certificate(c);
            }
        }
        if let (Some(cert), Some(key)) = (&tls.cert_file, &tls.key_file) {
            let mut pem = std::fs::read(cert).map_err(|e| format!("cert_file {cert}: {e}"))?;
            pem.extend(std::fs::read(key).map_err(|e| format!("key_file {key}: {e}"))?);
            let id = reqwest::Identity::from_pem(&pem).map_err(|e| format!("client cert: {e}"))?;
            b = b.identity(id);
        }
    }
    b.build().map_err(|e| e.to_string())
}

/// How a scrape request authenticates.
#[derive(Debug, Clone, Default)]
pub enum Auth {
    /// No credentials.
    #[default]
    None,
    /// Basic auth: user and password.
    Basic(String, Option<Secret>),
    /// `Authorization: <scheme> <credentials>` (the whole header value).
    Header(Secret),
}

impl Auth {
    /// The auth of a job (reads password/credentials files).
    pub fn from_config(sc: &ScrapeConfig) -> Result<Auth, String> {
        if let Some(b) = &sc.basic_auth {
            let pw = match (&b.password, &b.password_file) {
                (Some(p), _) => Some(p.clone()),
                (None, Some(f)) => Some(Secret::new(
                    std::fs::read_to_string(f)
                        .map_err(|e| format!("password_file {f}: {e}"))?
                        .trim(),
                )),
                _ => None,
            };
            return Ok(Auth::Basic(b.username.clone(), pw));
        }
        if let Some(a) = &sc.authorization {
            let cred = match (&a.credentials, &a.credentials_file) {
                (Some(c), _) => c.expose().to_owned(),
                (None, Some(f)) => std::fs::read_to_string(f)
                    .map_err(|e| format!("credentials_file {f}: {e}"))?
                    .trim()
                    .to_string(),
                _ => String::new(),
            };
            return Ok(Auth::Header(Secret::new(format!("{} {cred}", a.scheme()))));
        }
        Ok(Auth::None)
    }
}

/// A sample of this scrape waiting to be stored: its cache slot, time and value.
#[derive(Debug, Clone, Copy)]
struct Pend {
    slot: u32,
    t: i64,
    v: f64,
}

/// The outcome of one scrape.
#[derive(Debug, Clone, PartialEq)]
pub struct ScrapeReport {
    /// Whether the scrape succeeded (`up`).
    pub up: bool,
    /// Why it failed.
    pub error: Option<String>,
    /// Samples on the page.
    pub samples_scraped: usize,
    /// Samples left after metric relabelling.
    pub samples_post_relabel: usize,
    /// Series not seen in the previous scrape.
    pub series_added: usize,
    /// Staleness markers written.
    pub stale_markers: usize,
    /// Samples the sink refused (out of order, duplicates).
    pub rejected: usize,
}

/// The state of one target's scrape loop.
pub struct ScrapeLoop {
    target: Target,
    opts: ScrapeOptions,
    client: reqwest::Client,
    /// The lean client of an `http://` target (others go through `client`).
    lean: Option<HttpTarget>,
    auth: Auth,
    sink: Arc<dyn SampleSink>,
    state: Arc<Mutex<TargetState>>,
    cache: SeriesCache,
    gen: u64,
    pend: Vec<Pend>,
    synthetic: Vec<SeriesHandle>,
    /// The last page's metadata lines.
    meta_lines: MetaLines,
    /// Where this page's metadata lines are (start, end, declared type).
    meta_seen: Vec<(u32, u32, Option<MetricType>)>,
    duration_hist: Histogram,
    scraped_total: Counter,
    failed_total: Counter,
    /// The last batch could not be stored (logged once per change, not per scrape).
    store_failing: bool,
}

const SYNTHETIC: [&str; 5] = [
    "up",
    "scrape_duration_seconds",
    "scrape_samples_scraped",
    "scrape_samples_post_metric_relabeling",
    "scrape_series_added",
];

impl ScrapeLoop {
    /// A loop for `target`.
    pub fn new(
        target: Target,
        opts: ScrapeOptions,
        client: reqwest::Client,
        auth: Auth,
        sink: Arc<dyn SampleSink>,
    ) -> Self {
        let synthetic = SYNTHETIC
            .iter()
            .map(|n| SeriesHandle::new(target.labels.with("__name__", n)))
            .collect();
        let lean = (!opts.general_client_only).then(|| {
            HttpTarget::new(&RequestSpec {
                url: &target.url,
                accept: ACCEPT_HEADER,
                timeout: target.timeout,
                gzip: opts.enable_compression,
                authorization: match &auth {
                    Auth::None => None,
                    Auth::Basic(u, p) => Some(super::http::basic_auth_value(
                        u,
                        p.as_ref().map(Secret::expose),
                    )),
                    Auth::Header(h) => Some(h.expose().to_owned()),
                },
            })
        });
        ScrapeLoop {
            opts,
            client,
            lean: lean.flatten(),
            auth,
            sink,
            state: Arc::new(Mutex::new(TargetState::default())),
            cache: SeriesCache::default(),
            gen: 0,
            pend: Vec::new(),
            store_failing: false,
            duration_hist: metrics::histogram_with(
                "inferdb_target_scrape_duration_seconds",
                "Time a scrape took (fetch, parse, store), by job.",
                metrics::DURATION_BUCKETS,
                &[("job", &target.job)],
            ),
            scraped_total: metrics::counter_with(
                "inferdb_target_scrapes_total",
                "Scrapes done, by job.",
                &[("job", &target.job)],
            ),
            failed_total: metrics::counter_with(
                "inferdb_target_scrape_failures_total",
                "Scrapes that failed (up == 0), by job.",
                &[("job", &target.job)],
            ),
            target,
            synthetic,
            meta_lines: MetaLines::default(),
            meta_seen: Vec::new(),
        }
    }

    /// The target.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// The shared state (health, last error, metadata).
    pub fn state(&self) -> Arc<Mutex<TargetState>> {
        self.state.clone()
    }

    async fn fetch(&mut self) -> Result<Page, String> {
        if let Some(lean) = &mut self.lean {
            match lean.fetch(self.opts.body_size_limit).await {
                Ok(Outcome::Page(p)) => return Ok(p),
                // the job's client applies the redirect policy
                Ok(Outcome::Redirect) => {}
                Err(e) => return Err(e.to_string()),
            }
        }
        self.fetch_general().await
    }

    /// A fetch through the job's `reqwest` client (TLS, redirects).
    async fn fetch_general(&self) -> Result<Page, String> {
        let mut req = self
            .client
            .get(&self.target.url)
            .header(reqwest::header::ACCEPT, ACCEPT_HEADER)
            .header(
                "X-Prometheus-Scrape-Timeout-Seconds",
                format!("{}", self.target.timeout.as_secs_f64()),
            );
        match &self.auth {
            Auth::None => {}
            Auth::Basic(u, p) => req = req.basic_auth(u, p.as_ref().map(Secret::expose)),
            Auth::Header(h) => req = req.header(reqwest::header::AUTHORIZATION, h.expose()),
        }
        let mut resp = req.send().await.map_err(|e| describe_reqwest(&e))?;
        if !resp.status().is_success() {
            return Err(format!("server returned HTTP status {}", resp.status()));
        }
        let ct = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let limit = self.opts.body_size_limit;
        let cap =
            resp.content_length()
                .unwrap_or(1 << 16)
                .min(if limit > 0 { limit } else { 1 << 25 });
        let mut buf = PooledBuf::take();
        let body = buf.vec();
        body.reserve(cap as usize);
        while let Some(chunk) = resp.chunk().await.map_err(|e| describe_reqwest(&e))? {
            if limit > 0 && (body.len() + chunk.len()) as u64 > limit {
                EXCEEDED_BODY_SIZE.inc();
                return Err(format!("body size limit exceeded ({limit} bytes)"));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Page::whole(buf, ct))
    }

    /// Scrapes once with start time `t_ms`: fetches, parses, stores. Never panics on bad
    /// pages; a failure gives `up == 0` and staleness markers for the previous series.
    pub async fn scrape_once(&mut self, t_ms: i64) -> ScrapeReport {
        let fetched = self.fetch_page().await;
        self.process_fetched(fetched, t_ms)
    }

    /// The first half of [`ScrapeLoop::scrape_once`]: fetches the page within the timeout.
    /// The scrape's duration counts from here.
    pub async fn fetch_page(&mut self) -> Fetched {
        let start = Instant::now();
        let page = match tokio::time::timeout(self.target.timeout, self.fetch()).await {
            Ok(r) => r,
            Err(_) => Err(format!(
                "scrape timed out after {}",
                fmt_duration(self.target.timeout)
            )),
        };
        Fetched { start, page }
    }

    /// The second half of [`ScrapeLoop::scrape_once`]: parses the fetched page and stores
    /// its samples (CPU and the store only, no waiting on the network: a large page can be
    /// processed on a thread of its own while other targets are scraped).
    pub fn process_fetched(&mut self, fetched: Fetched, t_ms: i64) -> ScrapeReport {
        let result = match fetched.page {
            Ok(page) => match std::str::from_utf8(page.body()) {
                Ok(text) => {
                    self.process_page(text, Format::from_content_type(&page.content_type), t_ms)
                }
                Err(e) => Err(Failed::new(format!("page is not valid UTF-8: {e}"))),
            },
            Err(e) => Err(Failed::new(e)),
        };
        self.finish(result, t_ms, fetched.start.elapsed())
    }

    /// Processes a page as if fetched at `t_ms` (no HTTP); for tests and benchmarks.
    pub fn scrape_page(&mut self, page: &str, format: Format, t_ms: i64) -> ScrapeReport {
        let start = Instant::now();
        let r = self.process_page(page, format, t_ms);
        self.finish(r, t_ms, start.elapsed())
    }

    /// Writes staleness markers for every series of the last successful scrape (the target
    /// went away).
    pub fn mark_all_stale(&mut self, t_ms: i64) {
        let mut batch: Vec<SinkSample<'_>> = self
            .cache
            .handles()
            .map(|(_, h)| SinkSample {
                series: h,
                t: t_ms,
                v: stale_nan(),
            })
            .collect();
        batch.extend(self.synthetic.iter().map(|h| SinkSample {
            series: h,
            t: t_ms,
            v: stale_nan(),
        }));
        if let Err(e) = self.sink.append_batch(&batch) {
            tracing::warn!(target = %self.target.url, "writing staleness markers: {e}");
        }
        drop(batch);
        self.pend.clear();
        self.cache.clear();
    }

    fn finish(
        &mut self,
        result: Result<ProcessStats, Failed>,
        t_ms: i64,
        took: Duration,
    ) -> ScrapeReport {
        let mut report = ScrapeReport {
            up: result.is_ok(),
            error: result.as_ref().err().map(|f| f.error.clone()),
            samples_scraped: 0,
            samples_post_relabel: 0,
            series_added: 0,
            stale_markers: 0,
            rejected: 0,
        };
        match result {
            Ok(st) => {
                report.samples_scraped = st.scraped;
                report.samples_post_relabel = st.post_relabel;
                report.series_added = st.added;
                report.stale_markers = st.stale;
            }
            Err(f) => {
                // as Prometheus reports them: the samples read before the failure
                report.samples_scraped = f.stats.scraped;
                report.samples_post_relabel = f.stats.post_relabel;
                // As Prometheus appends an empty scrape: every series of the previous
                // successful scrape ends here.
                self.cache.discard();
                self.pend.clear();
                self.pend.extend(self.cache.handles().map(|(slot, _)| Pend {
                    slot,
                    t: t_ms,
                    v: stale_nan(),
                }));
                report.stale_markers = self.pend.len();
            }
        }
        let vals = [
            if report.up { 1.0 } else { 0.0 },
            took.as_secs_f64(),
            report.samples_scraped as f64,
            report.samples_post_relabel as f64,
            report.series_added as f64,
        ];
        let mut batch: Vec<SinkSample<'_>> = Vec::with_capacity(self.pend.len() + vals.len());
        for p in &self.pend {
            if let Some(h) = &self.cache.slot(p.slot).series {
                batch.push(SinkSample {
                    series: h,
                    t: p.t,
                    v: p.v,
                });
            }
        }
        for (s, v) in self.synthetic.iter().zip(vals) {
            batch.push(SinkSample {
                series: s,
                t: t_ms,
                v,
            });
        }
        // the store may block (WAL write, a segment roll or fsync under its lock): on a
        // multi-threaded runtime let the worker hand its other scrape loops to another thread
        // meanwhile, so one slow commit does not delay every target's scrape. `serve` runs
        // the loops on their own single-threaded runtime ([`super::manager::spawn_on_own_thread`])
        // and commits inline: the hand-off costs more CPU than the rare slow commit.
        let sink = &self.sink;
        let appended = match tokio::runtime::Handle::try_current() {
            Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(|| sink.append_batch(&batch))
            }
            _ => sink.append_batch(&batch),
        };
        drop(batch);
        let appended = match appended {
            Ok(st) if st.unresolved > 0 => self.retry_unresolved(st),
            r => r,
        };
        match appended {
            Ok(st) => {
                report.rejected = st.rejected;
                if st.rejected > 0 {
                    SAMPLES_REJECTED.add(st.rejected as u64);
                }
                if std::mem::take(&mut self.store_failing) {
                    tracing::info!(target = %self.target.url, "storing scraped samples again");
                }
            }
            Err(e) => {
                // nothing of the scrape (not even `up`) was stored; the store logs why
                if !std::mem::replace(&mut self.store_failing, true) {
                    tracing::warn!(target = %self.target.url, "{e}");
                }
                if report.error.is_none() {
                    report.error = Some(e.to_string());
                }
            }
        }
        if report.up {
            self.cache.commit();
        } else {
            self.cache.clear();
        }
        self.pend.clear();
        if self.pend.capacity() > 1 << 20 {
            self.pend.shrink_to(1 << 16);
        }
        self.duration_hist.observe(took.as_secs_f64());
        self.scraped_total.inc();
        if !report.up {
            self.failed_total.inc();
        }
        {
            let mut s = self.state.lock();
            // a page that could not be stored leaves the target down, as in Prometheus
            // where health follows the last error
            s.health = if report.up && report.error.is_none() {
                Health::Up
            } else {
                Health::Down
            };
            s.last_error = report.error.clone();
            s.last_scrape_ms = Some(t_ms);
            s.last_duration = took;
            s.samples_scraped = report.samples_scraped;
            s.scrapes += 1;
            if !report.up {
                s.failures += 1;
            }
        }
        report
    }

    /// The sink could not store some samples because their series' labels were released and
    /// its reference went stale: rebuilds those labels from the cached series text and
    /// stores the samples again.
    fn retry_unresolved(&mut self, first: AppendStats) -> Result<AppendStats, SinkError> {
        let mut relabel: Vec<(u32, Labels)> = vec![];
        for p in &self.pend {
            let Some(h) = &self.cache.slot(p.slot).series else {
                continue;
            };
            if h.labels().is_some() || h.cached_ref().is_some() {
                continue;
            }
            let text = self.cache.text_of(p.slot);
            let norm = self.cache.normalised_label(p.slot);
            let labels = exposition::parse_series_text(text, norm)
                .and_then(|smp| self.series_labels(&smp).ok().flatten());
            if let Some(l) = labels {
                relabel.push((p.slot, l));
            }
        }
        relabel.sort_by_key(|(slot, _)| *slot);
        relabel.dedup_by_key(|(slot, _)| *slot);
        let slots: Vec<u32> = relabel.iter().map(|(s, _)| *s).collect();
        for (slot, l) in relabel {
            if let Some(h) = &mut self.cache.slot_mut(slot).series {
                h.set_labels(l);
            }
        }
        self.cache.note_relabelled();
        let batch: Vec<SinkSample<'_>> = self
            .pend
            .iter()
            .filter_map(|p| {
                let h = self.cache.slot(p.slot).series.as_ref()?;
                slots.binary_search(&p.slot).is_ok().then_some(SinkSample {
                    series: h,
                    t: p.t,
                    v: p.v,
                })
            })
            .collect();
        let st = self.sink.append_batch(&batch)?;
        Ok(AppendStats {
            appended: first.appended + st.appended,
            rejected: first.rejected + st.rejected + st.unresolved,
            unresolved: 0,
        })
    }

    fn series_labels(&self, s: &exposition::Sample<'_>) -> Result<Option<Labels>, String> {
        let mut v: Vec<Label> = Vec::with_capacity(s.labels.len() + self.target.labels.len() + 1);
        v.push(Label::new("__name__", s.name.as_ref()));
        for (n, val) in s.labels.iter() {
            v.push(Label::new(n.into_owned(), val.into_owned()));
        }
        // target labels
        for tl in self.target.labels.iter() {
            match v.iter().position(|l| l.name == tl.name) {
                Some(i) if self.opts.honor_labels => {
                    let _ = i;
                }
                Some(i) => {
                    // the page's label becomes exported_<name> (exported_exported_... if taken)
                    let mut name = format!("exported_{}", tl.name);
                    while v.iter().any(|l| l.name == name) {
                        name = format!("exported_{name}");
                    }
                    let page_val = std::mem::replace(&mut v[i].value, tl.value.clone());
                    v.push(Label::new(name, page_val));
                }
                None => v.push(tl.clone()),
            }
        }
        if !self.opts.metric_relabel_configs.is_empty() {
            let mut m: LabelMap = v.into_iter().map(|l| (l.name, l.value)).collect();
            if !relabel(&mut m, &self.opts.metric_relabel_configs) {
                return Ok(None);
            }
            v = m.into_iter().map(|(n, val)| Label::new(n, val)).collect();
        }
        let labels = Labels::new(v);
        if self.opts.label_limit > 0 && labels.len() as u64 > self.opts.label_limit {
            return Err(format!(
                "label_limit exceeded (metric: {}, number of labels: {}, limit: {})",
                s.name,
                labels.len(),
                self.opts.label_limit
            ));
        }
        if labels.metric_name().is_none_or(|n| n.is_empty()) {
            return Ok(None);
        }
        Ok(Some(labels))
    }

    fn process_page(
        &mut self,
        page: &str,
        format: Format,
        t_ms: i64,
    ) -> Result<ProcessStats, Failed> {
        self.gen += 1;
        let gen = self.gen;
        self.pend.clear();
        self.cache.begin();
        let mut st = ProcessStats::default();
        // where this page's metadata lines are; whether one differs from the last page's
        self.meta_seen.clear();
        let mut meta_changed = false;
        let mut parser = exposition::parse(page, format);
        // the cached series expected on the next sample line (the last page's order)
        let mut next = 0usize;
        // the metadata line expected next (the last page's order)
        let mut next_meta = 0usize;
        loop {
            if let Some(text) = self.cache.expected(next) {
                if let Some(r) = parser.next_known(text) {
                    let slot = next as u32;
                    next += 1;
                    match r {
                        Ok((v, ts)) => {
                            st.scraped += 1;
                            self.take(slot, v, ts, t_ms, gen);
                            if self.over_sample_limit() {
                                return Err(
                                    self.sample_limit_exceeded(st, &page[parser.position()..])
                                );
                            }
                        }
                        // dcgm-exporter's "ERROR - FAILED TO CONVERT TO STRING": skip the line
                        Err(e) if e.bad_value_only => {}
                        Err(e) => {
                            return Err(self.failed(format!("parsing page: {e}"), st));
                        }
                    }
                    continue;
                }
            }
            if let Some((line, kind)) = self.meta_lines.expected(next_meta) {
                if parser.next_known_meta(line, kind) {
                    next_meta += 1;
                    let (a, b) = parser.last_line_span();
                    self.meta_seen.push((a as u32, b as u32, kind));
                    continue;
                }
            }
            let Some(entry) = parser.next() else { break };
            let entry = match entry {
                Ok(e) => e,
                Err(e) if e.bad_value_only => continue,
                Err(e) => {
                    return Err(self.failed(format!("parsing page: {e}"), st));
                }
            };
            match entry {
                Entry::Sample(s) => {
                    st.scraped += 1;
                    let slot = match self.cache.lookup(s.series_text) {
                        Some(slot) => slot,
                        None => {
                            let labels = match self.series_labels(&s) {
                                Ok(l) => l,
                                Err(err) => {
                                    return Err(self.failed(err, st));
                                }
                            };
                            if labels.is_some() {
                                st.added += 1;
                            }
                            self.cache.add_fresh(
                                s.series_text,
                                s.labels.normalised_label(),
                                labels.map(SeriesHandle::new),
                            )
                        }
                    };
                    if (slot as usize) < self.cache.len() {
                        // back in step with the last page's order
                        next = slot as usize + 1;
                    }
                    self.take(slot, s.value, s.timestamp_ms, t_ms, gen);
                    if self.over_sample_limit() {
                        return Err(self.sample_limit_exceeded(st, &page[parser.position()..]));
                    }
                }
                Entry::Help { .. } | Entry::Type { .. } | Entry::Unit { .. } => {
                    meta_changed = true;
                    let kind = match entry {
                        Entry::Type { kind, .. } => Some(kind),
                        _ => None,
                    };
                    let (a, b) = parser.last_line_span();
                    self.meta_seen.push((a as u32, b as u32, kind));
                }
            }
        }
        st.post_relabel = self.pend.len();
        // staleness: series of the previous scrape missing from this one
        for (slot, _) in self.cache.handles() {
            if self.cache.slot(slot).last_seen != gen {
                self.pend.push(Pend {
                    slot,
                    t: t_ms,
                    v: stale_nan(),
                });
                st.stale += 1;
            }
        }
        if meta_changed || self.meta_seen.len() != self.meta_lines.len() {
            // the metadata lines differ from the last page's (rarely): read them again
            let line = |&(a, b, _): &(u32, u32, Option<MetricType>)| &page[a as usize..b as usize];
            let mut meta: BTreeMap<String, MetricMetadata> = BTreeMap::new();
            for l in &self.meta_seen {
                let (name, field) = match exposition::parse(line(l), format).next() {
                    Some(Ok(Entry::Help { name, help })) => (name, MetaField::Help(help)),
                    Some(Ok(Entry::Type { name, kind })) => (name, MetaField::Type(kind.as_str())),
                    Some(Ok(Entry::Unit { name, unit })) => (name, MetaField::Unit(unit)),
                    _ => continue,
                };
                let m = meta.entry(name.into_owned()).or_insert_with(empty_meta);
                match field {
                    MetaField::Help(t) => m.help = t.into_owned(),
                    MetaField::Type(t) => m.kind = t.to_string(),
                    MetaField::Unit(t) => m.unit = t.to_string(),
                }
            }
            self.meta_lines
                .set(self.meta_seen.iter().map(|l| (line(l), l.2)));
            for m in meta.values_mut() {
                if m.kind.is_empty() {
                    m.kind = "unknown".into();
                }
            }
            self.state.lock().metadata = Arc::new(meta);
        }
        Ok(st)
    }

    /// Whether this page has more samples after relabelling than `sample_limit` allows.
    #[inline]
    fn over_sample_limit(&self) -> bool {
        self.opts.sample_limit > 0 && self.pend.len() as u64 > self.opts.sample_limit
    }

    /// The scrape fails on `error` with what was read so far; nothing of it is stored.
    fn failed(&mut self, error: String, mut stats: ProcessStats) -> Failed {
        stats.post_relabel = self.pend.len();
        self.pend.clear();
        Failed { error, stats }
    }

    /// The page went over `sample_limit`: the scrape fails (as in Prometheus) without
    /// parsing the rest of the page (`rest`), whose sample lines are only counted so that
    /// `scrape_samples_scraped` reports the page's size as Prometheus does.
    fn sample_limit_exceeded(&mut self, mut stats: ProcessStats, rest: &str) -> Failed {
        EXCEEDED_SAMPLE_LIMIT.inc();
        let more = count_sample_lines(rest);
        stats.scraped += more;
        let mut f = self.failed(String::new(), stats);
        if self.opts.metric_relabel_configs.is_empty() {
            // every sample line would have been kept
            f.stats.post_relabel += more;
        }
        f.error = format!(
            "sample limit exceeded (more than {} samples after relabelling; {} on the page)",
            self.opts.sample_limit, f.stats.scraped
        );
        f
    }

    /// A sample of the series in `slot`: queued unless the series was already on this page
    /// (the first one counts) or is dropped by relabelling.
    #[inline]
    fn take(&mut self, slot: u32, v: f64, ts: Option<i64>, t_ms: i64, gen: u64) {
        let s = self.cache.slot_mut(slot);
        if s.last_seen == gen {
            return;
        }
        s.last_seen = gen;
        let keep = s.series.is_some();
        self.cache.seen(slot);
        if keep {
            let t = match (self.opts.honor_timestamps, ts) {
                (true, Some(ts)) => ts,
                _ => t_ms,
            };
            self.pend.push(Pend { slot, t, v });
        }
    }
}

/// One metadata line of a page, borrowed.
enum MetaField<'a> {
    Help(Cow<'a, str>),
    Type(&'static str),
    Unit(&'a str),
}

fn empty_meta() -> MetricMetadata {
    MetricMetadata {
        kind: String::new(),
        help: String::new(),
        unit: String::new(),
    }
}

/// The sample lines of a page's text (neither blank nor a `#` line), without parsing them.
fn count_sample_lines(text: &str) -> usize {
    text.lines()
        .filter(|l| {
            let l = l.trim_start();
            !l.is_empty() && !l.starts_with('#')
        })
        .count()
}

/// A page fetched for one scrape (or why it could not be), waiting to be processed by
/// [`ScrapeLoop::process_fetched`].
pub struct Fetched {
    start: Instant,
    page: Result<Page, String>,
}

impl Fetched {
    /// Whether the page is large enough (1 MiB and more: tens of milliseconds of parsing
    /// and more) to be processed on a thread of its own rather than the scrape loops'.
    pub fn is_large(&self) -> bool {
        matches!(&self.page, Ok(p) if p.body().len() >= LARGE_PAGE_BYTES)
    }
}

/// See [`Fetched::is_large`].
const LARGE_PAGE_BYTES: usize = 1 << 20;

/// Why a page failed, with what was read of it before.
#[derive(Debug)]
struct Failed {
    error: String,
    stats: ProcessStats,
}

impl Failed {
    fn new(error: String) -> Failed {
        Failed {
            error,
            stats: ProcessStats::default(),
        }
    }
}

#[derive(Debug, Default, Clone, Copy)]
struct ProcessStats {
    scraped: usize,
    post_relabel: usize,
    added: usize,
    stale: usize,
}

fn describe_reqwest(e: &reqwest::Error) -> String {
    use std::error::Error as _;
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(x) = src {
        s.push_str(": ");
        s.push_str(&x.to_string());
        src = x.source();
    }
    s
}
