//! The built-in web UI: the query page, the vLLM fleet page and the status pages (targets,
//! service discovery, rules, alerts, TSDB status, configuration, flags, runtime and build
//! information).
//!
//! Every page is the same HTML shell (`assets/index.html`) naming the page; plain JavaScript
//! modules under `assets/` draw it from the HTTP API, charts by the vendored uPlot
//! (`assets/vendor/uplot/`). All files are embedded in the binary at build time and served
//! gzipped (compressed once, on first use) under `static/<version>/`, where the version is
//! a hash of their contents, so browsers may cache them for good. Every URL the pages use is
//! relative to the page, so the UI works unchanged under a route prefix or behind a proxy
//! that strips one.

use std::sync::OnceLock;

use axum::extract::{OriginalUri, Path, RawQuery, State};
use axum::http::Uri;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use inferdb_storage::{MatchOp, Matcher};

use crate::api::ApiState;

/// The pages, by path (without the leading slash), and their titles.
pub const PAGES: &[(&str, &str)] = &[
    ("query", "Query"),
    ("fleet", "vLLM fleet"),
    ("insights", "Insights"),
    ("targets", "Targets"),
    ("service-discovery", "Service discovery"),
    ("rules", "Rules"),
    ("alerts", "Alerts"),
    ("tsdb-status", "TSDB status"),
    ("config", "Configuration"),
    ("flags", "Command-line flags"),
    ("status", "Runtime and build information"),
];

/// One embedded file.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static [u8],
}

macro_rules! asset {
    ($name:literal, $ct:expr) => {
        Asset {
            name: $name,
            content_type: $ct,
            body: include_bytes!(concat!("assets/", $name)),
        }
    };
}

const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";

/// Every file served under `static/<version>/`.
const ASSETS: &[Asset] = &[
    asset!("app.js", JS),
    asset!("util.js", JS),
    asset!("chart.js", JS),
    asset!("query.js", JS),
    asset!("explain.js", JS),
    asset!("fleet.js", JS),
    asset!("insights.js", JS),
    asset!("status.js", JS),
    asset!("style.css", CSS),
    asset!("favicon.svg", "image/svg+xml"),
    asset!("vendor/uplot/uPlot.iife.min.js", JS),
    asset!("vendor/uplot/uPlot.min.css", CSS),
    asset!("vendor/uplot/LICENSE", "text/plain; charset=utf-8"),
];

const SHELL: &str = include_str!("assets/index.html");

/// A file ready to serve: its bytes plain and gzipped.
struct Prepared {
    content_type: &'static str,
    plain: &'static [u8],
    gzip: Vec<u8>,
}

struct Bundle {
    version: String,
    assets: Vec<(&'static str, Prepared)>,
}

fn gzip(data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    // writing into a Vec cannot fail
    let _ = enc.write_all(data);
    enc.finish().unwrap_or_default()
}

/// FNV-1a over every asset: the version in asset URLs changes whenever any file does.
fn version() -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for a in ASSETS {
        for b in a.name.bytes().chain(a.body.iter().copied()) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("{:012x}", h & 0xffff_ffff_ffff)
}

fn bundle() -> &'static Bundle {
    static B: OnceLock<Bundle> = OnceLock::new();
    B.get_or_init(|| Bundle {
        version: version(),
        assets: ASSETS
            .iter()
            .map(|a| {
                (
                    a.name,
                    Prepared {
                        content_type: a.content_type,
                        plain: a.body,
                        gzip: gzip(a.body),
                    },
                )
            })
            .collect(),
    })
}

/// The version in asset URLs (a hash of the embedded files).
pub fn assets_version() -> &'static str {
    &bundle().version
}

/// Total bytes of the UI's files gzipped, as served (every asset plus one page shell).
pub fn gzipped_bytes() -> usize {
    let b = bundle();
    b.assets.iter().map(|(_, p)| p.gzip.len()).sum::<usize>()
        + gzip(shell("query").as_bytes()).len()
}

