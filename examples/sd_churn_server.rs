//! A fake service-discovery source with churn, for `benches/sd_churn.sh`: N pods, a share
//! replaced every minute, served both as a Kubernetes API (`/api/v1/pods` list and watch,
//! `/version`) and as Prometheus HTTP SD target groups (`/sd`), so inferdb's Kubernetes SD
//! and Prometheus' HTTP SD can follow the same fleet.
//!
//! `cargo run --release --example sd_churn_server -- PORT PODS REPLACED_PER_MINUTE`

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

#[derive(Default)]
struct Fleet {
    rv: u64,
    next: u64,
    pods: BTreeMap<u64, Value>,
    watchers: Vec<Sender<String>>,
}

fn pod(i: u64, rv: u64) -> Value {
    let ip = format!("10.{}.{}.{}", (i >> 16) & 255, (i >> 8) & 255, i & 255);
    json!({
        "kind": "Pod", "apiVersion": "v1",
        "metadata": {"name": format!("vllm-{i}"), "namespace": "llm", "uid": format!("uid-{i}"),
            "resourceVersion": rv.to_string(),
            "labels": {"app": "vllm", "model": "llama-3-8b", "pod-template-hash": "7d9f"},
            "annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": "8000"},
            "ownerReferences": [{"kind": "ReplicaSet", "name": "vllm-7d9f", "controller": true}]},
        "spec": {"nodeName": format!("gpu-node-{}", i % 50), "containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.6.3",
            "ports": [{"name": "metrics", "containerPort": 8000, "protocol": "TCP"}]}]},
        "status": {"phase": "Running", "podIP": ip, "hostIP": "10.0.0.1",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": "vllm", "containerID": format!("containerd://{i}")}]}
    })
}

impl Fleet {
    fn add(&mut self) {
        self.rv += 1;
        let (i, rv) = (self.next, self.rv);
        self.next += 1;
        let p = pod(i, rv);
        let line = json!({"type": "ADDED", "object": p}).to_string();
        self.pods.insert(i, p);
        self.watchers.retain(|w| w.send(line.clone()).is_ok());
    }
    fn remove_oldest(&mut self) {
        let Some((_, mut p)) = self.pods.pop_first() else {
            return;
        };
        self.rv += 1;
        p["metadata"]["resourceVersion"] = json!(self.rv.to_string());
        let line = json!({"type": "DELETED", "object": p}).to_string();
        self.watchers.retain(|w| w.send(line.clone()).is_ok());
    }
    fn http_sd(&self) -> String {
        let groups: Vec<Value> = self
            .pods
            .values()
            .map(|p| {
                json!({"targets": [format!("{}:8000", p["status"]["podIP"].as_str().unwrap())],
                    "labels": {"namespace": "llm", "pod": p["metadata"]["name"], "model": "llama-3-8b"}})
            })
            .collect();
        Value::Array(groups).to_string()
    }
}

fn handle(fleet: Arc<Mutex<Fleet>>, mut s: TcpStream) {
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut first = String::new();
    if r.read_line(&mut first).is_err() {
        return;
    }
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).is_err() || h.trim().is_empty() {
            break;
        }
    }
    let target = first.split_whitespace().nth(1).unwrap_or("/").to_string();
    let (path, q) = target.split_once('?').unwrap_or((&target, ""));
    let reply = |s: &mut TcpStream, body: &str| {
        let _ = write!(s, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
    };
    match path {
        "/version" => reply(
            &mut s,
            r#"{"major":"1","minor":"30","gitVersion":"v1.30.2"}"#,
        ),
        "/sd" => {
            let body = fleet.lock().unwrap().http_sd();
            reply(&mut s, &body);
        }
        "/api/v1/pods" | "/api/v1/namespaces/llm/pods" if !q.contains("watch=true") => {
            let f = fleet.lock().unwrap();
            let items: Vec<&Value> = f.pods.values().collect();
            let body = json!({"kind": "PodList", "metadata": {"resourceVersion": f.rv.to_string()}, "items": items}).to_string();
            drop(f);
            reply(&mut s, &body);
        }
        "/api/v1/pods" | "/api/v1/namespaces/llm/pods" => {
            let (tx, rx) = channel();
            fleet.lock().unwrap().watchers.push(tx);
            let _ = write!(s, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n");
            while let Ok(l) = rx.recv() {
                let l = format!("{l}\n");
                if write!(s, "{:x}\r\n{l}\r\n", l.len())
                    .and_then(|_| s.flush())
                    .is_err()
                {
                    return;
                }
            }
        }
        _ => {
            let _ = write!(
                s,
                "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
        }
    }
}

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("numbers"))
        .collect();
    let (port, pods, per_min) = (args[0], args[1], args[2]);
    let fleet = Arc::new(Mutex::new(Fleet::default()));
    for _ in 0..pods {
        fleet.lock().unwrap().add();
    }
    let f = fleet.clone();
    std::thread::spawn(move || {
        if per_min == 0 {
            return;
        }
        let every = Duration::from_millis(60_000 / per_min);
        loop {
            std::thread::sleep(every);
            let mut f = f.lock().unwrap();
            f.remove_oldest();
            f.add();
        }
    });
    let l = TcpListener::bind(("127.0.0.1", port as u16)).unwrap();
    for s in l.incoming().flatten() {
        let f = fleet.clone();
        std::thread::spawn(move || handle(f, s));
    }
}
