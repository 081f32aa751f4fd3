//! Shared helpers for the integration tests that run `inferdb serve` and, for the differential
//! ones, a real Prometheus 2.42: child processes killed on drop, free ports, a blocking HTTP
//! client, starting either server on a temp folder and waiting for `/-/ready`, promtool block
//! creation, and (in [`diff`]) comparing two `/api/v1/query[_range]` answers (result type, label
//! sets, timestamps, values within 1e-9 relative, NaN equal to NaN).
//!
//! Cargo treats this folder as a plain module: each test file that needs it says `mod common;`.
#![allow(dead_code)]

pub mod conformance;
pub mod diff;
pub mod grafana;
pub mod insight;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The inferdb binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_inferdb");

/// How long a started server may take to answer its readiness URL.
const READY_WITHIN: Duration = Duration::from_secs(90);

/// A child process killed when dropped.
pub struct Proc {
    /// The process, for signals the helpers do not cover.
    pub child: Child,
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
    /// Starts `cmd` (no stdin) with stdout and stderr appended to `log`, so that a process
    /// restarted on the same folder keeps the earlier log.
    pub fn spawn(name: &'static str, cmd: &mut Command, log: PathBuf) -> Proc {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap();
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::from(f.try_clone().unwrap()))
            .stderr(Stdio::from(f))
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name}: {e}"));
        Proc { child, name, log }
    }

    /// The process' log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until a GET of `url` answers 200 (90 s at most); panics with the log when the
    /// process exits or the time runs out.
    pub fn wait_for(&mut self, url: &str, client: &Client) {
        let deadline = Instant::now() + READY_WITHIN;
        while Instant::now() < deadline {
            if let Ok(Some(st)) = self.child.try_wait() {
                panic!("{} exited with {st}:\n{}", self.name, self.log());
            }
            if client.status(url) == Some(200) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "{} not ready within {} s:\n{}",
            self.name,
            READY_WITHIN.as_secs(),
            self.log()
        );
    }

    /// Waits until 127.0.0.1:`port` takes TCP connections (60 s at most); panics with the log
    /// when the process exits or the time runs out. For servers `/-/ready` cannot reach (TLS).
    pub fn wait_listening(&mut self, port: u16) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(st)) = self.child.try_wait() {
                panic!("{} exited with {st}:\n{}", self.name, self.log());
            }
            assert!(
                Instant::now() < deadline,
                "{} did not listen:\n{}",
                self.name,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until `inferdb serve` on `port` takes connections and has logged that it is ready
    /// (its store open; before, everything but `/-/healthy` answers 503). For servers
    /// `/-/ready` cannot reach over plain HTTP (TLS, basic auth).
    pub fn wait_serving(&mut self, port: u16) {
        self.wait_listening(port);
        let deadline = Instant::now() + READY_WITHIN;
        while !self
            .log()
            .contains("Server is ready to receive web requests.")
        {
            if let Ok(Some(st)) = self.child.try_wait() {
                panic!("{} exited with {st}:\n{}", self.name, self.log());
            }
            assert!(
                Instant::now() < deadline,
                "{} not ready:\n{}",
                self.name,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until `base/-/ready` answers 200; see [`Proc::wait_for`].
    pub fn wait_ready(&mut self, base: &str, client: &Client) {
        self.wait_for(&format!("{base}/-/ready"), client);
    }

    /// SIGTERM, then wait for the exit (30 s at most, then SIGKILL): a clean shutdown keeps a
    /// server's WAL whole.
    pub fn terminate(mut self) {
        self.stop();
    }

    /// [`Proc::terminate`] keeping the process' log: the exit status.
    pub fn stop(&mut self) -> std::process::ExitStatus {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(st)) = self.child.try_wait() {
                return st;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        self.child.wait().unwrap()
    }

    /// Panics (with the log) when the process has exited or logged a panic.
    pub fn assert_running(&mut self) {
        let log = self.log();
        assert!(
            self.child.try_wait().unwrap().is_none(),
            "{} exited:\n{log}",
            self.name
        );
        assert!(!log.contains("panicked"), "{} panicked:\n{log}", self.name);
    }
}

/// The store in `dir` (created when missing) without background work: the test decides when
/// anything is compacted.
pub fn open_db(dir: &Path) -> inferdb_storage::Db {
    inferdb_storage::Db::open(
        dir,
        inferdb_storage::Options {
            background: false,
            ..Default::default()
        },
    )
    .unwrap()
}

/// Every file of `fuzz/corpus/<target>/`, in name order, with its bytes: what a test that
/// replays a fuzz target's corpus on stable Rust reads. Fails when there are fewer than
/// `at_least`.
pub fn fuzz_corpus(target: &str, at_least: usize) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(
        files.len() >= at_least,
        "{target}'s corpus has only {} files",
        files.len()
    );
    files
        .into_iter()
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p, bytes)
        })
        .collect()
}

