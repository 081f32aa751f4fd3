//! A lean HTTP/1.1 client for `http://` scrape targets: one kept-alive connection per target,
//! the request head written once at start-up, the response read with large reads straight
//! into a body buffer taken from a small pool shared by every scrape loop.
//!
//! Scraping 200 targets a second through a general client (a request builder, a header map,
//! a connection pool, a connection task and a body channel per response) cost more CPU than
//! parsing the pages; this path does one `write` and one or two `read`s a scrape, wakes the
//! scrape loop's own task only, and keeps no per-connection buffer between scrapes (a body
//! buffer is taken from the pool only once the response starts arriving, so waiting targets
//! hold none).
//!
//! It handles `Content-Length`, chunked and close-delimited bodies, `Content-Encoding: gzip`
//! (asked for when compression is enabled), the body size limit (on the decoded body, as
//! Prometheus applies it) and a reused connection the server closed meanwhile (the request
//! is sent again once on a new connection). Targets it does not serve (`https`, credentials
//! in the URL) and redirects are left to the job's `reqwest` client, which has the TLS
//! settings and the redirect policy.

use std::io::{self, Read as _};
use std::ops::Range;
use std::time::Duration;

use base64::Engine as _;
use parking_lot::Mutex;
use tokio::io::AsyncWriteExt as _;
use tokio::net::TcpStream;

/// Free body buffers, shared by the scrape loops. A scrape takes one when its response
/// starts arriving and gives it back when its page is processed, so the pool holds about as
/// many buffers as responses are read at the same time (a few), not one per target.
static POOL: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());
/// Buffers kept in the pool at most.
const POOL_MAX: usize = 16;
/// Larger buffers are freed rather than pooled (an unusual page should not pin its memory).
const POOL_MAX_BYTES: usize = 4 << 20;
/// Free space asked for before each read whose size is not known (bytes).
const READ_SPARE: usize = 64 << 10;
/// Response heads larger than this are refused.
const MAX_HEAD: usize = 64 << 10;

/// A body buffer from the pool; goes back to it when dropped.
#[derive(Debug, Default)]
pub(crate) struct PooledBuf(Vec<u8>);

impl PooledBuf {
    /// The buffer.
    pub(crate) fn vec(&mut self) -> &mut Vec<u8> {
        &mut self.0
    }

    /// A buffer from the pool (empty), or a new one.
    pub(crate) fn take() -> PooledBuf {
        let mut v = POOL.lock().pop().unwrap_or_default();
        v.clear();
        PooledBuf(v)
    }
}

impl Drop for PooledBuf {
    fn drop(&mut self) {
        let v = std::mem::take(&mut self.0);
        if v.capacity() == 0 || v.capacity() > POOL_MAX_BYTES {
            return;
        }
        let mut p = POOL.lock();
        if p.len() < POOL_MAX {
            p.push(v);
        }
    }
}

/// A fetched page: the buffer, where the (decoded) body lies in it, its content type.
#[derive(Debug)]
pub(crate) struct Page {
    buf: PooledBuf,
    body: Range<usize>,
    /// The `Content-Type` header (empty when absent).
    pub(crate) content_type: String,
}

impl Page {
    /// A page whose body is all of `buf`.
    pub(crate) fn whole(buf: PooledBuf, content_type: String) -> Page {
        let body = 0..buf.0.len();
        Page {
            buf,
            body,
            content_type,
        }
    }

    /// The body.
    pub(crate) fn body(&self) -> &[u8] {
        &self.buf.0[self.body.clone()]
    }
}

/// What a fetch gave.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// A 2xx response's body.
    Page(Page),
    /// A redirect: the caller asks its general client, which applies the redirect policy.
    Redirect,
}

