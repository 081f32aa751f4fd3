//! Requests meant to hurt, against a running `inferdb serve` (the real binary, scraping its
//! built-in simulator): a 100 MB body, a 1e9-point range, regexes that explode backtracking
//! engines or compile to huge programs. Each is answered (or refused) cleanly, with
//! Prometheus' error JSON and status where refused, and the server keeps answering afterwards.

mod common;

use std::time::{Duration, Instant};

use common::{demo_command, free_port, Proc};
use serde_json::Value;

/// `inferdb serve --demo` (two simulated servers), killed on drop.
struct Server {
    _proc: Proc,
    base: String,
    _dir: tempfile::TempDir,
}

fn start() -> Server {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut proc = Proc::spawn(
        "inferdb serve",
        &mut demo_command(&dir.path().join("data"), port, 2),
        dir.path().join("serve.log"),
    );
    proc.wait_serving(port);
    Server {
        _proc: proc,
        base: format!("http://127.0.0.1:{port}"),
        _dir: dir,
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// POSTs a form; (status, parsed body).
fn post(rt: &tokio::runtime::Runtime, url: &str, form: &[(&str, &str)]) -> (u16, Value) {
    rt.block_on(async {
        let r = reqwest::Client::new()
            .post(url)
            .form(form)
            .timeout(Duration::from_secs(60))
            .send()
            .await
            .unwrap();
        let st = r.status().as_u16();
        let body = r.text().await.unwrap();
        let v = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
        (st, v)
    })
}

/// The server still answers a query, with the right answer.
fn still_up(rt: &tokio::runtime::Runtime, s: &Server) {
    let (st, v) = post(
        rt,
        &format!("{}/api/v1/query", s.base),
        &[("query", "1+1"), ("time", "4")],
    );
    assert_eq!(st, 200);
    assert_eq!(v["data"]["result"], serde_json::json!([4, "2"]));
}

#[test]
fn hostile_requests_are_refused_cleanly_and_the_server_stays_up() {
    let s = start();
    let rt = rt();
    still_up(&rt, &s);

    // a 100 MB form body: 413 with the error JSON (default limit 8 MiB), or the connection
    // closed while the client is still sending (what Prometheus does); never a crash
    let big = {
        let mut b = b"query=".to_vec();
        b.resize(100 << 20, b'x');
        b
    };
    let r = rt.block_on(async {
        reqwest::Client::new()
            .post(format!("{}/api/v1/query", s.base))
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(big)
            .timeout(Duration::from_secs(60))
            .send()
            .await
    });
    match r {
        Ok(r) => {
            assert_eq!(r.status().as_u16(), 413);
            // the server closes the connection without reading the rest of the upload, so
            // the client may lose the body of the answer; when it arrives, it is the error JSON
            if let Ok(text) = rt.block_on(r.text()) {
                let v: Value = serde_json::from_str(&text).unwrap();
                assert_eq!(v["status"], "error");
                assert!(v["error"].as_str().unwrap().contains("larger than"), "{v}");
            }
        }
        Err(e) => assert!(!e.is_timeout(), "{e}"),
    }
    still_up(&rt, &s);

    // a 1e9-point range: Prometheus' 400 and message, before any work
    let t = Instant::now();
    let (st, v) = post(
        &rt,
        &format!("{}/api/v1/query_range", s.base),
        &[
            ("query", "up"),
            ("start", "0"),
            ("end", "1000000000"),
            ("step", "1"),
        ],
    );
    assert_eq!(st, 400);
    assert_eq!(v["errorType"], "bad_data");
    assert_eq!(
        v["error"],
        "exceeded maximum resolution of 11,000 points per timeseries. Try decreasing the query resolution (?step=XX)"
    );
    // answered right away (a generous bound: nothing was evaluated)
    assert!(t.elapsed() < Duration::from_secs(20));
    still_up(&rt, &s);

    // classic catastrophic-backtracking patterns: linear-time regex engines (RE2 in
    // Prometheus, the regex crate here) answer them like any other matcher
    for q in [
        r#"{__name__=~"(a+)+$"}"#,
        r#"{__name__=~"(a|aa)+b", job="vllm"}"#,
        r#"{__name__=~"(.*a){20}"}"#,
        r#"count({__name__=~"(x+x+)+y|vllm.*"})"#,
    ] {
        let (st, v) = post(
            &rt,
            &format!("{}/api/v1/query", s.base),
            &[("query", q), ("time", "1000")],
        );
        assert_eq!(st, 200, "{q}: {v}");
        assert_eq!(v["status"], "success", "{q}");
    }
    // a regex whose program would be huge: 400 bad_data (Prometheus refuses it too, as an
    // invalid repeat count), in the query slot rather than on the async runtime
    for q in [
        r#"{__name__=~"((a{1000}){1000}){1000}"}"#,
        r#"up{job=~"(\\w{1000}){1000}"}"#,
    ] {
        for path in ["/api/v1/query", "/api/v1/query_range"] {
            let (st, v) = post(
                &rt,
                &format!("{}{path}", s.base),
                &[
                    ("query", q),
                    ("time", "1000"),
                    ("start", "0"),
                    ("end", "3600"),
                    ("step", "15"),
                ],
            );
            assert_eq!(st, 400, "{q}: {v}");
            assert_eq!(v["errorType"], "bad_data", "{q}");
            assert!(v["error"].as_str().unwrap().contains("regex"), "{q}: {v}");
        }
    }
    still_up(&rt, &s);

    // Go's limit on repeat counts: Prometheus' exact answer (as Prometheus 2.42 gave it)
    let (st, v) = post(
        &rt,
        &format!("{}/api/v1/query", s.base),
        &[("query", r#"up{job=~"a{1001}"}"#), ("time", "1000")],
    );
    assert_eq!(
        (st, &v["errorType"]),
        (400, &serde_json::json!("bad_data")),
        "{v}"
    );
    assert_eq!(
        v["error"],
        "invalid parameter \"query\": 1:4: parse error: error parsing regexp: invalid repeat count: `{1001}`"
    );
    // label_replace's regex is checked when evaluated: Prometheus' 422 and message
    let (st, v) = post(
        &rt,
        &format!("{}/api/v1/query", s.base),
        &[
            ("query", r#"label_replace(up, "x", "$1", "job", "a{1001}")"#),
            ("time", "1000"),
        ],
    );
    assert_eq!(
        (st, &v["errorType"]),
        (422, &serde_json::json!("execution")),
        "{v}"
    );
    assert_eq!(
        v["error"],
        "invalid regular expression in label_replace(): a{1001}"
    );
    // a dashboard variable with 10,000 pods selected: beyond the regex crate's default size
    // limit, answered as Prometheus answers it
    let pods: Vec<String> = (0..10_000)
        .map(|i| format!("pod-name-of-some-deployment-{i:08}-abcdefghijklm"))
        .collect();
    let q = format!("up{{job=~\"({})\"}}", pods.join("|"));
    let (st, v) = post(
        &rt,
        &format!("{}/api/v1/query", s.base),
        &[("query", &q), ("time", "1000")],
    );
    assert_eq!(st, 200, "{v}");
    still_up(&rt, &s);
    // and the scraper kept going: the server is still ready
    let st = rt.block_on(async {
        reqwest::get(format!("{}/-/ready", s.base))
            .await
            .unwrap()
            .status()
            .as_u16()
    });
    assert_eq!(st, 200);
}