/// The HTML of page `page` (one of [`PAGES`]).
fn shell(page: &str) -> String {
    let title = PAGES
        .iter()
        .find(|(p, _)| *p == page)
        .map(|(_, t)| *t)
        .unwrap_or("inferdb");
    SHELL
        .replace("{{VERSION}}", assets_version())
        .replace("{{PAGE}}", page)
        .replace("{{TITLE}}", title)
}

fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|e| {
            let mut parts = e.trim().split(';');
            let name = parts.next().unwrap_or("").trim();
            let zero_q = parts.any(|p| {
                p.trim()
                    .strip_prefix("q=")
                    .and_then(|q| q.trim().parse::<f32>().ok())
                    == Some(0.0)
            });
            (name.eq_ignore_ascii_case("gzip") || name == "*") && !zero_q
        })
}

/// A body answered gzipped when the client takes it (the API's compression layer leaves a
/// response that already has a `Content-Encoding` alone).
fn encoded(
    headers: &HeaderMap,
    content_type: &'static str,
    plain: Vec<u8>,
    gz: Vec<u8>,
    cache: &'static str,
    etag: Option<String>,
) -> Response {
    if let Some(tag) = &etag {
        let hit = headers
            .get(header::IF_NONE_MATCH)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.split(',').any(|t| t.trim() == tag));
        if hit {
            let mut r = StatusCode::NOT_MODIFIED.into_response();
            r.headers_mut()
                .insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
            if let Ok(v) = HeaderValue::from_str(tag) {
                r.headers_mut().insert(header::ETAG, v);
            }
            return r;
        }
    }
    let gz_ok = accepts_gzip(headers);
    let mut r = if gz_ok { gz } else { plain }.into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    h.insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    if gz_ok {
        h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    }
    if let Some(tag) = etag.and_then(|t| HeaderValue::from_str(&t).ok()) {
        h.insert(header::ETAG, tag);
    }
    r
}

async fn page(headers: HeaderMap, uri: Uri) -> Response {
    let name = uri.path().rsplit('/').next().unwrap_or("");
    let Some((name, _)) = PAGES.iter().find(|(p, _)| *p == name) else {
        return (StatusCode::NOT_FOUND, "404 page not found\n").into_response();
    };
    let html = shell(name);
    let gz = gzip(html.as_bytes());
    // pages name the current asset version: revalidate them every time
    let etag = format!("\"{}-{}\"", assets_version(), name);
    encoded(
        &headers,
        "text/html; charset=utf-8",
        html.into_bytes(),
        gz,
        "no-cache",
        Some(etag),
    )
}

async fn asset(headers: HeaderMap, Path((ver, file)): Path<(String, String)>) -> Response {
    let b = bundle();
    let Some((_, a)) = b.assets.iter().find(|(n, _)| *n == file) else {
        return (StatusCode::NOT_FOUND, "404 page not found\n").into_response();
    };
    // an old version's URL still gets the file, but must not be cached as that version
    let cache = if ver == b.version {
        "public, max-age=31536000, immutable"
    } else {
        "no-cache"
    };
    encoded(
        &headers,
        a.content_type,
        a.plain.to_vec(),
        a.gzip.clone(),
        cache,
        Some(format!("\"{}\"", b.version)),
    )
}

