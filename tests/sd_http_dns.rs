//! HTTP and DNS service discovery side by side with a real Prometheus 2.42: the same active
//! targets (`discoveredLabels` and `labels`) and the same dropped targets in
//! `/api/v1/targets?state=any`, first and after the discovered set changes.
//!
//! HTTP SD reads target groups from an HTTP server of the test (basic auth required). DNS SD
//! runs in a network and mount namespace of its own (`unshare --mount --net`, as root): a
//! `resolv.conf` naming 127.0.0.1 is bind-mounted over `/etc/resolv.conf` there and the
//! test answers DNS on 127.0.0.1:53 (SRV, A, AAAA); the machine's own `resolv.conf` is
//! never touched.

mod common;

use std::collections::{BTreeSet, HashMap};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, TcpListener, UdpSocket};
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{require_prometheus, start_inferdb_with, start_prometheus_with, Client};
use serde_json::Value;

/// What `/api/v1/targets?state=any` shows, order aside.
#[derive(Debug, PartialEq, Eq)]
struct View {
    /// (discoveredLabels, labels) of each active target, as canonical JSON.
    active: BTreeSet<(String, String)>,
    /// discoveredLabels of each dropped target.
    dropped: BTreeSet<String>,
}

fn view(client: &Client, base: &str) -> Option<View> {
    let (st, body) = client.get(&format!("{base}/api/v1/targets?state=any"));
    if st != 200 {
        return None;
    }
    let v: Value = serde_json::from_str(&body).ok()?;
    let d = &v["data"];
    let active = d["activeTargets"]
        .as_array()?
        .iter()
        .map(|t| (t["discoveredLabels"].to_string(), t["labels"].to_string()))
        .collect();
    let dropped = d["droppedTargets"]
        .as_array()?
        .iter()
        .map(|t| t["discoveredLabels"].to_string())
        .collect();
    Some(View { active, dropped })
}

/// Waits until both servers show `active` active and `dropped` dropped targets, one of the
/// active ones with `needle` in its discovered labels (Prometheus applies discovery updates
/// every 5 s), and asserts that they show the same ones.
fn assert_same(
    client: &Client,
    (prom, ours): (&str, &str),
    (active, dropped): (usize, usize),
    needle: &str,
) -> View {
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let (p, o) = (view(client, prom), view(client, ours));
        let fits = |v: &Option<View>| {
            v.as_ref().is_some_and(|v| {
                v.active.len() == active
                    && v.dropped.len() == dropped
                    && v.active.iter().any(|(d, _)| d.contains(needle))
            })
        };
        if fits(&p) && fits(&o) {
            let (p, o) = (p.unwrap(), o.unwrap());
            assert_eq!(o.active, p.active, "active targets differ");
            assert_eq!(o.dropped, p.dropped, "dropped targets differ");
            return o;
        }
        assert!(
            Instant::now() < deadline,
            "not {active} active and {dropped} dropped targets on both:\nprometheus {p:#?}\ninferdb {o:#?}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Starts Prometheus and inferdb on the same configuration.
fn start_both(
    dir: &Path,
    yml: &str,
    client: &Client,
) -> ((common::Proc, String), (common::Proc, String)) {
    let (pw, iw) = (dir.join("prom"), dir.join("ours"));
    std::fs::create_dir_all(&pw).unwrap();
    std::fs::create_dir_all(&iw).unwrap();
    let prom = start_prometheus_with(&pw, yml, &pw.join("data"), &[], client);
    let cfg = iw.join("prometheus.yml");
    std::fs::write(&cfg, yml).unwrap();
    let ours = start_inferdb_with(
        &iw,
        &iw.join("data"),
        &["--config.file", cfg.to_str().unwrap()],
        client,
    );
    (prom, ours)
}

/// A one-path HTTP server answering `doc` as JSON to requests with the right basic auth.
fn serve_sd(doc: Arc<Mutex<String>>, auth: &'static str) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let doc = doc.clone();
            std::thread::spawn(move || {
                let mut req = vec![];
                let mut b = [0u8; 1024];
                while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut b) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => req.extend_from_slice(&b[..n]),
                    }
                }
                let req = String::from_utf8_lossy(&req).to_lowercase();
                let resp = if req.contains(&format!("authorization: basic {}", auth.to_lowercase()))
                {
                    let body = doc.lock().unwrap().clone();
                    format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    )
                } else {
                    "HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                        .to_string()
                };
                let _ = s.write_all(resp.as_bytes());
            });
        }
    });
    port
}

