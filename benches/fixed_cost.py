#!/usr/bin/env python3
"""Per-request fixed cost through HTTP: inferdb vs Prometheus 2.42 (issue #21).

    benches/fixed_cost.py [WORKDIR]           # default /tmp/inferdb-fixed-cost

Starts both servers on empty stores and asks each `vector(1)` as an instant query (POSTed as
Grafana sends it, one kept-alive connection per server; plain answers, timed on a raw socket by
`httpbench.Client` as in `compare_query_http.py`) and `GET /-/healthy`:
- hot: N requests to one server back to back;
- alternating: the servers take turns, with PAUSE seconds (default 0.001) after each request, as
  in `compare_query_http.py`, where a request finds the server idle (threads parked, caches cold).
For each it prints the median latency, and for the alternating run each server's CPU (utime +
stime of /proc/PID/stat) and context switches (all threads' voluntary + involuntary switches
from /proc/PID/task/*/status) per request.

Environment: IDB (default target/release/inferdb), N (default 2000), PAUSE, PORT_BASE (default
19290: Prometheus there, inferdb on the next port). Needs prometheus 2.42 and python3.
"""

import os
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from httpbench import Client, cpu_ticks, wait_ready  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
W = sys.argv[1] if len(sys.argv) > 1 else "/tmp/inferdb-fixed-cost"
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
IDB = os.environ.get("IDB", os.path.join(TARGET, "release", "inferdb"))
N = int(os.environ.get("N", "2000"))
PAUSE = float(os.environ.get("PAUSE", "0.001"))
PORT_BASE = int(os.environ.get("PORT_BASE", "19290"))
PORTS = {"prom": PORT_BASE, "inferdb": PORT_BASE + 1}
FORM = {"query": "vector(1)", "time": "1796169300"}


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
    wait_ready(p, name, port, "/-/ready", d + ".log")
    time.sleep(3)
    return p


def cpu_s(pid):
    return cpu_ticks(pid) / os.sysconf("SC_CLK_TCK")


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


def ask(client, path, form):
    return client.ask(path, form)[0]


def main():
    os.makedirs(W, exist_ok=True)
    procs = {n: start(n) for n in PORTS}
    try:
        conns = {n: Client(n, p, "identity") for n, p in PORTS.items()}
        print(f"N={N}, pause {PAUSE} s, load average {open('/proc/loadavg').read().split()[:3]}")
        for what, path, form in [("healthy", "/-/healthy", None),
                                 ("vector(1)", "/api/v1/query", FORM)]:
            for n, c in conns.items():
                for _ in range(50):
                    ask(c, path, form)
                hot = statistics.median(ask(c, path, form) for _ in range(N))
                print(f"hot          {what:<10} {n:<8} {hot * 1e3:.3f} ms")
        lat = {n: [] for n in conns}
        before = {n: (cpu_s(p.pid), switches(p.pid)) for n, p in procs.items()}
        for i in range(N):
            names = list(conns)
            names = names[i % 2:] + names[:i % 2]
            for n in names:
                lat[n].append(ask(conns[n], "/api/v1/query", FORM))
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
