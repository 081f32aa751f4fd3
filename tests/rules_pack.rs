//! The vLLM rule pack `deploy/rules/vllm.yml`: `promtool check rules` (2.42) accepts it
//! unchanged, and its unit tests `deploy/rules/vllm_test.yml` pass under both `promtool test
//! rules` and `inferdb rules test`; the copy embedded in the binary is the file.

mod common;

use std::path::PathBuf;
use std::process::{Command, Output};

use common::BIN;

fn rules_dir() -> PathBuf {
    common::conformance::repo_root().join("deploy/rules")
}

fn text(o: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn inferdb_checks_and_tests_the_pack() {
    let dir = rules_dir();
    let check = Command::new(BIN)
        .current_dir(&dir)
        .args(["rules", "check", "vllm.yml"])
        .output()
        .unwrap();
    assert!(check.status.success(), "{}", text(&check));
    assert!(
        String::from_utf8_lossy(&check.stdout).contains("SUCCESS: 57 rules found"),
        "{}",
        text(&check)
    );
    let test = Command::new(BIN)
        .current_dir(&dir)
        .args(["rules", "test", "vllm_test.yml"])
        .output()
        .unwrap();
    assert!(test.status.success(), "{}", text(&test));
    assert!(
        String::from_utf8_lossy(&test.stdout).contains("  SUCCESS"),
        "{}",
        text(&test)
    );
}

#[test]
fn promtool_2_42_checks_and_tests_the_pack() {
    if !common::require_tools(&["promtool"], "the vLLM rule pack under promtool 2.42") {
        return;
    }
    let dir = rules_dir();
    let check = Command::new("promtool")
        .current_dir(&dir)
        .args(["check", "rules", "vllm.yml"])
        .output()
        .unwrap();
    assert!(check.status.success(), "{}", text(&check));
    let test = Command::new("promtool")
        .current_dir(&dir)
        .args(["test", "rules", "vllm_test.yml"])
        .output()
        .unwrap();
    assert!(test.status.success(), "{}", text(&test));
}

/// A unit test that expects what the pack does not do fails under both tools: the pack's
/// tests can fail.
#[test]
fn a_wrong_expectation_fails_under_both() {
    let dir = rules_dir();
    let good = std::fs::read_to_string(dir.join("vllm_test.yml")).unwrap();
    let bad = good.replacen(
        "model_name:vllm_generation_tokens:rate5m{model_name=\"m\"}'\n            value: 25",
        "model_name:vllm_generation_tokens:rate5m{model_name=\"m\"}'\n            value: 26",
        1,
    );
    assert_ne!(good, bad);
    let tmp = tempfile::tempdir().unwrap();
    std::fs::copy(dir.join("vllm.yml"), tmp.path().join("vllm.yml")).unwrap();
    std::fs::write(tmp.path().join("vllm_test.yml"), bad).unwrap();
    let ours = Command::new(BIN)
        .current_dir(tmp.path())
        .args(["rules", "test", "vllm_test.yml"])
        .output()
        .unwrap();
    assert_eq!(ours.status.code(), Some(1), "{}", text(&ours));
    assert!(
        String::from_utf8_lossy(&ours.stderr).contains("value: 26")
            || String::from_utf8_lossy(&ours.stderr).contains("2.6E+01"),
        "{}",
        text(&ours)
    );
    if common::require_tools(&["promtool"], "a failing pack test under promtool 2.42") {
        let p = Command::new("promtool")
            .current_dir(tmp.path())
            .args(["test", "rules", "vllm_test.yml"])
            .output()
            .unwrap();
        assert_eq!(p.status.code(), Some(1), "{}", text(&p));
    }
}

/// The pack the binary embeds is the file in `deploy/rules/`.
#[test]
fn embedded_pack_is_the_file() {
    let file = std::fs::read_to_string(rules_dir().join("vllm.yml")).unwrap();
    assert_eq!(inferdb::rules::pack::VLLM_RULES, file);
    assert_eq!(inferdb::rules::pack::VLLM_RULES_FILE, "vllm.yml");
}

/// The pack's groups in order, and every alert says what it means and what to try.
#[test]
fn every_alert_has_a_summary_and_a_description() {
    let f = inferdb::rules::pack::vllm_groups().unwrap();
    let names: Vec<&str> = f.groups.iter().map(|g| g.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "vllm-throughput",
            "vllm-cache",
            "vllm-latency",
            "vllm-load",
            "vllm-slo",
            "vllm-alerts"
        ]
    );
    let alerts: Vec<_> = f
        .groups
        .iter()
        .flat_map(|g| &g.rules)
        .filter(|r| !r.alert.is_empty())
        .collect();
    assert_eq!(alerts.len(), 10);
    for r in alerts {
        for key in ["summary", "description"] {
            assert!(
                r.annotations.iter().any(|(k, v)| k == key && v.len() > 20),
                "{} lacks {key}",
                r.alert
            );
        }
        assert!(r.labels.iter().any(|(k, _)| k == "severity"), "{}", r.alert);
    }
}

