//! The HTTP server from the moment the port is bound, before the store is open: as Prometheus
//! while it replays the WAL, `/-/healthy` answers 200, `/-/ready` and every other endpoint 503
//! `Service Unavailable`, `/api/v1/status/walreplay` shows the replay's progress and `/metrics`
//! the process' own metrics. Once [`Startup::ready`] hands over the full API, every request
//! (on the same listener and connections) goes to it.

use std::future::Future;
use std::sync::{Arc, OnceLock};

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{middleware, Router};
use inferdb_storage::ReplayProgress;
use tokio::net::TcpListener;
use tower::ServiceExt;

use super::router::{self, ApiConfig, ApiState};

/// The switch from the starting server to the full API.
#[derive(Clone, Default)]
pub struct Startup {
    full: Arc<OnceLock<Router>>,
}

impl Startup {
    /// A server not ready yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Hands every later request to the full API over `state` (marks the server ready).
    pub fn ready(&self, state: ApiState) {
        let _ = self.full.set(router::router(state));
    }
}

async fn unavailable() -> Response {
    (StatusCode::SERVICE_UNAVAILABLE, "Service Unavailable\n").into_response()
}

async fn metrics() -> Response {
    let mut r = (StatusCode::OK, crate::metrics::render()).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    r
}

/// The endpoints answered while the store opens, under the route prefix and behind the web
/// configuration's basic auth as the full API is.
fn starting_router(config: &ApiConfig, progress: Arc<ReplayProgress>) -> Router {
    let walreplay = move || {
        let p = progress.clone();
        async move { super::status::walreplay_response(Some(&p)) }
    };
    let mut r = Router::new()
        .route(
            "/-/healthy",
            get(super::misc::healthy).head(super::misc::healthy),
        )
        .route("/-/ready", get(unavailable).head(unavailable))
        .route("/api/v1/status/walreplay", get(walreplay))
        .route("/metrics", get(metrics))
        .fallback(unavailable);
    if !config.basic_auth_users.is_empty() {
        let a = Arc::new(super::auth::BasicAuth::new(config.basic_auth_users.clone()));
        r = r.layer(middleware::from_fn_with_state(a, super::auth::require));
    }
    let prefix = config.web.prefix();
    if prefix.is_empty() {
        r
    } else {
        Router::new().nest(prefix, r).fallback(unavailable)
    }
}

async fn dispatch(State((startup, starting)): State<(Startup, Router)>, req: Request) -> Response {
    let r = match startup.full.get() {
        Some(full) => full.clone().oneshot(req).await,
        None => starting.oneshot(req).await,
    };
    match r {
        Ok(r) => r,
        Err(e) => match e {},
    }
}

/// Serves on `listener` until `shutdown` completes: the starting endpoints until
/// [`Startup::ready`], the full API after (HTTPS when the configuration has TLS settings).
pub async fn serve(
    listener: TcpListener,
    config: ApiConfig,
    progress: Arc<ReplayProgress>,
    startup: Startup,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = Router::new()
        .fallback(dispatch)
        .with_state((startup, starting_router(&config, progress)));
    router::serve_app(listener, app, &config, shutdown).await
}