#[test]
fn http_sd_matches_prometheus() {
    if !require_prometheus("HTTP SD side by side") {
        return;
    }
    let client = Client::new();
    let doc = Arc::new(Mutex::new(
        r#"[
  {"targets": ["127.0.0.1:1", "127.0.0.1:2"], "labels": {"env": "prod", "model": "llama"}},
  {"targets": ["127.0.0.1:3"], "labels": {"env": "dev"}},
  {"targets": ["127.0.0.1:4"], "labels": {"env": "prod", "job": "custom", "__metrics_path__": "/vllm/metrics", "empty": ""}}
]"#
        .to_string(),
    ));
    // "sd:secret"
    let port = serve_sd(doc.clone(), "c2Q6c2VjcmV0");
    let yml = format!(
        r#"global: {{scrape_interval: 1m, scrape_timeout: 2s}}
scrape_configs:
  - job_name: vllm
    http_sd_configs:
      - url: http://127.0.0.1:{port}/sd
        refresh_interval: 1s
        basic_auth: {{username: sd, password: secret}}
    relabel_configs:
      - {{source_labels: [env], regex: prod, action: keep}}
      - {{source_labels: [__meta_url], target_label: sd_url}}
      - {{source_labels: [__address__], regex: '([^:]+):(\d+)', target_label: host, replacement: 'h-$2'}}
  - job_name: unauthorised
    http_sd_configs:
      - url: http://127.0.0.1:{port}/sd
        refresh_interval: 1s
"#
    );
    let dir = tempfile::tempdir().unwrap();
    let ((_p, prom), (_o, ours)) = start_both(dir.path(), &yml, &client);
    let v = assert_same(&client, (&prom, &ours), (3, 1), "\"job\":\"custom\"");
    assert!(
        v.dropped.iter().any(|d| d.contains("\"env\":\"dev\"")),
        "{v:?}"
    );
    // groups change: a target leaves, a group goes, one comes
    *doc.lock().unwrap() = r#"[
  {"targets": ["127.0.0.1:1"], "labels": {"env": "prod", "model": "llama"}},
  {"targets": ["127.0.0.1:5", "127.0.0.1:6"], "labels": {"env": "prod", "model": "qwen"}},
  {"targets": ["127.0.0.1:7"], "labels": {"env": "staging"}}
]"#
    .to_string();
    let v = assert_same(&client, (&prom, &ours), (3, 1), "127.0.0.1:6");
    assert!(
        v.dropped.iter().any(|d| d.contains("\"env\":\"staging\"")),
        "{v:?}"
    );
}

/// The records the test's DNS server answers, by lower-case name with the final dot.
type Zone = Arc<Mutex<HashMap<(String, u16), Vec<hickory_proto::rr::RData>>>>;

fn answer(zone: &Zone, q: &[u8]) -> Option<Vec<u8>> {
    use hickory_proto::op::{Message, MessageType, ResponseCode};
    use hickory_proto::rr::Record;
    let req = Message::from_vec(q).ok()?;
    let query = req.queries().first()?.clone();
    let name = query.name().to_ascii().to_lowercase();
    let mut resp = Message::new();
    resp.set_id(req.id())
        .set_message_type(MessageType::Response)
        .set_op_code(req.op_code())
        .set_recursion_desired(req.recursion_desired())
        .set_recursion_available(true)
        .set_authoritative(true);
    resp.add_query(query.clone());
    let z = zone.lock().unwrap();
    match z.get(&(name.clone(), u16::from(query.query_type()))) {
        Some(rs) => {
            for rd in rs {
                resp.add_answer(Record::from_rdata(query.name().clone(), 5, rd.clone()));
            }
        }
        None if z.keys().any(|(n, _)| *n == name) => {}
        None => {
            resp.set_response_code(ResponseCode::NXDomain);
        }
    }
    resp.to_vec().ok()
}

/// Answers DNS over UDP and TCP on 127.0.0.1:53 from `zone`.
fn serve_dns(zone: Zone) {
    let udp = UdpSocket::bind("127.0.0.1:53").expect("binding 127.0.0.1:53 in the namespace");
    let z = zone.clone();
    std::thread::spawn(move || {
        let mut b = [0u8; 4096];
        while let Ok((n, from)) = udp.recv_from(&mut b) {
            if let Some(r) = answer(&z, &b[..n]) {
                let _ = udp.send_to(&r, from);
            }
        }
    });
    let tcp = TcpListener::bind("127.0.0.1:53").unwrap();
    std::thread::spawn(move || {
        for s in tcp.incoming() {
            let Ok(mut s) = s else { continue };
            let z = zone.clone();
            std::thread::spawn(move || loop {
                let mut len = [0u8; 2];
                if s.read_exact(&mut len).is_err() {
                    return;
                }
                let mut q = vec![0u8; u16::from_be_bytes(len) as usize];
                if s.read_exact(&mut q).is_err() {
                    return;
                }
                let Some(r) = answer(&z, &q) else { return };
                let _ = s.write_all(&(r.len() as u16).to_be_bytes());
                let _ = s.write_all(&r);
            });
        }
    });
}

fn srv(port: u16, target: &str) -> hickory_proto::rr::RData {
    use hickory_proto::rr::{rdata::SRV, Name, RData};
    RData::SRV(SRV::new(0, 0, port, Name::from_ascii(target).unwrap()))
}

