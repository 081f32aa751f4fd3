//! Third-party Prometheus API clients against inferdb: `promtool query instant|range|series|labels`
//! (Debian package `prometheus`) must get the answers the API gives. Skipped, with a notice,
//! where promtool is not installed.

mod common;

use std::process::Command;
use std::sync::Arc;

use inferdb::api::{ApiConfig, ApiState, DbBackend, NoScrape};
use inferdb_query::EngineOptions;
use inferdb_storage::Labels;
use serde_json::Value;

fn promtool() -> Option<&'static str> {
    let ok = Command::new("promtool")
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    ok.then_some("promtool")
}

fn run(args: &[&str]) -> String {
    let out = Command::new("promtool").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "promtool {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promtool_queries() {
    if promtool().is_none() {
        common::conformance::skip(
            "promtool_queries",
            "promtool not installed (apt-get install prometheus)",
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = common::open_db(dir.path());
    {
        let mut app = db.appender();
        for (model, inst, k) in [
            ("llama", "10.0.0.5:8000", 1.0),
            ("qwen", "10.0.0.7:8000", 2.5),
        ] {
            let c = Labels::from_pairs([
                ("__name__", "vllm:generation_tokens_total"),
                ("model_name", model),
                ("instance", inst),
                ("job", "vllm"),
            ]);
            let g = Labels::from_pairs([
                ("__name__", "vllm:num_requests_running"),
                ("model_name", model),
                ("instance", inst),
                ("job", "vllm"),
            ]);
            for i in 0..240 {
                let t = 1_754_000_000_000 + i * 15_000;
                app.append(&c, t, k * 100.0 * i as f64).unwrap();
                app.append(&g, t, (i % 7) as f64 * k).unwrap();
            }
        }
        app.commit().unwrap();
    }
    let state = ApiState::new(
        Arc::new(DbBackend::new(Arc::new(db), EngineOptions::default())),
        Arc::new(NoScrape),
        ApiConfig::default(),
    );
    let server = common::InProcessApi::start(state).await;
    let url = server.base.clone();
    let client = reqwest::Client::new();
    let api = |path: &'static str, form: Vec<(&'static str, String)>| {
        let client = client.clone();
        let url = url.clone();
        async move {
            let body = client
                .post(format!("{url}{path}"))
                .form(&form)
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            serde_json::from_str::<Value>(&body).unwrap()
        }
    };

    let u = url.clone();
    let expr = "sum by (model_name) (rate(vllm:generation_tokens_total[1m]))";
    let out = tokio::task::spawn_blocking(move || {
        run(&[
            "query",
            "instant",
            "-o",
            "json",
            "--time",
            "1754003000",
            &u,
            expr,
        ])
    })
    .await
    .unwrap();
    let via_promtool: Value = serde_json::from_str(&out).unwrap();
    let ours = api(
        "/api/v1/query",
        vec![("query", expr.into()), ("time", "1754003000".into())],
    )
    .await;
    assert_eq!(via_promtool, ours["data"]["result"]);
    assert_eq!(via_promtool.as_array().unwrap().len(), 2);

    let u = url.clone();
    let expr = "vllm:num_requests_running{model_name=\"qwen\"}";
    let out = tokio::task::spawn_blocking(move || {
        run(&[
            "query",
            "range",
            "-o",
            "json",
            "--start",
            "1754000600",
            "--end",
            "1754001200",
            "--step",
            "1m",
            &u,
            expr,
        ])
    })
    .await
    .unwrap();
    let via_promtool: Value = serde_json::from_str(&out).unwrap();
    let ours = api(
        "/api/v1/query_range",
        vec![
            ("query", expr.into()),
            ("start", "1754000600".into()),
            ("end", "1754001200".into()),
            ("step", "60".into()),
        ],
    )
    .await;
    assert_eq!(via_promtool, ours["data"]["result"]);
    assert_eq!(via_promtool[0]["values"].as_array().unwrap().len(), 11);

    let u = url.clone();
    let out = tokio::task::spawn_blocking(move || {
        run(&[
            "query",
            "series",
            "--match",
            "vllm:num_requests_running",
            "--start",
            "1754000000",
            "--end",
            "1754003600",
            &u,
        ])
    })
    .await
    .unwrap();
    assert_eq!(
        out,
        "{__name__=\"vllm:num_requests_running\", instance=\"10.0.0.5:8000\", job=\"vllm\", model_name=\"llama\"}\n\
         {__name__=\"vllm:num_requests_running\", instance=\"10.0.0.7:8000\", job=\"vllm\", model_name=\"qwen\"}\n"
    );
    let u = url.clone();
    let out = tokio::task::spawn_blocking(move || {
        run(&[
            "query",
            "labels",
            "--start",
            "1754000000",
            "--end",
            "1754003600",
            &u,
            "model_name",
        ])
    })
    .await
    .unwrap();
    assert_eq!(out, "llama\nqwen\n");

    server.stop().await;
}
