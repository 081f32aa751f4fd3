//! The built-in vLLM simulator: serves realistic vLLM 0.34 `/metrics` pages for demos, docs
//! and tests (`inferdb simulate --port 8000 --servers N`).
//!
//! Each server is an independent [`model::VllmModel`] (its own load level, phase and
//! restarts). Servers listen on consecutive ports (`port`, `port+1`, ...) and are also
//! reachable by path on the first port: `/servers/<i>/metrics`. `GET /metrics` answers
//! `text/plain; version=1.0.0; charset=utf-8`, like vLLM, without gzip unless
//! [`SimOptions::gzip`] is set and the client asks for it.

pub mod model;
pub mod record;

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub use model::{Phase, Scenario, ScenarioPlan, VllmModel};

/// Content type of vLLM's `/metrics` (prometheus_client 0.26).
pub const CONTENT_TYPE: &str = "text/plain; version=1.0.0; charset=utf-8";

/// Options of a simulator.
#[derive(Debug, Clone)]
pub struct SimOptions {
    /// Number of servers.
    pub servers: usize,
    /// Seconds of one workload cycle (steady, saturation, restart); 600 by default.
    pub cycle_s: f64,
    /// Answer gzip when asked (real vLLM does not).
    pub gzip: bool,
    /// Seed of the first server (server i uses seed + i).
    pub seed: u64,
    /// Pages each server remembers for [`SimServer::served`] (the newest; 0 keeps none, and
    /// [`SimServer::last_page`] still gives the last one). Tests compare what was stored with
    /// what was served.
    pub keep_pages: usize,
    /// The models served: server i serves `models[i % len]` (its `model_name` label); the
    /// template's model when empty.
    pub models: Vec<String>,
    /// Scenario plans, the i-th for server i and the last for the servers after it; empty:
    /// the demo's cycle of steady load, KV-cache saturation and restart.
    pub scenarios: Vec<ScenarioPlan>,
}

/// The model of the template page, which every server serves unless [`SimOptions::models`]
/// names others.
pub const DEFAULT_MODEL: &str = "meta-llama/Llama-3.1-8B-Instruct";

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            servers: 1,
            cycle_s: 600.0,
            gzip: false,
            seed: 1,
            keep_pages: 0,
            models: vec![DEFAULT_MODEL.to_string()],
            scenarios: Vec::new(),
        }
    }
}

/// A served page, remembered for tests.
#[derive(Debug, Clone)]
pub struct ServedPage {
    /// Unix seconds at which the model was rendered.
    pub at: f64,
    /// The body.
    pub body: Arc<String>,
}

/// One simulated server's shared state.
pub struct SimServer {
    model: Mutex<VllmModel>,
    last: Mutex<Option<ServedPage>>,
    keep: usize,
    served: Mutex<std::collections::VecDeque<ServedPage>>,
    count: std::sync::atomic::AtomicU64,
    /// The model name written in place of [`DEFAULT_MODEL`], if another.
    model_name: Option<String>,
}

impl SimServer {
    fn new(
        seed: u64,
        cycle_s: f64,
        keep: usize,
        model_name: Option<String>,
        plan: Option<ScenarioPlan>,
    ) -> Self {
        let now = now_s();
        let mut model = VllmModel::new(seed, now, cycle_s);
        if let Some(p) = plan {
            model.set_plan(p, now);
        }
        SimServer {
            model: Mutex::new(model),
            last: Mutex::new(None),
            keep,
            served: Mutex::new(std::collections::VecDeque::new()),
            count: std::sync::atomic::AtomicU64::new(0),
            model_name: model_name.filter(|m| m != DEFAULT_MODEL),
        }
    }

