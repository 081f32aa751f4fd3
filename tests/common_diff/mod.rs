//! Shared helpers for differential tests against a real Prometheus 2.42: child processes,
//! a blocking HTTP client, loading an OpenMetrics file into both servers, and comparing two
//! `/api/v1/query[_range]` answers (result type, label sets, timestamps, values within 1e-9
//! relative, NaN equal to NaN).
//!
//! The comparison rules mirror those of `tests/differential_prometheus.rs`.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The inferdb binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_inferdb");

/// A child process killed when dropped.
pub struct Proc {
    child: Child,
    name: &'static str,
    log: PathBuf,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proc {
    /// Starts `cmd` with stdout and stderr going to `log`.
    pub fn spawn(name: &'static str, cmd: &mut Command, log: PathBuf) -> Proc {
        let f = std::fs::File::create(&log).unwrap();
        let child = cmd
            .stdout(Stdio::from(f.try_clone().unwrap()))
            .stderr(Stdio::from(f))
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name}: {e}"));
        Proc { child, name, log }
    }

    /// Waits until `base/-/ready` answers 200 (90 s at most); panics with the log otherwise.
    pub fn wait_ready(&mut self, base: &str, client: &Client) {
        let deadline = Instant::now() + Duration::from_secs(90);
        while Instant::now() < deadline {
            if let Ok(Some(st)) = self.child.try_wait() {
                panic!(
                    "{} exited with {st}:\n{}",
                    self.name,
                    std::fs::read_to_string(&self.log).unwrap_or_default()
                );
            }
            if client.status(&format!("{base}/-/ready")) == Some(200) {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!(
            "{} not ready within 90 s:\n{}",
            self.name,
            std::fs::read_to_string(&self.log).unwrap_or_default()
        );
    }
}

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A blocking HTTP client over reqwest.
pub struct Client {
    rt: tokio::runtime::Runtime,
    /// The underlying client, for requests `post` does not cover.
    pub http: reqwest::Client,
}

impl Default for Client {
    fn default() -> Self {
        Self::new()
    }
}

impl Client {
    /// A client with a 60 s timeout per request.
    pub fn new() -> Client {
        Client {
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(60))
                .build()
                .unwrap(),
        }
    }

    /// The status of a GET, `None` when the request fails.
    pub fn status(&self, url: &str) -> Option<u16> {
        self.rt.block_on(async {
            let r = self.http.get(url).send().await.ok()?;
            Some(r.status().as_u16())
        })
    }

    /// POSTs a form; (status, body).
    pub fn post(&self, url: &str, form: &[(&str, String)]) -> (u16, String) {
        let body = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(form.iter().map(|(k, v)| (*k, v.as_str())))
            .finish();
        self.send(
            self.http
                .post(url)
                .header("Content-Type", "application/x-www-form-urlencoded")
                .body(body),
        )
    }

    /// Sends a request; (status, body), status 0 when it failed.
    pub fn send(&self, req: reqwest::RequestBuilder) -> (u16, String) {
        self.rt.block_on(async {
            match req.send().await {
                Ok(r) => {
                    let st = r.status().as_u16();
                    (st, r.text().await.unwrap_or_default())
                }
                Err(e) => (0, format!("request failed: {e}")),
            }
        })
    }
}

/// Whether `prometheus` and `promtool` run. Without them the caller skips, except under
/// `CI=true`, where this panics: CI must not pass a differential test it did not run.
pub fn require_prometheus(what: &str) -> bool {
    let ok = |b: &str| {
        Command::new(b)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
    };
    if ok("prometheus") && ok("promtool") {
        return true;
    }
    let msg = "prometheus and promtool (Debian package `prometheus`, 2.42) are not on PATH";
    if std::env::var("CI").map(|v| v == "true").unwrap_or(false) {
        panic!("{msg}: {what} needs them on CI");
    }
    let _ = writeln!(std::io::stderr(), "SKIPPED {what}: {msg}");
    false
}

/// Runs `promtool tsdb create-blocks-from openmetrics OM DATA`; panics on failure.
pub fn promtool_create_blocks(om: &Path, data: &Path) {
    std::fs::create_dir_all(data).unwrap();
    let out = Command::new("promtool")
        .args(["tsdb", "create-blocks-from", "openmetrics"])
        .arg(om)
        .arg(data)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "promtool create-blocks-from failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `inferdb import openmetrics --quiet --data-dir DATA OM`; panics on failure and
/// returns its standard output.
pub fn inferdb_import(om: &Path, data: &Path) -> String {
    let out = Command::new(BIN)
        .args(["import", "openmetrics", "--quiet", "--data-dir"])
        .arg(data)
        .arg(om)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "inferdb import failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Starts Prometheus on the TSDB folder `data` (no scrape targets, 5 m lookback) with its
/// config and log in `work`; returns the process and its base URL once ready.
pub fn start_prometheus(work: &Path, data: &Path, client: &Client) -> (Proc, String) {
    let cfg = work.join("prometheus.yml");
    std::fs::write(
        &cfg,
        "global:\n  scrape_interval: 15s\n  evaluation_interval: 1m\nscrape_configs: []\n",
    )
    .unwrap();
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let mut p = Proc::spawn(
        "prometheus",
        Command::new("prometheus")
            .arg(format!("--storage.tsdb.path={}", data.display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg(format!("--config.file={}", cfg.display()))
            .arg("--storage.tsdb.retention.time=100y")
            .arg("--query.lookback-delta=5m"),
        work.join("prometheus.log"),
    );
    p.wait_ready(&base, client);
    (p, base)
}

/// Starts `inferdb serve` on `data` (no GPU, 100 y retention) with its log in `work`; returns
/// the process and its base URL once ready.
pub fn start_inferdb(work: &Path, data: &Path, client: &Client) -> (Proc, String) {
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let mut p = Proc::spawn(
        "inferdb",
        Command::new(BIN)
            .arg("serve")
            .arg("--data-dir")
            .arg(data)
            .arg("--web.listen-address")
            .arg(format!("127.0.0.1:{port}"))
            .args(["--no-gpu", "--storage.tsdb.retention.time", "100y"]),
        work.join("inferdb.log"),
    );
    p.wait_ready(&base, client);
    (p, base)
}

/// Two sample values (JSON strings) equal within 1e-9 relative (1e-12 absolute near zero);
/// NaN equals NaN, infinities must match exactly.
pub fn val_eq(a: &Value, b: &Value) -> bool {
    let (Some(a), Some(b)) = (a.as_str(), b.as_str()) else {
        return a == b;
    };
    if a == b {
        return true;
    }
    let (Ok(x), Ok(y)) = (a.parse::<f64>(), b.parse::<f64>()) else {
        return false;
    };
    if x.is_nan() && y.is_nan() {
        return true;
    }
    if x.is_infinite() || y.is_infinite() {
        return x == y;
    }
    let d = (x - y).abs();
    d <= 1e-9 * x.abs().max(y.abs()) || d <= 1e-12
}

/// Two `[time, "value"]` points equal.
pub fn point_eq(a: &Value, b: &Value) -> bool {
    match (a.as_array(), b.as_array()) {
        (Some(a), Some(b)) if a.len() == 2 && b.len() == 2 => {
            a[0].as_f64() == b[0].as_f64() && val_eq(&a[1], &b[1])
        }
        _ => false,
    }
}

fn series_eq(a: &Value, b: &Value) -> bool {
    if a["metric"] != b["metric"] {
        return false;
    }
    if a.get("value").is_some() || b.get("value").is_some() {
        return point_eq(&a["value"], &b["value"]);
    }
    match (a["values"].as_array(), b["values"].as_array()) {
        (Some(x), Some(y)) => x.len() == y.len() && x.iter().zip(y).all(|(p, q)| point_eq(p, q)),
        _ => a["values"] == b["values"],
    }
}

fn ordered(q: &str) -> bool {
    let q = q.trim_start();
    q.starts_with("sort(") || q.starts_with("sort_desc(")
}

/// Compares two API answers (`a` from Prometheus, `b` from inferdb); `Err(reason)` on a
/// difference. Both refusing the query counts as equal.
pub fn compare(
    query: &str,
    is_range: bool,
    a: &(u16, String),
    b: &(u16, String),
) -> Result<(), String> {
    let pa: Value = serde_json::from_str(&a.1).map_err(|e| format!("prometheus body: {e}"))?;
    let pb: Value = serde_json::from_str(&b.1).map_err(|e| format!("inferdb body: {e}"))?;
    if pa["status"] != pb["status"] {
        return Err("status differs".into());
    }
    if pa["status"] != "success" {
        return Ok(());
    }
    let (da, db) = (&pa["data"], &pb["data"]);
    if da["resultType"] != db["resultType"] {
        return Err("resultType differs".into());
    }
    let (ra, rb) = (&da["result"], &db["result"]);
    match (ra.as_array(), rb.as_array()) {
        (Some(x), Some(y)) if da["resultType"] == "vector" || da["resultType"] == "matrix" => {
            if x.len() != y.len() {
                return Err(format!("{} vs {} series", x.len(), y.len()));
            }
            if !is_range && ordered(query) {
                for (p, q) in x.iter().zip(y) {
                    if !val_eq(&p["value"][1], &q["value"][1]) {
                        return Err("order or values differ".into());
                    }
                }
            }
            let key = |s: &Value| s["metric"].to_string();
            let mx: BTreeMap<String, &Value> = x.iter().map(|s| (key(s), s)).collect();
            let my: BTreeMap<String, &Value> = y.iter().map(|s| (key(s), s)).collect();
            if mx.len() != x.len() || my.len() != y.len() {
                return Err("duplicate label sets".into());
            }
            for (k, s) in &mx {
                match my.get(k) {
                    None => return Err(format!("series {k} missing in inferdb")),
                    Some(t) if !series_eq(s, t) => return Err(format!("series {k} differs")),
                    _ => {}
                }
            }
            Ok(())
        }
        _ => {
            if point_eq(ra, rb) || ra == rb {
                Ok(())
            } else {
                Err("scalar/string differs".into())
            }
        }
    }
}

/// `s` cut to 1500 bytes for messages.
pub fn short(s: &str) -> String {
    if s.len() > 1500 {
        let mut end = 1500;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}... ({} bytes)", &s[..end], s.len())
    } else {
        s.to_string()
    }
}

/// `t` (ms) as API seconds with milliseconds.
pub fn secs(t: i64) -> String {
    format!("{}.{:03}", t.div_euclid(1000), t.rem_euclid(1000))
}