/// The series of a simulated server the pack reads, rendered every `step_s` for `minutes`
/// under `plan` (the simulator's model, stepped on a simulated clock), as promtool
/// `input_series` with the scrape's `job` and `instance`.
fn simulated_series(plan: &str, minutes: u64, step_s: f64) -> String {
    use inferdb::sim::model::VllmModel;
    use inferdb::sim::ScenarioPlan;
    const READ: &[&str] = &[
        "vllm:generation_tokens_total",
        "vllm:generation_tokens_created",
        "vllm:prompt_tokens_total",
        "vllm:request_success_total",
        "vllm:num_preemptions_total",
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:prefix_cache_hits_total",
        "vllm:prefix_cache_queries_total",
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:time_to_first_token_seconds_count",
        "vllm:inter_token_latency_seconds_bucket",
        "vllm:e2e_request_latency_seconds_bucket",
    ];
    let start = 1_796_198_400.0;
    let mut m = VllmModel::new(7, start, 600.0);
    m.set_plan(ScenarioPlan::parse(plan).unwrap(), start);
    let mut series: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    let steps = (minutes as f64 * 60.0 / step_s) as usize;
    for k in 0..=steps {
        m.advance_to(start + k as f64 * step_s);
        for line in m.render().lines() {
            let Some((s, v)) = line.rsplit_once(' ') else {
                continue;
            };
            let name = s.split('{').next().unwrap_or("");
            if line.starts_with('#') || !READ.contains(&name) {
                continue;
            }
            let s = s.replacen('{', "{job=\"vllm\",instance=\"sim:8000\",", 1);
            let v: f64 = v.parse().unwrap();
            series.entry(s).or_default().push(format!("{v}"));
        }
    }
    let mut out = String::new();
    for (s, vals) in series {
        out.push_str(&format!(
            "      - series: '{s}'\n        values: '{}'\n",
            vals.join(" ")
        ));
    }
    out
}

