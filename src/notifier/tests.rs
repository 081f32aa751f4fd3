//! The notifier against a fake Alertmanager: an axum server on a free port that records each
//! `POST` (path, headers, JSON body) and answers with a status the test sets, optionally
//! holding requests until the test lets them go.

use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::routing::post;
use inferdb_storage::labels::Labels;
use parking_lot::Mutex;
use tokio::sync::Semaphore;

use super::*;

#[derive(Debug, Clone)]
struct Request {
    path: String,
    auth: Option<String>,
    content_type: Option<String>,
    body: serde_json::Value,
}

struct Hook {
    addr: String,
    got: Arc<Mutex<Vec<Request>>>,
    status: Arc<AtomicU16>,
    /// Requests wait for a permit while `held`.
    gate: Arc<Semaphore>,
}

#[derive(Clone)]
struct HookState {
    got: Arc<Mutex<Vec<Request>>>,
    status: Arc<AtomicU16>,
    gate: Arc<Semaphore>,
}

async fn record(
    State(s): State<HookState>,
    uri: Uri,
    headers: HeaderMap,
    body: String,
) -> StatusCode {
    let _permit = s.gate.acquire().await;
    let h = |n: &str| {
        headers
            .get(n)
            .and_then(|v| v.to_str().ok())
            .map(String::from)
    };
    s.got.lock().push(Request {
        path: uri.path().to_string(),
        auth: h("authorization"),
        content_type: h("content-type"),
        body: serde_json::from_str(&body).unwrap_or(serde_json::Value::Null),
    });
    StatusCode::from_u16(s.status.load(Ordering::Relaxed)).unwrap()
}

impl Hook {
    async fn start() -> Hook {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let st = HookState {
            got: Arc::default(),
            status: Arc::new(AtomicU16::new(200)),
            gate: Arc::new(Semaphore::new(Semaphore::MAX_PERMITS)),
        };
        let app = axum::Router::new()
            .route("/{*path}", post(record))
            .with_state(st.clone());
        tokio::spawn(async move { axum::serve(l, app).await });
        Hook {
            addr,
            got: st.got,
            status: st.status,
            gate: st.gate,
        }
    }

    /// Holds every request until [`Hook::release`].
    async fn hold(&self) {
        let n = self.gate.available_permits() as u32;
        self.gate.acquire_many(n).await.unwrap().forget();
    }

    fn release(&self) {
        self.gate
            .add_permits(Semaphore::MAX_PERMITS - self.gate.available_permits());
    }