/// Why a fetch failed (the text becomes the target's last error).
#[derive(Debug, thiserror::Error)]
pub(crate) enum FetchError {
    /// The connection could not be opened.
    #[error("connecting to {0}: {1}")]
    Connect(String, io::Error),
    /// Reading or writing failed.
    #[error("{0}")]
    Io(io::Error),
    /// The response is not HTTP/1.1 as expected.
    #[error("malformed HTTP response: {0}")]
    Malformed(String),
    /// A status other than 2xx or 3xx.
    #[error("server returned HTTP status {0}")]
    Status(String),
    /// The body is larger than the limit.
    #[error("body size limit exceeded ({0} bytes)")]
    BodyTooLarge(u64),
    /// The gzip body does not decode.
    #[error("decoding gzip body: {0}")]
    Gzip(io::Error),
}

/// The plain-HTTP connection of one target.
#[derive(Debug)]
pub(crate) struct HttpTarget {
    /// `host:port` to connect to.
    authority: String,
    /// The whole request, written as is each scrape.
    request: Vec<u8>,
    /// The kept-alive connection, if any.
    stream: Option<TcpStream>,
}

/// How the body of a response is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    Length(u64),
    Chunked,
    Close,
}

/// The parts of a response head the scraper uses.
#[derive(Debug)]
struct Head {
    len: usize,
    status: u16,
    reason: String,
    framing: Framing,
    gzip: bool,
    close: bool,
    content_type: String,
}

/// Request headers besides `Host`, `User-Agent` and `Accept-Encoding`.
pub(crate) struct RequestSpec<'a> {
    /// The URL.
    pub(crate) url: &'a str,
    /// `Accept`.
    pub(crate) accept: &'a str,
    /// `X-Prometheus-Scrape-Timeout-Seconds`.
    pub(crate) timeout: Duration,
    /// Ask for gzip.
    pub(crate) gzip: bool,
    /// The `Authorization` header value, if any.
    pub(crate) authorization: Option<String>,
}

/// `Basic <base64(user:password)>`, as Go's `SetBasicAuth` writes it.
pub(crate) fn basic_auth_value(user: &str, password: Option<&str>) -> String {
    let raw = format!("{user}:{}", password.unwrap_or(""));
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(raw)
    )
}

impl HttpTarget {
    /// The client for `spec.url`, or `None` when this path does not serve it (not `http`,
    /// credentials in the URL, a header value that cannot be sent as is).
    pub(crate) fn new(spec: &RequestSpec<'_>) -> Option<HttpTarget> {
        let url = reqwest::Url::parse(spec.url).ok()?;
        if url.scheme() != "http" || !url.username().is_empty() || url.password().is_some() {
            return None;
        }
        let host = url.host_str()?;
        let port = url.port_or_known_default()?;
        let host_header = match url.port() {
            Some(p) => format!("{host}:{p}"),
            None => host.to_string(),
        };
        let mut target = url.path().to_string();
        if let Some(q) = url.query() {
            target.push('?');
            target.push_str(q);
        }
        let mut r = String::with_capacity(512);
        r.push_str("GET ");
        r.push_str(&target);
        r.push_str(" HTTP/1.1\r\nHost: ");
        r.push_str(&host_header);
        r.push_str(concat!(
            "\r\nUser-Agent: inferdb/",
            env!("CARGO_PKG_VERSION"),
            "\r\nAccept: "
        ));
        r.push_str(spec.accept);
        if spec.gzip {
            r.push_str("\r\nAccept-Encoding: gzip");
        }
        r.push_str("\r\nX-Prometheus-Scrape-Timeout-Seconds: ");
        r.push_str(&format!("{}", spec.timeout.as_secs_f64()));
        if let Some(a) = &spec.authorization {
            r.push_str("\r\nAuthorization: ");
            r.push_str(a);
        }
        r.push_str("\r\n\r\n");
        // header values with line breaks or other controls: leave them to reqwest, which
        // refuses them with its own error
        let head_ok = [spec.accept, spec.authorization.as_deref().unwrap_or("")]
            .iter()
            .all(|v| v.bytes().all(|b| b == b'\t' || (b >= 0x20 && b != 0x7f)));
        if !head_ok {
            return None;
        }
        Some(HttpTarget {
            authority: format!("{host}:{port}"),
            request: r.into_bytes(),
            stream: None,
        })
    }

