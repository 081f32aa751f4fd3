//! The API server's connections: the accept loop with a cap on open connections
//! (`--web.max-connections`) below the open-files limit, the timeouts (`--web.read-timeout`
//! for a request and for an idle kept-alive connection, as Go's `ReadTimeout`, and a
//! header-read timeout of inferdb's own), and GET request lines longer than the `http`
//! crate's URI type holds (65,534 bytes; Go, and so Prometheus, reads heads up to 1 MB).
//!
//! When every slot is taken, the connection idle longest (waiting for a request, none in
//! progress) is closed to admit the new one, so that silent sockets cannot keep a client out
//! for a whole read timeout; with every connection inside a request, new ones wait in the
//! listen backlog, as Prometheus' `LimitListener` makes them.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderName, Method};
use axum::Router;
use bytes::Bytes;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, Semaphore};
use tokio::time::{Instant, Sleep};
use tower::ServiceExt;

use super::params::LongQuery;

/// Connection limits of the API server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnLimits {
    /// The most connections open at once (`--web.max-connections`, default 512 as in
    /// Prometheus); lowered at start to keep file descriptors for the store and the scraper.
    pub max_connections: usize,
    /// How long a request may take to arrive, body included, and how long a kept-alive
    /// connection may wait for its next request (`--web.read-timeout`, default 5m as in
    /// Prometheus).
    pub read_timeout: Duration,
    /// How long a request's head may take to arrive once its first byte did (10 s).
    pub header_timeout: Duration,
}

impl Default for ConnLimits {
    fn default() -> Self {
        ConnLimits {
            max_connections: 512,
            read_timeout: Duration::from_secs(300),
            header_timeout: Duration::from_secs(10),
        }
    }
}

/// The longest request head read, as Go's `DefaultMaxHeaderBytes` (1 MB) plus its slack.
const MAX_HEAD_BYTES: usize = (1 << 20) + 4096;
/// The longest request target the `http` crate's `Uri` takes.
const MAX_URI_BYTES: usize = u16::MAX as usize - 1;
/// Marks a request rewritten from a GET whose target was longer than [`MAX_URI_BYTES`].
const LONG_GET: HeaderName = HeaderName::from_static("x-inferdb-long-get");

/// Raises the soft open-files limit to the hard one and returns the connection cap that
/// leaves a reserve of descriptors (a quarter of the limit, 256 at least) for the store's
/// files, the scrape connections and the rest.
pub fn connection_cap(requested: usize) -> usize {
    let Some(limit) = raise_nofile_limit() else {
        return requested;
    };
    let reserve = (limit / 4).max(256);
    let cap = limit.saturating_sub(reserve).max(1) as usize;
    if requested > cap {
        tracing::warn!(
            "--web.max-connections {requested} lowered to {cap}: the open files limit is {limit} \
             and {reserve} descriptors stay for the store and the scraper"
        );
        return cap;
    }
    requested
}

#[cfg(unix)]
#[allow(unsafe_code)] // getrlimit/setrlimit through libc
fn raise_nofile_limit() -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid pointer to an rlimit owned here.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return None;
        }
        if lim.rlim_cur < lim.rlim_max {
            let want = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &want) == 0 {
                lim.rlim_cur = lim.rlim_max;
            }
        }
    }
    // rlim_t is not u64 on every unix
    #[allow(clippy::unnecessary_cast)]
    let cur = lim.rlim_cur as u64;
    (lim.rlim_cur != libc::RLIM_INFINITY).then_some(cur)
}

#[cfg(not(unix))]
fn raise_nofile_limit() -> Option<u64> {
    None
}

/// One open connection as the accept loop sees it.
struct Conn {
    /// Requests received and not yet answered in full.
    in_flight: AtomicUsize,
    /// Requests received so far.
    requests: AtomicU64,
    /// When the connection last became idle (opened, or its last response sent).
    idle_since: Mutex<Instant>,
    /// Rewritten long GETs whose marker the service may honour.
    long_gets: AtomicUsize,
    /// Closes the connection (it was idle and a slot was needed).
    evict: Notify,
}

