//! `inferdb rules check`: promtool's `check rules` (the same checks, messages, lint and
//! exit codes: 0 fine, 1 invalid, 3 lint problems with `--lint-fatal`).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::PathBuf;

use super::file::{self, RuleFile, RuleFileErrors};

/// Lint settings (`--lint`, `--lint-fatal`, `--ignore-unknown-fields`).
#[derive(Debug, Clone)]
pub struct CheckOptions {
    /// `--lint`: comma-separated `all`, `duplicate-rules`, `none`.
    pub lint: String,
    /// `--lint-fatal`: lint problems exit with 3.
    pub lint_fatal: bool,
    /// `--ignore-unknown-fields`.
    pub ignore_unknown_fields: bool,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            lint: "duplicate-rules".into(),
            lint_fatal: false,
            ignore_unknown_fields: false,
        }
    }
}

/// Exit code of a check that found lint problems under `--lint-fatal`.
pub const LINT_EXIT_CODE: i32 = 3;

/// One rule's identity for the duplicate lint: its name and its labels (group's overlaid by
/// the rule's), sorted.
type RuleKey = (String, Vec<(String, String)>);

/// The duplicated rules of a file (each listed once), as promtool finds them.
pub fn duplicates(f: &RuleFile) -> Vec<RuleKey> {
    let mut keys: Vec<RuleKey> = Vec::new();
    for g in &f.groups {
        for r in &g.rules {
            let mut m: BTreeMap<String, String> = g.labels.iter().cloned().collect();
            m.extend(r.labels.iter().cloned());
            m.retain(|_, v| !v.is_empty());
            keys.push((r.name().to_string(), m.into_iter().collect()));
        }
    }
    keys.sort();
    let mut out: Vec<RuleKey> = Vec::new();
    for w in keys.windows(2) {
        if w[0] == w[1] && out.last() != Some(&w[1]) {
            out.push(w[1].clone());
        }
    }
    out
}

fn lint_duplicates(opts: &CheckOptions) -> bool {
    let mut on = false;
    for s in opts.lint.split(',') {
        match s {
            "all" | "duplicate-rules" => on = true,
            "none" | "" => {}
            other => println!(
                "WARNING: unknown lint option: {}",
                inferdb_query::parser::go_quote(other)
            ),
        }
    }
    on
}

/// Checks one parsed (or refused) file; prints promtool's lines; returns (failed, has_errors).
fn report(
    parsed: Result<RuleFile, RuleFileErrors>,
    opts: &CheckOptions,
    lint: bool,
) -> (bool, bool) {
    let f = match parsed {
        Ok(f) => f,
        Err(e) => {
            eprintln!("  FAILED:");
            for m in e.0 {
                eprintln!("{m}");
            }
            return (true, true);
        }
    };
    let n: usize = f.groups.iter().map(|g| g.rules.len()).sum();
    let _ = opts;
    if lint {
        let d = duplicates(&f);
        if !d.is_empty() {
            let mut msg = format!("lint error {} duplicate rule(s) found.\n", d.len());
            for (name, labels) in &d {
                msg.push_str(&format!("Metric: {name}\nLabel(s):\n"));
                for (k, v) in labels {
                    msg.push_str(&format!("\t{k}: {v}\n"));
                }
            }
            msg.push_str("Might cause inconsistency while recording expressions");
            eprintln!("  FAILED:");
            eprintln!("{msg}");
            println!();
            return (true, false);
        }
    }
    println!("  SUCCESS: {n} rules found");
    println!();
    (false, false)
}

/// Checks rule files (standard input when `files` is empty); returns the exit code.
pub fn check_files(files: &[PathBuf], opts: &CheckOptions) -> i32 {
    let lint = lint_duplicates(opts);
    let mut failed = false;
    let mut has_errors = false;
    if files.is_empty() {
        println!("Checking standard input");
        let mut buf = Vec::new();
        if let Err(e) = std::io::stdin().read_to_end(&mut buf) {
            eprintln!("  FAILED: {e}");
            return 1;
        }
        let text = String::from_utf8_lossy(&buf);
        let (f, h) = report(file::parse(&text, opts.ignore_unknown_fields), opts, lint);
        failed |= f;
        has_errors |= h;
    } else {
        for p in files {
            println!("Checking {}", p.display());
            let (f, h) = report(file::parse_file(p, opts.ignore_unknown_fields), opts, lint);
            failed |= f;
            has_errors |= h;
        }
    }
    if failed && has_errors {
        1
    } else if failed && opts.lint_fatal {
        LINT_EXIT_CODE
    } else {
        0
    }
}
