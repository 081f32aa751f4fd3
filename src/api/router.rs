//! The axum router, shared state and server loop.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use inferdb_query::engine::CancelToken;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower_http::compression::predicate::{DefaultPredicate, Predicate, SizeAbove};
use tower_http::compression::{CompressionLayer, CompressionLevel};

use super::error::ApiError;
use super::params::{MaxBodyBytes, DEFAULT_MAX_BODY_BYTES};
use super::{json, ApiBackend, ScrapeStatus};

/// Server-wide settings of the API.
#[derive(Debug, Clone)]
pub struct ApiConfig {
    /// Where to listen (`--web.listen-address`, default `127.0.0.1:9090`).
    pub listen: SocketAddr,
    /// The longest a query may run (`--query.timeout`, default 2m); a request's `timeout`
    /// parameter can only shorten it.
    pub query_timeout: Duration,
    /// The most samples one query may load (`--query.max-samples`, default 50,000,000).
    pub max_samples: usize,
    /// Lookback delta for instant selectors, ms (`--query.lookback-delta`, default 5m).
    pub lookback_delta_ms: i64,
    /// Queries evaluated at once (`--query.max-concurrency`, default 20); more wait in line.
    pub max_concurrency: usize,
    /// The largest request body accepted, bytes.
    pub max_body_bytes: usize,
    /// Whether `POST /-/reload` is allowed (`--web.enable-lifecycle`).
    pub enable_lifecycle: bool,
    /// Whether the TSDB admin endpoints work (`--web.enable-admin-api`).
    pub enable_admin_api: bool,
    /// The command-line flags, for `/api/v1/status/flags`.
    pub flags: BTreeMap<String, String>,
    /// Retention as text (e.g. `15d`), for `/api/v1/status/runtimeinfo`.
    pub storage_retention: String,
    /// The loaded configuration file as YAML, for `/api/v1/status/config`.
    pub config_yaml: String,
    /// Users allowed in (name to bcrypt hash); empty: no authentication.
    pub basic_auth_users: BTreeMap<String, crate::config::http::Secret>,
    /// HTTPS settings from the web configuration's `tls_server_config`; `None`: plain HTTP.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// The external URL and the route prefix every endpoint is served under.
    pub web: super::WebUrls,
    /// Connection cap and timeouts.
    pub conn_limits: super::conn::ConnLimits,
}

impl Default for ApiConfig {
    fn default() -> Self {
        ApiConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 9090)),
            query_timeout: Duration::from_secs(120),
            max_samples: 50_000_000,
            lookback_delta_ms: 5 * 60_000,
            max_concurrency: 20,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            enable_lifecycle: false,
            enable_admin_api: false,
            flags: BTreeMap::new(),
            storage_retention: "15d".into(),
            config_yaml: String::new(),
            basic_auth_users: BTreeMap::new(),
            tls: None,
            web: super::WebUrls::default(),
            conn_limits: super::conn::ConnLimits::default(),
        }
    }
}

/// Prometheus' buckets of `prometheus_http_request_duration_seconds`.
pub(crate) const HTTP_DURATION_BUCKETS: &[f64] = &[0.1, 0.2, 0.4, 1.0, 3.0, 8.0, 20.0, 60.0, 120.0];

