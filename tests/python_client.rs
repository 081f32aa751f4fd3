//! A third-party Python client of the Prometheus API, PyPI's `prometheus-api-client`
//! (`PrometheusConnect`), against a running `inferdb serve`: its answers equal the HTTP API's
//! and the values known from the imported data.
//!
//! Needs `python3` with `pip install prometheus-api-client`. Without it the test prints
//! SKIPPED and passes, except under `CI=true`, where it fails saying what to install.

mod common;

use std::io::Write as _;
use std::process::{Command, Stdio};

use common::{free_port, inferdb_import, serve_command, Proc};

const SCRIPT: &str = r#"
import datetime, json, sys, time, urllib.parse, urllib.request
from prometheus_api_client import PrometheusConnect

url, base = sys.argv[1], int(sys.argv[2])
T = base + 3585  # the last sample

def raw(path, **params):
    q = urllib.parse.urlencode(params)
    with urllib.request.urlopen(f"{url}{path}?{q}", timeout=30) as r:
        body = json.load(r)
    assert body["status"] == "success", body
    return body["data"]

deadline = time.time() + 60
while True:
    try:
        with urllib.request.urlopen(url + "/-/ready", timeout=5) as r:
            if r.status == 200:
                break
    except Exception as e:
        if time.time() > deadline:
            sys.exit(f"inferdb did not become ready: {e}")
    time.sleep(0.2)

checks = 0
def check(cond, what):
    global checks
    checks += 1
    if not cond:
        sys.exit(f"FAILED: {what}")

