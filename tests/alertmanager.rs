//! Alerts to a real Alertmanager (Debian's `prometheus-alertmanager` 0.25), started by the test
//! without gossip (`--cluster.listen-address=`), on a temporary `--storage.path` and a free port,
//! routing everything to a webhook the test serves (`group_wait: 1s`, short intervals,
//! `send_resolved: true`): a firing alert arrives with its labels (external labels attached) and
//! annotations, resolves, and after the Alertmanager is killed and started again on the same
//! port with fresh storage, the resent alert arrives again. `/api/v1/alertmanagers` of `serve`
//! is compared with Prometheus 2.42's for the same `alerting` section. End to end, `inferdb
//! serve` with a rule file over a page the test serves: the alert fires after its `for`, arrives
//! with its templated labels and annotations, resolves when the condition clears, and is resent
//! to a restarted Alertmanager.

mod common;

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::routing::post;
use inferdb::notifier::{generator_url, Alert, Notifier, NotifierOptions};
use inferdb_storage::labels::Labels;
use parking_lot::Mutex;
use serde_json::Value;

use common::{free_port, Client, Proc};

/// The webhook receiver: every notification Alertmanager posts.
#[derive(Clone, Default)]
struct Hook {
    got: Arc<Mutex<Vec<Value>>>,
    /// The KV-cache usage the `/metrics` page shows (`f64` bits).
    usage: Arc<AtomicU64>,
}

async fn page(State(h): State<Hook>) -> String {
    let v = f64::from_bits(h.usage.load(Ordering::Relaxed));
    format!("# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc {v}\n")
}

async fn receive(State(h): State<Hook>, body: String) -> &'static str {
    if let Ok(v) = serde_json::from_str(&body) {
        h.got.lock().push(v);
    }
    "ok"
}

impl Hook {
    /// Serves the webhook on a free port of 127.0.0.1 on `rt`; returns its port.
    fn start(&self, rt: &tokio::runtime::Runtime) -> u16 {
        let l = rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let port = l.local_addr().unwrap().port();
        let app = axum::Router::new()
            .route("/hook", post(receive))
            .route("/metrics", axum::routing::get(page))
            .with_state(self.clone());
        rt.spawn(async move { axum::serve(l, app).await });
        port
    }