/// Request counts and durations for inferdb's own `/metrics`, per server (Prometheus'
/// `prometheus_http_requests_total` and `prometheus_http_request_duration_seconds`).
#[derive(Debug, Default)]
pub(crate) struct HttpMetrics {
    /// (handler, code) -> requests
    pub requests: Mutex<BTreeMap<(&'static str, u16), u64>>,
    /// handler -> durations in seconds
    pub durations: Mutex<BTreeMap<&'static str, crate::metrics::Histogram>>,
}

impl HttpMetrics {
    fn record(&self, handler: &'static str, code: u16, secs: f64) {
        if let Ok(mut m) = self.requests.lock() {
            *m.entry((handler, code)).or_insert(0) += 1;
        }
        let h = match self.durations.lock() {
            Ok(mut m) => m
                .entry(handler)
                .or_insert_with(|| crate::metrics::Histogram::new(HTTP_DURATION_BUCKETS))
                .clone(),
            Err(_) => return,
        };
        h.observe(secs);
    }
}

struct Inner {
    backend: Arc<dyn ApiBackend>,
    scrape: Arc<dyn ScrapeStatus>,
    config: ApiConfig,
    query_slots: Arc<Semaphore>,
    metrics: HttpMetrics,
    start_time: SystemTime,
    ready: AtomicBool,
    remote: std::sync::OnceLock<Arc<crate::remote::receiver::RemoteStore>>,
    wal_replay: std::sync::OnceLock<Arc<inferdb_storage::ReplayProgress>>,
    notifier: std::sync::OnceLock<crate::notifier::Notifier>,
    rules: std::sync::OnceLock<Arc<crate::rules::manager::RuleManager>>,
    /// Queries (see [`InlineKey`]) that did not finish within [`INLINE_BUDGET`] last time.
    too_big_inline: Mutex<std::collections::HashSet<u64>>,
}

/// The state shared by every handler (cheap to clone).
#[derive(Clone)]
pub struct ApiState {
    inner: Arc<Inner>,
}

impl ApiState {
    /// State over a backend and a scraper view.
    pub fn new(
        backend: Arc<dyn ApiBackend>,
        scrape: Arc<dyn ScrapeStatus>,
        config: ApiConfig,
    ) -> Self {
        let slots = config.max_concurrency.max(1);
        ApiState {
            inner: Arc::new(Inner {
                backend,
                scrape,
                query_slots: Arc::new(Semaphore::new(slots)),
                config,
                metrics: HttpMetrics::default(),
                start_time: SystemTime::now(),
                ready: AtomicBool::new(true),
                remote: std::sync::OnceLock::new(),
                wal_replay: std::sync::OnceLock::new(),
                notifier: std::sync::OnceLock::new(),
                rules: std::sync::OnceLock::new(),
                too_big_inline: Mutex::new(std::collections::HashSet::new()),
            }),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &ApiConfig {
        &self.inner.config
    }

    pub(crate) fn backend(&self) -> &Arc<dyn ApiBackend> {
        &self.inner.backend
    }

    pub(crate) fn scrape(&self) -> &Arc<dyn ScrapeStatus> {
        &self.inner.scrape
    }

    pub(crate) fn metrics(&self) -> &HttpMetrics {
        &self.inner.metrics
    }

    pub(crate) fn start_time(&self) -> SystemTime {
        self.inner.start_time
    }

    /// Attaches the remote-write receiver and remote-read source (`/api/v1/write`,
    /// `/api/v1/read`); without one both answer 404. Only the first call takes effect.
    pub fn set_remote(&self, remote: Arc<crate::remote::receiver::RemoteStore>) {
        let _ = self.inner.remote.set(remote);
    }

    /// Attaches the notifier whose Alertmanagers `/api/v1/alertmanagers` lists; only the
    /// first call takes effect.
    pub fn set_notifier(&self, notifier: crate::notifier::Notifier) {
        let _ = self.inner.notifier.set(notifier);
    }

    pub(crate) fn notifier(&self) -> Option<&crate::notifier::Notifier> {
        self.inner.notifier.get()
    }

    pub(crate) fn remote(&self) -> Option<&Arc<crate::remote::receiver::RemoteStore>> {
        self.inner.remote.get()
    }

    /// Attaches the WAL replay's progress shown by `/api/v1/status/walreplay` (zeros
    /// without). Only the first call takes effect.
    pub fn set_wal_replay(&self, progress: Arc<inferdb_storage::ReplayProgress>) {
        let _ = self.inner.wal_replay.set(progress);
    }

    pub(crate) fn wal_replay(&self) -> Option<&Arc<inferdb_storage::ReplayProgress>> {
        self.inner.wal_replay.get()
    }

    /// Attaches the rule manager (`/api/v1/rules`, `/api/v1/alerts`); without one both
    /// answer empty lists. Only the first call takes effect.
    pub fn set_rules(&self, rules: Arc<crate::rules::manager::RuleManager>) {
        let _ = self.inner.rules.set(rules);
    }

    pub(crate) fn rules(&self) -> Option<&Arc<crate::rules::manager::RuleManager>> {
        self.inner.rules.get()
    }

    /// Marks the server ready or not (`/-/ready`); e.g. not ready while replaying the WAL.
    pub fn set_ready(&self, ready: bool) {
        self.inner.ready.store(ready, Ordering::Relaxed);
    }

    pub(crate) fn is_ready(&self) -> bool {
        self.inner.ready.load(Ordering::Relaxed) && self.inner.backend.ready()
    }

    /// Runs `f` on the blocking pool once a query slot is free (waiting in line otherwise),
    /// within `timeout` counted from now, including the wait. On timeout `cancel` is set so an
    /// engine that polls it stops; the slot stays taken until the work really ends. If the
    /// client goes away (this future is dropped), `cancel` is set too.
    pub(crate) async fn run_blocking<T, F>(
        &self,
        timeout: Duration,
        cancel: CancelToken,
        f: F,
    ) -> Result<T, ApiError>
    where
        T: Send + 'static,
        F: FnOnce(&dyn ApiBackend) -> Result<T, ApiError> + Send + 'static,
    {
        struct CancelOnDrop(CancelToken, bool);
        impl Drop for CancelOnDrop {
            fn drop(&mut self) {
                if self.1 {
                    self.0.cancel();
                }
            }
        }
        let mut guard = CancelOnDrop(cancel.clone(), true);
        let slots = self.inner.query_slots.clone();
        let backend = self.inner.backend.clone();
        let work = async move {
            let permit = slots
                .acquire_owned()
                .await
                .map_err(|_| ApiError::internal("query queue closed"))?;
            let handle = tokio::task::spawn_blocking(move || {
                let r = f(&*backend);
                drop(permit);
                r
            });
            handle
                .await
                .map_err(|e| ApiError::internal(format!("query failed: {e}")))?
        };
        let r = match tokio::time::timeout(timeout, work).await {
            Ok(r) => r,
            Err(_) => {
                cancel.cancel();
                Err(ApiError::timeout())
            }
        };
        guard.1 = false;
        r
    }
}

/// How long a query may run on the async worker that received it. Most dashboard queries
/// finish well within this, and answering them there saves the hand-off to the blocking pool
/// and back (two thread wake-ups); a query that is not done by then is stopped and evaluated
/// again from the start on the blocking pool, so a worker is never held for longer (the engine
/// checks its deadline at least once per series loaded and per block of steps). The same
/// query (text and number of steps) then goes straight to the pool until a run there takes
/// less than this again, so a large query is evaluated twice at most once.
pub(crate) const INLINE_BUDGET: Duration = Duration::from_micros(1500);

/// Queries longer than this are parsed on the blocking pool only; so are queries whose regex
/// matchers have counted repetitions (`a{2,5}`: nested ones make compiling take long).
/// Parsing anything else, regexes without them included, costs microseconds.
const INLINE_MAX_QUERY_BYTES: usize = 4096;

/// The most queries remembered as too big to run inline; the set is emptied when full.
const MAX_REMEMBERED: usize = 4096;

/// Which query a request runs, for [`ApiState::run_query`]'s memory of large queries: the
/// query text and the number of steps (a dashboard repeats both while its range moves on).
#[derive(Debug, Clone, Copy)]
pub(crate) struct InlineKey(u64);

impl InlineKey {
    /// The key of `query` over `steps` steps (0 for an instant query); `None` when the query
    /// must not be parsed on an async worker at all (long, or with regex matchers that may
    /// take long to compile).
    pub(crate) fn new(query: &str, steps: i64) -> Option<Self> {
        use std::hash::{Hash, Hasher};
        if query.len() > INLINE_MAX_QUERY_BYTES
            || ((query.contains("=~") || query.contains("!~")) && counted_repetition(query))
        {
            return None;
        }
        let mut h = std::collections::hash_map::DefaultHasher::new();
        query.hash(&mut h);
        steps.hash(&mut h);
        Some(InlineKey(h.finish()))
    }
}

/// Whether `query` may hold a regex counted repetition: a `{` followed by a digit or a
/// comma (a label matcher's `{` is followed by a label name, a quote or `}`). Without one a
/// regex compiles in time linear in its length.
fn counted_repetition(query: &str) -> bool {
    let b = query.as_bytes();
    b.iter().enumerate().any(|(i, &c)| {
        c == b'{'
            && b[i + 1..]
                .iter()
                .find(|x| !x.is_ascii_whitespace())
                .is_some_and(|x| x.is_ascii_digit() || *x == b',')
    })
}

impl ApiState {
    fn remember_big(&self, key: InlineKey, big: bool) {
        if let Ok(mut set) = self.inner.too_big_inline.lock() {
            if big {
                if set.len() >= MAX_REMEMBERED {
                    set.clear();
                }
                set.insert(key.0);
            } else {
                set.remove(&key.0);
            }
        }
    }

    fn known_big(&self, key: InlineKey) -> bool {
        self.inner
            .too_big_inline
            .lock()
            .map(|set| set.contains(&key.0))
            .unwrap_or(true)
    }

    /// Runs a query: first on this async worker within [`INLINE_BUDGET`] when `inline` is
    /// given, the query was not too big for that last time and a query slot is free right now;
    /// then, if that did not finish (or was not tried), on the blocking pool as
    /// [`ApiState::run_blocking`] does, within what is left of `timeout`.
    ///
    /// `f` gets the backend and the time it may run; it must stop with
    /// [`ErrorType::Timeout`](super::ErrorType::Timeout) once that has passed (the engine
    /// does). A timeout of the inline attempt before `timeout` itself has passed means
    /// "not finished yet", never an error to the client.
    pub(crate) async fn run_query<T, F>(
        &self,
        timeout: Duration,
        cancel: CancelToken,
        inline: Option<InlineKey>,
        f: F,
    ) -> Result<T, ApiError>
    where
        T: Send + 'static,
        F: Fn(&dyn ApiBackend, Duration) -> Result<T, ApiError> + Send + Sync + 'static,
    {
        let start = Instant::now();
        if let Some(key) = inline {
            if timeout > INLINE_BUDGET && !self.known_big(key) {
                if let Ok(permit) = self.inner.query_slots.try_acquire() {
                    crate::metrics::observe_query_slice("queue_time", start.elapsed());
                    let r = f(&*self.inner.backend, INLINE_BUDGET);
                    drop(permit);
                    match r {
                        Err(e) if e.typ == super::ErrorType::Timeout => {
                            self.remember_big(key, true)
                        }
                        r => return r,
                    }
                }
            }
        }
        let left = timeout.saturating_sub(start.elapsed());
        let state = self.clone();
        let queued = Instant::now();
        self.run_blocking(left, cancel, move |b| {
            crate::metrics::observe_query_slice("queue_time", queued.elapsed());
            let t0 = Instant::now();
            let r = f(b, left);
            if let Some(key) = inline {
                if t0.elapsed() < INLINE_BUDGET / 2 {
                    state.remember_big(key, false);
                }
            }
            r
        })
        .await
    }
}

/// A JSON success response around already-encoded `data`.
pub(crate) fn success(data: &str, warnings: &[String], infos: &[String]) -> Response {
    json_response(
        StatusCode::OK,
        json::success_envelope(data, warnings, infos),
    )
}

/// A response with `Content-Type: application/json`.
pub(crate) fn json_response(status: StatusCode, body: impl Into<axum::body::Body>) -> Response {
    let mut r = (status, body.into()).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

async fn track(State(state): State<ApiState>, mut req: Request, next: Next) -> Response {
    let handler = handler_name(req.uri().path());
    req.extensions_mut()
        .insert(MaxBodyBytes(state.config().max_body_bytes));
    let start = Instant::now();
    let resp = next.run(req).await;
    state.metrics().record(
        handler,
        resp.status().as_u16(),
        start.elapsed().as_secs_f64(),
    );
    resp
}

/// A bounded-cardinality name for the request's endpoint.
fn handler_name(path: &str) -> &'static str {
    const KNOWN: &[&str] = &[
        "/api/v1/query",
        "/api/v1/query_range",
        "/api/v1/query_exemplars",
        "/api/v1/format_query",
        "/api/v1/parse_query",
        "/api/v1/series",
        "/api/v1/labels",
        "/api/v1/metadata",
        "/api/v1/targets",
        "/api/v1/targets/metadata",
        "/api/v1/admin/tsdb/snapshot",
        "/api/v1/admin/tsdb/delete_series",
        "/api/v1/admin/tsdb/clean_tombstones",
        "/federate",
        "/api/v1/rules",
        "/api/v1/alerts",
        "/api/v1/alertmanagers",
        "/api/v1/status/buildinfo",
        "/api/v1/status/runtimeinfo",
        "/api/v1/status/flags",
        "/api/v1/status/config",
        "/api/v1/status/tsdb",
        "/api/v1/status/walreplay",
        "/api/v1/write",
        "/api/v1/read",
        "/-/healthy",
        "/-/ready",
        "/-/reload",
        "/metrics",
    ];
    if path.starts_with("/api/v1/label/") && path.ends_with("/values") {
        return "/api/v1/label/:name/values";
    }
    KNOWN
        .iter()
        .find(|k| **k == path)
        .copied()
        .unwrap_or("other")
}

async fn not_found() -> Response {
    (StatusCode::NOT_FOUND, "404 page not found\n").into_response()
}

/// Responses smaller than this go uncompressed even to clients that accept gzip: they fit
/// one TCP segment on Ethernet either way, and compressing them costs more time than the
/// bytes saved (most instant query answers are this small).
pub(crate) const COMPRESS_MIN_BYTES: u16 = 1400;

/// The compression of API answers a client accepts (Grafana's transport asks for gzip):
/// deflate's fastest level. A dashboard's range answer of 8 series over 1,441 steps (366 KB
/// of JSON) is then answered in ~4 ms instead of ~22 at the default level, gzipped 3-46 %
/// larger (BENCHMARKS.md, issue #21); answers are made once and read once, so the time until
/// the last byte is sent counts more than a few more bytes.
fn compression() -> CompressionLayer<impl Predicate> {
    CompressionLayer::new()
        .quality(CompressionLevel::Fastest)
        .compress_when(DefaultPredicate::new().and(SizeAbove::new(COMPRESS_MIN_BYTES)))
}

/// Builds the router with every endpoint, gzip/deflate compression when the client asks
/// (see [`compression`]), and request accounting.
pub fn router(state: ApiState) -> Router {
    use super::{admin, federate};
    use super::{labels, metadata, misc, query, query_range, series, status, targets};
    use super::{read, write};
    let api = Router::new()
        .route("/query", get(query::handle).post(query::handle))
        .route(
            "/query_range",
            get(query_range::handle).post(query_range::handle),
        )
        .route(
            "/query_exemplars",
            get(misc::query_exemplars).post(misc::query_exemplars),
        )
        .route(
            "/format_query",
            get(misc::format_query).post(misc::format_query),
        )
        .route(
            "/parse_query",
            get(super::parse_query::handle).post(super::parse_query::handle),
        )
        .route("/series", get(series::handle).post(series::handle))
        .route("/labels", get(labels::names).post(labels::names))
        .route("/label/{name}/values", get(labels::values))
        .route("/metadata", get(metadata::handle))
        .route("/targets", get(targets::handle))
        .route("/targets/metadata", get(metadata::targets))
        .route(
            "/admin/tsdb/snapshot",
            post(admin::snapshot).put(admin::snapshot),
        )
        .route(
            "/admin/tsdb/delete_series",
            post(admin::delete_series).put(admin::delete_series),
        )
        .route(
            "/admin/tsdb/clean_tombstones",
            post(admin::clean_tombstones).put(admin::clean_tombstones),
        )
        .route("/rules", get(super::rules::rules))
        .route("/alerts", get(super::rules::alerts))
        .route("/alertmanagers", get(super::alertmanagers::handle))
        .route("/status/buildinfo", get(status::buildinfo))
        .route("/status/runtimeinfo", get(status::runtimeinfo))
        .route("/status/flags", get(status::flags))
        .route("/status/config", get(status::config))
        .route("/status/tsdb", get(status::tsdb))
        .route("/status/walreplay", get(status::walreplay))
        .route("/write", post(write::handle))
        .route("/read", post(read::handle));
    let auth = (!state.config().basic_auth_users.is_empty()).then(|| {
        Arc::new(super::auth::BasicAuth::new(
            state.config().basic_auth_users.clone(),
        ))
    });
    let router = Router::new()
        .nest("/api/v1", api)
        .route("/inferdb/v1/insights", get(super::insights::handle))
        .route("/inferdb/v1/compare", get(super::compare::handle))
        .merge(crate::ui::routes())
        .route("/-/healthy", get(misc::healthy).head(misc::healthy))
        .route("/-/ready", get(misc::ready).head(misc::ready))
        .route("/-/reload", post(misc::reload).put(misc::reload))
        .route("/metrics", get(misc::metrics))
        .route("/federate", get(federate::handle))
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(state.clone(), track))
        .layer(compression());
    let router = match auth {
        Some(a) => router.layer(middleware::from_fn_with_state(a, super::auth::require)),
        None => router,
    };
    let prefix = state.config().web.prefix().to_string();
    // `<prefix>/` (where `/` redirects) is the UI's root too; nesting only matches `<prefix>`
    let mut ui_root = get(crate::ui::root).with_state(state.clone());
    if !state.config().basic_auth_users.is_empty() {
        let a = Arc::new(super::auth::BasicAuth::new(
            state.config().basic_auth_users.clone(),
        ));
        ui_root = ui_root.layer(middleware::from_fn_with_state(a, super::auth::require));
    }
    let router = router.with_state(state);
    if prefix.is_empty() {
        return router;
    }
    // As Prometheus: everything under the prefix, `/` redirects there.
    let to = format!("{prefix}/");
    Router::new()
        .route(
            "/",
            get(move || async move { (StatusCode::FOUND, [(header::LOCATION, to)]) }),
        )
        .route(&format!("{prefix}/"), ui_root)
        .nest(&prefix, router)
        .fallback(not_found)
}

/// Serves the API on `listener` until `shutdown` completes: HTTPS when the configuration
/// has TLS settings, plain HTTP otherwise.
pub async fn serve(
    listener: TcpListener,
    state: ApiState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let config = state.config().clone();
    serve_app(listener, router(state), &config, shutdown).await
}

/// Serves `app` on `listener` with the configuration's connection limits, over HTTPS when it
/// has TLS settings, until `shutdown` completes.
pub(crate) async fn serve_app(
    listener: TcpListener,
    app: Router,
    config: &ApiConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let limits = config.conn_limits;
    if let Some(tls) = config.tls.clone() {
        return super::tls::serve_tls(listener, app, tls, limits, shutdown).await;
    }
    super::conn::serve(listener, app, limits, shutdown, |tcp, _| async {
        Some(tcp)
    })
    .await
}