for method in ("GET", "POST"):
    prom = PrometheusConnect(url=url, disable_ssl=True, method=method)
    # check_prometheus_connection() is GET / (Prometheus answers with a redirect to its UI)
    check(prom.check_prometheus_connection(), f"{method} check_prometheus_connection")

    # instant query: a counter's rate per model
    q = "sum by (model_name) (rate(vllm:generation_tokens_total[5m]))"
    got = prom.custom_query(q, params={"time": T})
    check(got == raw("/api/v1/query", query=q, time=T)["result"], f"{method} custom_query == API")
    rates = {s["metric"]["model_name"]: float(s["value"][1]) for s in got}
    check(set(rates) == {"llama", "qwen"}, f"models {rates}")
    check(abs(rates["llama"] - 100 / 15) < 1e-9, f"llama rate {rates}")
    check(abs(rates["qwen"] - 250 / 15) < 1e-9, f"qwen rate {rates}")
    check(all(s["value"][0] == T for s in got), f"timestamps {got}")

    # instant query: a gauge's last value
    got = prom.custom_query('vllm:num_requests_running{model_name="qwen"}', params={"time": T})
    check(len(got) == 1 and got[0]["value"][1] == "2", f"gauge {got}")
    check(got[0]["metric"] == {"__name__": "vllm:num_requests_running", "instance": "10.0.0.7:8000",
                               "job": "vllm", "model_name": "qwen"}, f"labels {got}")

    # range query
    start = datetime.datetime.fromtimestamp(base + 600, tz=datetime.timezone.utc)
    end = datetime.datetime.fromtimestamp(base + 1200, tz=datetime.timezone.utc)
    q = "sum(vllm:num_requests_running)"
    got = prom.custom_query_range(q, start_time=start, end_time=end, step="60")
    check(got == raw("/api/v1/query_range", query=q, start=base + 600, end=base + 1200, step=60)["result"],
          f"{method} custom_query_range == API")
    check(len(got) == 1 and len(got[0]["values"]) == 11, f"range shape {got}")
    for t, v in got[0]["values"]:
        i = (t - base) // 15
        check(float(v) == (i % 7) * 3, f"range value at {t}: {v}")

    # metadata-ish endpoints
    names = prom.all_metrics()
    check(names == raw("/api/v1/label/__name__/values"), "all_metrics == API")
    check({"vllm:generation_tokens_total", "vllm:num_requests_running"} <= set(names), f"names {names}")
    models = prom.get_label_values("model_name")
    check(models == ["llama", "qwen"], f"model_name values {models}")
    check("instance" in prom.get_label_names() and "model_name" in prom.get_label_names(), "label names")
    series = prom.get_series(start, end, params={"match[]": "vllm:num_requests_running"})
    check(len(series) == 2 and all(s["__name__"] == "vllm:num_requests_running" for s in series),
          f"series {series}")

    # raw samples through a range selector (single-quoted label values, as the client writes them)
    data = prom.get_metric_range_data(
        "vllm:num_requests_running", label_config={"model_name": "llama"},
        start_time=datetime.datetime.fromtimestamp(base, tz=datetime.timezone.utc),
        end_time=datetime.datetime.fromtimestamp(T, tz=datetime.timezone.utc))
    check(len(data) == 1, f"range data {len(data)} series")
    vals = data[0]["values"]
    # (base, T]: every sample but the first
    check(len(vals) == 239, f"{len(vals)} raw samples")
    check(all(float(v) == ((t - base) // 15) % 7 for t, v in vals), "raw sample values")

    # aggregation over a range query (needs numpy on the client side: only where installed)
    try:
        import numpy  # noqa: F401
    except ImportError:
        continue
    agg = prom.get_metric_aggregation(q, operations=["max", "min", "sum"],
                                      start_time=start, end_time=end, step="60")
    want = [((base + 600 + 60 * k - base) // 15 % 7) * 3 for k in range(11)]
    check(agg["max"] == max(want) and agg["min"] == min(want) and agg["sum"] == sum(want), f"agg {agg}")

print(f"prometheus-api-client: {checks} checks passed")
"#;

/// OpenMetrics text: two models' token counters and running gauges every 15 s for an hour
/// from `base` (seconds).
fn history(base: i64) -> String {
    let mut s = String::new();
    s.push_str("# TYPE vllm:generation_tokens counter\n");
    for (model, inst, k) in [
        ("llama", "10.0.0.5:8000", 100),
        ("qwen", "10.0.0.7:8000", 250),
    ] {
        for i in 0..240i64 {
            s.push_str(&format!(
                "vllm:generation_tokens_total{{instance=\"{inst}\",job=\"vllm\",model_name=\"{model}\"}} {} {}\n",
                k * i,
                base + 15 * i
            ));
        }
    }
    s.push_str("# TYPE vllm:num_requests_running gauge\n");
    for (model, inst, k) in [("llama", "10.0.0.5:8000", 1), ("qwen", "10.0.0.7:8000", 2)] {
        for i in 0..240i64 {
            s.push_str(&format!(
                "vllm:num_requests_running{{instance=\"{inst}\",job=\"vllm\",model_name=\"{model}\"}} {} {}\n",
                (i % 7) * k,
                base + 15 * i
            ));
        }
    }
    s.push_str("# EOF\n");
    s
}

#[test]
fn prometheus_api_client_gets_the_apis_answers() {
    let has_client = Command::new("python3")
        .args(["-c", "import prometheus_api_client"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !has_client {
        let msg = "python3 with PyPI's prometheus-api-client is needed \
                   (pip install prometheus-api-client)";
        common::conformance::skip("python_client", msg);
        return;
    }

    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // an hour ending a minute ago, on whole minutes (inside any retention)
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let base = now / 60 * 60 - 3660;
    let om = dir.path().join("history.om");
    std::fs::write(&om, history(base)).unwrap();
    inferdb_import(&om, &data);

    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let server = Proc::spawn(
        "inferdb serve",
        &mut serve_command(&data, port),
        dir.path().join("serve.log"),
    );

    let script = dir.path().join("client.py");
    std::fs::File::create(&script)
        .and_then(|mut f| f.write_all(SCRIPT.as_bytes()))
        .unwrap();
    let out = Command::new("python3")
        .arg(&script)
        .arg(format!("http://{addr}"))
        .arg(base.to_string())
        .output()
        .unwrap();
    drop(server);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "python client failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(stdout.contains("checks passed"), "{stdout}");
    eprintln!("{stdout}");
}