impl Conn {
    fn is_idle(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) == 0
    }
}

/// The open connections, to find the one idle longest.
#[derive(Default)]
struct Registry {
    next: AtomicU64,
    conns: Mutex<HashMap<u64, Arc<Conn>>>,
}

impl Registry {
    fn add(&self) -> (u64, Arc<Conn>) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let c = Arc::new(Conn {
            in_flight: AtomicUsize::new(0),
            requests: AtomicU64::new(0),
            idle_since: Mutex::new(Instant::now()),
            long_gets: AtomicUsize::new(0),
            evict: Notify::new(),
        });
        self.conns.lock().insert(id, c.clone());
        (id, c)
    }

    /// Closes the connection idle longest, if one is idle; true if one was.
    fn evict_idlest(&self) -> bool {
        let mut conns = self.conns.lock();
        let victim = conns
            .iter()
            .filter(|(_, c)| c.is_idle())
            .min_by_key(|(_, c)| *c.idle_since.lock())
            .map(|(id, _)| *id);
        match victim.and_then(|id| conns.remove(&id)) {
            Some(c) => {
                c.evict.notify_one();
                true
            }
            None => false,
        }
    }
}

/// Removes a connection from the registry when its task ends.
struct Registered(Arc<Registry>, u64);

impl Drop for Registered {
    fn drop(&mut self) {
        self.0.conns.lock().remove(&self.1);
    }
}

/// Serves `app` on `listener` until `shutdown` completes, within `limits`. `handshake`
/// turns an accepted socket into the stream HTTP is read from (TLS, or the socket itself);
/// `None` drops the connection.
pub(crate) async fn serve<I, H, F>(
    listener: TcpListener,
    app: Router,
    limits: ConnLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
    handshake: H,
) -> io::Result<()>
where
    H: Fn(TcpStream, SocketAddr) -> F + Clone + Send + 'static,
    F: Future<Output = Option<I>> + Send + 'static,
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let slots = Arc::new(Semaphore::new(connection_cap(limits.max_connections)));
    let registry = Arc::new(Registry::default());
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let (tcp, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    // out of descriptors and the like: back off rather than spin
                    tracing::warn!("accepting a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let permit = match slots.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                registry.evict_idlest();
                tokio::select! {
                    p = slots.clone().acquire_owned() => match p {
                        Ok(p) => p,
                        Err(_) => break,
                    },
                    _ = &mut shutdown => break,
                }
            }
        };
        let _ = tcp.set_nodelay(true);
        let (id, conn) = registry.add();
        let registered = Registered(registry.clone(), id);
        let app = app.clone();
        let handshake = handshake.clone();
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let _permit = permit;
            let _registered = registered;
            let evicted = conn.clone();
            let work = async move {
                let Some(io) = handshake(tcp, peer).await else {
                    return;
                };
                let io = TimedIo::new(io, conn.clone(), limits);
                let svc =
                    tower::service_fn(move |req| handle(app.clone(), conn.clone(), limits, req));
                let http = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(io), TowerToHyperService::new(svc));
                if let Err(e) = watcher.watch(http).await {
                    tracing::debug!("HTTP connection from {peer}: {e}");
                }
            };
            tokio::select! {
                _ = work => {}
                _ = evicted.evict.notified() => {
                    tracing::debug!("closed idle connection from {peer}: connection limit reached");
                }
            }
        });
    }
    drop(listener);
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = tokio::time::sleep(Duration::from_secs(30)) => {
            tracing::warn!("HTTP connections still open after 30 s; closing");
        }
    }
    Ok(())
}

