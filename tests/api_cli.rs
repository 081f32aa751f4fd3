//! The `inferdb` binary: `query` against a data folder and against `--url` give the same
//! answer as the HTTP API; `serve --demo` scrapes the simulator and answers Grafana's calls.

mod common;

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{demo_command, free_port, open_db, BIN};
use inferdb::api::{ApiConfig, ApiState, DbBackend, NoScrape};
use inferdb_query::EngineOptions;
use inferdb_storage::Labels;
use serde_json::Value;

fn write_data(dir: &std::path::Path) {
    let db = open_db(dir);
    let mut app = db.appender();
    for (model, k) in [("llama", 1.0), ("qwen", 2.0)] {
        let l = Labels::from_pairs([
            ("__name__", "vllm:generation_tokens_total"),
            ("model_name", model),
            ("job", "vllm"),
        ]);
        for i in 0..120 {
            app.append(&l, 1_754_000_000_000 + i * 15_000, k * 150.0 * i as f64)
                .unwrap();
        }
    }
    app.commit().unwrap();
    db.close().unwrap();
}

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn query_folder_url_and_api_agree() {
    let dir = tempfile::tempdir().unwrap();
    write_data(dir.path());
    let d = dir.path().to_str().unwrap();
    let expr = "sum by (model_name) (rate(vllm:generation_tokens_total[1m]))";

    // straight from the folder
    let (code, folder_json, err) = run(&[
        "query",
        "instant",
        expr,
        "--time",
        "1754001500",
        "--data-dir",
        d,
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&folder_json).unwrap();
    assert_eq!(v["data"]["resultType"], "vector");
    let r = v["data"]["result"].as_array().unwrap();
    assert_eq!(r.len(), 2);
    let val = |i: usize| r[i]["value"][1].as_str().unwrap().parse::<f64>().unwrap();
    assert!(
        (val(0) - 10.0).abs() < 1e-9 && (val(1) - 20.0).abs() < 1e-9,
        "{folder_json}"
    );

    // the same through a server's HTTP API (the folder is then open for writing by the server)
    let rt = tokio::runtime::Runtime::new().unwrap();
    let db = Arc::new(open_db(dir.path()));
    let state = ApiState::new(
        Arc::new(DbBackend::new(db, EngineOptions::default())),
        Arc::new(NoScrape),
        ApiConfig::default(),
    );
    let server = rt.block_on(common::InProcessApi::start(state));
    let url = server.base.clone();
    let (code, url_json, err) = run(&[
        "query",
        "instant",
        expr,
        "--time",
        "1754001500",
        "--url",
        &url,
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(url_json, folder_json);
    let api_body = rt.block_on(async {
        reqwest::Client::new()
            .post(format!("{url}/api/v1/query"))
            .form(&[("query", expr), ("time", "1754001500")])
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    });
    assert_eq!(url_json.trim_end(), api_body);

    // range, as CSV, both ways
    let args = |src: &[&str]| {
        let mut a = vec![
            "query",
            "range",
            "vllm:generation_tokens_total{model_name=\"qwen\"}",
            "--start",
            "1754000000",
            "--end",
            "1754000060",
            "--step",
            "30s",
            "--format",
            "csv",
        ];
        a.extend_from_slice(src);
        a.iter().map(|s| s.to_string()).collect::<Vec<_>>()
    };
    let a1 = args(&["--data-dir", d]);
    let a2 = args(&["--url", &url]);
    let (c1, csv1, e1) = run(&a1.iter().map(String::as_str).collect::<Vec<_>>());
    let (c2, csv2, e2) = run(&a2.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!((c1, c2), (0, 0), "{e1} {e2}");
    assert_eq!(csv1, csv2);
    assert_eq!(
        csv1,
        "timestamp,value,__name__,job,model_name\n1754000000000,0,vllm:generation_tokens_total,vllm,qwen\n1754000030000,600,vllm:generation_tokens_total,vllm,qwen\n1754000060000,1200,vllm:generation_tokens_total,vllm,qwen\n"
    );

    // errors: a parse error exits 1 with Prometheus' message, both ways
    for src in [vec!["--data-dir", d], vec!["--url", url.as_str()]] {
        let mut a = vec!["query", "instant", "rate(x[5m]"];
        a.extend(src);
        let (code, _, err) = run(&a);
        assert_eq!(code, 1);
        assert!(
            err.contains("bad_data: invalid parameter \"query\": 1:11: parse error"),
            "{err}"
        );
    }
    // a missing folder is an error, not an empty answer
    let (code, _, err) = run(&[
        "query",
        "instant",
        "up",
        "--data-dir",
        "/nonexistent/inferdb",
    ]);
    assert_eq!(code, 2, "a missing data folder is a usage error: {err}");
    assert!(err.contains("does not exist"), "{err}");
    assert!(!err.contains("internal"), "{err}");
    rt.block_on(server.stop());
}

#[test]
fn help_has_examples() {
    for cmd in [
        vec!["serve", "--help"],
        vec!["query", "instant", "--help"],
        vec!["query", "range", "--help"],
        vec!["simulate", "--help"],
    ] {
        let (code, out, _) = run(&cmd);
        assert_eq!(code, 0);
        assert!(out.contains("Example"), "{cmd:?}: {out}");
    }
    let (code, _, err) = run(&["query", "instant"]);
    assert_eq!(code, 2, "{err}");
}

fn get_json(url: &str) -> Option<Value> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let r = reqwest::Client::new()
            .get(url)
            .timeout(Duration::from_secs(5))
            .send()
            .await
            .ok()?;
        serde_json::from_str(&r.text().await.ok()?).ok()
    })
}

#[test]
fn serve_demo_scrapes_the_simulator() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let mut child = demo_command(dir.path(), port, 2)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let base = format!("http://{addr}");
    // the first scrapes land within one 15 s interval
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut up = Vec::new();
    while Instant::now() < deadline {
        if let Some(v) = get_json(&format!("{base}/api/v1/query?query=up")) {
            up = v["data"]["result"].as_array().cloned().unwrap_or_default();
            if up.len() == 2 {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let result = std::panic::catch_unwind(|| {
        assert_eq!(up.len(), 2, "both simulated servers scraped");
        for s in &up {
            assert_eq!(s["metric"]["job"], "vllm");
            assert_eq!(s["value"][1], "1");
        }
        let names = get_json(&format!("{base}/api/v1/label/__name__/values")).unwrap();
        let names: Vec<&str> = names["data"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|x| x.as_str())
            .collect();
        assert!(names.contains(&"vllm:num_requests_running"), "{names:?}");
        let t = get_json(&format!("{base}/api/v1/targets")).unwrap();
        assert_eq!(t["data"]["activeTargets"].as_array().unwrap().len(), 2);
        let md = get_json(&format!(
            "{base}/api/v1/metadata?metric=vllm:num_requests_running"
        ))
        .unwrap();
        assert_eq!(md["data"]["vllm:num_requests_running"][0]["type"], "gauge");
        let h = get_json(&format!("{base}/api/v1/query?query=1%2B1&time=4")).unwrap();
        assert_eq!(h["data"]["result"], serde_json::json!([4, "2"]));
    });
    // SIGTERM: a clean shutdown
    let _ = Command::new("kill").arg(child.id().to_string()).status();
    let status = child.wait().unwrap();
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
    assert!(status.success(), "serve exited with {status}");
    // the data is there afterwards, read-only
    let (code, out, err) = run(&[
        "query",
        "instant",
        "count(up)",
        "--data-dir",
        dir.path().to_str().unwrap(),
        "--time",
        "now",
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["data"]["result"][0]["value"][1], "2", "{out}");
}
