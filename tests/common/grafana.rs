//! Reading a Grafana dashboard's queries as Grafana sends them: every panel's `expr`, the
//! `query` template variables, and Grafana's interpolation of built-in intervals and variables.

use serde_json::Value as Json;

/// Every `expr` of every panel (rows' nested panels included), with the panel title.
pub fn panel_exprs(d: &Json) -> Vec<(String, String)> {
    fn walk(panels: &Json, out: &mut Vec<(String, String)>) {
        for p in panels.as_array().into_iter().flatten() {
            let title = p["title"].as_str().unwrap_or("").to_string();
            for t in p["targets"].as_array().into_iter().flatten() {
                if let Some(e) = t["expr"].as_str() {
                    out.push((title.clone(), e.to_string()));
                }
            }
            walk(&p["panels"], out);
        }
    }
    let mut out = vec![];
    walk(&d["panels"], &mut out);
    out
}

/// The `query` template variables: (name, query).
pub fn variable_queries(d: &Json) -> Vec<(String, String)> {
    d["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| v["type"] == "query")
        .map(|v| {
            let q = match &v["query"] {
                Json::String(s) => s.clone(),
                o => o["query"].as_str().unwrap_or("").to_string(),
            };
            (v["name"].as_str().unwrap_or("").to_string(), q)
        })
        .collect()
}

/// Grafana's interpolation: built-in intervals, then variables (`$name` or `${name}`) from
/// `vars`; an unknown variable is an error.
pub fn substitute(q: &str, vars: &[(&str, &str)]) -> Result<String, String> {
    let s = q
        .replace("$__rate_interval", "1m")
        .replace("${__rate_interval}", "1m")
        .replace("$__range", "1h")
        .replace("$__interval", "15s");
    let mut out = String::with_capacity(s.len());
    let mut rest = s.as_str();
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let tail = &rest[i + 1..];
        let (name, after) = if let Some(t) = tail.strip_prefix('{') {
            let end = t.find('}').ok_or_else(|| format!("unclosed ${{ in {q}"))?;
            (&t[..end], &t[end + 1..])
        } else {
            let end = tail
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(tail.len());
            (&tail[..end], &tail[end..])
        };
        let v = vars
            .iter()
            .find(|(n, _)| *n == name)
            .ok_or_else(|| format!("unknown variable ${name} in {q}"))?;
        out.push_str(v.1);
        rest = after;
    }
    out.push_str(rest);
    Ok(out)
}
