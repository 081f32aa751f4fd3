#!/usr/bin/env python3
"""Query latency through HTTP: inferdb vs Prometheus 2.42 vs VictoriaMetrics (issue #21).

    benches/compare_query_http.py [WORKDIR]          # default /tmp/inferdb-qhttp

1. Generates 24 h x 8 simulated vLLM servers at 15 s (examples/gen_openmetrics.rs, only the
   families the queries read) as OpenMetrics, once, and loads it into
   - inferdb: `inferdb import openmetrics`;
   - Prometheus 2.42: `promtool tsdb create-blocks-from openmetrics --max-block-duration=24h`;
   - VictoriaMetrics (Debian `victoria-metrics`): `/api/v1/import/prometheus` (timestamps in ms).
   The stores are kept in WORKDIR (delete one to redo it); the OpenMetrics file is deleted once
   all three exist (KEEP_OM=1 keeps it).
2. Runs the provisioned dashboard's queries (deploy/grafana/dashboards/vllm.json, variables set
   to "All", `$__rate_interval` as Grafana sets it for a 15 s scrape interval) and the queries of
   issue #21 as `/api/v1/query` (at the range's end), `/api/v1/query_range` over 6 h at 15 s and
   over 24 h at 60 s, POSTed as Grafana sends them (form body, `Accept-Encoding: gzip`) over a
   kept-alive connection per server, RUNS times each (default 5), the servers taking turns in a
   rotating order. A request's latency is from writing it to reading the last byte of the
   response, on a raw socket (no HTTP library in the timed part).
   - "first": inferdb with `--query.result-cache-size=0` and VictoriaMetrics with
     `-search.disableCache`, so every run is a first evaluation;
   - "refresh": both with their caches on (defaults); each query is asked once over its range,
     then RUNS times with the range moved on by 30 s more each time, ends aligned down to the
     step as Grafana aligns them (a dashboard refreshing every 30 s).
   Prometheus has no result cache: it serves both phases.
3. Prints per query the median latency of each server and the ratios to Prometheus, then the
   geometric mean of the ratios per kind and phase, and checks that inferdb's and Prometheus'
   answers have the same series and points (values within 1e-6 relative).

Environment: IDB (inferdb binary, default target/release/inferdb), GEN (gen_openmetrics,
default target/release/examples/gen_openmetrics), RUNS, ONLY (comma-separated query names),
KINDS (default instant,6h,24h), PHASES (default first,refresh), NO_VM=1 (leave
VictoriaMetrics out), PORT_BASE (default 19190: Prometheus there, inferdb and
VictoriaMetrics on the next two ports), ENCODING (default gzip; identity asks for plain
responses). Build first: cargo build --release --bin inferdb --example gen_openmetrics.
Needs prometheus and promtool 2.42, victoria-metrics, python3 (standard library only).
"""

import http.client
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from httpbench import Client, cpu_ticks, wait_ready  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
W = sys.argv[1] if len(sys.argv) > 1 else "/tmp/inferdb-qhttp"
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
IDB = os.environ.get("IDB", os.path.join(TARGET, "release", "inferdb"))
GEN = os.environ.get("GEN", os.path.join(TARGET, "release", "examples", "gen_openmetrics"))
RUNS = int(os.environ.get("RUNS", "5"))
KINDS = os.environ.get("KINDS", "instant,6h,24h").split(",")
PHASES = os.environ.get("PHASES", "first,refresh").split(",")
ONLY = [q for q in os.environ.get("ONLY", "").split(",") if q]
NO_VM = os.environ.get("NO_VM") == "1"
HAS_CACHE_FLAG = True
PORT_BASE = int(os.environ.get("PORT_BASE", "19190"))
# what the client accepts: Grafana's Go transport asks for gzip (spec/grafana-prometheus-api.md)
ENCODING = os.environ.get("ENCODING", "gzip")
PORTS = {"prom": PORT_BASE, "inferdb": PORT_BASE + 1, "vm": PORT_BASE + 2}

# the generator's first scrape (2026-12-01T00:00:00Z); the data covers 24 h from there
DATA_START = 1_796_083_200
# sample times off the step grid: Prometheus 2.42 closes windows on the left, Prometheus 3
# (and inferdb) on the right, which only matters for samples exactly at a window's start
OFFSET_MS = 7_350
# the ranges end 5 minutes before the data does, so that every refresh still finds data
END = DATA_START + 86400 - 300
KIND_RANGE = {"6h": (6 * 3600, 15), "24h": (24 * 3600, 60)}

FAMILIES = [
    "up", "vllm:generation_tokens", "vllm:prompt_tokens", "vllm:num_requests_running",
    "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc",
    "vllm:request_success", "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds",
    "vllm:e2e_request_latency_seconds", "vllm:num_preemptions", "vllm:prefix_cache_hits",
    "vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_hits", "vllm:gpu_prefix_cache_queries",
]

