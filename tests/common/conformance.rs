//! Where the tests find the project's own test data and the third-party conformance suites.
//!
//! The project's fixtures (vLLM and dcgm-exporter pages, the Grafana request corpus, the
//! dashboard queries) are part of the repository, under `tests/fixtures/`. Prometheus' own
//! suites (`promql/promqltest/testdata`, `cmd/promtool/testdata`) are not copied into the
//! repository: a test finds them through an environment variable or in `../shared/` beside the
//! repository and, when they are absent, says it skipped and how to get them. With
//! `INFERDB_REQUIRE_CONFORMANCE=1` (set by `.ci/run`) a missing suite or tool fails instead.
//!
//! Used by the root crate's `tests/common` and, through a `#[path]` module, by the query crate's.
#![allow(dead_code)]

use std::io::Write as _;
use std::path::{Path, PathBuf};

/// The repository's root (the folder holding `Cargo.lock`).
pub fn repo_root() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.ancestors()
        .find(|p| p.join("Cargo.lock").is_file())
        .unwrap_or(here)
        .to_path_buf()
}

/// The project's own test data: `tests/fixtures` at the repository's root.
pub fn fixtures_dir() -> PathBuf {
    repo_root().join("tests/fixtures")
}

/// The text of `tests/fixtures/<rel>`; panics naming the file when it cannot be read (the
/// fixtures are part of the repository, so a missing one is a broken checkout).
pub fn fixture(rel: &str) -> String {
    let p = fixtures_dir().join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Whether a missing suite or tool must fail the test rather than skip it:
/// `INFERDB_REQUIRE_CONFORMANCE=1` (what `.ci/run` sets) or `CI=true`.
pub fn required() -> bool {
    std::env::var("INFERDB_REQUIRE_CONFORMANCE").is_ok_and(|v| v == "1")
        || std::env::var("CI").is_ok_and(|v| v == "true")
}

/// Reports a test part that cannot run for want of `what`: a `SKIPPED` line on stderr, or a
/// panic when [`required`].
pub fn skip(test: &str, what: &str) {
    if required() {
        panic!("{test}: {what} (INFERDB_REQUIRE_CONFORMANCE=1 forbids skipping)");
    }
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {what}");
}

/// A third-party suite's folder: `$env` when set, else `../shared/<shared>` beside the
/// repository; `None` (after [`skip`]) when that folder is missing.
fn suite(test: &str, env: &str, shared: &str, upstream: &str) -> Option<PathBuf> {
    let dir = std::env::var_os(env)
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("..").join("shared").join(shared));
    if dir.is_dir() {
        return Some(dir);
    }
    skip(
        test,
        &format!(
            "{} not found; set {env} to a copy of Prometheus' {upstream} \
             (git clone https://github.com/prometheus/prometheus) or put it at ../shared/{shared}",
            dir.display()
        ),
    );
    None
}

/// Prometheus' promqltest scripts: `INFERDB_PROMQLTEST_DIR`, else `../shared/promqltest`.
pub fn promqltest_dir(test: &str) -> Option<PathBuf> {
    suite(
        test,
        "INFERDB_PROMQLTEST_DIR",
        "promqltest",
        "promql/promqltest/testdata",
    )
}

/// promtool's test data: `INFERDB_PROMTOOL_TESTDATA_DIR`, else `../shared/promtool-testdata`.
pub fn promtool_testdata_dir(test: &str) -> Option<PathBuf> {
    suite(
        test,
        "INFERDB_PROMTOOL_TESTDATA_DIR",
        "promtool-testdata",
        "cmd/promtool/testdata",
    )
}
