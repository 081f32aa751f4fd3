//! The HTTP server's limits (issue 13): a connection cap that idle sockets cannot exhaust
//! under a low open-files limit, the read and header timeouts, GET URLs longer than 64 KB
//! and invalid UTF-8 in a path parameter answered as Prometheus answers them.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{free_port, serve_command, Client, Proc};

/// A scrape target on threads of the test: answers every request with a one-line page.
fn page_server() -> String {
    common::PageServer::start("limits_test_page 1\n").addr
}

/// `inferdb serve` scraping `target` every second, with `extra` flags and at most `nofile`
/// open files; returns the process, its base URL and port once ready.
fn start(
    work: &Path,
    target: &str,
    extra: &[&str],
    nofile: Option<u64>,
    client: &Client,
) -> (Proc, String) {
    let cfg = work.join("prometheus.yml");
    std::fs::write(
        &cfg,
        format!(
            "global: {{scrape_interval: 1s}}\nscrape_configs:\n- job_name: page\n  static_configs: [{{targets: ['{target}']}}]\n"
        ),
    )
    .unwrap();
    let port = free_port();
    let mut cmd = serve_command(&work.join("data"), port);
    cmd.arg("--config.file").arg(&cfg).args(extra);
    if let Some(n) = nofile {
        // SAFETY: only setrlimit between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                let lim = libc::rlimit {
                    rlim_cur: n,
                    rlim_max: n,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let mut p = Proc::spawn("inferdb", &mut cmd, work.join("inferdb.log"));
    let base = format!("http://127.0.0.1:{port}");
    p.wait_ready(&base, client);
    (p, base)
}

/// Raises this process' soft open-files limit to its hard one (to hold many sockets).
fn raise_own_nofile() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit on a local rlimit.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        lim.rlim_cur = lim.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
    }
    lim.rlim_cur
}

/// Samples of `up` stored so far, asked on a new connection (a kept-alive one may have been
/// closed as idle: that is what the limits do).
fn up_samples(base: &str) -> f64 {
    let v = Client::new().query(
        base,
        "/api/v1/query",
        &[("query", "count_over_time(up{job=\"page\"}[1h])".into())],
    );
    v["data"]["result"][0]["value"][1]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0.0)
}

#[test]
fn idle_sockets_under_a_low_file_limit_lock_no_one_out() {
    if raise_own_nofile() < 1300 {
        eprintln!("SKIPPED: this process may not open 1,300 files");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let client = Client::new();
    let target = page_server();
    let (p, base) = start(dir.path(), &target, &[], Some(1024), &client);
    let port: u16 = base.rsplit(':').next().unwrap().parse().unwrap();
    // wait (bounded) for the first scrapes
    let deadline = Instant::now() + Duration::from_secs(30);
    while up_samples(&base) < 2.0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    let before = up_samples(&base);
    assert!(before >= 2.0, "no scrapes: {}", p.log());
    // 1,100 connections that never send a byte
    let mut idle = Vec::new();
    for _ in 0..1100 {
        if let Ok(s) = TcpStream::connect_timeout(
            &format!("127.0.0.1:{port}").parse().unwrap(),
            Duration::from_secs(2),
        ) {
            idle.push(s);
        }
    }
    assert!(idle.len() >= 1000, "only {} sockets connected", idle.len());
    // a new client is answered within 15 s
    let t = Instant::now();
    let fresh = Client::new();
    let (st, body) = fresh.get(&format!("{base}/api/v1/query?query=vector(1)"));
    assert_eq!(st, 200, "{body} after {:?}", t.elapsed());
    let took = t.elapsed();
    assert!(took < Duration::from_secs(15), "answered after {took:?}");
    // scraping and the WAL go on while the sockets are held: 3 more scrapes stored
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut now = before;
    while now < before + 3.0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(300));
        now = up_samples(&base);
    }
    assert!(
        now >= before + 3.0,
        "{before} -> {now} samples:\n{}",
        p.log()
    );
    // the server stays below its file limit, with room for its own files
    let fds = std::fs::read_dir(format!("/proc/{}/fd", p.child.id()))
        .map(|d| d.count())
        .unwrap_or(0);
    assert!(fds < 1024 - 128, "{fds} descriptors open");
    drop(idle);
    let log = p.log();
    for bad in ["Too many open files", "fsync failed"] {
        assert!(!log.contains(bad), "{bad} in the log:\n{log}");
    }
    p.terminate();
}