/// The HTTP API served in the test's own process (on its tokio runtime) on a free port of
/// 127.0.0.1, for tests that give it their own backend or store; stopped when dropped or by
/// [`InProcessApi::stop`].
pub struct InProcessApi {
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
    shutdown: tokio::sync::oneshot::Sender<()>,
}

impl InProcessApi {
    /// Serves `state` (`inferdb::api::serve`) on the current tokio runtime.
    pub async fn start(state: inferdb::api::ApiState) -> InProcessApi {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (shutdown, rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(inferdb::api::serve(listener, state, async move {
            let _ = rx.await;
        }));
        InProcessApi {
            base,
            server,
            shutdown,
        }
    }

    /// Shuts the server down gracefully; panics unless it ends without an error.
    pub async fn stop(self) {
        let _ = self.shutdown.send(());
        self.server.await.unwrap().unwrap();
    }
}

/// A scrape target on threads of the test (also a stand-in HTTP proxy): answers every request
/// with `page` in the text format 0.0.4, keeping connections alive, and records each request's
/// head.
pub struct PageServer {
    /// `127.0.0.1:PORT`.
    pub addr: String,
    heads: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl PageServer {
    /// Starts serving `page` on a free port.
    pub fn start(page: &'static str) -> PageServer {
        use std::io::{Read, Write};
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let heads = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = heads.clone();
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(mut s) = s else { continue };
                let seen = seen.clone();
                std::thread::spawn(move || {
                    let mut buf = [0u8; 4096];
                    let mut have = Vec::new();
                    loop {
                        match s.read(&mut buf) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => have.extend_from_slice(&buf[..n]),
                        }
                        while let Some(i) = have.windows(4).position(|w| w == b"\r\n\r\n") {
                            let head: Vec<u8> = have.drain(..i + 4).collect();
                            seen.lock()
                                .unwrap()
                                .push(String::from_utf8_lossy(&head).into_owned());
                            let r = format!(
                                "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\n\r\n{page}",
                                page.len()
                            );
                            if s.write_all(r.as_bytes()).is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        PageServer { addr, heads }
    }

    /// The heads of the requests answered so far, in order.
    pub fn heads(&self) -> Vec<String> {
        self.heads.lock().unwrap().clone()
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

/// The wall clock in Unix milliseconds.
#[allow(unused_imports)]
pub use inferdb::model::time::now_ms;

/// `t` (ms) as API seconds with milliseconds.
pub fn secs(t: i64) -> String {
    format!("{}.{:03}", t.div_euclid(1000), t.rem_euclid(1000))
}

/// A blocking HTTP client over reqwest.
pub struct Client {
    rt: tokio::runtime::Runtime,
    /// The underlying client, for requests the helpers do not cover.
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

    /// Sends a request; (status, body, response headers), status 0 when it failed.
    pub fn send_with_headers(
        &self,
        req: reqwest::RequestBuilder,
    ) -> (u16, String, Vec<(String, String)>) {
        self.rt.block_on(async {
            match req.send().await {
                Ok(r) => {
                    let st = r.status().as_u16();
                    let h = r
                        .headers()
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_string()))
                        .collect();
                    (st, r.text().await.unwrap_or_default(), h)
                }
                Err(e) => (0, format!("request failed: {e}"), vec![]),
            }
        })
    }

    /// Sends a request; (status, body), status 0 when it failed.
    pub fn send(&self, req: reqwest::RequestBuilder) -> (u16, String) {
        let (st, body, _) = self.send_with_headers(req);
        (st, body)
    }

    /// GETs `url`; (status, body).
    pub fn get(&self, url: &str) -> (u16, String) {
        self.send(self.http.get(url))
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

    /// POSTs a form to `base` + `path` (e.g. `/api/v1/query`) and returns the JSON answer;
    /// panics unless the status is 200.
    pub fn query(&self, base: &str, path: &str, form: &[(&str, String)]) -> Value {
        let (st, text) = self.post(&format!("{base}{path}"), form);
        assert_eq!(st, 200, "{base}{path} {form:?}: {text}");
        serde_json::from_str(&text).unwrap()
    }

    /// A `/metrics` value of a server (summed over label sets), `None` when absent.
    pub fn metric(&self, base: &str, name: &str) -> Option<f64> {
        let (_, text) = self.get(&format!("{base}/metrics"));
        let mut sum = None;
        for l in text.lines() {
            if l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']) {
                let v: f64 = l.rsplit(' ').next()?.parse().ok()?;
                *sum.get_or_insert(0.0) += v;
            }
        }
        sum
    }
}

/// Whether every one of `tools` runs (`TOOL --version`). Without them the caller skips, except
/// under `INFERDB_REQUIRE_CONFORMANCE=1` or `CI=true`, where this panics: CI must not pass a
/// differential test it did not run.
pub fn require_tools(tools: &[&str], what: &str) -> bool {
    let ok = |b: &str| {
        Command::new(b)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
    };
    if tools.iter().all(|t| ok(t)) {
        return true;
    }
    let msg = format!(
        "{} (Debian package `prometheus`, 2.42) not on PATH",
        tools.join(" and ")
    );
    conformance::skip(what, &msg);
    false
}

/// Whether `prometheus` and `promtool` run; see [`require_tools`].
pub fn require_prometheus(what: &str) -> bool {
    require_tools(&["prometheus", "promtool"], what)
}

/// Runs `cmd` to its end and returns its standard output; panics with its output, naming it
/// `what`, unless it succeeds.
pub fn run_ok(what: &str, cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("starting {what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `promtool tsdb create-blocks-from openmetrics OM DATA`; panics on failure.
pub fn promtool_create_blocks(om: &Path, data: &Path) {
    std::fs::create_dir_all(data).unwrap();
    run_ok(
        "promtool create-blocks-from",
        Command::new("promtool")
            .args(["tsdb", "create-blocks-from", "openmetrics"])
            .arg(om)
            .arg(data),
    );
}

/// Runs `inferdb import openmetrics --quiet --data-dir DATA OM`; panics on failure and
/// returns its standard output.
pub fn inferdb_import(om: &Path, data: &Path) -> String {
    run_ok(
        "inferdb import",
        Command::new(BIN)
            .args(["import", "openmetrics", "--quiet", "--data-dir"])
            .arg(data)
            .arg(om),
    )
}

/// Starts Prometheus on 127.0.0.1:`port` with the TSDB folder `data`, the configuration `yml`
/// written to `work/prometheus.yml` and the log in `work/prometheus.log`, plus `extra` flags;
/// does not wait for it.
pub fn spawn_prometheus(work: &Path, yml: &str, data: &Path, port: u16, extra: &[&str]) -> Proc {
    let cfg = work.join("prometheus.yml");
    std::fs::write(&cfg, yml).unwrap();
    Proc::spawn(
        "prometheus",
        Command::new("prometheus")
            .arg(format!("--config.file={}", cfg.display()))
            .arg(format!("--storage.tsdb.path={}", data.display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .args(extra),
        work.join("prometheus.log"),
    )
}

/// [`spawn_prometheus`] on a free port; returns the process and its base URL once ready.
pub fn start_prometheus_with(
    work: &Path,
    yml: &str,
    data: &Path,
    extra: &[&str],
    client: &Client,
) -> (Proc, String) {
    let port = free_port();
    let mut p = spawn_prometheus(work, yml, data, port, extra);
    let base = format!("http://127.0.0.1:{port}");
    p.wait_ready(&base, client);
    (p, base)
}

/// Starts Prometheus on the TSDB folder `data` (no scrape targets, 100 y retention, 5 m
/// lookback) with its config and log in `work`; returns the process and its base URL once
/// ready.
pub fn start_prometheus(work: &Path, data: &Path, client: &Client) -> (Proc, String) {
    start_prometheus_with(
        work,
        "global:\n  scrape_interval: 15s\n  evaluation_interval: 1m\nscrape_configs: []\n",
        data,
        &[
            "--storage.tsdb.retention.time=100y",
            "--query.lookback-delta=5m",
        ],
        client,
    )
}

/// `inferdb serve --data-dir DATA --web.listen-address 127.0.0.1:PORT --no-gpu`, for the
/// caller to add flags to.
pub fn serve_command(data: &Path, port: u16) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.arg("serve")
        .arg("--data-dir")
        .arg(data)
        .arg("--web.listen-address")
        .arg(format!("127.0.0.1:{port}"))
        .arg("--no-gpu");
    cmd
}

/// [`serve_command`] scraping `servers` servers of the built-in simulator (`--demo`) on
/// ports of the system's choosing.
pub fn demo_command(data: &Path, port: u16, servers: u32) -> Command {
    let mut cmd = serve_command(data, port);
    cmd.args(["--demo", "--demo.port", "0", "--demo.servers"])
        .arg(servers.to_string());
    cmd
}

/// Starts `inferdb serve` on `data` (no GPU, 100 y retention, plus `extra` flags) on a free
/// port with its log in `work/inferdb.log`; returns the process and its base URL once ready.
pub fn start_inferdb_with(
    work: &Path,
    data: &Path,
    extra: &[&str],
    client: &Client,
) -> (Proc, String) {
    let port = free_port();
    let mut cmd = serve_command(data, port);
    cmd.args(["--storage.tsdb.retention.time", "100y"])
        .args(extra);
    let mut p = Proc::spawn("inferdb", &mut cmd, work.join("inferdb.log"));
    let base = format!("http://127.0.0.1:{port}");
    p.wait_ready(&base, client);
    (p, base)
}

/// [`start_inferdb_with`] without extra flags.
pub fn start_inferdb(work: &Path, data: &Path, client: &Client) -> (Proc, String) {
    start_inferdb_with(work, data, &[], client)
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
