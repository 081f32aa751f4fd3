//! Shared by the query crate's integration tests: the repository's fixtures (the vLLM
//! dashboard queries with Grafana's variables substituted) and the promqltest suite, found as
//! the root crate's `tests/common/conformance.rs` says.
//!
//! Cargo treats this folder as a plain module: each test file that needs it says `mod common;`.
#![allow(dead_code)]

/// The core promqltest files (without `.test`).
pub const PROMQLTEST_CORE: [&str; 14] = [
    "aggregators",
    "at_modifier",
    "collision",
    "functions",
    "histograms",
    "limit",
    "literals",
    "name_label_dropping",
    "operators",
    "range_queries",
    "selectors",
    "staleness",
    "subquery",
    "trig_functions",
];

#[path = "../../../tests/common/conformance.rs"]
mod conformance;
#[allow(unused_imports)]
pub use conformance::{fixture, promqltest_dir};

/// The dashboard expressions of `fixtures/vllm/dashboard-queries.txt` (`text`): its lines up to
/// the template variables, without comments and blank lines, unsubstituted.
pub fn dashboard_expressions(text: &str) -> impl Iterator<Item = &str> {
    text.lines()
        .take_while(|l| !l.starts_with("# ==== TEMPLATE VARIABLES ===="))
        .filter(|l| !(l.starts_with('#') || l.trim().is_empty()))
}

/// Grafana's substitution: intervals become durations, `$var` inside a regex matcher matches
/// everything, inside an equality matcher a concrete value (the SLO variables are `le` values).
pub fn substitute(q: &str) -> String {
    let mut s = q
        .replace("$__rate_interval", "1m")
        .replace("$__range", "1h")
        .replace("$__interval", "15s")
        .replace("\"$ttft_slo\"", "\"0.5\"")
        .replace("\"$tpot_slo\"", "\"0.1\"");
    // Remaining variables: `=~"$x"` -> `=~".*"`, `="$x"` -> `="x"`.
    let mut out = String::with_capacity(s.len());
    while let Some(i) = s.find('$') {
        let (head, tail) = s.split_at(i);
        let name_len = tail[1..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len() - 1);
        let regex = head.ends_with("=~\"") || head.ends_with("!~\"");
        out.push_str(head);
        out.push_str(if regex { ".*" } else { "x" });
        s = tail[1 + name_len..].to_string();
    }
    out.push_str(&s);
    out
}
