#!/usr/bin/env python3
"""Web UI page weight and time to first usable page, on `inferdb serve --demo` (run by hand;
figures in BENCHMARKS.md, "Web UI").

    benches/ui_load.py [RUNS]          (default 5 cold loads per page)

Builds nothing: uses $BIN (default target/release/inferdb; `cargo build --release` first).
Starts `serve --demo` (two simulated vLLM servers, scraped every 15 s) on a free port, waits
until rates exist (three scrapes), then for each page opens a fresh headless Chromium
(chromedriver, new profile, so the cache is cold) RUNS times and reads from the browser:

- ready: ms from navigation start to `performance.mark('inferdb:ready')`, which each page sets
  once its first data is drawn (fleet: table and all 15 charts; query: the panel's graph or
  its explain tree with every node evaluated; insights: the findings);
- load: ms to the load event;
- bytes: what crossed the wire (transferSize of the document and every resource: static
  files gzipped plus the API's JSON answers);
- static: gzipped bytes of the UI's own files (`static/...`) that page loaded.

Then one warm load (same browser again: static files from the cache). Prints medians, and the
whole UI's weight: the union of static files over all pages plus one page shell, gzipped.
Standard library only; needs chromium and chromedriver (Debian packages).
"""
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 5
BIN = os.environ.get("BIN", "target/release/inferdb")
GEN = "sum by (model_name) (rate(vllm:generation_tokens_total[1m]))"
PAGES = [
    "fleet",
    "query?" + urllib.parse.urlencode({"g0.expr": GEN, "g0.tab": "graph", "g0.range_input": "1h"}),
    "query",
    "query?" + urllib.parse.urlencode({"g0.expr": GEN, "g0.tab": "explain"}),
    "insights",
    "targets",
    "service-discovery",
    "rules",
    "alerts",
    "tsdb-status",
    "config",
    "flags",
    "status",
]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def call(method, url, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.load(r)


def wait_port(port, what, proc):
    for _ in range(600):
        if proc.poll() is not None:
            sys.exit(f"{what} exited")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    sys.exit(f"{what} did not listen")


class Session:
    def __init__(self, driver):
        self.driver = driver
        prof = tempfile.mkdtemp(prefix="ui-bench-profile-")
        caps = {"capabilities": {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": {
            "binary": "/usr/bin/chromium",
            "args": ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                     "--disable-background-networking", "--disable-component-update", "--disable-sync",
                     "--disable-dev-shm-usage", "--window-size=1280,800", f"--user-data-dir={prof}"]}}}}
        self.id = call("POST", f"{driver}/session", caps)["value"]["sessionId"]

    def js(self, script):
        return call("POST", f"{self.driver}/session/{self.id}/execute/sync",
                    {"script": script, "args": []})["value"]

    def goto(self, url):
        call("POST", f"{self.driver}/session/{self.id}/url", {"url": url})

    def measure(self, url):
        self.goto(url)
        for _ in range(600):
            got = self.js("""
              const r = performance.getEntriesByName('inferdb:ready')[0];
              if (!r) return null;
              const nav = performance.getEntriesByType('navigation')[0];
              const res = performance.getEntriesByType('resource');
              return {ready: r.startTime, load: nav.loadEventEnd,
                      bytes: nav.transferSize + res.reduce((a, e) => a + e.transferSize, 0),
                      docBytes: nav.encodedBodySize,
                      statics: res.filter(e => e.name.includes('/static/'))
                                  .map(e => [e.name.replace(/^.*\\/static\\/[^/]+\\//, ''), e.encodedBodySize])};""")
            if got and got["load"] > 0:
                return got
            time.sleep(0.05)
        sys.exit(f"{url}: never ready")

    def close(self):
        call("DELETE", f"{self.driver}/session/{self.id}")


def main():
    port, dport = free_port(), free_port()
    base = f"http://127.0.0.1:{port}"
    work = tempfile.mkdtemp(prefix="ui-bench-")
    srv = subprocess.Popen([BIN, "serve", "--demo", "--demo.port", "0", "--no-gpu", "--data-dir", f"{work}/data",
                            "--web.listen-address", f"127.0.0.1:{port}"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    drv = subprocess.Popen(["chromedriver", f"--port={dport}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port, "inferdb", srv)
        wait_port(dport, "chromedriver", drv)
        q = urllib.parse.urlencode({"query": GEN})
        for _ in range(120):
            try:
                with urllib.request.urlopen(f"{base}/api/v1/query?{q}") as r:
                    if len(json.load(r)["data"]["result"]) == 2:
                        break
            except urllib.error.HTTPError as e:
                if e.code != 503:  # 503: the store is still opening
                    raise
            time.sleep(1)
        else:
            sys.exit("no rates after 120 s")
        time.sleep(16)  # one more scrape: every chart has two points at least
        driver = f"http://127.0.0.1:{dport}"
        statics = {}
        print(f"{'page':<18} {'ready ms':>9} {'load ms':>8} {'bytes':>8} {'static gz':>9} {'warm ready':>10}")
        for page in PAGES:
            cold = []
            for _ in range(RUNS):
                s = Session(driver)
                cold.append(s.measure(f"{base}/{page}"))
                warm = s.measure(f"{base}/{page}")
                s.close()
            for c in cold:
                statics.update(dict(c["statics"]))
            med = lambda k: statistics.median(c[k] for c in cold)
            name = page.split("?")[0] + (" (explain)" if "explain" in page else " (graph)" if "g0.expr" in page else "")
            print(f"{name:<18} {med('ready'):>9.0f} {med('load'):>8.0f} {med('bytes'):>8.0f} "
                  f"{sum(v for _, v in cold[0]['statics']):>9} {warm['ready']:>10.0f}")
        doc = cold[0]["docBytes"]
        total = sum(statics.values()) + doc
        print(f"whole UI gzipped: {total} bytes ({len(statics)} static files + one {doc}-byte page shell)")
        for k, v in sorted(statics.items(), key=lambda kv: -kv[1]):
            print(f"  {k:<40} {v:>7}")
    finally:
        srv.terminate()
        drv.terminate()
        srv.wait()
        drv.wait()


if __name__ == "__main__":
    main()