    /// Fetches the page once. `limit` is the body size limit (0: none). A fetch that is
    /// dropped part-way (the scrape timeout) drops its connection with it.
    pub(crate) async fn fetch(&mut self, limit: u64) -> Result<Outcome, FetchError> {
        let mut buf = PooledBuf::take();
        if let Some(s) = self.stream.take() {
            match self.exchange(s, &mut buf, limit, true).await {
                Err(Retry::Fresh) => {}
                Err(Retry::Fail(e)) => return Err(e),
                Ok(r) => return Ok(r),
            }
            buf.0.clear();
        }
        let s = TcpStream::connect(self.authority.as_str())
            .await
            .map_err(|e| FetchError::Connect(self.authority.clone(), e))?;
        let _ = s.set_nodelay(true);
        match self.exchange(s, &mut buf, limit, false).await {
            Ok(r) => Ok(r),
            Err(Retry::Fail(e)) => Err(e),
            Err(Retry::Fresh) => Err(FetchError::Io(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed before the response",
            ))),
        }
    }

    /// One request and response on `s`; keeps `s` for the next scrape when it can be
    /// reused. On a `reused` connection, a failure before any response byte asks for a
    /// retry on a new one (the server closed the idle connection).
    async fn exchange(
        &mut self,
        mut s: TcpStream,
        pooled: &mut PooledBuf,
        limit: u64,
        reused: bool,
    ) -> Result<Outcome, Retry> {
        let fresh_or = |e: io::Error, got: usize| {
            if reused && got == 0 {
                Retry::Fresh
            } else {
                Retry::Fail(FetchError::Io(e))
            }
        };
        if let Err(e) = s.write_all(&self.request).await {
            return Err(fresh_or(e, 0));
        }
        let buf = &mut pooled.0;
        // the head
        let head = loop {
            if let Some(h) = parse_head(buf).map_err(Retry::Fail)? {
                if (100..200).contains(&h.status) && h.status != 101 {
                    // an interim response: drop it, read on
                    buf.drain(..h.len);
                    continue;
                }
                break h;
            }
            if buf.len() > MAX_HEAD {
                return Err(Retry::Fail(FetchError::Malformed(
                    "response head too large".into(),
                )));
            }
            match read_some(&s, buf, READ_SPARE).await {
                Ok(0) => {
                    let got = buf.len();
                    return Err(fresh_or(
                        io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "connection closed before the response",
                        ),
                        got,
                    ));
                }
                Ok(_) => {}
                Err(e) => {
                    let got = buf.len();
                    return Err(fresh_or(e, got));
                }
            }
        };
        if (300..400).contains(&head.status) {
            return Ok(Outcome::Redirect);
        }
        if !(200..300).contains(&head.status) {
            return Err(Retry::Fail(FetchError::Status(if head.reason.is_empty() {
                head.status.to_string()
            } else {
                format!("{} {}", head.status, head.reason)
            })));
        }
        let fail = |e: FetchError| Retry::Fail(e);
        // with gzip the limit applies to the decoded body; the raw one gets some slack
        let raw_limit = match (limit, head.gzip) {
            (0, _) => u64::MAX,
            (l, false) => l,
            (l, true) => l.saturating_add(l / 64 + 1024),
        };
        let start = head.len;
        let (body, reusable) = match head.framing {
            Framing::Length(n) => {
                if n > raw_limit {
                    return Err(fail(body_too_large(limit)));
                }
                let end = start + n as usize;
                while buf.len() < end {
                    let want = end - buf.len();
                    read_body(&s, buf, want).await.map_err(fail)?;
                }
                // bytes after the body (a pipelining server) would be misread next time
                (start..end, buf.len() == end && !head.close)
            }
            Framing::Chunked => {
                let mut ch = Chunked::new(start);
                loop {
                    if ch.advance(buf).map_err(fail)? {
                        break;
                    }
                    if (buf.len() - start) as u64 > raw_limit.saturating_add(64 << 10) {
                        return Err(fail(body_too_large(limit)));
                    }
                    read_body(&s, buf, READ_SPARE).await.map_err(fail)?;
                }
                let consumed = ch.pos;
                let end = ch.compact(buf);
                if (end - start) as u64 > raw_limit {
                    return Err(fail(body_too_large(limit)));
                }
                (start..end, consumed == buf.len() && !head.close)
            }
            Framing::Close => {
                loop {
                    match read_some(&s, buf, READ_SPARE).await {
                        Ok(0) => break,
                        Ok(_) => {}
                        Err(e) => return Err(fail(FetchError::Io(e))),
                    }
                    if (buf.len() - start) as u64 > raw_limit {
                        return Err(fail(body_too_large(limit)));
                    }
                }
                (start..buf.len(), false)
            }
        };
        if reusable {
            self.stream = Some(s);
        }
        let mut page = std::mem::take(pooled);
        let body = if head.gzip {
            let mut out = PooledBuf::take();
            gunzip(&page.0[body], &mut out.0, limit).map_err(fail)?;
            let n = out.0.len();
            page = out;
            0..n
        } else {
            body
        };
        Ok(Outcome::Page(Page {
            buf: page,
            body,
            content_type: head.content_type,
        }))
    }
}

