//! The built-in vLLM simulator: serves realistic vLLM 0.34 `/metrics` pages for demos, docs
//! and tests (`inferdb simulate --port 8000 --servers N`).
//!
//! Each server is an independent [`model::VllmModel`] (its own load level, phase and
//! restarts). Servers listen on consecutive ports (`port`, `port+1`, ...) and are also
//! reachable by path on the first port: `/servers/<i>/metrics`. `GET /metrics` answers
//! `text/plain; version=1.0.0; charset=utf-8`, like vLLM, without gzip unless
//! [`SimOptions::gzip`] is set and the client asks for it.
//!
//! The servers' clock is the wall clock unless [`SimOptions::clock`] says otherwise: sample
//! time may start in the past and run faster than the wall clock (4 h of workload in 16 min
//! at 15×). Pages then carry explicit timestamps, so that a scraper honouring them
//! (`honor_timestamps`, the default) stores sample time.

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
    /// The servers' clock: the wall clock by default.
    pub clock: SimClock,
}

/// The simulated servers' clock: sample time starts at `start` and runs `warp` times as fast
/// as the wall clock.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SimClock {
    /// Unix seconds of sample time when the simulator starts; `None`: the wall clock's time.
    pub start: Option<f64>,
    /// Sample seconds per wall second (1: real time).
    pub warp: f64,
}

impl Default for SimClock {
    fn default() -> Self {
        SimClock {
            start: None,
            warp: 1.0,
        }
    }
}

impl SimClock {
    /// Whether this is the wall clock (pages then carry no timestamps).
    pub fn is_wall(&self) -> bool {
        self.start.is_none() && self.warp == 1.0
    }
}

/// A [`SimClock`] started at a wall time.
#[derive(Debug, Clone, Copy)]
struct Clock {
    wall0: f64,
    sample0_ms: i64,
    warp: f64,
    stamped: bool,
}

impl Clock {
    fn start(c: SimClock) -> Clock {
        let wall0 = now_s();
        Clock {
            wall0,
            sample0_ms: (c.start.unwrap_or(wall0) * 1000.0).round() as i64,
            warp: c.warp,
            stamped: !c.is_wall(),
        }
    }

    /// Sample time (ms) at wall time `wall` (Unix seconds).
    fn at_ms(&self, wall: f64) -> i64 {
        self.sample0_ms + ((wall - self.wall0) * self.warp * 1000.0).round() as i64
    }

    /// Sample time now, Unix seconds.
    fn now(&self) -> f64 {
        self.at_ms(now_s()) as f64 / 1000.0
    }
}

/// The timestamps one connection sees from one server under a warped clock. The whole wall
/// seconds since the connection first asked the server are warped and what is left over (the
/// scraper's jitter and the request's latency) is dropped: a scraper whose interval is a
/// whole number of seconds gets timestamps exactly `interval × warp` apart, as its own ticker
/// would stamp a scrape at that interval. Warping the jitter too would make it `warp` times
/// a real scrape's, which costs every store bytes a real one does not pay.
#[derive(Debug, Clone, Copy)]
struct Grid {
    wall0: f64,
    sample0_ms: i64,
    last_ms: i64,
}

impl Grid {
    fn new(clock: &Clock, wall: f64) -> Grid {
        let t = clock.at_ms(wall);
        Grid {
            wall0: wall,
            sample0_ms: t,
            last_ms: t - 1,
        }
    }

    /// The timestamp (ms) of a page served at wall time `wall`: on the grid, and after the
    /// previous one (1 ms after it when asked twice within a wall second).
    fn stamp(&mut self, clock: &Clock, wall: f64) -> i64 {
        let k = (wall - self.wall0).round();
        let t = (self.sample0_ms + (k * clock.warp * 1000.0).round() as i64).max(self.last_ms + 1);
        self.last_ms = t;
        t
    }
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
            clock: SimClock::default(),
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
    clock: Clock,
}