#[test]
fn read_and_header_timeouts_close_silent_and_slow_clients() {
    let dir = tempfile::tempdir().unwrap();
    let client = Client::new();
    let target = page_server();
    let (p, base) = start(
        dir.path(),
        &target,
        &["--web.read-timeout", "1s", "--web.max-connections", "64"],
        None,
        &client,
    );
    let addr = base.trim_start_matches("http://").to_string();
    let closed_within = |mut s: TcpStream, what: &str| {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let t = Instant::now();
        let mut buf = Vec::new();
        let _ = s.read_to_end(&mut buf);
        let took = t.elapsed();
        assert!(
            took >= Duration::from_millis(700) && took < Duration::from_secs(5),
            "{what}: closed after {took:?}"
        );
        String::from_utf8_lossy(&buf).into_owned()
    };
    // silent connection
    let s = TcpStream::connect(&addr).unwrap();
    closed_within(s, "silent");
    // half a request head
    let mut s = TcpStream::connect(&addr).unwrap();
    s.write_all(b"GET /api/v1/query?query=1 HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    closed_within(s, "half head");
    // a body that never arrives whole: refused as bad data when the read timeout passes
    let mut s = TcpStream::connect(&addr).unwrap();
    s.write_all(b"POST /api/v1/query HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\nquery=1")
        .unwrap();
    let answer = closed_within(s, "slow body");
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    // a kept-alive connection used within the timeout serves request after request
    let mut s = TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    for _ in 0..3 {
        s.write_all(b"GET /api/v1/query?query=1 HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut buf = [0u8; 4096];
        let n = s.read(&mut buf).unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
        std::thread::sleep(Duration::from_millis(400));
    }
    // the flags show as Prometheus shows them
    let (_, flags) = Client::new().get(&format!("{base}/api/v1/status/flags"));
    assert!(flags.contains(r#""web.read-timeout":"1s""#), "{flags}");
    assert!(flags.contains(r#""web.max-connections":"64""#), "{flags}");
    p.terminate();
}

#[test]
fn zero_connections_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = serve_command(&dir.path().join("data"), free_port())
        .args(["--web.max-connections", "0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--web.max-connections must be at least 1"),
        "{err}"
    );
}

/// A GET of `path` on a connection of its own (clients built on the `http` crate refuse
/// URIs over 64 KB); HTTP/1.0, so that the body is not chunked; (status, body).
fn raw_get(base: &str, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(base.trim_start_matches("http://")).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let req = format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n");
    // the server may answer (and close) before reading a refused head whole
    let _ = s.write_all(req.as_bytes());
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    (status, body.to_string())
}

/// A GET of 70 KB (over the 65,534 bytes hyper's URI type holds) and a label name that is
/// not UTF-8, against inferdb and, where installed, Prometheus 2.42.
#[test]
fn long_urls_and_invalid_utf8_as_prometheus() {
    let dir = tempfile::tempdir().unwrap();
    let client = Client::new();
    let target = page_server();
    let (p, base) = start(dir.path(), &target, &[], None, &client);
    let mut bases = vec![base];
    let prom = if common::require_prometheus("long URLs and invalid UTF-8 against Prometheus") {
        let pdir = dir.path().join("prom");
        std::fs::create_dir_all(&pdir).unwrap();
        let (pp, pbase) = common::start_prometheus(&pdir, &pdir.join("data"), &client);
        bases.push(pbase);
        Some(pp)
    } else {
        None
    };
    let long = format!(
        "label_replace(vector(1), \"x\", \"{}\", \"\", \"\")",
        "A".repeat(70_000)
    );
    let q: String = form_urlencoded::Serializer::new(String::new())
        .append_pair("query", &long)
        .append_pair("time", "1000")
        .finish();
    let mut answers = vec![];
    for b in &bases {
        let (st, body) = raw_get(b, &format!("/api/v1/query?{q}"));
        assert_eq!(st, 200, "{b}: {}", common::short(&body));
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            v["data"]["result"][0]["metric"]["x"].as_str().map(str::len),
            Some(70_000)
        );
        answers.push(v);
        let (st, body) = client.get(&format!("{b}/api/v1/label/a%FFb/values"));
        assert_eq!(st, 400, "{b}: {body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["errorType"], "bad_data");
        assert_eq!(v["error"], r#"invalid label name: "a\xffb""#);
    }
    if answers.len() == 2 {
        assert_eq!(answers[0], answers[1]);
    }
    // a head over 1 MB is refused, not read
    let huge = "A".repeat(1_100_000);
    let (st, _) = raw_get(&bases[0], &format!("/api/v1/query?query={huge}"));
    assert!(st == 414 || st == 431, "{st}");
    drop(prom);
    p.terminate();
}