/// Runs `name` (a test of this file) again inside `unshare --mount --net`; false (skipped)
/// when namespaces are not available outside CI.
fn in_namespace(name: &str) -> bool {
    if std::env::var("INFERDB_TEST_IN_NETNS").is_ok() {
        return true;
    }
    let ok = Command::new("unshare")
        .args(["--mount", "--net", "true"])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var("CI").map(|v| v != "true").unwrap_or(true),
            "{name} needs `unshare --mount --net` (root) on CI"
        );
        eprintln!("SKIPPED {name}: unshare --mount --net is not available");
        return false;
    }
    let out = Command::new("unshare")
        .args(["--mount", "--net", "--"])
        .arg(std::env::current_exe().unwrap())
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env("INFERDB_TEST_IN_NETNS", "1")
        .output()
        .unwrap();
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success(),
        "{name} in the namespace failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("1 passed"),
        "{name} did not run in the namespace:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    false
}

#[test]
fn dns_sd_matches_prometheus() {
    if !require_prometheus("DNS SD side by side") || !in_namespace("dns_sd_matches_prometheus") {
        return;
    }
    // inside the namespace: loopback up, our resolv.conf over the machine's
    let run = |args: &[&str]| {
        let st = Command::new(args[0]).args(&args[1..]).status().unwrap();
        assert!(st.success(), "{args:?}");
    };
    run(&["ip", "link", "set", "lo", "up"]);
    let dir = tempfile::tempdir().unwrap();
    let resolv = dir.path().join("resolv.conf");
    std::fs::write(
        &resolv,
        "nameserver 127.0.0.1\noptions ndots:1 timeout:1 attempts:1\n",
    )
    .unwrap();
    run(&[
        "mount",
        "--bind",
        resolv.to_str().unwrap(),
        "/etc/resolv.conf",
    ]);

    use hickory_proto::rr::rdata::{A, AAAA};
    use hickory_proto::rr::{RData, RecordType};
    let zone: Zone = Arc::new(Mutex::new(HashMap::new()));
    let srv_t = u16::from(RecordType::SRV);
    let (a_t, aaaa_t) = (u16::from(RecordType::A), u16::from(RecordType::AAAA));
    {
        let mut z = zone.lock().unwrap();
        z.insert(
            ("_vllm._tcp.svc.test.".into(), srv_t),
            vec![
                srv(8000, "vllm-0.svc.test."),
                srv(8001, "vllm-1.svc.test."),
                srv(9000, "router.svc.test."),
            ],
        );
        z.insert(
            ("engine.svc.test.".into(), a_t),
            vec![
                RData::A(A(Ipv4Addr::new(127, 0, 0, 2))),
                RData::A(A(Ipv4Addr::new(127, 0, 0, 3))),
            ],
        );
        z.insert(
            ("engine.svc.test.".into(), aaaa_t),
            vec![RData::AAAA(AAAA(Ipv6Addr::LOCALHOST))],
        );
    }
    serve_dns(zone.clone());
    let yml = r#"global: {scrape_interval: 1m, scrape_timeout: 2s}
scrape_configs:
  - job_name: vllm-srv
    dns_sd_configs:
      - names: [_vllm._tcp.svc.test, _absent._tcp.svc.test]
        refresh_interval: 1s
    relabel_configs:
      - {source_labels: [__meta_dns_srv_record_port], regex: '9000', action: drop}
      - {source_labels: [__meta_dns_srv_record_target], target_label: srv_target}
  - job_name: engines
    dns_sd_configs:
      - {names: [engine.svc.test], type: A, port: 8000, refresh_interval: 1s}
      - {names: [engine.svc.test], type: AAAA, port: 8000, refresh_interval: 1s}
    relabel_configs:
      - {source_labels: [__meta_dns_name], target_label: dns_name}
"#;
    let client = Client::new();
    let ((_p, prom), (_o, ours)) = start_both(dir.path(), yml, &client);
    let v = assert_same(
        &client,
        (&prom, &ours),
        (5, 1),
        "\"__meta_dns_srv_record_target\":\"vllm-1.svc.test.\"",
    );
    assert!(
        v.active.iter().any(|(d, _)| d.contains("[::1]:8000")),
        "{v:?}"
    );
    assert!(
        v.dropped.iter().any(|d| d.contains("router.svc.test.")),
        "{v:?}"
    );
    // records change: an SRV target goes, one comes; an A record goes
    {
        let mut z = zone.lock().unwrap();
        z.insert(
            ("_vllm._tcp.svc.test.".into(), srv_t),
            vec![
                srv(8000, "vllm-0.svc.test."),
                srv(8002, "vllm-2.svc.test."),
                srv(8003, "vllm-3.svc.test."),
                srv(9000, "router.svc.test."),
            ],
        );
        z.insert(
            ("engine.svc.test.".into(), a_t),
            vec![RData::A(A(Ipv4Addr::new(127, 0, 0, 3)))],
        );
    }
    let v = assert_same(&client, (&prom, &ours), (5, 1), "\"vllm-3.svc.test:8003\"");
    assert!(
        !v.active.iter().any(|(d, _)| d.contains("127.0.0.2")),
        "{v:?}"
    );
    eprintln!("{v:#?}");
}
