//! inferdb's own `/metrics` under Prometheus' names and types (query engine, HTTP, head,
//! compaction, WAL), clean for `promtool check metrics`; and every query of the self-monitoring
//! dashboard (`deploy/grafana/dashboards/inferdb.json`) answers with data from a server that
//! scrapes itself.

mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::grafana::{panel_exprs, substitute, variable_queries};
use common::{free_port, require_tools, serve_command, Client, Proc};
use serde_json::Value as Json;

/// A server scraping its own `/metrics` every second, once it holds a few scrapes of itself
/// and has answered queries of both kinds.
fn start() -> (tempfile::TempDir, Proc, String) {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let yml = dir.path().join("prometheus.yml");
    std::fs::write(
        &yml,
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: inferdb\n    \
             static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
        ),
    )
    .unwrap();
    let mut cmd = serve_command(&dir.path().join("data"), port);
    cmd.arg("--config.file").arg(&yml);
    let mut p = Proc::spawn("inferdb", &mut cmd, dir.path().join("inferdb.log"));
    let base = format!("http://127.0.0.1:{port}");
    let client = Client::new();
    p.wait_ready(&base, &client);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let v = client.query(
            &base,
            "/api/v1/query_range",
            &[
                ("query", "count_over_time(up{job=\"inferdb\"}[1m])".into()),
                ("start", format!("{}", common::now_ms() / 1000 - 60)),
                ("end", format!("{}", common::now_ms() / 1000)),
                ("step", "1".into()),
            ],
        );
        let n = v["data"]["result"][0]["values"]
            .as_array()
            .and_then(|a| a.last())
            .and_then(|p| p[1].as_str())
            .and_then(|s| s.parse::<f64>().ok())
            .unwrap_or(0.0);
        if n >= 4.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no scrapes of itself:\n{}",
            p.log()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    (dir, p, base)
}

/// `# TYPE` lines of a text-format page: name -> type.
fn types(page: &str) -> BTreeMap<String, String> {
    page.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .map(|(n, t)| (n.to_string(), t.to_string()))
        .collect()
}

#[test]
fn own_metrics_have_prometheus_names_and_types_and_pass_promtool() {
    let (_dir, p, base) = start();
    let client = Client::new();
    let (code, page) = client.get(&format!("{base}/metrics"));
    assert_eq!(code, 200);
    let t = types(&page);
    for (name, kind) in [
        ("prometheus_engine_query_duration_seconds", "summary"),
        ("prometheus_http_request_duration_seconds", "histogram"),
        ("prometheus_http_requests_total", "counter"),
        ("prometheus_tsdb_compaction_duration_seconds", "histogram"),
        ("prometheus_tsdb_compactions_total", "counter"),
        ("prometheus_tsdb_compactions_failed_total", "counter"),
        ("prometheus_tsdb_wal_fsync_duration_seconds", "summary"),
        ("prometheus_tsdb_wal_corruptions_total", "counter"),
        ("prometheus_tsdb_wal_truncations_total", "counter"),
        ("prometheus_tsdb_checkpoint_creations_total", "counter"),
        ("prometheus_tsdb_head_series_created_total", "counter"),
        ("prometheus_tsdb_head_series_removed_total", "counter"),
        ("prometheus_tsdb_head_series", "gauge"),
    ] {
        assert_eq!(
            t.get(name).map(String::as_str),
            Some(kind),
            "{name} should be a {kind}:\n{page}"
        );
    }
    // every slice of the engine summary has quantiles, a sum and a count
    for slice in ["inner_eval", "prepare_time", "queue_time", "result_sort"] {
        for suffix in [
            format!("{{slice=\"{slice}\",quantile=\"0.9\"}} "),
            format!("_count{{slice=\"{slice}\"}} "),
        ] {
            let line = format!("prometheus_engine_query_duration_seconds{suffix}");
            assert!(page.contains(&line), "no {line}:\n{page}");
        }
    }
    assert!(
        page.contains("prometheus_http_request_duration_seconds_bucket{handler=\"/api/v1/query_range\",le=\"0.1\"}"),
        "{page}"
    );
    let created = client
        .metric(&base, "prometheus_tsdb_head_series_created_total")
        .unwrap();
    assert!(created >= 1.0, "{created}");
    // the page passes promtool's linter
    if !require_tools(&["promtool"], "promtool check metrics") {
        return;
    }
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(page.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    p.terminate();
}

fn dashboard() -> Json {
    let p =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("deploy/grafana/dashboards/inferdb.json");
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn self_monitoring_dashboard_queries_answer_with_data() {
    let d = dashboard();
    let exprs = panel_exprs(&d);
    assert!(exprs.len() >= 20, "only {} panel queries", exprs.len());
    let all: String = exprs.iter().map(|(_, e)| e.as_str()).collect();
    for needle in [
        "prometheus_engine_query_duration_seconds",
        "prometheus_http_request_duration_seconds_bucket",
        "prometheus_tsdb_compaction_duration_seconds_bucket",
        "prometheus_tsdb_wal_fsync_duration_seconds",
        "prometheus_tsdb_head_series_created_total",
    ] {
        assert!(all.contains(needle), "no panel query reads {needle}");
    }
    let (_dir, p, base) = start();
    let client = Client::new();
    let vars: &[(&str, &str)] = &[("instance", ".*")];
    let mut failures = vec![];
    let now = common::now_ms() / 1000;
    for (name, q) in variable_queries(&d) {
        // label_values(selector, label): the label's values among the selector's series
        let inner = q
            .strip_prefix("label_values(")
            .and_then(|s| s.strip_suffix(')'))
            .and_then(|s| s.rsplit_once(','))
            .unwrap_or_else(|| panic!("${name}: {q}"));
        let v = client.query(
            &base,
            "/api/v1/query",
            &[(
                "query",
                format!("count by ({}) ({})", inner.1.trim(), inner.0),
            )],
        );
        if v["data"]["result"].as_array().is_none_or(|a| a.is_empty()) {
            failures.push(format!("${name}: {q}: no values"));
        }
    }
    for (title, raw) in &exprs {
        let q = match substitute(raw, vars) {
            Ok(q) => q,
            Err(e) => {
                failures.push(format!("{title}: {e}"));
                continue;
            }
        };
        let v = client.query(&base, "/api/v1/query", &[("query", q.clone())]);
        if v["status"] != "success" {
            failures.push(format!("{title}: {q}: instant: {v}"));
        } else if v["data"]["result"].as_array().is_none_or(|a| a.is_empty()) {
            failures.push(format!("{title}: {q}: instant: empty"));
        }
        let v = client.query(
            &base,
            "/api/v1/query_range",
            &[
                ("query", q.clone()),
                ("start", (now - 30).to_string()),
                ("end", now.to_string()),
                ("step", "1".into()),
            ],
        );
        if v["status"] != "success" {
            failures.push(format!("{title}: {q}: range: {v}"));
        } else if v["data"]["result"].as_array().is_none_or(|a| a.is_empty()) {
            failures.push(format!("{title}: {q}: range: empty"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} queries failed:\n{}",
        failures.len(),
        exprs.len(),
        failures.join("\n")
    );
    p.terminate();
}