/// On the simulator's scenarios with known ground truth, the pack's alerts fire where they
/// should and nowhere else, under both `promtool test rules` (2.42) and `inferdb rules test`:
/// kv-pressure pages the KV cache, cache-kick the prefix cache, queueing the queue (and the
/// TTFT objective), a restart the restart; a healthy server nothing.
#[test]
fn alerts_fire_on_the_simulated_scenarios() {
    let step = 14.5;
    // (plan, minutes simulated, minute checked, the alerts firing then)
    let scenarios: &[(&str, u64, u64, &[&str])] = &[
        ("healthy", 25, 25, &[]),
        ("kv-pressure", 16, 15, &["VllmKvCachePressure"]),
        (
            "healthy,cache-kick@20m",
            33,
            32,
            &["VllmPrefixCacheHitRateCollapse"],
        ),
        // waiting requests wait for their first token too: the TTFT objective burns
        (
            "queueing",
            13,
            12,
            &["VllmQueueGrowing", "VllmTtftSloBurnFast"],
        ),
        ("healthy,restart@10m", 13, 12, &["VllmServerRestarted"]),
    ];
    let pack = rules_dir().join("vllm.yml");
    let mut doc = format!(
        "rule_files:\n  - {}\nevaluation_interval: 15s\ntests:\n",
        pack.display()
    );
    for (plan, minutes, at, firing) in scenarios {
        doc.push_str(&format!(
            "  - name: {plan}\n    interval: {}ms\n    input_series:\n",
            (step * 1000.0) as u64
        ));
        doc.push_str(&simulated_series(plan, *minutes, step));
        doc.push_str(&format!(
            "    promql_expr_test:\n      - expr: count by (alertname) (ALERTS{{alertstate=\"firing\"}})\n        eval_time: {at}m\n        exp_samples:\n"
        ));
        for a in *firing {
            doc.push_str(&format!(
                "          - labels: '{{alertname=\"{a}\"}}'\n            value: 1\n"
            ));
        }
        if firing.is_empty() {
            doc.push_str("          []\n");
        }
    }
    let doc = doc.replace("exp_samples:\n          []", "exp_samples: []");
    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("scenarios_test.yml");
    std::fs::write(&f, &doc).unwrap();
    let ours = Command::new(BIN)
        .args(["rules", "test", f.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(ours.status.success(), "inferdb: {}", text(&ours));
    if common::require_tools(
        &["promtool"],
        "the pack on simulated scenarios under promtool",
    ) {
        let p = Command::new("promtool")
            .args(["test", "rules", f.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(p.status.success(), "promtool: {}", text(&p));
    }
}

/// `serve --demo` evaluates the embedded pack: `/api/v1/rules` lists its groups under
/// `vllm.yml`, and they are evaluated (health ok, a last evaluation) over the simulated servers.
#[test]
fn serve_demo_loads_the_pack() {
    let tmp = tempfile::tempdir().unwrap();
    let client = common::Client::new();
    let port = common::free_port();
    let mut cmd = common::demo_command(&tmp.path().join("data"), port, 1);
    let mut p = common::Proc::spawn("inferdb", &mut cmd, tmp.path().join("inferdb.log"));
    let base = format!("http://127.0.0.1:{port}");
    p.wait_ready(&base, &client);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    let groups = loop {
        let (code, body) = client.get(&format!("{base}/api/v1/rules"));
        assert_eq!(code, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        let groups = v["data"]["groups"].as_array().cloned().unwrap_or_default();
        let evaluated = groups.iter().any(|g| {
            g["name"] == "vllm-throughput"
                && g["rules"][0]["health"] == "ok"
                && g["lastEvaluation"]
                    .as_str()
                    .is_some_and(|t| !t.starts_with("0001"))
        });
        if evaluated {
            break groups;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the pack was not evaluated: {body}\n{}",
            p.log()
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    };
    let names: Vec<&str> = groups.iter().filter_map(|g| g["name"].as_str()).collect();
    for want in [
        "vllm-throughput",
        "vllm-cache",
        "vllm-latency",
        "vllm-load",
        "vllm-slo",
        "vllm-alerts",
    ] {
        assert!(names.contains(&want), "{names:?}");
    }
    for g in &groups {
        assert_eq!(g["file"], "vllm.yml", "{g}");
    }
    // Pages of two groups, as Prometheus 3's `group_limit` / `group_next_token`, list the
    // same groups in the same order; each token names the next page's first group.
    let mut paged: Vec<String> = Vec::new();
    let mut token = String::new();
    loop {
        let url = format!("{base}/api/v1/rules?group_limit=2&group_next_token={token}");
        let (code, body) = client.get(&url);
        assert_eq!(code, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        let page = v["data"]["groups"].as_array().cloned().unwrap_or_default();
        assert!(!page.is_empty() && page.len() <= 2, "{body}");
        paged.extend(page.iter().map(|g| g["name"].as_str().unwrap().to_owned()));
        match v["data"]["groupNextToken"].as_str() {
            Some(t) => {
                assert_eq!(t.len(), 64, "a hex SHA-256: {t}");
                token = t.to_owned();
            }
            None => break,
        }
    }
    assert_eq!(paged, names, "paged listing differs from the whole one");
    for (query, want) in [
        ("group_limit=0", "group_limit needs to be greater than 0"),
        (
            "group_limit=x",
            "strconv.ParseInt: parsing \"x\": invalid syntax",
        ),
        ("group_next_token=abc", "group_limit needs to be present"),
        (
            "group_limit=1&group_next_token=abc",
            "invalid group_next_token 'abc'",
        ),
    ] {
        let (code, body) = client.get(&format!("{base}/api/v1/rules?{query}"));
        assert_eq!(code, 400, "{query}: {body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["errorType"], "bad_data", "{query}: {body}");
        assert!(
            v["error"].as_str().is_some_and(|e| e.contains(want)),
            "{query}: {body}"
        );
    }
    p.terminate();
}