# the queries of issue #21 and more of the kinds it names
OWN = [
    ("label_replace", 'label_replace(sum by (model_name) (rate(vllm:request_success_total[5m])), "model", "$1", "model_name", ".*/(.*)")'),
    ("label_join", 'label_join(rate(vllm:generation_tokens_total[5m]), "where", "/", "instance", "model_name")'),
    ("vector1", "vector(1)"),
    ("absent_or_vector0", 'sum(vllm:num_requests_running{model_name="does-not-exist"}) or vector(0)'),
    ("avg_over_time_10m", "avg_over_time(vllm:num_requests_running[10m])"),
    ("sum_over_time_30m", "sum_over_time(vllm:num_requests_running[30m])"),
    ("count_over_time_10m", "count_over_time(vllm:num_requests_waiting[10m])"),
    ("max_over_time_30m", "max_over_time(vllm:num_requests_waiting[30m])"),
    ("min_over_time_10m", "min_over_time(vllm:kv_cache_usage_perc[10m])"),
    ("quantile_over_time_30m", "quantile_over_time(0.9, vllm:kv_cache_usage_perc[30m])"),
    ("deriv_10m", "deriv(vllm:kv_cache_usage_perc[10m])"),
    ("irate_5m", "irate(vllm:generation_tokens_total[5m])"),
    ("sum_by_model_rate", "sum by (model_name) (rate(vllm:request_success_total[5m]))"),
    ("topk_rate", "topk(3, rate(vllm:generation_tokens_total[5m]))"),
    ("hq_p99_e2e_5m", "histogram_quantile(0.99, sum by (le) (rate(vllm:e2e_request_latency_seconds_bucket[5m])))"),
]


def log(*a):
    print(*a, flush=True)


def dashboard_queries():
    d = json.load(open(os.path.join(ROOT, "deploy/grafana/dashboards/vllm.json")))
    out, seen = [], set()

    def walk(panels):
        for p in panels:
            walk(p.get("panels", []))
            for i, t in enumerate(p.get("targets", [])):
                e = t.get("expr")
                if e and e not in seen:
                    seen.add(e)
                    slug = "".join(c if c.isalnum() else "_" for c in p.get("title", "panel").lower())
                    out.append((f"dash_{slug}_{i}"[:40], e))

    walk(d.get("panels", []))
    return out


def expand(expr, step):
    """The dashboard's variables as Grafana fills them: 'All' is `.*`; `$__rate_interval` is
    max($__interval + scrape interval, 4 x scrape interval) with a 15 s scrape interval."""
    rate_interval = max(step + 15, 60)
    for v in ("$model_name", "$instance", "$gpu_instance"):
        expr = expr.replace(v, ".*")
    return expr.replace("$__rate_interval", f"{rate_interval}s")


def run(cmd, **kw):
    log("$", " ".join(cmd))
    subprocess.run(cmd, check=True, **kw)


def prepare():
    os.makedirs(W, exist_ok=True)
    om = os.path.join(W, "vllm-8x24h.om")
    stores = {n: os.path.join(W, n) for n in ("inferdb", "prom", "vm")}
    vm_done = os.path.join(stores["vm"], ".imported")
    need = [n for n in ("inferdb", "prom") if not os.path.isdir(stores[n])]
    if not NO_VM and not os.path.exists(vm_done):
        need.append("vm")
    if not need:
        return stores
    if not os.path.exists(om):
        run([GEN, om + ".tmp", "8", "24", "15", str(OFFSET_MS), ",".join(FAMILIES)])
        os.rename(om + ".tmp", om)
    if "inferdb" in need:
        t = time.time()
        run([IDB, "import", "openmetrics", "--quiet", "--data-dir", stores["inferdb"] + ".tmp", om])
        os.rename(stores["inferdb"] + ".tmp", stores["inferdb"])
        log(f"inferdb import: {time.time() - t:.1f} s")
    if "prom" in need:
        t = time.time()
        shutil.rmtree(stores["prom"] + ".tmp", ignore_errors=True)
        run(["promtool", "tsdb", "create-blocks-from", "openmetrics", "-q",
             "--max-block-duration=24h", om, stores["prom"] + ".tmp"])
        os.rename(stores["prom"] + ".tmp", stores["prom"])
        log(f"promtool create-blocks-from openmetrics: {time.time() - t:.1f} s")
    if "vm" in need:
        t = time.time()
        shutil.rmtree(stores["vm"], ignore_errors=True)
        p = start("vm", cache=True, stores=stores)
        try:
            vm_import(om)
            c = http.client.HTTPConnection("127.0.0.1", PORTS["vm"], timeout=600)
            c.request("GET", "/internal/force_flush")
            c.getresponse().read()
        finally:
            stop(p)
        open(vm_done, "w").close()
        log(f"VictoriaMetrics import: {time.time() - t:.1f} s")
    if os.environ.get("KEEP_OM") != "1":
        os.remove(om)
    return stores