/// One request: its body read within the read timeout, the connection marked busy until
/// the response is sent, a rewritten long GET turned back into a GET.
async fn handle(
    app: Router,
    conn: Arc<Conn>,
    limits: ConnLimits,
    req: hyper::Request<hyper::body::Incoming>,
) -> Result<axum::response::Response, Infallible> {
    let guard = InFlight::begin(conn.clone());
    let deadline = Instant::now() + limits.read_timeout;
    let mut req = req.map(|b| Body::new(DeadlineBody::new(b, deadline)));
    if req.headers_mut().remove(LONG_GET).is_some() && take_long_get(&conn) {
        let (mut parts, body) = req.into_parts();
        let query = match axum::body::to_bytes(body, MAX_HEAD_BYTES).await {
            Ok(b) => String::from_utf8_lossy(&b).into_owned(),
            Err(e) => {
                let resp = super::error::ApiError::bad_data(format!("reading the request: {e}"));
                return Ok(axum::response::IntoResponse::into_response(resp));
            }
        };
        parts.method = Method::GET;
        parts.headers.remove(header::CONTENT_TYPE);
        parts.headers.remove(header::CONTENT_LENGTH);
        parts.extensions.insert(LongQuery(query));
        req = axum::http::Request::from_parts(parts, Body::empty());
    }
    let resp = match app.oneshot(req).await {
        Ok(r) => r,
        Err(never) => match never {},
    };
    Ok(resp.map(|b| {
        Body::new(Guarded {
            inner: b,
            _guard: guard,
        })
    }))
}

fn take_long_get(conn: &Conn) -> bool {
    conn.long_gets
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
        .is_ok()
}

/// Marks its connection busy while alive (from a request's head to its response's end).
struct InFlight(Arc<Conn>);

impl InFlight {
    fn begin(conn: Arc<Conn>) -> InFlight {
        conn.requests.fetch_add(1, Ordering::AcqRel);
        conn.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight(conn)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        *self.0.idle_since.lock() = Instant::now();
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A response body that keeps its connection marked busy until it is sent (or dropped).
struct Guarded {
    inner: Body,
    _guard: InFlight,
}

impl http_body::Body for Guarded {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// A request body that must arrive whole before a deadline (Go's `ReadTimeout`).
struct DeadlineBody {
    inner: hyper::body::Incoming,
    sleep: Pin<Box<Sleep>>,
}

impl DeadlineBody {
    fn new(inner: hyper::body::Incoming, deadline: Instant) -> Self {
        DeadlineBody {
            inner,
            sleep: Box::pin(tokio::time::sleep_until(deadline)),
        }
    }
}

impl http_body::Body for DeadlineBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, io::Error>>> {
        if let Poll::Ready(r) = Pin::new(&mut self.inner).poll_frame(cx) {
            return Poll::Ready(r.map(|f| f.map_err(io::Error::other)));
        }
        match self.sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "request body not received within the read timeout",
            )))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// How [`TimedIo`] reads between requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Between {
    /// Collecting a request line to see whether it is a GET too long for hyper.
    Sniffing,
    /// Bytes go to hyper as they come.
    PassThrough,
}

/// The connection's stream with the timeouts that apply between requests (waiting idle:
/// the read timeout; a head under way: the header timeout) and the long-GET rewrite. Inside
/// a request reads pass through (the body has its own deadline; a long query may run).
struct TimedIo<I> {
    inner: I,
    conn: Arc<Conn>,
    limits: ConnLimits,
    sleep: Pin<Box<Sleep>>,
    armed: Option<Instant>,
    head_started: Option<Instant>,
    /// The connection's request count when this head began.
    requests_seen: u64,
    mode: Between,
    /// Bytes read while sniffing.
    sniff: Vec<u8>,
    /// How far `sniff` was searched for the end of the head.
    scanned: usize,
    /// Bytes for hyper before reading more (a sniffed head, rewritten or not).
    out: Vec<u8>,
    out_pos: usize,
}

