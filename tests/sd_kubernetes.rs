//! Kubernetes service discovery against a fake API server: `inferdb serve` with the
//! relabelling of a typical vLLM deployment (keep pods annotated `prometheus.io/scrape`,
//! in phase Running, the port named `metrics`; `namespace`/`pod`/`model` labels) finds the
//! pods the server lists, follows them through the watch stream (added, phase changed,
//! deleted), and loses nothing and duplicates nothing when the server closes the stream or
//! answers `410 Gone`.
//!
//! The fake server answers `/version`, paged lists (`limit`/`continue`, `resourceVersion`)
//! and watches (`resourceVersion`, `allowWatchBookmarks`, `timeoutSeconds`) of pods from
//! JSON shaped like the real API's, as JSON whatever the `Accept` header.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::Command;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{start_inferdb_with, Client};
use serde_json::{json, Value};

#[derive(Default)]
struct Cluster {
    rv: u64,
    /// Objects of every kind by `plural/namespace/name`.
    objects: BTreeMap<String, Value>,
    /// Events by resource version with their kind (plural) and namespace, for watches that
    /// start behind.
    history: Vec<(u64, String, String, String)>,
    /// The next watch gets `410 Gone` (its version was compacted away).
    gone_next: bool,
    /// Changes are not sent to open watches nor kept in the history.
    quiet: bool,
    /// Open watches: kind (plural), namespace (all when none), stream.
    watchers: Vec<(String, Option<String>, Sender<String>)>,
    /// Requests seen, for the test's assertions.
    requests: Vec<String>,
    /// The bearer token requests must carry, if any.
    token: Option<&'static str>,
}

#[derive(Clone, Default)]
struct FakeApi(Arc<Mutex<Cluster>>);

fn pod(name: &str, ip: &str, phase: &str, model: &str) -> Value {
    json!({
        "kind": "Pod", "apiVersion": "v1",
        "metadata": {
            "name": name, "namespace": "llm", "uid": format!("uid-{name}"),
            "labels": {"app": "vllm", "model": model},
            "annotations": {"prometheus.io/scrape": "true"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "vllm-7d9f", "uid": "rs1", "controller": true}]
        },
        "spec": {
            "nodeName": "gpu-node-1",
            "containers": [{
                "name": "vllm", "image": "vllm/vllm-openai:v0.6.3",
                "ports": [
                    {"name": "http", "containerPort": 8000, "protocol": "TCP"},
                    {"name": "metrics", "containerPort": 8001, "protocol": "TCP"}
                ]
            }, {"name": "sidecar", "image": "envoy:1"}]
        },
        "status": {
            "phase": phase, "podIP": ip, "hostIP": "10.0.0.1",
            "conditions": [{"type": "Ready", "status": if phase == "Running" { "True" } else { "False" }}],
            "containerStatuses": [{"name": "vllm", "containerID": format!("containerd://{name}")}]
        }
    })
}

/// The kinds the fake API serves: (kind, plural, API group path, namespaced).
const KINDS: [(&str, &str, &str, bool); 5] = [
    ("Pod", "pods", "/api/v1/", true),
    ("Service", "services", "/api/v1/", true),
    ("Endpoints", "endpoints", "/api/v1/", true),
    (
        "EndpointSlice",
        "endpointslices",
        "/apis/discovery.k8s.io/v1/",
        true,
    ),
    ("Node", "nodes", "/api/v1/", false),
];

/// The kind (plural) and namespace of an API path (`/api/v1/namespaces/ns/pods`,
/// `/apis/discovery.k8s.io/v1/endpointslices`, `/api/v1/nodes`).
fn route(path: &str) -> Option<(&'static str, &'static str, Option<String>)> {
    KINDS.iter().find_map(|(kind, plural, group, namespaced)| {
        let rest = path.strip_prefix(group)?;
        if rest == *plural {
            return Some((*kind, *plural, None));
        }
        let (ns, p) = rest.strip_prefix("namespaces/")?.split_once('/')?;
        (*namespaced && p == *plural).then(|| (*kind, *plural, Some(ns.to_string())))
    })
}

fn object_key(obj: &Value) -> (String, String) {
    let kind = obj["kind"].as_str().unwrap_or("Pod");
    let plural = KINDS.iter().find(|k| k.0 == kind).unwrap().1;
    let ns = obj["metadata"]["namespace"].as_str().unwrap_or_default();
    let name = obj["metadata"]["name"].as_str().unwrap();
    (format!("{plural}/{ns}/{name}"), ns.to_string())
}