def vm_import(om):
    """Posts the OpenMetrics file to VictoriaMetrics as Prometheus text with ms timestamps."""
    conn = http.client.HTTPConnection("127.0.0.1", PORTS["vm"], timeout=600)
    buf, size = [], 0

    def flush():
        nonlocal buf, size
        if not buf:
            return
        body = "".join(buf).encode()
        conn.request("POST", "/api/v1/import/prometheus", body=body,
                     headers={"Content-Type": "text/plain"})
        r = conn.getresponse()
        msg = r.read()
        if r.status // 100 != 2:
            raise SystemExit(f"VictoriaMetrics import: {r.status} {msg[:300]!r}")
        buf, size = [], 0

    with open(om) as f:
        for line in f:
            if line.startswith("#"):
                continue
            head, ts = line.rsplit(" ", 1)
            line = f"{head} {round(float(ts) * 1000)}\n"
            buf.append(line)
            size += len(line)
            if size >= 32 << 20:
                flush()
    flush()


def start(name, cache, stores):
    port = PORTS[name]
    logf = open(os.path.join(W, f"{name}.log"), "a")
    if name == "prom":
        cfg = os.path.join(W, "prometheus.yml")
        with open(cfg, "w") as f:
            f.write("global:\n  scrape_interval: 15s\nscrape_configs: []\n")
        cmd = ["prometheus", f"--config.file={cfg}", f"--storage.tsdb.path={stores['prom']}",
               "--storage.tsdb.retention.time=100y", f"--web.listen-address=127.0.0.1:{port}",
               "--log.level=warn"]
    elif name == "inferdb":
        cmd = [IDB, "serve", "--no-gpu", "--data-dir", stores["inferdb"],
               "--web.listen-address", f"127.0.0.1:{port}"]
        if not cache and HAS_CACHE_FLAG:
            cmd.append("--query.result-cache-size=0")
    else:
        cmd = ["victoria-metrics", f"-storageDataPath={stores['vm']}", "-retentionPeriod=100y",
               f"-httpListenAddr=127.0.0.1:{port}", "-loggerLevel=WARN"]
        if not cache:
            cmd.append("-search.disableCache")
    p = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT)
    ready = "/health" if name == "vm" else "/-/ready"
    wait_ready(p, name, port, ready, os.path.join(W, f"{name}.log"))
    # let start-up work (block loading, compaction of imported blocks) finish: 3 s without CPU
    idle, last = 0, cpu_ticks(p.pid)
    for _ in range(120):
        time.sleep(1)
        now = cpu_ticks(p.pid)
        idle = idle + 1 if now == last else 0
        last = now
        if idle >= 3:
            break
    return p


def stop(p):
    if p and p.poll() is None:
        p.terminate()
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def request(kind, expr, end):
    if kind == "instant":
        return "/api/v1/query", {"query": expand(expr, 15), "time": str(end)}
    span, step = KIND_RANGE[kind]
    end = end // step * step
    return "/api/v1/query_range", {"query": expand(expr, step), "start": str(end - span),
                                   "end": str(end), "step": str(step)}


def same_answer(a, b):
    """Whether two API answers hold the same series and points (values within 1e-6)."""
    ra, rb = json.loads(a)["data"]["result"], json.loads(b)["data"]["result"]
    if isinstance(ra, list) is False or isinstance(rb, list) is False:
        return ra == rb
    key = lambda s: tuple(sorted(s["metric"].items()))
    pts = lambda s: s.get("values") or [s["value"]]
    da, db = {key(s): pts(s) for s in ra}, {key(s): pts(s) for s in rb}
    if da.keys() != db.keys():
        return False
    for k in da:
        if [p[0] for p in da[k]] != [p[0] for p in db[k]]:
            return False
        for (_, x), (_, y) in zip(da[k], db[k]):
            x, y = float(x), float(y)
            if not (x == y or (math.isnan(x) and math.isnan(y)) or abs(x - y) <= 1e-6 * max(abs(x), abs(y))):
                return False
    return True