impl<I> TimedIo<I> {
    fn new(inner: I, conn: Arc<Conn>, limits: ConnLimits) -> Self {
        let now = Instant::now();
        TimedIo {
            inner,
            conn,
            limits,
            sleep: Box::pin(tokio::time::sleep_until(now)),
            armed: None,
            head_started: None,
            requests_seen: 0,
            mode: Between::Sniffing,
            sniff: Vec::new(),
            scanned: 0,
            out: Vec::new(),
            out_pos: 0,
        }
    }

    /// When reading must have progressed by, between requests.
    fn deadline(&self) -> Instant {
        match self.head_started {
            Some(t) => t + self.limits.header_timeout.min(self.limits.read_timeout),
            None => *self.conn.idle_since.lock() + self.limits.read_timeout,
        }
    }

    /// `Pending`, or the timeout's error once the deadline passed.
    fn wait(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let d = self.deadline();
        if self.armed != Some(d) {
            self.sleep.as_mut().reset(d);
            self.armed = Some(d);
        }
        match self.sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                if self.head_started.is_some() {
                    "request head not received within the header timeout"
                } else {
                    "idle connection closed after the read timeout"
                },
            ))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn pass_through(&mut self) {
        self.out = std::mem::take(&mut self.sniff);
        self.out_pos = 0;
        self.scanned = 0;
        self.mode = Between::PassThrough;
    }

    /// Looks at the sniffed bytes: a complete request line that is not a too-long GET, or a
    /// complete long GET head, ends sniffing.
    fn decide(&mut self) {
        let Some(eol) = self.sniff.iter().position(|&b| b == b'\n') else {
            if self.sniff.len() > MAX_HEAD_BYTES {
                self.pass_through();
            }
            return;
        };
        let line = &self.sniff[..eol];
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(target_len) = long_get_target(line) else {
            self.pass_through();
            return;
        };
        let from = self.scanned.max(eol).saturating_sub(3);
        match find(&self.sniff[from..], b"\r\n\r\n") {
            Some(i) => self.rewrite(eol, target_len, from + i + 4),
            None if self.sniff.len() > MAX_HEAD_BYTES => self.pass_through(),
            None => self.scanned = self.sniff.len(),
        }
    }

    /// Rewrites the long GET head `sniff[..end]` as a POST of its query (see
    /// [`handle`]); a GET with a body is left to hyper (which refuses its URI).
    fn rewrite(&mut self, eol: usize, target_len: usize, end: usize) {
        let line = &self.sniff[..eol];
        let target = &line[4..4 + target_len];
        let version = std::str::from_utf8(&line[4 + target_len + 1..])
            .unwrap_or("HTTP/1.1")
            .trim_end_matches('\r');
        let (path, query) = match target.iter().position(|&b| b == b'?') {
            Some(q) => (&target[..q], &target[q + 1..]),
            None => (target, &target[target.len()..]),
        };
        let mut head = Vec::with_capacity(end - target.len() + 256);
        head.extend_from_slice(b"POST ");
        head.extend_from_slice(path);
        head.push(b' ');
        head.extend_from_slice(version.as_bytes());
        head.extend_from_slice(b"\r\n");
        for h in self.sniff[eol + 1..end - 2].split(|&b| b == b'\n') {
            let h = h.strip_suffix(b"\r").unwrap_or(h);
            if h.is_empty() {
                continue;
            }
            let (name, value) = match h.iter().position(|&b| b == b':') {
                Some(c) => (&h[..c], &h[c + 1..]),
                None => (h, &h[h.len()..]),
            };
            let name = String::from_utf8_lossy(name).trim().to_ascii_lowercase();
            match name.as_str() {
                "content-length" | "transfer-encoding" => {
                    if name == "transfer-encoding" || String::from_utf8_lossy(value).trim() != "0" {
                        self.pass_through();
                        return;
                    }
                    continue;
                }
                "content-type" | "x-inferdb-long-get" => continue,
                _ => {}
            }
            head.extend_from_slice(h);
            head.extend_from_slice(b"\r\n");
        }
        head.extend_from_slice(
            format!(
                "content-type: application/x-www-form-urlencoded\r\ncontent-length: {}\r\n{}: 1\r\n\r\n",
                query.len(),
                LONG_GET.as_str()
            )
            .as_bytes(),
        );
        head.extend_from_slice(query);
        head.extend_from_slice(&self.sniff[end..]);
        self.conn.long_gets.fetch_add(1, Ordering::AcqRel);
        self.sniff.clear();
        self.out = head;
        self.out_pos = 0;
        self.scanned = 0;
        self.mode = Between::PassThrough;
    }
}

