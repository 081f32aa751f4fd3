//! Every expression of vLLM's Grafana dashboards (`shared/fixtures/vllm/dashboard-queries.txt`),
//! with Grafana's variables substituted, parses, prints and re-parses to the same AST; the
//! selectors of the template-variable queries parse as `match[]` selectors.

use std::path::PathBuf;

use inferdb_query::parser::{parse, parse_matchers};

fn fixture() -> Option<String> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/fixtures/vllm/dashboard-queries.txt");
    std::fs::read_to_string(p).ok()
}

/// Grafana's substitution: intervals become durations, `$var` inside a regex matcher matches
/// everything, inside an equality matcher a concrete value (the SLO variables are `le` values).
fn substitute(q: &str) -> String {
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

#[test]
fn dashboard_queries_parse_and_round_trip() {
    let Some(text) = fixture() else {
        eprintln!("dashboard fixture not found; skipping");
        return;
    };
    let mut n = 0;
    let mut failures = Vec::new();
    for line in text.lines() {
        if line.starts_with("# ==== TEMPLATE VARIABLES ====") {
            break;
        }
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let q = substitute(line);
        n += 1;
        match parse(&q) {
            Ok(ast) => {
                let printed = ast.to_string();
                match parse(&printed) {
                    Ok(again) if again == ast => {}
                    other => failures.push(format!("{q}\n  printed {printed}\n  -> {other:?}")),
                }
            }
            Err(e) => failures.push(format!("{q}: {e}")),
        }
    }
    assert!(n >= 150, "only {n} dashboard expressions found");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn template_variable_selectors_parse_as_match_selectors() {
    let Some(text) = fixture() else {
        return;
    };
    let vars = text
        .split("\n# ==== TEMPLATE VARIABLES ====")
        .nth(1)
        .expect("template variables section");
    let mut n = 0;
    for line in vars.lines() {
        let Some(args) = line
            .strip_prefix("label_values(")
            .and_then(|r| r.strip_suffix(')'))
        else {
            continue;
        };
        // label_values(<selector>, <label>) or label_values(<label>).
        let Some((sel, _label)) = args.rsplit_once(", ") else {
            continue;
        };
        let sel = substitute(sel);
        let ms = parse_matchers(&sel).unwrap_or_else(|e| panic!("{sel}: {e}"));
        assert_eq!(
            ms.last().map(|m| m.name.as_str()),
            Some("__name__"),
            "{sel}"
        );
        n += 1;
    }
    assert!(n >= 10, "only {n} selectors");
}

#[test]
fn substitution_examples() {
    assert_eq!(
        substitute("rate(a{job=~\"$job\", m=\"$model_name\", le=\"$ttft_slo\"}[$__rate_interval])"),
        "rate(a{job=~\".*\", m=\"x\", le=\"0.5\"}[1m])"
    );
}