/// `/`: the fleet page when vLLM series were seen in the last 6 hours, the query page
/// otherwise (Prometheus redirects `/` to its query page).
pub(crate) async fn root(State(state): State<ApiState>, uri: OriginalUri) -> Response {
    let now = crate::model::time::now_ms();
    let has_vllm = state
        .run_blocking(
            std::time::Duration::from_secs(5),
            inferdb_query::engine::CancelToken::default(),
            move |b| {
                for name in ["vllm:num_requests_running", "vllm:generation_tokens_total"] {
                    let m = Matcher::new(MatchOp::Equal, "__name__", name)
                        .map_err(|e| crate::api::ApiError::internal(e.to_string()))?;
                    if !b.series(&[m], now - 6 * 3_600_000, now)?.is_empty() {
                        return Ok(true);
                    }
                }
                Ok(false)
            },
        )
        .await
        .unwrap_or(false);
    let page = if has_vllm { "fleet" } else { "query" };
    // relative to what the browser asked for: `/prefix/` and `/` take `./page`, `/prefix`
    // (no slash) takes `./prefix/page`
    let path = uri.0.path();
    match path.rsplit('/').next() {
        Some(last) if !last.is_empty() => redirect(&format!("./{last}/{page}")),
        _ => redirect(&format!("./{page}")),
    }
}

fn redirect(to: &str) -> Response {
    let mut r = StatusCode::FOUND.into_response();
    if let Ok(v) = HeaderValue::from_str(to) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    r
}

/// `/graph` (Prometheus 2's query page): to `/query` with the same query string, whose
/// panel parameters the query page reads in both versions' forms.
async fn graph(RawQuery(q): RawQuery) -> Response {
    match q {
        Some(q) if !q.is_empty() => redirect(&format!("./query?{q}")),
        _ => redirect("./query"),
    }
}

/// The UI's routes, to merge into the API router (inside its authentication and accounting
/// layers).
pub fn routes() -> Router<ApiState> {
    let mut r = Router::new()
        .route("/", get(root))
        .route("/graph", get(graph))
        .route("/static/{ver}/{*file}", get(asset));
    for (p, _) in PAGES {
        r = r.route(&format!("/{p}"), get(page));
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_asset_the_pages_name_is_embedded() {
        let names: Vec<&str> = ASSETS.iter().map(|a| a.name).collect();
        let html = shell("query");
        for part in html.split("static/").skip(1) {
            let path = part.split(['"', '\'']).next().unwrap_or("");
            let file = path.split_once('/').map(|(_, f)| f).unwrap_or("");
            assert!(names.contains(&file), "{path} is not embedded");
        }
        for a in ASSETS
            .iter()
            .filter(|a| a.name.ends_with(".js") && !a.name.contains("vendor"))
        {
            let text = std::str::from_utf8(a.body).unwrap();
            for part in text.split("from './").skip(1) {
                let file = part.split('\'').next().unwrap_or("");
                assert!(
                    names.contains(&file),
                    "{} imports {file}, not embedded",
                    a.name
                );
            }
        }
    }

    #[test]
    fn shell_names_the_page_and_versioned_assets() {
        let html = shell("targets");
        assert!(html.contains("data-page=\"targets\""));
        assert!(html.contains(&format!("static/{}/app.js", assets_version())));
        assert!(!html.contains("{{"));
        // relative URLs only: the UI must work under a route prefix
        assert!(!html.contains("src=\"/") && !html.contains("href=\"/"));
    }

    #[test]
    fn our_scripts_use_relative_urls_only() {
        // an absolute path ('/api/v1/...') would miss a route prefix or a proxy's path
        for a in ASSETS
            .iter()
            .filter(|a| a.name.ends_with(".js") && !a.name.contains("vendor"))
        {
            let text = std::str::from_utf8(a.body).unwrap();
            for q in ['\'', '"', '`'] {
                assert!(!text.contains(&format!("{q}/")), "{}: absolute URL", a.name);
            }
        }
    }

    #[test]
    fn whole_ui_is_under_500_kb_gzipped() {
        let n = gzipped_bytes();
        assert!(n < 500_000, "{n} bytes gzipped");
    }

    #[test]
    fn gzip_negotiation() {
        let mut h = HeaderMap::new();
        assert!(!accepts_gzip(&h));
        h.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("br, gzip;q=0.8"),
        );
        assert!(accepts_gzip(&h));
        h.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("gzip;q=0"),
        );
        assert!(!accepts_gzip(&h));
    }
}