/// The length of the target of `GET <target> HTTP/1.x` when it is longer than the `http`
/// crate takes and made of the bytes a request target may hold.
fn long_get_target(line: &[u8]) -> Option<usize> {
    let rest = line.strip_prefix(b"GET ")?;
    let sp = rest.iter().rposition(|&b| b == b' ')?;
    let (target, version) = (&rest[..sp], &rest[sp + 1..]);
    (target.len() > MAX_URI_BYTES
        && version.starts_with(b"HTTP/1.")
        && target.starts_with(b"/")
        && target.iter().all(|&b| (0x21..=0x7e).contains(&b)))
    .then_some(target.len())
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

impl<I: AsyncRead + Unpin> AsyncRead for TimedIo<I> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let requests = this.conn.requests.load(Ordering::Acquire);
        if requests != this.requests_seen {
            // a request began since: what comes next is a new head
            this.requests_seen = requests;
            this.head_started = None;
            this.mode = Between::Sniffing;
        }
        loop {
            if this.out_pos < this.out.len() {
                let n = buf.remaining().min(this.out.len() - this.out_pos);
                buf.put_slice(&this.out[this.out_pos..this.out_pos + n]);
                this.out_pos += n;
                if this.out_pos == this.out.len() {
                    this.out.clear();
                    this.out_pos = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if !this.conn.is_idle() {
                // inside a request (its body; no timeout here: the body has its own)
                return Pin::new(&mut this.inner).poll_read(cx, buf);
            }
            if this.mode == Between::PassThrough {
                let before = buf.filled().len();
                return match Pin::new(&mut this.inner).poll_read(cx, buf) {
                    Poll::Pending => this.wait(cx),
                    Poll::Ready(Ok(())) => {
                        if buf.filled().len() > before && this.head_started.is_none() {
                            this.head_started = Some(Instant::now());
                        }
                        Poll::Ready(Ok(()))
                    }
                    r => r,
                };
            }
            let mut tmp = [0u8; 16 << 10];
            let mut rb = ReadBuf::new(&mut tmp);
            match Pin::new(&mut this.inner).poll_read(cx, &mut rb) {
                Poll::Pending => return this.wait(cx),
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) if rb.filled().is_empty() => {
                    // end of stream: hand over what was sniffed, then the end
                    this.pass_through();
                    if this.out.is_empty() {
                        return Poll::Ready(Ok(()));
                    }
                }
                Poll::Ready(Ok(())) => {
                    this.head_started.get_or_insert_with(Instant::now);
                    this.sniff.extend_from_slice(rb.filled());
                    this.decide();
                }
            }
        }
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for TimedIo<I> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_get_lines() {
        let long = format!("GET /api/v1/query?query={} HTTP/1.1", "u".repeat(70_000));
        assert_eq!(long_get_target(long.as_bytes()), Some(70_000 + 20));
        assert_eq!(
            long_get_target(b"GET /api/v1/query?query=up HTTP/1.1"),
            None
        );
        let post = long.replacen("GET", "POST", 1);
        assert_eq!(long_get_target(post.as_bytes()), None);
        let spaced = long.replacen("query=", "query= ", 1);
        assert_eq!(long_get_target(spaced.as_bytes()), None);
    }
}
