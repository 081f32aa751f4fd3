//! Every expression of vLLM's Grafana dashboards (`tests/fixtures/vllm/dashboard-queries.txt`),
//! with Grafana's variables substituted, parses, prints and re-parses to the same AST; the
//! selectors of the template-variable queries parse as `match[]` selectors.

mod common;

use common::{dashboard_expressions, fixture, substitute};
use inferdb_query::parser::{parse, parse_matchers};

fn queries() -> String {
    fixture("vllm/dashboard-queries.txt")
}

#[test]
fn dashboard_queries_parse_and_round_trip() {
    let text = queries();
    let mut n = 0;
    let mut failures = Vec::new();
    for line in dashboard_expressions(&text) {
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
    let text = queries();
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