impl FakeApi {
    fn event(&self, kind: &str, mut obj: Value) {
        let mut c = self.0.lock().unwrap();
        c.rv += 1;
        let rv = c.rv;
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        let (key, ns) = object_key(&obj);
        let plural = key.split('/').next().unwrap().to_string();
        if kind == "DELETED" {
            c.objects.remove(&key);
        } else {
            c.objects.insert(key, obj.clone());
        }
        let line = json!({"type": kind, "object": obj}).to_string();
        if c.quiet {
            return;
        }
        c.history
            .push((rv, plural.clone(), ns.clone(), line.clone()));
        c.watchers.retain(|(p, n, w)| {
            if *p != plural || n.as_ref().is_some_and(|n| *n != ns) {
                return true;
            }
            w.send(line.clone()).is_ok()
        });
    }

    fn upsert(&self, obj: Value) {
        let key = object_key(&obj).0;
        let kind = if self.0.lock().unwrap().objects.contains_key(&key) {
            "MODIFIED"
        } else {
            "ADDED"
        };
        self.event(kind, obj);
    }

    /// Sends a `BOOKMARK` at the current resource version to the open pod watches (all
    /// of which asked for bookmarks); returns that version.
    fn bookmark(&self) -> u64 {
        let mut c = self.0.lock().unwrap();
        let rv = c.rv;
        let line = json!({"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1",
            "metadata": {"resourceVersion": rv.to_string()}}})
        .to_string();
        c.watchers
            .retain(|(p, _, w)| p != "pods" || w.send(line.clone()).is_ok());
        rv
    }

    /// Ends every open watch stream.
    fn close_watches(&self) {
        self.0.lock().unwrap().watchers.clear();
    }

    /// Makes `changes` that no watch sees, forgets the history and ends the streams: the
    /// next watch gets `410 Gone` and only a new list shows the changes.
    fn expire(&self, changes: impl FnOnce(&FakeApi)) {
        self.0.lock().unwrap().quiet = true;
        changes(self);
        let mut c = self.0.lock().unwrap();
        c.quiet = false;
        c.gone_next = true;
        c.history.clear();
        c.watchers.clear();
    }

    fn serve(&self) -> u16 {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let me = self.clone();
        std::thread::spawn(move || {
            for s in l.incoming().flatten() {
                let me = me.clone();
                std::thread::spawn(move || me.handle(s));
            }
        });
        port
    }

    /// [`FakeApi::serve`] over TLS with `cert`/`key`, answering only requests that carry
    /// `Authorization: Bearer TOKEN`.
    fn serve_tls(&self, cert: &Path, key: &Path, token: &'static str) -> u16 {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let certs: Vec<CertificateDer> = CertificateDer::pem_file_iter(cert)
            .unwrap()
            .map(|c| c.unwrap())
            .collect();
        let key = PrivateKeyDer::from_pem_file(key).unwrap();
        let cfg = Arc::new(
            rustls::ServerConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .unwrap(),
        );
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let me = self.clone();
        me.0.lock().unwrap().token = Some(token);
        std::thread::spawn(move || {
            for s in l.incoming().flatten() {
                let (me, cfg) = (me.clone(), cfg.clone());
                std::thread::spawn(move || {
                    let conn = rustls::ServerConnection::new(cfg).unwrap();
                    me.handle(rustls::StreamOwned::new(conn, s))
                });
            }
        });
        port
    }

    fn handle(&self, mut s: impl Read + Write) {
        // the request head, byte by byte (the body of a GET is empty)
        let mut head = vec![];
        let mut b = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            match s.read(&mut b) {
                Ok(1) => head.push(b[0]),
                _ => return,
            }
        }
        let head = String::from_utf8_lossy(&head).into_owned();
        let first = head.lines().next().unwrap_or_default().to_string();
        if let Some(t) = self.0.lock().unwrap().token {
            if !head
                .lines()
                .any(|l| l.eq_ignore_ascii_case(&format!("authorization: bearer {t}")))
            {
                let _ = write!(
                    s,
                    "HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                );
                return;
            }
        }
        let target = first.split_whitespace().nth(1).unwrap_or("/").to_string();
        self.0.lock().unwrap().requests.push(target.clone());
        let (path, q) = target.split_once('?').unwrap_or((&target, ""));
        let q: BTreeMap<String, String> =
            form_urlencoded::parse(q.as_bytes()).into_owned().collect();
        let reply = |s: &mut dyn Write, code: &str, body: &str| {
            let _ = write!(
                s,
                "HTTP/1.1 {code}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        };
        match path {
            "/version" => reply(
                &mut s,
                "200 OK",
                r#"{"major":"1","minor":"30","gitVersion":"v1.30.2"}"#,
            ),
            _ if route(path).is_none() => {
                reply(&mut s, "404 Not Found", r#"{"kind":"Status","code":404}"#)
            }
            _ if !q.contains_key("watch") => {
                let (kind, plural, ns) = route(path).unwrap();
                let c = self.0.lock().unwrap();
                let limit: usize = q
                    .get("limit")
                    .and_then(|l| l.parse().ok())
                    .unwrap_or(usize::MAX);
                let from: usize = q.get("continue").and_then(|l| l.parse().ok()).unwrap_or(0);
                let prefix = format!(
                    "{plural}/{}",
                    ns.as_deref().map(|n| format!("{n}/")).unwrap_or_default()
                );
                let all: Vec<&Value> = c
                    .objects
                    .range(prefix.clone()..)
                    .take_while(|(k, _)| k.starts_with(&prefix))
                    .map(|(_, v)| v)
                    .collect();
                let page: Vec<&Value> = all.iter().skip(from).take(limit).cloned().collect();
                let cont = if from + page.len() < all.len() {
                    (from + page.len()).to_string()
                } else {
                    String::new()
                };
                let body = json!({"kind": format!("{kind}List"), "apiVersion": "v1",
                    "metadata": {"resourceVersion": c.rv.to_string(), "continue": cont},
                    "items": page});
                reply(&mut s, "200 OK", &body.to_string());
            }
            _ => {
                let (_, plural, ns) = route(path).unwrap();
                let rx: Receiver<String>;
                let mut backlog = vec![];
                {
                    let mut c = self.0.lock().unwrap();
                    let from: u64 = q
                        .get("resourceVersion")
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0);
                    if std::mem::take(&mut c.gone_next) {
                        backlog.push(json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                            "message": "too old resource version", "reason": "Expired", "code": 410}}).to_string());
                        let (_tx, r) = channel();
                        rx = r;
                    } else {
                        backlog.extend(
                            c.history
                                .iter()
                                .filter(|(v, p, n, _)| {
                                    *v > from && p == plural && ns.as_ref().is_none_or(|ns| ns == n)
                                })
                                .map(|(_, _, _, l)| l.clone()),
                        );
                        let (tx, r) = channel();
                        c.watchers.push((plural.to_string(), ns, tx));
                        rx = r;
                    }
                }
                let _ = write!(s, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n");
                let chunk = |s: &mut dyn Write, line: &str| {
                    let l = format!("{line}\n");
                    write!(s, "{:x}\r\n{l}\r\n", l.len()).and_then(|_| s.flush())
                };
                for l in backlog {
                    if chunk(&mut s, &l).is_err() {
                        return;
                    }
                }
                while let Ok(l) = rx.recv() {
                    if chunk(&mut s, &l).is_err() {
                        return;
                    }
                }
                let _ = write!(s, "0\r\n\r\n");
            }
        }
    }
}