    /// Waits (bounded) until `n` requests arrived; returns them.
    async fn wait_requests(&self, n: usize) -> Vec<Request> {
        for _ in 0..500 {
            if self.got.lock().len() >= n {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let got = self.got.lock().clone();
        assert!(got.len() >= n, "{} requests, expected {n}", got.len());
        got
    }
}

/// Waits (bounded) until the metrics page holds `line`; returns the page.
async fn wait_metric(line: &str) -> String {
    let mut text = String::new();
    for _ in 0..500 {
        text = crate::metrics::render();
        if text.contains(line) {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{line} not in\n{text}");
}

fn alert(name: &str, i: usize) -> Alert {
    Alert {
        labels: Labels::from_pairs([
            ("alertname", name.to_string()),
            ("i", i.to_string()),
            ("cluster", "own".to_string()),
        ]),
        annotations: Labels::from_pairs([("summary", format!("alert {i}"))]),
        starts_at: 1_700_000_000_000,
        ends_at: 1_700_000_240_000,
        generator_url: generator_url("http://inferdb:9090/", "up == 0"),
    }
}

fn config(yaml: &str) -> Config {
    Config::parse(yaml).unwrap()
}

/// The `i` label of every alert of the requests, in order of arrival.
fn indices(reqs: &[Request]) -> Vec<usize> {
    reqs.iter()
        .flat_map(|r| r.body.as_array().unwrap().iter())
        .map(|a| a["labels"]["i"].as_str().unwrap().parse().unwrap())
        .collect()
}

#[tokio::test]
async fn batches_of_256_reach_every_alertmanager_with_external_labels() {
    let (h1, h2) = (Hook::start().await, Hook::start().await);
    let n = Notifier::new(NotifierOptions::default());
    n.apply_config(&config(&format!(
        r#"
global: {{external_labels: {{cluster: ext, region: eu}}}}
alerting:
  alert_relabel_configs: [{{source_labels: [alertname], regex: Noise, action: drop}}]
  alertmanagers:
    - static_configs: [{{targets: ['{}']}}]
      path_prefix: /am/
    - static_configs: [{{targets: ['{}']}}]
"#,
        h1.addr, h2.addr
    )))
    .unwrap();
    let (active, dropped) = n.alertmanagers();
    assert_eq!(
        active,
        [
            format!("http://{}/am/api/v2/alerts", h1.addr),
            format!("http://{}/api/v2/alerts", h2.addr)
        ]
    );
    assert!(dropped.is_empty());
    h1.hold().await;
    n.send(vec![alert("Noise", 9999)]);
    n.send((0..600).map(|i| alert("KvCacheFull", i)).collect());
    h1.release();
    for h in [&h1, &h2] {
        let reqs = h.wait_requests(3).await;
        let sizes: Vec<usize> = reqs
            .iter()
            .map(|r| r.body.as_array().unwrap().len())
            .collect();
        assert_eq!(sizes, [256, 256, 88], "{}", h.addr);
        assert_eq!(indices(&reqs), (0..600).collect::<Vec<_>>());
        assert_eq!(reqs[0].content_type.as_deref(), Some("application/json"));
    }
    let r = h1.got.lock()[0].clone();
    assert_eq!(r.path, "/am/api/v2/alerts");
    assert_eq!(
        r.body[0],
        serde_json::json!({
            "annotations": {"summary": "alert 0"},
            "endsAt": "2023-11-14T22:17:20.000Z",
            "startsAt": "2023-11-14T22:13:20.000Z",
            "generatorURL": "http://inferdb:9090/graph?g0.expr=up+%3D%3D+0&g0.tab=1",
            "labels": {"alertname": "KvCacheFull", "cluster": "own", "i": "0", "region": "eu"},
        })
    );
    wait_metric(&format!(
        "prometheus_notifications_sent_total{{alertmanager=\"http://{}/api/v2/alerts\"}} 600",
        h2.addr
    ))
    .await;
    n.stop().await;
}

#[tokio::test]
async fn failed_sends_are_counted_as_errors_and_drops_and_credentials_are_sent() {
    let (bad, good) = (Hook::start().await, Hook::start().await);
    bad.status.store(500, Ordering::Relaxed);
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "s3cret\n").unwrap();
    let n = Notifier::new(NotifierOptions::default());
    n.apply_config(&config(&format!(
        r#"
alerting:
  alertmanagers:
    - static_configs: [{{targets: ['{}']}}]
      basic_auth: {{username: am, password: pw}}
    - static_configs: [{{targets: ['{}']}}]
      authorization: {{credentials_file: '{}'}}
"#,
        bad.addr,
        good.addr,
        token.display()
    )))
    .unwrap();
    let dropped = || n.inner.stats.dropped.get();
    let before = dropped();
    n.send((0..3).map(|i| alert("A", i)).collect());
    bad.wait_requests(1).await;
    good.wait_requests(1).await;
    // one set accepted nowhere: the batch counts as dropped
    for _ in 0..200 {
        if dropped() >= before + 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(dropped() >= before + 3);
    assert_eq!(bad.got.lock()[0].auth.as_deref(), Some("Basic YW06cHc="));
    assert_eq!(good.got.lock()[0].auth.as_deref(), Some("Bearer s3cret"));
    let url = format!("http://{}/api/v2/alerts", bad.addr);
    // the latency summary is written by the collector of the newest notifier of the process,
    // which may be another test's: read this notifier's own
    let latency =
        format!("prometheus_notifications_latency_seconds_count{{alertmanager=\"{url}\"}} 1");
    let mut own = String::new();
    for _ in 0..500 {
        own.clear();
        n.inner.stats.write_latency(&mut own);
        if own.contains(&latency) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(own.contains(&latency), "{latency} not in\n{own}");
    let text = wait_metric(&format!(
        "prometheus_notifications_sent_total{{alertmanager=\"{url}\"}} 3"
    ))
    .await;
    let line = format!("prometheus_notifications_errors_total{{alertmanager=\"{url}\"}} 3");
    assert!(text.contains(&line), "{line} not in\n{text}");
    let good_url = format!("http://{}/api/v2/alerts", good.addr);
    assert!(text.contains(&format!(
        "prometheus_notifications_errors_total{{alertmanager=\"{good_url}\"}} 0"
    )));
    n.stop().await;
}

#[tokio::test]
async fn a_full_queue_drops_the_oldest_alerts() {
    let h = Hook::start().await;
    let n = Notifier::new(NotifierOptions {
        queue_capacity: 5,
        ..Default::default()
    });
    n.apply_config(&config(&format!(
        "alerting: {{alertmanagers: [{{static_configs: [{{targets: ['{}']}}]}}]}}",
        h.addr
    )))
    .unwrap();
    let dropped = || n.inner.stats.dropped.get();
    let before = dropped();
    // a batch larger than the queue keeps its newest alerts
    h.hold().await;
    n.send((100..108).map(|i| alert("A", i)).collect());
    // the first batch is in flight (held); the queue fills behind it
    for _ in 0..500 {
        if n.queue_len() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(n.queue_len(), 0);
    n.send((0..4).map(|i| alert("A", i)).collect());
    n.send((4..7).map(|i| alert("A", i)).collect());
    assert_eq!(n.queue_len(), 5);
    assert!(dropped() >= before + 3 + 2);
    h.release();
    let reqs = h.wait_requests(2).await;
    assert_eq!(indices(&reqs), [103, 104, 105, 106, 107, 2, 3, 4, 5, 6]);
    n.stop().await;
}

#[tokio::test]
async fn reload_keeps_the_queue_and_follows_the_new_alertmanagers() {
    let (old, new) = (Hook::start().await, Hook::start().await);
    let n = Notifier::new(NotifierOptions::default());
    let cfg = |addr: &str, ext: &str| {
        config(&format!(
            "global: {{external_labels: {{site: {ext}}}}}\nalerting: {{alertmanagers: [{{static_configs: [{{targets: ['{addr}']}}]}}]}}"
        ))
    };
    n.apply_config(&cfg(&old.addr, "a")).unwrap();
    old.hold().await;
    n.send(vec![alert("A", 0)]);
    // alert 0 is in flight to the old Alertmanager; 1 and 2 wait in the queue
    for _ in 0..500 {
        if n.queue_len() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    n.send(vec![alert("A", 1), alert("A", 2)]);
    n.apply_config(&cfg(&new.addr, "b")).unwrap();
    assert_eq!(
        n.alertmanagers().0,
        [format!("http://{}/api/v2/alerts", new.addr)]
    );
    old.release();
    let reqs = new.wait_requests(1).await;
    assert_eq!(indices(&reqs), [1, 2]);
    // labels were attached when the alerts were queued
    assert_eq!(reqs[0].body[0]["labels"]["site"], "a");
    assert_eq!(indices(&old.wait_requests(1).await), [0]);
    n.send(vec![alert("A", 3)]);
    let reqs = new.wait_requests(2).await;
    assert_eq!(reqs[1].body[0]["labels"]["site"], "b");
    n.stop().await;
}

#[tokio::test]
async fn file_discovery_relabelling_and_per_entry_alert_relabelling() {
    let (h1, h2) = (Hook::start().await, Hook::start().await);
    let dir = tempfile::tempdir().unwrap();
    let sd = dir.path().join("am.yml");
    std::fs::write(
        &sd,
        format!("- targets: ['{}']\n  labels: {{team: infra}}\n", h1.addr),
    )
    .unwrap();
    let n = Notifier::new(NotifierOptions::default());
    n.apply_config(&config(&format!(
        r#"
alerting:
  alertmanagers:
    - file_sd_configs: [{{files: ['{}'], refresh_interval: 100ms}}]
      relabel_configs: [{{source_labels: [team], regex: drop, action: drop}}]
      alert_relabel_configs: [{{source_labels: [severity], regex: page, action: keep}}]
"#,
        sd.display()
    )))
    .unwrap();
    let url = |a: &str| format!("http://{a}/api/v2/alerts");
    assert_eq!(n.alertmanagers(), (vec![url(&h1.addr)], vec![]));
    let page = |i: usize| Alert {
        labels: Labels::from_pairs([
            ("alertname", "A".to_string()),
            ("i", i.to_string()),
            ("severity", "page".into()),
        ]),
        ..alert("A", i)
    };
    n.send(vec![alert("A", 0), page(1)]);
    assert_eq!(indices(&h1.wait_requests(1).await), [1]);
    let series = |name: &str, a: &str| format!("{name}{{alertmanager=\"{}\"", url(a));
    wait_metric(&format!(
        "{}}} 1\n",
        series("prometheus_notifications_sent_total", &h1.addr)
    ))
    .await;
    // the file changes: one Alertmanager kept, one dropped by relabelling
    std::fs::write(
        &sd,
        format!(
            "- targets: ['{}']\n- targets: ['{}']\n  labels: {{team: drop}}\n",
            h2.addr, h1.addr
        ),
    )
    .unwrap();
    for _ in 0..300 {
        if n.alertmanagers().0 == [url(&h2.addr)] {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        n.alertmanagers(),
        (vec![url(&h2.addr)], vec![url(&h1.addr)])
    );
    n.send(vec![page(2)]);
    assert_eq!(indices(&h2.wait_requests(1).await), [2]);
    assert_eq!(h1.got.lock().len(), 1);
    // the series of the Alertmanager no longer discovered are gone, as in Prometheus' sync
    let text = wait_metric(&format!(
        "{}}} 1\n",
        series("prometheus_notifications_sent_total", &h2.addr)
    ))
    .await;
    for name in [
        "prometheus_notifications_sent_total",
        "prometheus_notifications_errors_total",
        "prometheus_notifications_latency_seconds",
    ] {
        assert!(
            !text.contains(&series(name, &h1.addr)),
            "{name} of h1 in\n{text}"
        );
    }
    assert!(text.contains(&series("prometheus_notifications_errors_total", &h2.addr)));
    n.stop().await;
}

#[test]
fn generator_url_is_prometheus_table_link() {
    assert_eq!(
        generator_url("https://mon.example/prom", "rate(x{a=\"b\"}[5m]) > 0.5 * ~1"),
        "https://mon.example/prom/graph?g0.expr=rate%28x%7Ba%3D%22b%22%7D%5B5m%5D%29+%3E+0.5+%2A+~1&g0.tab=1"
    );
}
