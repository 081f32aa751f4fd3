//! Every `eval` expression of the core promqltest files parses (unless the case expects a
//! failure), prints, and re-parses to the same AST. Cases expected to fail at parse time
//! fail with the expected message.

mod common;

use std::path::PathBuf;

use common::{promqltest_dir, PROMQLTEST_CORE as CORE};
use inferdb_query::parser::parse;

fn suite_dir() -> Option<PathBuf> {
    promqltest_dir("parser_promqltest")
}

/// An `eval` case: the expression, whether a failure is expected, and the expected message.
struct Case {
    file: String,
    line: usize,
    expr: String,
    fail: bool,
    msg: Option<String>,
}

fn cases(file: &str, text: &str) -> Vec<Case> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        if !l.starts_with("eval") {
            continue;
        }
        let (cmd, rest) = l.split_once(' ').expect("eval line has arguments");
        let expr = if let Some(r) = rest.strip_prefix("instant at ") {
            r.split_once(' ').map(|x| x.1).unwrap_or("")
        } else if let Some(r) = rest.strip_prefix("range from ") {
            // from <a> to <b> step <s> <expr>
            let mut parts = r.splitn(6, ' ');
            let _ = (
                parts.next(),
                parts.next(),
                parts.next(),
                parts.next(),
                parts.next(),
            );
            parts.next().unwrap_or("")
        } else {
            panic!("{file}:{}: unknown eval form {l}", i + 1)
        };
        let mut fail = cmd == "eval_fail";
        let mut msg = None;
        for next in &lines[i + 1..] {
            if !next.starts_with([' ', '\t']) || next.trim().is_empty() {
                break;
            }
            let t = next.trim();
            if let Some(r) = t.strip_prefix("expect fail") {
                fail = true;
                if let Some(m) = r.trim().strip_prefix("msg:") {
                    msg = Some(m.trim().to_string());
                }
            }
        }
        out.push(Case {
            file: file.to_string(),
            line: i + 1,
            expr: expr.to_string(),
            fail,
            msg,
        });
    }
    out
}

#[test]
fn core_eval_expressions_parse_and_round_trip() {
    let Some(dir) = suite_dir() else {
        return;
    };
    let mut failures = Vec::new();
    let mut parsed = 0;
    for f in CORE {
        let text = std::fs::read_to_string(dir.join(format!("{f}.test"))).expect("read test file");
        for c in cases(f, &text) {
            match parse(&c.expr) {
                Ok(ast) => {
                    parsed += 1;
                    let printed = ast.to_string();
                    match parse(&printed) {
                        Ok(again) if again == ast => {}
                        Ok(_) => failures.push(format!(
                            "{}:{}: {} printed as {printed} re-parses differently",
                            c.file, c.line, c.expr
                        )),
                        Err(e) => failures.push(format!(
                            "{}:{}: {} printed as {printed} fails to re-parse: {e}",
                            c.file, c.line, c.expr
                        )),
                    }
                }
                Err(e) if !c.fail => {
                    failures.push(format!("{}:{}: {}: {e}", c.file, c.line, c.expr))
                }
                Err(e) => {
                    if let Some(m) = &c.msg {
                        if *m != e.to_string() && *m != e.message {
                            failures.push(format!(
                                "{}:{}: {}: expected error {m:?}, got {e}",
                                c.file, c.line, c.expr
                            ));
                        }
                    }
                }
            }
        }
    }
    assert!(parsed > 1200, "only {parsed} expressions parsed");
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn duration_expression_file_parses() {
    let Some(dir) = suite_dir() else {
        return;
    };
    let text = std::fs::read_to_string(dir.join("duration_expression.test")).expect("read");
    let mut failures = Vec::new();
    let all = cases("duration_expression", &text);
    assert!(all.len() > 40);
    for c in all {
        match parse(&c.expr) {
            Ok(ast) => {
                let printed = ast.to_string();
                if parse(&printed).ok().as_ref() != Some(&ast) {
                    failures.push(format!("{}: {} printed as {printed}", c.line, c.expr));
                }
            }
            Err(e) if !c.fail => failures.push(format!("{}: {}: {e}", c.line, c.expr)),
            Err(_) => {}
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