    /// Waits (bounded) for a notification with `status` holding an alert of `alertname`;
    /// returns that alert.
    fn wait_alert(&self, status: &str, alertname: &str, within: Duration) -> Value {
        let deadline = Instant::now() + within;
        loop {
            for n in self.got.lock().iter() {
                for a in n["alerts"].as_array().into_iter().flatten() {
                    if a["status"] == status && a["labels"]["alertname"] == alertname {
                        return a.clone();
                    }
                }
            }
            assert!(
                Instant::now() < deadline,
                "no {status} {alertname} within {within:?}; got {:?}",
                self.got.lock()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Starts Alertmanager on 127.0.0.1:`port` with fresh storage under `work/<tag>`, routing
/// to the webhook on `hook_port`; waits until it is ready.
fn start_alertmanager(work: &Path, tag: &str, port: u16, hook_port: u16, c: &Client) -> Proc {
    let dir = work.join(tag);
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("alertmanager.yml");
    std::fs::write(
        &cfg,
        format!(
            "route:
  receiver: hook
  group_by: [alertname]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: hook
    webhook_configs:
      - url: http://127.0.0.1:{hook_port}/hook
        send_resolved: true
"
        ),
    )
    .unwrap();
    let mut p = Proc::spawn(
        "alertmanager",
        Command::new("prometheus-alertmanager")
            .arg(format!("--config.file={}", cfg.display()))
            .arg(format!("--storage.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--cluster.listen-address="),
        dir.join("alertmanager.log"),
    );
    p.wait_ready(&format!("http://127.0.0.1:{port}"), c);
    p
}

fn kv_alert(starts_at: i64, ends_at: i64) -> Alert {
    Alert {
        labels: Labels::from_pairs([
            ("alertname", "KvCacheFull"),
            ("instance", "vllm-0:8000"),
            ("severity", "page"),
        ]),
        annotations: Labels::from_pairs([("summary", "KV cache of vllm-0:8000 at 95%")]),
        starts_at,
        ends_at,
        generator_url: generator_url("http://inferdb.example:9090", "kv_cache_usage > 0.9"),
    }
}

#[test]
fn alerts_reach_a_real_alertmanager_resolve_and_survive_its_restart() {
    if !common::require_tools(&["prometheus-alertmanager"], "alertmanager") {
        return;
    }
    let c = Client::new();
    let work = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let hook = Hook::default();
    let hook_port = hook.start(&rt);
    let am_port = free_port();
    let am = start_alertmanager(work.path(), "am1", am_port, hook_port, &c);

    let notifier = rt.block_on(async { Notifier::new(NotifierOptions::default()) });
    let cfg = inferdb::config::Config::parse(&format!(
        "global: {{external_labels: {{cluster: eu-1}}}}
alerting:
  alertmanagers:
    - static_configs: [{{targets: ['127.0.0.1:{am_port}']}}]
      timeout: 2s
"
    ))
    .unwrap();
    rt.block_on(async { notifier.apply_config(&cfg) }).unwrap();
    let now = inferdb::model::time::now_ms;

    // firing: endsAt four resend delays ahead, as the rule manager sets it
    let started = now();
    notifier.send(vec![kv_alert(started, started + 240_000)]);
    let a = hook.wait_alert("firing", "KvCacheFull", Duration::from_secs(20));
    assert_eq!(
        a["labels"],
        serde_json::json!({"alertname": "KvCacheFull", "cluster": "eu-1",
            "instance": "vllm-0:8000", "severity": "page"})
    );
    assert_eq!(
        a["annotations"]["summary"],
        "KV cache of vllm-0:8000 at 95%"
    );
    assert_eq!(
        a["generatorURL"],
        "http://inferdb.example:9090/graph?g0.expr=kv_cache_usage+%3E+0.9&g0.tab=1"
    );
    let starts_at = a["startsAt"].as_str().unwrap();
    assert_eq!(
        chrono::DateTime::parse_from_rfc3339(starts_at)
            .unwrap()
            .timestamp_millis(),
        started
    );

    // resolved: endsAt is the resolve time
    let resolved = now();
    notifier.send(vec![kv_alert(started, resolved)]);
    let r = hook.wait_alert("resolved", "KvCacheFull", Duration::from_secs(20));
    assert_eq!(
        chrono::DateTime::parse_from_rfc3339(r["endsAt"].as_str().unwrap())
            .unwrap()
            .timestamp_millis(),
        resolved
    );

    // fires again; Alertmanager restarts with empty storage; the resend brings it back
    hook.got.lock().clear();
    let again = now();
    notifier.send(vec![kv_alert(again, again + 240_000)]);
    hook.wait_alert("firing", "KvCacheFull", Duration::from_secs(20));
    drop(am); // SIGKILL
    hook.got.lock().clear();
    let am2 = start_alertmanager(work.path(), "am2", am_port, hook_port, &c);
    let (_, alerts) = c.get(&format!("http://127.0.0.1:{am_port}/api/v2/alerts"));
    assert_eq!(alerts.trim(), "[]", "fresh storage holds no alert");
    notifier.send(vec![kv_alert(again, now() + 240_000)]);
    let back = hook.wait_alert("firing", "KvCacheFull", Duration::from_secs(20));
    assert_eq!(back["labels"]["cluster"], "eu-1");
    let (_, alerts) = c.get(&format!("http://127.0.0.1:{am_port}/api/v2/alerts"));
    assert!(alerts.contains("KvCacheFull"), "{alerts}");

    let sent = inferdb::metrics::render();
    let url = format!("http://127.0.0.1:{am_port}/api/v2/alerts");
    assert!(
        sent.contains(&format!(
            "prometheus_notifications_sent_total{{alertmanager=\"{url}\"}} 4"
        )),
        "{sent}"
    );
    rt.block_on(notifier.stop());
    drop(am2);
}

#[test]
fn api_alertmanagers_matches_prometheus() {
    let with_prometheus = common::require_prometheus("api_alertmanagers");
    let c = Client::new();
    let work = tempfile::tempdir().unwrap();
    let sd = work.path().join("am.json");
    std::fs::write(
        &sd,
        r#"[{"targets": ["am-file:9093"], "labels": {"zone": "b"}}]"#,
    )
    .unwrap();
    let yml = format!(
        "global: {{scrape_interval: 15s}}
alerting:
  alertmanagers:
    - static_configs: [{{targets: ['am-a:9093', 'am-b:9093'], labels: {{zone: a}}}}]
      path_prefix: /alertmanager
      relabel_configs:
        - {{source_labels: [__address__], regex: 'am-b.*', action: drop}}
    - scheme: https
      file_sd_configs: [{{files: ['{}']}}]
scrape_configs: []
",
        sd.display()
    );
    let cfg = work.path().join("inferdb.yml");
    std::fs::write(&cfg, &yml).unwrap();
    let (inferdb, base) = common::start_inferdb_with(
        work.path(),
        &work.path().join("data"),
        &["--config.file", cfg.to_str().unwrap()],
        &c,
    );
    let (st, ours) = c.get(&format!("{base}/api/v1/alertmanagers"));
    assert_eq!(st, 200, "{ours}");
    let ours: Value = serde_json::from_str(&ours).unwrap();
    assert_eq!(
        ours["data"],
        serde_json::json!({
            "activeAlertmanagers": [
                {"url": "http://am-a:9093/alertmanager/api/v2/alerts"},
                {"url": "https://am-file:9093/api/v2/alerts"}
            ],
            "droppedAlertmanagers": [{"url": "http://am-b:9093/alertmanager/api/v2/alerts"}]
        })
    );
    inferdb.terminate();
    if !with_prometheus {
        return;
    }
    let pdir = work.path().join("prom");
    std::fs::create_dir_all(&pdir).unwrap();
    let (prom, pbase) = common::start_prometheus_with(&pdir, &yml, &pdir.join("data"), &[], &c);
    // Prometheus applies discovery updates in batches (every 5 s): wait for both entries
    let deadline = Instant::now() + Duration::from_secs(30);
    let theirs = loop {
        let (_, t) = c.get(&format!("{pbase}/api/v1/alertmanagers"));
        let v: Value = serde_json::from_str(&t).unwrap();
        let n = |k: &str| v["data"][k].as_array().map_or(0, Vec::len);
        if n("activeAlertmanagers") == 2 && n("droppedAlertmanagers") == 1 {
            break v;
        }
        assert!(Instant::now() < deadline, "Prometheus: {t}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let sorted = |v: &Value, k: &str| {
        let mut urls: Vec<String> = v["data"][k]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["url"].as_str().unwrap().to_string())
            .collect();
        urls.sort();
        urls
    };
    for k in ["activeAlertmanagers", "droppedAlertmanagers"] {
        assert_eq!(sorted(&ours, k), sorted(&theirs, k), "{k}");
    }
    prom.terminate();
}

#[test]
fn serve_fires_resolves_and_resends_through_a_real_alertmanager() {
    if !common::require_tools(&["prometheus-alertmanager"], "alertmanager") {
        return;
    }
    let c = Client::new();
    let work = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let hook = Hook::default();
    hook.usage.store(0.95f64.to_bits(), Ordering::Relaxed);
    let hook_port = hook.start(&rt);
    let am_port = free_port();
    let am = start_alertmanager(work.path(), "am1", am_port, hook_port, &c);
    std::fs::write(
        work.path().join("rules.yml"),
        r#"groups:
  - name: kv
    interval: 1s
    rules:
      - alert: KvCacheFull
        expr: vllm:gpu_cache_usage_perc > 0.9
        for: 2s
        labels:
          severity: page
          team: '{{ $labels.job }}-oncall'
        annotations:
          summary: 'KV cache of {{ $labels.instance }} at {{ $value | humanizePercentage }}'
"#,
    )
    .unwrap();
    let cfg = work.path().join("inferdb.yml");
    std::fs::write(
        &cfg,
        format!(
            "global: {{scrape_interval: 1s, evaluation_interval: 1s, external_labels: {{cluster: eu-1}}}}
rule_files: [rules.yml]
alerting:
  alertmanagers: [{{static_configs: [{{targets: ['127.0.0.1:{am_port}']}}], timeout: 2s}}]
scrape_configs:
  - job_name: vllm
    static_configs: [{{targets: ['127.0.0.1:{hook_port}']}}]
"
        ),
    )
    .unwrap();
    let t0 = inferdb::model::time::now_ms();
    let (inferdb, base) = common::start_inferdb_with(
        work.path(),
        &work.path().join("data"),
        &[
            "--config.file",
            cfg.to_str().unwrap(),
            "--rules.alert.resend-delay",
            "1s",
            "--web.external-url",
            "http://inferdb.example:9090",
        ],
        &c,
    );
    let ms = |v: &Value, k: &str| {
        chrono::DateTime::parse_from_rfc3339(v[k].as_str().unwrap())
            .unwrap()
            .timestamp_millis()
    };
    let a = hook.wait_alert("firing", "KvCacheFull", Duration::from_secs(30));
    let instance = format!("127.0.0.1:{hook_port}");
    assert_eq!(
        a["labels"],
        serde_json::json!({"alertname": "KvCacheFull", "cluster": "eu-1", "instance": instance,
            "job": "vllm", "severity": "page", "team": "vllm-oncall"})
    );
    assert_eq!(
        a["annotations"]["summary"],
        format!("KV cache of {instance} at 95%")
    );
    assert!(
        a["generatorURL"].as_str().unwrap().starts_with(
            "http://inferdb.example:9090/graph?g0.expr=vllm%3Agpu_cache_usage_perc+%3E+0.9"
        ),
        "{a}"
    );
    // pending for 2 s after the first scrape, then firing
    assert!(ms(&a, "startsAt") >= t0 + 2000, "{a} vs start {t0}");

    // the condition clears: resolved
    hook.usage.store(0.1f64.to_bits(), Ordering::Relaxed);
    let r = hook.wait_alert("resolved", "KvCacheFull", Duration::from_secs(30));
    assert!(ms(&r, "endsAt") > ms(&a, "startsAt"), "{r}");

    // fires again; Alertmanager restarts with empty storage; the resend brings it back
    hook.got.lock().clear();
    hook.usage.store(0.97f64.to_bits(), Ordering::Relaxed);
    hook.wait_alert("firing", "KvCacheFull", Duration::from_secs(30));
    drop(am); // SIGKILL
    hook.got.lock().clear();
    let am2 = start_alertmanager(work.path(), "am2", am_port, hook_port, &c);
    let back = hook.wait_alert("firing", "KvCacheFull", Duration::from_secs(30));
    assert_eq!(
        back["annotations"]["summary"],
        format!("KV cache of {instance} at 97%")
    );
    let (_, am_list) = c.get(&format!("{base}/api/v1/alertmanagers"));
    assert!(
        am_list.contains(&format!("http://127.0.0.1:{am_port}/api/v2/alerts")),
        "{am_list}"
    );
    assert!(
        c.metric(&base, "prometheus_notifications_sent_total")
            .unwrap()
            >= 3.0
    );
    inferdb.terminate();
    drop(am2);
}
