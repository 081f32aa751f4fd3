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