def measure(phase, clients, queries):
    """Median latency (s) per (query, kind, server) over RUNS runs."""
    res, mismatches = {}, []
    names = [c.name for c in clients]
    for qname, expr in queries:
        for kind in KINDS:
            if phase == "refresh" and kind == "instant":
                continue
            times = {n: [] for n in names}
            if phase == "first":
                path, params = request(kind, expr, END)
                answers = {c.name: c.ask(path, params)[1] for c in clients}  # not timed
                if "prom" in answers and not same_answer(answers["prom"], answers["inferdb"]):
                    mismatches.append(f"{qname} {kind}")
                for r in range(RUNS):
                    order = clients[r % len(clients):] + clients[:r % len(clients)]
                    for c in order:
                        times[c.name].append(c.ask(path, params)[0])
            else:
                for c in clients:  # the dashboard's first load, not timed
                    c.ask(*request(kind, expr, END))
                for r in range(1, RUNS + 1):
                    path, params = request(kind, expr, END + 30 * r)
                    order = clients[r % len(clients):] + clients[:r % len(clients)]
                    for c in order:
                        times[c.name].append(c.ask(path, params)[0])
            res[(qname, kind)] = {n: statistics.median(v) for n, v in times.items()}
            row = res[(qname, kind)]
            ratios = "  ".join(f"{n}/prom {row[n] / row['prom']:.2f}" for n in names if n != "prom")
            log(f"{phase:<8} {kind:<8} {qname:<40} " + "  ".join(
                f"{n} {row[n] * 1e3:8.2f} ms" for n in names) + "  " + ratios)
    return res, mismatches


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def main():
    for c in ("prometheus", "promtool") + (() if NO_VM else ("victoria-metrics",)):
        if not shutil.which(c):
            raise SystemExit(f"{c} missing")
    for b in (IDB, GEN):
        if not os.path.exists(b):
            raise SystemExit(f"{b} missing: cargo build --release --bin inferdb --example gen_openmetrics")
    global HAS_CACHE_FLAG
    HAS_CACHE_FLAG = "--query.result-cache-size" in subprocess.run(
        [IDB, "serve", "--help"], capture_output=True, text=True).stdout
    stores = prepare()
    queries = dashboard_queries() + OWN
    if ONLY:
        queries = [q for q in queries if q[0] in ONLY]
    log(f"{len(queries)} queries, {RUNS} runs each, load average {open('/proc/loadavg').read().split()[:3]}, {os.cpu_count()} CPUs")
    names = ["prom", "inferdb"] + ([] if NO_VM else ["vm"])
    summary = {}
    prom = start("prom", cache=False, stores=stores)
    try:
        for phase in PHASES:
            procs = [start(n, cache=(phase == "refresh"), stores=stores) for n in names[1:]]
            try:
                clients = [Client(n, PORTS[n], ENCODING) for n in names]
                res, bad = measure(phase, clients, queries)
                summary[phase] = res
                if bad:
                    log(f"ANSWERS DIFFER (inferdb vs Prometheus): {', '.join(bad)}")
            finally:
                for p in procs:
                    stop(p)
    finally:
        stop(prom)
    log("\nper-query ratio to Prometheus 2.42 (median of runs), worst inferdb first:")
    for phase, res in summary.items():
        rows = sorted(res.items(), key=lambda kv: -kv[1]["inferdb"] / kv[1]["prom"])
        over = [f"{q} {k} {v['inferdb'] / v['prom']:.2f}" for (q, k), v in rows if v["inferdb"] > v["prom"]]
        log(f"  {phase}: queries slower than Prometheus: {len(over)}{': ' + ', '.join(over) if over else ''}")
    log("\ngeometric mean of latency ratios to Prometheus 2.42:")
    log(f"  {'phase':<8} {'kind':<8} {'queries':>7} " + " ".join(f"{n + '/prom':>12}" for n in names[1:]))
    for phase, res in summary.items():
        for kind in KINDS:
            rows = [v for (q, k), v in res.items() if k == kind]
            if rows:
                log(f"  {phase:<8} {kind:<8} {len(rows):>7} " + " ".join(
                    f"{geomean([r[n] / r['prom'] for r in rows]):>12.3f}" for n in names[1:]))
    # the same as a Markdown table (for BENCHMARKS.md): per query, inferdb/Prometheus and
    # VictoriaMetrics/Prometheus for each kind and phase
    cols = [(p, k) for p in summary for k in KINDS if any(kk == k for (_, kk) in summary[p])]
    log("\n| query | " + " | ".join(f"{k} {p}" for p, k in cols) + " |")
    log("|---|" + "---:|" * len(cols))
    for qname, _ in queries:
        cells = []
        for p, k in cols:
            v = summary[p].get((qname, k))
            if not v:
                cells.append("")
                continue
            cell = f"{v['inferdb'] / v['prom']:.2f}"
            if "vm" in v:
                cell += f" ({v['vm'] / v['prom']:.2f})"
            cells.append(cell)
        log(f"| `{qname}` | " + " | ".join(cells) + " |")
    if "first" in summary:
        log("\nper-request fixed cost (vector(1), first phase, median ms):")
        for kind in KINDS:
            v = summary["first"].get(("vector1", kind))
            if v:
                log(f"  {kind:<8} " + "  ".join(f"{n} {v[n] * 1e3:.2f}" for n in names))


if __name__ == "__main__":
    main()