enum Retry {
    /// Send the request again on a new connection.
    Fresh,
    Fail(FetchError),
}

fn body_too_large(limit: u64) -> FetchError {
    super::target::note_body_size_exceeded();
    FetchError::BodyTooLarge(limit)
}

/// [`read_some`] inside a body whose end is still to come: end of stream is an error.
async fn read_body(s: &TcpStream, buf: &mut Vec<u8>, want: usize) -> Result<(), FetchError> {
    match read_some(s, buf, want).await {
        Ok(0) => Err(FetchError::Io(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed inside the body",
        ))),
        Ok(_) => Ok(()),
        Err(e) => Err(FetchError::Io(e)),
    }
}

/// One read into `buf`'s free space, at least `want` bytes of it (and `READ_SPARE` at
/// most beyond that), after waiting for the socket to be readable. 0 at end of stream.
async fn read_some(s: &TcpStream, buf: &mut Vec<u8>, want: usize) -> io::Result<usize> {
    let want = want.max(1);
    if buf.capacity() - buf.len() < want {
        buf.reserve(want);
    }
    loop {
        // try first: the data is often there already (the rest of a body)
        match s.try_read_buf(buf) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
        s.readable().await?;
    }
}

/// The response head at the start of `buf`, once complete.
fn parse_head(buf: &[u8]) -> Result<Option<Head>, FetchError> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut r = httparse::Response::new(&mut headers);
    let len = match r.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(FetchError::Malformed(e.to_string())),
    };
    let status = r.code.unwrap_or(0);
    let mut head = Head {
        len,
        status,
        reason: r.reason.unwrap_or("").to_string(),
        framing: Framing::Close,
        gzip: false,
        close: r.version == Some(0),
        content_type: String::new(),
    };
    let mut length: Option<u64> = None;
    let mut chunked = false;
    for h in r.headers.iter() {
        let v = std::str::from_utf8(h.value).unwrap_or("").trim();
        if h.name.eq_ignore_ascii_case("content-length") {
            let n: u64 = v
                .parse()
                .map_err(|_| FetchError::Malformed(format!("content-length {v:?}")))?;
            if length.is_some_and(|l| l != n) {
                return Err(FetchError::Malformed("conflicting content-length".into()));
            }
            length = Some(n);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = v
                .rsplit(',')
                .next()
                .is_some_and(|last| last.trim().eq_ignore_ascii_case("chunked"));
        } else if h.name.eq_ignore_ascii_case("content-encoding") {
            head.gzip = v.eq_ignore_ascii_case("gzip") || v.eq_ignore_ascii_case("x-gzip");
        } else if h.name.eq_ignore_ascii_case("connection") {
            for t in v.split(',') {
                let t = t.trim();
                if t.eq_ignore_ascii_case("close") {
                    head.close = true;
                } else if t.eq_ignore_ascii_case("keep-alive") && r.version == Some(0) {
                    head.close = false;
                }
            }
        } else if h.name.eq_ignore_ascii_case("content-type") {
            head.content_type = v.to_string();
        }
    }
    head.framing = if status == 204 || status == 304 {
        Framing::Length(0)
    } else if chunked {
        Framing::Chunked
    } else if let Some(n) = length {
        Framing::Length(n)
    } else {
        head.close = true;
        Framing::Close
    };
    Ok(Some(head))
}