/// (labels, discoveredLabels) of the active targets, labels as canonical JSON.
fn active(client: &Client, base: &str) -> BTreeSet<String> {
    let (st, body) = client.get(&format!("{base}/api/v1/targets?state=active"));
    assert_eq!(st, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    v["data"]["activeTargets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["labels"].to_string())
        .collect()
}

fn target(pod: &str, ip: &str, model: &str) -> String {
    json!({"instance": format!("{ip}:8001"), "job": "vllm", "model": model, "namespace": "llm", "pod": pod}).to_string()
}

fn wait_for(client: &Client, base: &str, want: &BTreeSet<String>, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let got = active(client, base);
        if &got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: want {want:#?}\ngot {got:#?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn pods_are_followed_through_list_and_watch() {
    let api = FakeApi::default();
    api.upsert(pod("vllm-0", "10.1.0.10", "Running", "llama-3-8b"));
    api.upsert(pod("vllm-1", "10.1.0.11", "Running", "llama-3-8b"));
    api.upsert(pod("vllm-2", "10.1.0.12", "Pending", "qwen-2"));
    let mut other = pod("web-0", "10.1.0.20", "Running", "none");
    other["metadata"]["annotations"] = json!({});
    api.upsert(other);
    let port = api.serve();
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("prometheus.yml");
    std::fs::write(
        &cfg,
        format!(
            r#"global: {{scrape_interval: 1m, scrape_timeout: 1s}}
scrape_configs:
  - job_name: vllm
    kubernetes_sd_configs:
      - role: pod
        api_server: http://127.0.0.1:{port}
        namespaces: {{names: [llm]}}
        selectors: [{{role: pod, label: app=vllm}}]
    relabel_configs:
      - {{source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_scrape], regex: 'true', action: keep}}
      - {{source_labels: [__meta_kubernetes_pod_phase], regex: Running, action: keep}}
      - {{source_labels: [__meta_kubernetes_pod_container_port_name], regex: metrics, action: keep}}
      - {{source_labels: [__meta_kubernetes_namespace], target_label: namespace}}
      - {{source_labels: [__meta_kubernetes_pod_name], target_label: pod}}
      - {{source_labels: [__meta_kubernetes_pod_label_model], target_label: model}}
"#
        ),
    )
    .unwrap();
    let client = Client::new();
    let (_p, base) = start_inferdb_with(
        dir.path(),
        &dir.path().join("data"),
        &["--config.file", cfg.to_str().unwrap()],
        &client,
    );
    let mut want: BTreeSet<String> = [
        target("vllm-0", "10.1.0.10", "llama-3-8b"),
        target("vllm-1", "10.1.0.11", "llama-3-8b"),
    ]
    .into();
    wait_for(&client, &base, &want, "initial list");
    // the watch request follows the list
    let deadline = Instant::now() + Duration::from_secs(20);
    while !api
        .0
        .lock()
        .unwrap()
        .requests
        .iter()
        .any(|r| r.contains("watch=true"))
    {
        assert!(Instant::now() < deadline, "no watch request");
        std::thread::sleep(Duration::from_millis(50));
    }
    {
        let c = api.0.lock().unwrap();
        let list = c.requests.iter().find(|r| !r.contains("watch=")).unwrap();
        assert!(list.starts_with("/api/v1/namespaces/llm/pods?"), "{list}");
        assert!(
            list.contains("labelSelector=app%3Dvllm") && list.contains("limit="),
            "{list}"
        );
        let w = c
            .requests
            .iter()
            .find(|r| r.contains("watch=true"))
            .unwrap();
        assert!(
            w.contains("allowWatchBookmarks=true")
                && w.contains("timeoutSeconds=")
                && w.contains("resourceVersion=4"),
            "{w}"
        );
    }
    // through the watch: a pod starts running, a pod is added, a pod is deleted
    api.upsert(pod("vllm-2", "10.1.0.12", "Running", "qwen-2"));
    api.upsert(pod("vllm-3", "10.1.0.13", "Running", "qwen-2"));
    api.event(
        "DELETED",
        pod("vllm-0", "10.1.0.10", "Running", "llama-3-8b"),
    );
    want.remove(&target("vllm-0", "10.1.0.10", "llama-3-8b"));
    want.insert(target("vllm-2", "10.1.0.12", "qwen-2"));
    want.insert(target("vllm-3", "10.1.0.13", "qwen-2"));
    wait_for(&client, &base, &want, "after watch events");
    // a pod leaves Running
    api.upsert(pod("vllm-1", "10.1.0.11", "Failed", "llama-3-8b"));
    want.remove(&target("vllm-1", "10.1.0.11", "llama-3-8b"));
    wait_for(&client, &base, &want, "after a phase change");

    // the server closes the stream: changes after are still seen (watch resumed)
    let lists_before = api
        .0
        .lock()
        .unwrap()
        .requests
        .iter()
        .filter(|r| !r.contains("watch="))
        .count();
    // a bookmark moves the version the watch resumes from, though no pod changed
    api.upsert(json!({"kind": "Node", "apiVersion": "v1", "metadata": {"name": "gpu-node-1"}}));
    let rv = api.bookmark();
    api.close_watches();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !api
        .0
        .lock()
        .unwrap()
        .requests
        .iter()
        .any(|r| r.contains("watch=true") && r.contains(&format!("resourceVersion={rv}&")))
    {
        assert!(
            Instant::now() < deadline,
            "no watch resumed from the bookmark's version {rv}: {:?}",
            api.0.lock().unwrap().requests
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    api.upsert(pod("vllm-4", "10.1.0.14", "Running", "qwen-2"));
    want.insert(target("vllm-4", "10.1.0.14", "qwen-2"));
    wait_for(&client, &base, &want, "after the stream closed");
    let lists_after = api
        .0
        .lock()
        .unwrap()
        .requests
        .iter()
        .filter(|r| !r.contains("watch="))
        .count();
    assert_eq!(
        lists_before, lists_after,
        "a closed stream is resumed, not re-listed"
    );

    // 410 Gone: changes no watch saw, the history compacted, the stream ended
    api.expire(|api| {
        api.upsert(pod("vllm-5", "10.1.0.15", "Running", "qwen-2"));
        api.event("DELETED", pod("vllm-2", "10.1.0.12", "Running", "qwen-2"));
    });
    want.insert(target("vllm-5", "10.1.0.15", "qwen-2"));
    want.remove(&target("vllm-2", "10.1.0.12", "qwen-2"));
    wait_for(&client, &base, &want, "after 410 Gone and a new list");
    let lists = api
        .0
        .lock()
        .unwrap()
        .requests
        .iter()
        .filter(|r| !r.contains("watch="))
        .count();
    assert!(lists > lists_after, "410 Gone makes a new list");
    // and the watch goes on after the new list
    api.event("DELETED", pod("vllm-5", "10.1.0.15", "Running", "qwen-2"));
    want.remove(&target("vllm-5", "10.1.0.15", "qwen-2"));
    wait_for(&client, &base, &want, "watching after the new list");
}

/// Prints a log file when the test fails.
struct LogOnPanic(std::path::PathBuf);

impl Drop for LogOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", std::fs::read_to_string(&self.0).unwrap_or_default());
        }
    }
}

/// Runs `name` (a test of this file) again inside `unshare --mount`; false (skipped) when
/// mount namespaces are not available outside CI.
fn in_mount_namespace(name: &str) -> bool {
    if std::env::var("INFERDB_TEST_IN_MOUNTNS").is_ok() {
        return true;
    }
    let ok = Command::new("unshare")
        .args(["--mount", "true"])
        .status()
        .is_ok_and(|s| s.success());
    let openssl = Command::new("openssl")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok || !openssl {
        assert!(
            std::env::var("CI").map(|v| v != "true").unwrap_or(true),
            "{name} needs `unshare --mount` (root) and openssl on CI"
        );
        eprintln!("SKIPPED {name}: unshare --mount or openssl is not available");
        return false;
    }
    let out = Command::new("unshare")
        .args(["--mount", "--"])
        .arg(std::env::current_exe().unwrap())
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env("INFERDB_TEST_IN_MOUNTNS", "1")
        .output()
        .unwrap();
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("1 passed"),
        "{name} in the namespace failed:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    false
}

/// In a pod: no api_server, the service account's token, CA and namespace under
/// `/var/run/secrets/kubernetes.io/serviceaccount` (a tmpfs over `/run` in a mount namespace
/// of the test's own, nothing on the machine changes), `KUBERNETES_SERVICE_HOST`/`_PORT`.
#[test]
fn in_cluster_service_account() {
    if !in_mount_namespace("in_cluster_service_account") {
        return;
    }
    let run = |args: &[&str]| {
        let st = Command::new(args[0]).args(&args[1..]).status().unwrap();
        assert!(st.success(), "{args:?}");
    };
    let dir = tempfile::tempdir().unwrap();
    run(&[
        "openssl",
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        dir.path().join("api.key").to_str().unwrap(),
        "-out",
        dir.path().join("api.pem").to_str().unwrap(),
        "-days",
        "2",
        "-subj",
        "/CN=kubernetes",
        "-addext",
        "subjectAltName=IP:127.0.0.1",
        "-addext",
        "basicConstraints=critical,CA:FALSE",
        "-addext",
        "extendedKeyUsage=serverAuth",
    ]);
    run(&["mount", "-t", "tmpfs", "tmpfs", "/run"]);
    let sa = Path::new("/run/secrets/kubernetes.io/serviceaccount");
    std::fs::create_dir_all(sa).unwrap();
    std::fs::copy(dir.path().join("api.pem"), sa.join("ca.crt")).unwrap();
    std::fs::write(sa.join("token"), "sa-token\n").unwrap();
    std::fs::write(sa.join("namespace"), "llm").unwrap();
    assert!(Path::new("/var/run/secrets/kubernetes.io/serviceaccount/token").exists());

    let api = FakeApi::default();
    api.upsert(pod("vllm-0", "10.1.0.10", "Running", "llama-3-8b"));
    let port = api.serve_tls(
        &dir.path().join("api.pem"),
        &dir.path().join("api.key"),
        "sa-token",
    );
    let cfg = dir.path().join("prometheus.yml");
    std::fs::write(
        &cfg,
        r#"global: {scrape_interval: 1m, scrape_timeout: 1s}
scrape_configs:
  - job_name: vllm
    kubernetes_sd_configs: [{role: pod, namespaces: {own_namespace: true}}]
    relabel_configs:
      - {source_labels: [__meta_kubernetes_pod_container_port_name], regex: metrics, action: keep}
      - {source_labels: [__meta_kubernetes_namespace], target_label: namespace}
      - {source_labels: [__meta_kubernetes_pod_name], target_label: pod}
      - {source_labels: [__meta_kubernetes_pod_label_model], target_label: model}
"#,
    )
    .unwrap();
    std::env::set_var("KUBERNETES_SERVICE_HOST", "127.0.0.1");
    std::env::set_var("KUBERNETES_SERVICE_PORT", port.to_string());
    let client = Client::new();
    let (_p, base) = start_inferdb_with(
        dir.path(),
        &dir.path().join("data"),
        &["--config.file", cfg.to_str().unwrap()],
        &client,
    );
    let _log = LogOnPanic(dir.path().join("inferdb.log"));
    let mut want: BTreeSet<String> = [target("vllm-0", "10.1.0.10", "llama-3-8b")].into();
    wait_for(&client, &base, &want, "in-cluster list");
    api.upsert(pod("vllm-1", "10.1.0.11", "Running", "llama-3-8b"));
    want.insert(target("vllm-1", "10.1.0.11", "llama-3-8b"));
    wait_for(&client, &base, &want, "in-cluster watch");
    let c = api.0.lock().unwrap();
    assert!(
        c.requests
            .iter()
            .all(|r| r.starts_with("/api/v1/namespaces/llm/pods?")),
        "{:?}",
        c.requests
    );
}

/// The discovered labels of a job's active targets, as canonical JSON.
fn discovered(client: &Client, base: &str, job: &str) -> BTreeSet<String> {
    let (st, body) = client.get(&format!("{base}/api/v1/targets?state=active"));
    assert_eq!(st, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    v["data"]["activeTargets"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["scrapePool"] == job)
        .map(|t| t["discoveredLabels"].to_string())
        .collect()
}

/// `labels` as a job's target discovers them: the job's own settings added, empty values
/// left out (as Prometheus' label builder leaves them out).
fn as_discovered(job: &str, labels: &[Value]) -> String {
    let mut m = serde_json::Map::new();
    for l in labels {
        for (k, v) in l.as_object().unwrap() {
            if v != "" {
                m.insert(k.clone(), v.clone());
            }
        }
    }
    for (k, v) in [
        ("job", job),
        ("__scheme__", "http"),
        ("__metrics_path__", "/metrics"),
        ("__scrape_interval__", "1m"),
        ("__scrape_timeout__", "1s"),
    ] {
        m.insert(k.into(), json!(v));
    }
    Value::Object(m).to_string()
}

/// Services, Endpoints, EndpointSlices and nodes are listed and watched too: the objects of
/// Prometheus' `TestEndpointsDiscoveryAdd` and `TestEndpointSliceDiscoveryAdd` (a pod
/// listed, then the Endpoints and the EndpointSlice naming it arriving through the watch)
/// give Prometheus' expected targets; a service's change reaches both groups; a node is
/// found by the node role.
#[test]
fn services_endpoints_endpointslices_and_nodes_through_list_and_watch() {
    let api = FakeApi::default();
    api.upsert(json!({"kind": "Pod", "metadata": {"name": "testpod", "namespace": "default", "uid": "deadbeef"},
        "spec": {"nodeName": "testnode", "containers": [
            {"name": "c1", "image": "c1:latest", "ports": [{"name": "mainport", "containerPort": 9000, "protocol": "TCP"}]},
            {"name": "c2", "image": "c2:latest", "ports": [{"name": "sideport", "containerPort": 9001, "protocol": "TCP"}]}]},
        "status": {"hostIP": "2.3.4.5", "podIP": "1.2.3.4"}}));
    api.upsert(
        json!({"kind": "Service", "metadata": {"name": "testendpoints", "namespace": "default",
        "labels": {"app/name": "test"}}, "spec": {"type": "ClusterIP", "clusterIP": "10.0.0.1",
        "ports": [{"name": "testport", "port": 9000, "protocol": "TCP"}]}}),
    );
    api.upsert(
        json!({"kind": "Node", "metadata": {"name": "testnode", "labels": {"gpu": "h100"}},
        "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.7"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}}}}),
    );
    let port = api.serve();
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("prometheus.yml");
    let mut yml =
        "global: {scrape_interval: 1m, scrape_timeout: 1s}\nscrape_configs:\n".to_string();
    for role in ["endpoints", "endpointslice", "service", "node"] {
        yml.push_str(&format!(
            "  - job_name: {role}\n    kubernetes_sd_configs: [{{role: {role}, api_server: 'http://127.0.0.1:{port}'}}]\n"
        ));
    }
    std::fs::write(&cfg, yml).unwrap();
    let client = Client::new();
    let (_p, base) = start_inferdb_with(
        dir.path(),
        &dir.path().join("data"),
        &["--config.file", cfg.to_str().unwrap()],
        &client,
    );
    let _log = LogOnPanic(dir.path().join("inferdb.log"));
    let wait = |job: &str, want: &BTreeSet<String>, what: &str| {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let got = discovered(&client, &base, job);
            if &got == want {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: want {want:#?}\ngot {got:#?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let svc_labels = |labels: &[(&str, &str)]| {
        let mut m = json!({"__meta_kubernetes_service_name": "testendpoints"});
        for (k, v) in labels {
            m[format!("__meta_kubernetes_service_label_{k}")] = json!(v);
            m[format!("__meta_kubernetes_service_labelpresent_{k}")] = json!("true");
        }
        m
    };
    wait(
        "service",
        &[as_discovered(
            "service",
            &[
                json!({"__meta_kubernetes_namespace": "default"}),
                svc_labels(&[("app_name", "test")]),
                json!({"__address__": "testendpoints.default.svc:9000",
                    "__meta_kubernetes_service_type": "ClusterIP", "__meta_kubernetes_service_cluster_ip": "10.0.0.1",
                    "__meta_kubernetes_service_port_name": "testport", "__meta_kubernetes_service_port_number": "9000",
                    "__meta_kubernetes_service_port_protocol": "TCP"}),
            ],
        )]
        .into(),
        "service role",
    );
    wait(
        "node",
        &[as_discovered(
            "node",
            &[json!({"__address__": "10.0.0.7:10250", "instance": "testnode",
                "__meta_kubernetes_node_address_InternalIP": "10.0.0.7", "__meta_kubernetes_node_name": "testnode",
                "__meta_kubernetes_node_provider_id": "",
                "__meta_kubernetes_node_label_gpu": "h100", "__meta_kubernetes_node_labelpresent_gpu": "true"})],
        )]
        .into(),
        "node role",
    );

    api.upsert(json!({"kind": "Endpoints", "metadata": {"name": "testendpoints", "namespace": "default"},
        "subsets": [{"addresses": [{"ip": "4.3.2.1", "targetRef": {"kind": "Pod", "name": "testpod", "namespace": "default"}}],
            "ports": [{"name": "testport", "port": 9000, "protocol": "TCP"}]}]}));
    api.upsert(json!({"kind": "EndpointSlice", "metadata": {"name": "testendpoints", "namespace": "default",
            "labels": {"kubernetes.io/service-name": "testendpoints"}}, "addressType": "IPv4",
        "ports": [{"name": "testport", "port": 9000, "protocol": "TCP"}],
        "endpoints": [{"addresses": ["4.3.2.1"], "targetRef": {"kind": "Pod", "name": "testpod", "namespace": "default"},
            "conditions": {"ready": false}}]}));
    let pod = |c: &str, port_name: &str, port: &str| {
        json!({"__meta_kubernetes_pod_name": "testpod", "__meta_kubernetes_pod_ip": "1.2.3.4",
            "__meta_kubernetes_pod_ready": "unknown", "__meta_kubernetes_pod_phase": "",
            "__meta_kubernetes_pod_node_name": "testnode", "__meta_kubernetes_pod_host_ip": "2.3.4.5",
            "__meta_kubernetes_pod_uid": "deadbeef", "__meta_kubernetes_pod_container_name": c,
            "__meta_kubernetes_pod_container_image": format!("{c}:latest"),
            "__meta_kubernetes_pod_container_port_name": port_name,
            "__meta_kubernetes_pod_container_port_number": port,
            "__meta_kubernetes_pod_container_port_protocol": "TCP", "__meta_kubernetes_pod_container_init": "false"})
    };
    let endpoints = |svc: Value| -> BTreeSet<String> {
        let group = [
            json!({"__meta_kubernetes_namespace": "default", "__meta_kubernetes_endpoints_name": "testendpoints"}),
            svc,
        ];
        [
            as_discovered("endpoints", &[group[0].clone(), group[1].clone(), pod("c1", "mainport", "9000"),
                json!({"__address__": "4.3.2.1:9000", "__meta_kubernetes_endpoint_port_name": "testport",
                    "__meta_kubernetes_endpoint_port_protocol": "TCP", "__meta_kubernetes_endpoint_ready": "true",
                    "__meta_kubernetes_endpoint_address_target_kind": "Pod",
                    "__meta_kubernetes_endpoint_address_target_name": "testpod"})]),
            as_discovered("endpoints", &[group[0].clone(), group[1].clone(), pod("c2", "sideport", "9001"),
                json!({"__address__": "1.2.3.4:9001"})]),
        ]
        .into()
    };
    let slices = |svc: Value| -> BTreeSet<String> {
        let group = [
            json!({"__meta_kubernetes_namespace": "default", "__meta_kubernetes_endpointslice_name": "testendpoints",
            "__meta_kubernetes_endpointslice_address_type": "IPv4",
            "__meta_kubernetes_endpointslice_label_kubernetes_io_service_name": "testendpoints",
            "__meta_kubernetes_endpointslice_labelpresent_kubernetes_io_service_name": "true"}),
            svc,
        ];
        [
            as_discovered("endpointslice", &[group[0].clone(), group[1].clone(), pod("c1", "mainport", "9000"),
                json!({"__address__": "4.3.2.1:9000",
                    "__meta_kubernetes_endpointslice_address_target_kind": "Pod",
                    "__meta_kubernetes_endpointslice_address_target_name": "testpod",
                    "__meta_kubernetes_endpointslice_endpoint_conditions_ready": "false",
                    "__meta_kubernetes_endpointslice_port": "9000", "__meta_kubernetes_endpointslice_port_name": "testport",
                    "__meta_kubernetes_endpointslice_port_protocol": "TCP"})]),
            as_discovered("endpointslice", &[group[0].clone(), group[1].clone(), pod("c2", "sideport", "9001"),
                json!({"__address__": "1.2.3.4:9001"})]),
        ]
        .into()
    };
    wait(
        "endpoints",
        &endpoints(svc_labels(&[("app_name", "test")])),
        "endpoints added",
    );
    wait(
        "endpointslice",
        &slices(svc_labels(&[("app_name", "test")])),
        "endpointslice added",
    );

    // the service's labels change: both groups are re-built with them
    api.upsert(json!({"kind": "Service", "metadata": {"name": "testendpoints", "namespace": "default",
        "labels": {"app/name": "svc", "component": "testing"}}, "spec": {"type": "ClusterIP", "clusterIP": "10.0.0.1",
        "ports": [{"name": "testport", "port": 9000, "protocol": "TCP"}]}}));
    let updated = svc_labels(&[("app_name", "svc"), ("component", "testing")]);
    wait(
        "endpoints",
        &endpoints(updated.clone()),
        "service updated (endpoints)",
    );
    wait(
        "endpointslice",
        &slices(updated),
        "service updated (endpointslice)",
    );

    // deletions take the targets away
    api.event(
        "DELETED",
        json!({"kind": "Endpoints", "metadata": {"name": "testendpoints", "namespace": "default"}}),
    );
    api.event(
        "DELETED",
        json!({"kind": "Node", "metadata": {"name": "testnode"}}),
    );
    wait("endpoints", &BTreeSet::new(), "endpoints deleted");
    wait("node", &BTreeSet::new(), "node deleted");
}