impl SimServer {
    fn new(
        seed: u64,
        cycle_s: f64,
        keep: usize,
        model_name: Option<String>,
        plan: Option<ScenarioPlan>,
        clock: Clock,
    ) -> Self {
        let now = clock.now();
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
            clock,
        }
    }

    /// Renders the page for now (advancing the workload) and remembers it. Its samples carry
    /// the sample time as timestamps when the clock is not the wall clock.
    pub fn page(&self) -> Arc<String> {
        let t = self.clock.at_ms(now_s());
        self.page_at(t, self.clock.stamped)
    }

    /// Renders the page at sample time `t_ms` (advancing the workload to it, unless it is
    /// there already: a page for a slightly older time shows the newer state under the older
    /// timestamp) and remembers it; `stamped` writes `t_ms` on every sample.
    fn page_at(&self, t_ms: i64, stamped: bool) -> Arc<String> {
        let now = t_ms as f64 / 1000.0;
        // render and record under the model's lock, so the log's order is the serving order
        let mut m = self.model.lock();
        m.advance_to(now);
        let mut text = if stamped {
            m.render_stamped(t_ms)
        } else {
            m.render()
        };
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
        m.advance_to(self.clock.now());
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
        let clock = Clock::start(opts.clock);
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
                clock,
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
    // per server asked on this connection, under a warped clock
    let mut grids: std::collections::HashMap<usize, Grid> = Default::default();
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
                let page = if all[i].clock.stamped {
                    let (clock, wall) = (&all[i].clock, now_s());
                    let t = grids
                        .entry(i)
                        .or_insert_with(|| Grid::new(clock, wall))
                        .stamp(clock, wall);
                    all[i].page_at(t, true)
                } else {
                    all[i].page()
                };
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
        let wall = Clock::start(SimClock::default());
        let page = SimServer::new(1, 600.0, 0, Some(other.into()), None, wall).page();
        assert!(page.contains(&format!("model_name=\"{other}\"")));
        assert!(!page.contains(DEFAULT_MODEL));
        let page = SimServer::new(1, 600.0, 0, None, None, wall).page();
        assert!(page.contains(&format!("model_name=\"{DEFAULT_MODEL}\"")));
        // the wall clock's pages carry no timestamps: every sample line ends in its value
        let first = page.lines().find(|l| !l.starts_with('#')).unwrap();
        assert_eq!(first.split(' ').count(), 2, "{first}");
    }

    /// The timestamp of every sample line of `page`, which must all be the same.
    fn page_stamp(page: &str) -> i64 {
        let mut ts = page
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(|l| l.rsplit(' ').next().unwrap().parse::<i64>().unwrap());
        let t = ts.next().unwrap();
        assert!(ts.all(|x| x == t));
        t
    }

    #[test]
    fn a_warped_clock_stamps_pages_with_sample_time() {
        let start = 1_790_000_000.0;
        let clock = Clock::start(SimClock {
            start: Some(start),
            warp: 15.0,
        });
        assert!(clock.stamped);
        // sample time runs 15 times as fast as the wall clock from the given start
        assert_eq!(clock.at_ms(clock.wall0), 1_790_000_000_000);
        assert_eq!(clock.at_ms(clock.wall0 + 2.0), 1_790_000_030_000);
        let server = SimServer::new(1, 600.0, 0, None, None, clock);
        let t = page_stamp(&server.page());
        assert!((t - 1_790_000_000_000).abs() < 60_000, "{t}");
        // a page for a given sample time carries exactly it
        assert_eq!(page_stamp(&server.page_at(t + 15_000, true)), t + 15_000);
        let p = server.page_at(t + 30_000, true);
        let v = crate::model::exposition::parse(&p, crate::model::exposition::Format::PromText)
            .filter_map(|e| match e {
                Ok(crate::model::exposition::Entry::Sample(s)) => Some(s.timestamp_ms),
                _ => None,
            })
            .collect::<Vec<_>>();
        assert!(v.len() > 500 && v.iter().all(|x| *x == Some(t + 30_000)));
    }

    #[test]
    fn a_connection_gets_timestamps_on_a_grid_of_warped_whole_seconds() {
        let clock = Clock::start(SimClock {
            start: Some(1_790_000_000.0),
            warp: 15.0,
        });
        let w = clock.wall0 + 0.3;
        let mut g = Grid::new(&clock, w);
        let t0 = g.stamp(&clock, w);
        assert_eq!(t0, 1_790_000_004_500);
        // a scraper every second with up to ±40 ms of jitter: exactly 15 s apart
        for (i, jitter) in [0.012, -0.04, 0.0, 0.031, -0.007].iter().enumerate() {
            let k = i as i64 + 1;
            assert_eq!(g.stamp(&clock, w + k as f64 + jitter), t0 + k * 15_000);
        }
        // two seconds later: 30 s later
        assert_eq!(g.stamp(&clock, w + 7.02), t0 + 7 * 15_000);
        // asked twice within a second: later by a millisecond, never the same or earlier
        assert_eq!(g.stamp(&clock, w + 7.1), t0 + 7 * 15_000 + 1);
    }
}