/// Incremental chunked-body framing: finds the chunks as data arrives, then moves their
/// data together.
struct Chunked {
    /// Where the next chunk-size line (or the trailers) starts.
    pos: usize,
    /// Data ranges of the chunks found.
    chunks: Vec<Range<usize>>,
    /// The last chunk was seen: now in the trailers.
    trailers: bool,
    /// Where the body starts in the buffer.
    start: usize,
}

impl Chunked {
    fn new(start: usize) -> Self {
        Chunked {
            pos: start,
            chunks: vec![],
            trailers: false,
            start,
        }
    }

    /// Reads the framing in `buf` as far as it goes; true when the body is complete.
    fn advance(&mut self, buf: &[u8]) -> Result<bool, FetchError> {
        loop {
            let rest = &buf[self.pos..];
            let Some(nl) = memchr_nl(rest) else {
                if rest.len() > 4096 {
                    return Err(FetchError::Malformed("chunk header too long".into()));
                }
                return Ok(false);
            };
            let line = &rest[..nl];
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if self.trailers {
                self.pos += nl + 1;
                if line.is_empty() {
                    return Ok(true);
                }
                continue;
            }
            let size_txt = line.split(|&b| b == b';').next().unwrap_or(b"");
            let size_txt = std::str::from_utf8(size_txt).unwrap_or("").trim();
            let size = usize::from_str_radix(size_txt, 16)
                .map_err(|_| FetchError::Malformed(format!("chunk size {size_txt:?}")))?;
            if size == 0 {
                self.pos += nl + 1;
                self.trailers = true;
                continue;
            }
            let data = self.pos + nl + 1;
            let Some(end) = data.checked_add(size) else {
                return Err(FetchError::Malformed("chunk size".into()));
            };
            // the data and its line end
            if buf.len() < end + 1 {
                return Ok(false);
            }
            let after = if buf[end] == b'\n' {
                end + 1
            } else if buf.len() < end + 2 {
                return Ok(false);
            } else if &buf[end..end + 2] == b"\r\n" {
                end + 2
            } else {
                return Err(FetchError::Malformed("chunk not terminated".into()));
            };
            self.chunks.push(data..end);
            self.pos = after;
        }
    }

    /// Moves the chunks' data to the start of the body; gives the body's end.
    fn compact(&self, buf: &mut [u8]) -> usize {
        let mut at = self.start;
        for c in &self.chunks {
            buf.copy_within(c.clone(), at);
            at += c.len();
        }
        at
    }
}

fn memchr_nl(b: &[u8]) -> Option<usize> {
    b.iter().position(|&c| c == b'\n')
}

