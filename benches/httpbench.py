"""What the HTTP benchmark scripts share (`compare_query_http.py`, `fixed_cost.py`): waiting
for a server to be ready, its CPU ticks, and a raw-socket HTTP/1.1 client that adds as little
as it can to the latency it times. Standard library only."""

import gzip
import http.client
import re
import socket
import time
import urllib.parse


def wait_ready(p, name, port, path, log):
    """Waits until `GET path` on `port` answers 200; exits if the server `p` ends first."""
    for _ in range(600):
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", path)
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        if p.poll() is not None:
            raise SystemExit(f"{name} exited; see {log}")
        time.sleep(0.2)
    raise SystemExit(f"{name} not ready after 120 s; see {log}")


def cpu_ticks(pid):
    """User + system clock ticks of process `pid` (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return int(parts[11]) + int(parts[12])


class Client:
    """One kept-alive connection to a server on `port`; `ask` POSTs a form with Grafana's
    headers (`Accept-Encoding: encoding`: Go's transport sends gzip), or GETs a path.

    The timed part is writing the prepared request and reading the whole response (headers,
    then `Content-Length` bytes or every chunk); headers are split and gzip undone after the
    clock stops, so that the client adds as little as it can to either server's figure."""

    def __init__(self, name, port, encoding="gzip"):
        self.name = name
        self.port = port
        self.encoding = encoding
        self.sock = None

    def _connect(self):
        self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=300)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()
        self.rx = memoryview(bytearray(1 << 16))

    def _fill(self, what):
        # into a buffer kept for the connection (recv(n) would allocate n bytes per call)
        n = self.sock.recv_into(self.rx)
        if not n:
            raise ConnectionError(f"{self.name}: connection closed in the {what}")
        self.buf += self.rx[:n]  # amortised: a bytearray grows in place

    def _read_response(self):
        """Reads one response from the connection into `buf`: returns the head, the spans of
        `buf` that hold the body as sent, and where the response ends in `buf` (the body is
        put together by the caller, after the clock stops)."""
        buf = self.buf
        while (i := buf.find(b"\r\n\r\n")) < 0:
            self._fill("response headers")
        head, pos = bytes(buf[:i]), i + 4
        low = head.lower()
        m = re.search(rb"\r\ncontent-length:\s*(\d+)", low)
        if m:
            end = pos + int(m.group(1))
            while len(buf) < end:
                self._fill("body")
            return head, [(pos, end)], end
        if b"\r\ntransfer-encoding: chunked" not in low:
            raise SystemExit(f"{self.name}: response with neither length nor chunks: {head!r}")
        spans = []
        while True:
            while (j := buf.find(b"\r\n", pos)) < 0:
                self._fill("chunk header")
            size = int(bytes(buf[pos:j]).split(b";")[0], 16)
            end = j + 2 + size + 2
            while len(buf) < end:
                self._fill("chunk")
            if size == 0:
                # no trailers are sent by these servers: the last chunk ends with CRLF
                return head, spans, end
            spans.append((j + 2, j + 2 + size))
            pos = end

    def ask(self, path, params=None):
        """Sends `path` (POST with `params` as a form, GET without); returns the seconds from
        writing the request to reading the answer's last byte, and the answer (gunzipped)."""
        head = (f"Host: 127.0.0.1:{self.port}\r\nUser-Agent: Grafana/11.0.0\r\n"
                f"Accept-Encoding: {self.encoding}\r\n")
        if params is None:
            req = f"GET {path} HTTP/1.1\r\n{head}\r\n".encode()
        else:
            body = urllib.parse.urlencode(params).encode()
            req = (f"POST {path} HTTP/1.1\r\n{head}"
                   f"Content-Type: application/x-www-form-urlencoded\r\n"
                   f"Content-Length: {len(body)}\r\n\r\n").encode() + body
        if self.sock is None:
            self._connect()
        t = time.perf_counter()
        self.sock.sendall(req)
        head, spans, end = self._read_response()
        dt = time.perf_counter() - t
        data = b"".join(bytes(self.buf[a:b]) for a, b in spans)
        del self.buf[:end]
        status = int(head.split(b" ", 2)[1])
        if b"\r\ncontent-encoding: gzip" in head.lower():
            data = gzip.decompress(data)
        if status != 200:
            raise SystemExit(f"{self.name} {path} {params}: {status} {data[:300]!r}")
        return dt, data