    /// Renders the page for now (advancing the workload) and remembers it.
    pub fn page(&self) -> Arc<String> {
        let now = now_s();
        // render and record under the model's lock, so the log's order is the serving order
        let mut m = self.model.lock();
        m.advance_to(now);
        let mut text = m.render();
        if let Some(name) = &self.model_name {
            text = text.replace(DEFAULT_MODEL, name);
        }
        let body = Arc::new(text);
        let page = ServedPage {
            at: now,
            body: body.clone(),
        };
        if self.keep > 0 {
            let mut log = self.served.lock();
            if log.len() == self.keep {
                log.pop_front();
            }
            log.push_back(page.clone());
        }
        *self.last.lock() = Some(page);
        self.count
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        drop(m);
        body
    }

    /// The last page served.
    pub fn last_page(&self) -> Option<ServedPage> {
        self.last.lock().clone()
    }

    /// The newest pages served, oldest first (at most [`SimOptions::keep_pages`]).
    pub fn served(&self) -> Vec<ServedPage> {
        self.served.lock().iter().cloned().collect()
    }

    /// Pages served since the start.
    pub fn pages_served(&self) -> u64 {
        self.count.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Restarts the simulated process now (counters reset).
    pub fn restart(&self) {
        let mut m = self.model.lock();
        m.advance_to(now_s());
        m.restart();
    }

    /// The current phase.
    pub fn phase(&self) -> Phase {
        self.model.lock().phase()
    }
}

fn now_s() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// A running simulator.
pub struct Simulator {
    servers: Vec<Arc<SimServer>>,
    addrs: Vec<SocketAddr>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Simulator {
    /// Binds `servers` listeners on `host:port`, `host:port+1`, ... (port 0: any free ports)
    /// and starts serving. Must run inside a tokio runtime.
    pub async fn start(host: &str, port: u16, opts: SimOptions) -> io::Result<Simulator> {
        let mut servers = vec![];
        let mut addrs = vec![];
        let mut listeners = vec![];
        for i in 0..opts.servers.max(1) {
            let p = if port == 0 { 0 } else { port + i as u16 };
            let l = TcpListener::bind((host, p))
                .await
                .map_err(|e| io::Error::new(e.kind(), format!("binding {host}:{p}: {e}")))?;
            addrs.push(l.local_addr()?);
            listeners.push(l);
            servers.push(Arc::new(SimServer::new(
                opts.seed + i as u64,
                opts.cycle_s,
                opts.keep_pages,
                (!opts.models.is_empty()).then(|| opts.models[i % opts.models.len()].clone()),
                opts.scenarios.get(i).or(opts.scenarios.last()).cloned(),
            )));
        }
        let all = Arc::new(servers.clone());
        let mut tasks = vec![];
        for (i, l) in listeners.into_iter().enumerate() {
            let all = all.clone();
            let gzip = opts.gzip;
            tasks.push(tokio::spawn(async move {
                loop {
                    let Ok((sock, _)) = l.accept().await else {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    };
                    let all = all.clone();
                    tokio::spawn(async move {
                        let _ = serve_conn(sock, i, all, gzip).await;
                    });
                }
            }));
        }
        Ok(Simulator {
            servers,
            addrs,
            tasks,
        })
    }

    /// The listening addresses, one per server.
    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// Server `i`.
    pub fn server(&self, i: usize) -> Option<&Arc<SimServer>> {
        self.servers.get(i)
    }

    /// Stops serving.
    pub fn stop(&self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Drop for Simulator {
    fn drop(&mut self) {
        self.stop();
    }
}

async fn serve_conn(
    mut sock: TcpStream,
    own: usize,
    all: Arc<Vec<Arc<SimServer>>>,
    gzip: bool,
) -> io::Result<()> {
    let _ = sock.set_nodelay(true);
    let mut buf = Vec::with_capacity(2048);
    loop {
        // read one request head
        let head_end = loop {
            if let Some(p) = find_head_end(&buf) {
                break p;
            }
            if buf.len() > 16 * 1024 {
                return Ok(());
            }
            let mut tmp = [0u8; 2048];
            let n = tokio::time::timeout(Duration::from_secs(60), sock.read(&mut tmp))
                .await
                .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "idle"))??;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&tmp[..n]);
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
        buf.drain(..head_end + 4);
        let mut lines = head.split("\r\n");
        let req = lines.next().unwrap_or("");
        let mut parts = req.split(' ');
        let method = parts.next().unwrap_or("");
        let path = parts.next().unwrap_or("/");
        let path = path.split('?').next().unwrap_or("/");
        let mut close = req.ends_with("HTTP/1.0");
        let mut wants_gzip = false;
        for h in lines {
            if let Some((k, v)) = h.split_once(':') {
                let (k, v) = (k.trim().to_ascii_lowercase(), v.trim().to_ascii_lowercase());
                if k == "connection" && v == "close" {
                    close = true;
                }
                if k == "accept-encoding" && v.contains("gzip") {
                    wants_gzip = true;
                }
            }
        }
        let target = if path == "/metrics" {
            Some(own)
        } else if let Some(rest) = path.strip_prefix("/servers/") {
            rest.strip_suffix("/metrics")
                .and_then(|i| i.parse::<usize>().ok())
                .filter(|i| *i < all.len())
        } else {
            None
        };
        let (status, ctype, body, gz): (&str, &str, Vec<u8>, bool) = match (method, target) {
            ("GET", Some(i)) => {
                let page = all[i].page();
                if gzip && wants_gzip {
                    use std::io::Write;
                    let mut e =
                        flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                    e.write_all(page.as_bytes())?;
                    ("200 OK", CONTENT_TYPE, e.finish()?, true)
                } else {
                    ("200 OK", CONTENT_TYPE, page.as_bytes().to_vec(), false)
                }
            }
            ("GET", None) if path == "/health" => ("200 OK", "text/plain", vec![], false),
            ("GET", None) => ("404 Not Found", "text/plain", b"Not Found".to_vec(), false),
            _ => (
                "405 Method Not Allowed",
                "text/plain",
                b"Method Not Allowed".to_vec(),
                false,
            ),
        };
        let mut resp = format!(
            "HTTP/1.1 {status}\r\ncontent-type: {ctype}\r\ncontent-length: {}\r\n",
            body.len()
        );
        if gz {
            resp.push_str("content-encoding: gzip\r\n");
        }
        if close {
            resp.push_str("connection: close\r\n");
        }
        resp.push_str("\r\n");
        sock.write_all(resp.as_bytes()).await?;
        sock.write_all(&body).await?;
        if close {
            sock.shutdown().await?;
            return Ok(());
        }
    }
}

fn find_head_end(b: &[u8]) -> Option<usize> {
    b.windows(4).position(|w| w == b"\r\n\r\n")
}

/// Runs a simulator of `servers` vLLM servers on `host:port`.. until `shutdown` completes
/// (`inferdb simulate`). Logs the addresses.
pub async fn run_simulator(
    host: &str,
    port: u16,
    opts: SimOptions,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    let sim = Simulator::start(host, port, opts).await?;
    match sim.addrs() {
        [one] => tracing::info!("simulated vLLM server on http://{one}/metrics"),
        many => tracing::info!(
            "{} simulated vLLM servers on http://{} .. http://{} (/metrics), also http://{}/servers/<i>/metrics",
            many.len(),
            many[0],
            many[many.len() - 1],
            many[0]
        ),
    }
    shutdown.await;
    sim.stop();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_serves_the_model_it_is_given() {
        let other = "Qwen/Qwen2.5-7B-Instruct";
        let page = SimServer::new(1, 600.0, 0, Some(other.into()), None).page();
        assert!(page.contains(&format!("model_name=\"{other}\"")));
        assert!(!page.contains(DEFAULT_MODEL));
        let page = SimServer::new(1, 600.0, 0, None, None).page();
        assert!(page.contains(&format!("model_name=\"{DEFAULT_MODEL}\"")));
    }
}