/// Decodes the gzip `raw` into `out` (every member), refusing more than `limit` bytes.
fn gunzip(raw: &[u8], out: &mut Vec<u8>, limit: u64) -> Result<(), FetchError> {
    let d = flate2::bufread::MultiGzDecoder::new(raw);
    out.reserve(raw.len().saturating_mul(4).min(8 << 20));
    let cap = if limit > 0 { limit + 1 } else { u64::MAX };
    d.take(cap).read_to_end(out).map_err(FetchError::Gzip)?;
    if limit > 0 && out.len() as u64 > limit {
        return Err(body_too_large(limit));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(s: &str) -> Head {
        parse_head(s.as_bytes()).unwrap().unwrap()
    }

    #[test]
    fn heads() {
        let h = head("HTTP/1.1 200 OK\r\nContent-Length: 12\r\nContent-Type: text/plain; version=0.0.4\r\n\r\nxx");
        assert_eq!(h.status, 200);
        assert_eq!(h.framing, Framing::Length(12));
        assert!(!h.close && !h.gzip);
        assert_eq!(h.content_type, "text/plain; version=0.0.4");
        assert_eq!(h.len, 80);
        let h = head("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-encoding: gzip\r\nconnection: close\r\n\r\n");
        assert_eq!(h.framing, Framing::Chunked);
        assert!(h.close && h.gzip);
        let h = head("HTTP/1.0 200 OK\r\n\r\n");
        assert_eq!(h.framing, Framing::Close);
        assert!(h.close);
        assert!(parse_head(b"HTTP/1.1 200 OK\r\nContent-Le")
            .unwrap()
            .is_none());
        assert!(parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n").is_err());
        assert!(parse_head(b"garbage\r\n\r\n").is_err());
    }

    #[test]
    fn chunked_bodies_arriving_in_pieces() {
        let raw = b"HEAD4\r\nabcd\r\n3;ext=1\r\nefg\r\n0\r\nX-Trailer: 1\r\n\r\n";
        for cut in 5..raw.len() {
            let mut buf = raw[..cut].to_vec();
            let mut ch = Chunked::new(4);
            let done = ch.advance(&buf).unwrap();
            assert!(!done, "complete at {cut}");
            buf.extend_from_slice(&raw[cut..]);
            assert!(ch.advance(&buf).unwrap());
            assert_eq!(ch.pos, raw.len());
            let end = ch.compact(&mut buf);
            assert_eq!(&buf[4..end], b"abcdefg");
        }
        let mut ch = Chunked::new(0);
        assert!(ch.advance(b"zz\r\n").is_err());
    }

    #[test]
    fn gzip_with_limit() {
        use std::io::Write as _;
        let text = "metric_a 1\n".repeat(1000);
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(text.as_bytes()).unwrap();
        let z = e.finish().unwrap();
        let mut out = vec![];
        gunzip(&z, &mut out, 0).unwrap();
        assert_eq!(out, text.as_bytes());
        let mut out = vec![];
        assert!(matches!(
            gunzip(&z, &mut out, 5000),
            Err(FetchError::BodyTooLarge(5000))
        ));
        let mut out = vec![];
        assert!(gunzip(b"not gzip at all", &mut out, 0).is_err());
    }

    #[test]
    fn requests_and_unserved_urls() {
        let spec = |url| RequestSpec {
            url,
            accept: "text/plain",
            timeout: Duration::from_millis(1500),
            gzip: true,
            authorization: Some(basic_auth_value("u", Some("p"))),
        };
        let t = HttpTarget::new(&spec("http://127.0.0.1:9100/metrics?a=b%20c")).unwrap();
        assert_eq!(
            String::from_utf8(t.request.clone()).unwrap(),
            concat!(
                "GET /metrics?a=b%20c HTTP/1.1\r\nHost: 127.0.0.1:9100\r\nUser-Agent: inferdb/",
                env!("CARGO_PKG_VERSION"),
                "\r\nAccept: text/plain\r\nAccept-Encoding: gzip\r\n",
                "X-Prometheus-Scrape-Timeout-Seconds: 1.5\r\nAuthorization: Basic dTpw\r\n\r\n"
            )
        );
        assert_eq!(t.authority, "127.0.0.1:9100");
        let t = HttpTarget::new(&spec("http://example.com/m")).unwrap();
        assert_eq!(t.authority, "example.com:80");
        assert!(HttpTarget::new(&spec("http://[::1]:9100/m")).is_some());
        assert!(HttpTarget::new(&spec("https://127.0.0.1:9100/metrics")).is_none());
        assert!(HttpTarget::new(&spec("http://u:p@127.0.0.1:9100/metrics")).is_none());
    }
}
