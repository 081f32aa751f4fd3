#!/usr/bin/env python3
"""Per-request fixed cost through HTTP: inferdb vs Prometheus 2.42 (issue #21).

    benches/fixed_cost.py [WORKDIR]           # default /tmp/inferdb-fixed-cost

Starts both servers on empty stores and asks each `vector(1)` as an instant query (POSTed as
Grafana sends it, one kept-alive connection per server) and `GET /-/healthy`:
- hot: N requests to one server back to back;
- alternating: the servers take turns, with PAUSE seconds (default 0.001) after each request, as
  in `compare_query_http.py`, where a request finds the server idle (threads parked, caches cold).
For each it prints the median latency, and for the alternating run each server's CPU (utime +
stime of /proc/PID/stat) and context switches (all threads' voluntary + involuntary switches
from /proc/PID/task/*/status) per request.

Environment: IDB (default target/release/inferdb), N (default 2000), PAUSE, PORT_BASE (default
19290: Prometheus there, inferdb on the next port). Needs prometheus 2.42 and python3.
"""

import http.client
import os
import shutil
import statistics
import subprocess
import sys
import time
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
W = sys.argv[1] if len(sys.argv) > 1 else "/tmp/inferdb-fixed-cost"
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
IDB = os.environ.get("IDB", os.path.join(TARGET, "release", "inferdb"))
N = int(os.environ.get("N", "2000"))
PAUSE = float(os.environ.get("PAUSE", "0.001"))
PORT_BASE = int(os.environ.get("PORT_BASE", "19290"))
PORTS = {"prom": PORT_BASE, "inferdb": PORT_BASE + 1}
FORM = urllib.parse.urlencode({"query": "vector(1)", "time": "1796169300"})
HDR = {"Content-Type": "application/x-www-form-urlencoded"}


def start(name):
    d = os.path.join(W, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    port = PORTS[name]
    if name == "prom":
        cfg = os.path.join(W, "prometheus.yml")
        with open(cfg, "w") as f:
            f.write("global:\n  scrape_interval: 15s\nscrape_configs: []\n")
        cmd = ["prometheus", f"--config.file={cfg}", f"--storage.tsdb.path={d}",
               f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"]
    else:
        cmd = [IDB, "serve", "--no-gpu", "--data-dir", d,
               "--web.listen-address", f"127.0.0.1:{port}", "--query.result-cache-size=0"]
    p = subprocess.Popen(cmd, stdout=open(d + ".log", "w"), stderr=subprocess.STDOUT)
    for _ in range(300):
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/-/ready")
            if c.getresponse().status == 200:
                break
        except OSError:
            pass
        if p.poll() is not None:
            raise SystemExit(f"{name} exited; see {d}.log")
        time.sleep(0.2)
    time.sleep(3)
    return p


def cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        x = f.read().rsplit(")", 1)[1].split()
    return (int(x[11]) + int(x[12])) / os.sysconf("SC_CLK_TCK")


def switches(pid):
    n = 0
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{t}/status") as f:
                for line in f:
                    if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                        n += int(line.split()[1])
        except OSError:
            pass
    return n


def ask(conn, method, path):
    t = time.perf_counter()
    if method == "POST":
        conn.request("POST", path, body=FORM, headers=HDR)
    else:
        conn.request("GET", path)
    r = conn.getresponse()
    r.read()
    if r.status != 200:
        raise SystemExit(f"{path}: {r.status}")
    return time.perf_counter() - t


def main():
    os.makedirs(W, exist_ok=True)
    procs = {n: start(n) for n in PORTS}
    try:
        conns = {n: http.client.HTTPConnection("127.0.0.1", p) for n, p in PORTS.items()}
        print(f"N={N}, pause {PAUSE} s, load average {open('/proc/loadavg').read().split()[:3]}")
        for what, method, path in [("healthy", "GET", "/-/healthy"),
                                   ("vector(1)", "POST", "/api/v1/query")]:
            for n, c in conns.items():
                for _ in range(50):
                    ask(c, method, path)
                hot = statistics.median(ask(c, method, path) for _ in range(N))
                print(f"hot          {what:<10} {n:<8} {hot * 1e3:.3f} ms")
        lat = {n: [] for n in conns}
        before = {n: (cpu_s(p.pid), switches(p.pid)) for n, p in procs.items()}
        for i in range(N):
            names = list(conns)
            names = names[i % 2:] + names[:i % 2]
            for n in names:
                lat[n].append(ask(conns[n], "POST", "/api/v1/query"))
                time.sleep(PAUSE)
        for n, p in procs.items():
            cpu = (cpu_s(p.pid) - before[n][0]) / N
            cs = (switches(p.pid) - before[n][1]) / N
            print(f"alternating  vector(1)  {n:<8} {statistics.median(lat[n]) * 1e3:.3f} ms, "
                  f"{cpu * 1e6:.0f} us CPU and {cs:.1f} context switches per request")
    finally:
        for p in procs.values():
            p.terminate()
            p.wait(30)


if __name__ == "__main__":
    main()
