//! Flat chains of binary operators (the fault review's `1+1+…+1` with 200 terms refused as
//! "nested too deeply") answered as Prometheus 2.42 answers them: same status and values for
//! chains of 200 to 2,000 terms of each associativity and mixed precedence.

mod common;

use common::{diff, require_prometheus, start_inferdb, start_prometheus, Client};

fn chains() -> Vec<String> {
    vec![
        format!("1{}", " + 1".repeat(199)),
        // 10,000 terms (tested without Prometheus in the query crate) take Prometheus 2.42 21 s
        format!("1{}", " + 1".repeat(1_999)),
        format!("vector(1){}", " or vector(2)".repeat(299)),
        format!("vector(1){}", " and vector(2)".repeat(299)),
        format!("2{}", " ^ 1".repeat(299)),
        format!("vector(3){}", " * 2 - 1 / 4 % 3".repeat(500)),
        format!("vector(1){}", " - on() vector(1)".repeat(300)),
        format!("1{}", " < bool 2 + 1".repeat(300)),
        format!("sum(vector(1){})", " + 1".repeat(1_000)),
    ]
}

#[test]
fn flat_chains_as_prometheus_answers_them() {
    if !require_prometheus("flat_chains_as_prometheus_answers_them") {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(d.path().join("p")).unwrap();
    std::fs::create_dir_all(d.path().join("i")).unwrap();
    let client = Client::new();
    let (_prom, pbase) = start_prometheus(&d.path().join("p"), &d.path().join("p/data"), &client);
    let (_inf, ibase) = start_inferdb(&d.path().join("i"), &d.path().join("i/data"), &client);
    for q in chains() {
        let form = [("query", q.clone()), ("time", "1700000000.5".to_string())];
        let a = client.post(&format!("{pbase}/api/v1/query"), &form);
        let b = client.post(&format!("{ibase}/api/v1/query"), &form);
        let head = &q[..q.len().min(60)];
        assert_eq!(a.0, 200, "Prometheus on {head}…: {}", a.1);
        assert_eq!(b.0, 200, "inferdb on {head}…: {}", common::short(&b.1));
        diff::compare(&q, false, &a, &b).unwrap_or_else(|e| panic!("{head}…: {e}"));
    }
}
