//! The rule-file format (Prometheus' `rulefmt`): groups of recording and alerting rules,
//! read with positions so every problem is reported as Prometheus reports it
//! (`rules.yml: 7:15: group "g", rule 1, "x": could not parse expression: ...`).

use std::path::Path;

use super::yaml::{self, Decoder, Pos};

/// A rule file: its groups in file order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RuleFile {
    /// The groups.
    pub groups: Vec<RuleGroup>,
}

/// A group: rules evaluated in order, on one schedule.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RuleGroup {
    /// `name`.
    pub name: String,
    /// `interval` in milliseconds (0: the global evaluation interval).
    pub interval_ms: i64,
    /// `query_offset` in milliseconds (Prometheus 3), `None` when unset.
    pub query_offset_ms: Option<i64>,
    /// `limit` (0: none).
    pub limit: i64,
    /// `labels` added to every rule's output (Prometheus 3).
    pub labels: Vec<(String, String)>,
    /// The rules.
    pub rules: Vec<Rule>,
}

/// One recording (`record`) or alerting (`alert`) rule.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rule {
    /// `record`: the name of the recorded series.
    pub record: String,
    /// `alert`: the alert's name.
    pub alert: String,
    /// `expr`: the PromQL expression.
    pub expr: String,
    /// `for` in milliseconds.
    pub for_ms: i64,
    /// `keep_firing_for` in milliseconds.
    pub keep_firing_for_ms: i64,
    /// `labels`.
    pub labels: Vec<(String, String)>,
    /// `annotations` (alerting rules).
    pub annotations: Vec<(String, String)>,
}

impl Rule {
    /// The rule's name: the alert's or the recorded series'.
    pub fn name(&self) -> &str {
        if self.alert.is_empty() {
            &self.record
        } else {
            &self.alert
        }
    }
}

/// Why a rule file was refused: each message as Prometheus prints it, the file name first.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}", .0.join("\n"))]
pub struct RuleFileErrors(pub Vec<String>);

struct RulePos {
    record: Pos,
    alert: Pos,
    expr: Pos,
}

const GROUPS_FIELDS: &[&str] = &["groups"];
const GROUP_FIELDS: &[&str] = &[
    "name",
    "interval",
    "query_offset",
    "limit",
    "rules",
    "labels",
];
const RULE_FIELDS: &[&str] = &[
    "record",
    "alert",
    "expr",
    "for",
    "keep_firing_for",
    "labels",
    "annotations",
];

/// Reads a rule file; errors are prefixed with `file` as Prometheus prints them.
pub fn parse_file(path: &Path, ignore_unknown_fields: bool) -> Result<RuleFile, RuleFileErrors> {
    let name = path.display().to_string();
    let text = std::fs::read(path)
        .map_err(|e| RuleFileErrors(vec![format!("{name}: open {name}: {}", go_io_error(&e))]))?;
    let text = String::from_utf8_lossy(&text);
    parse(&text, ignore_unknown_fields)
        .map_err(|e| RuleFileErrors(e.0.into_iter().map(|m| format!("{name}: {m}")).collect()))
}

/// Go's wording of an I/O error (`no such file or directory`).
pub fn go_io_error(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file or directory".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied".into(),
        _ => {
            let s = e.to_string();
            match s.find(" (os error") {
                Some(i) => s[..i].to_lowercase(),
                None => s,
            }
        }
    }
}

/// Parses and validates rule-file text (the first YAML document).
pub fn parse(text: &str, ignore_unknown_fields: bool) -> Result<RuleFile, RuleFileErrors> {
    let docs = yaml::parse(text).map_err(|e| RuleFileErrors(vec![e.to_string()]))?;
    let Some(doc) = docs.first() else {
        return Ok(RuleFile::default());
    };
    let mut de = Decoder::new(!ignore_unknown_fields);
    let mut file = RuleFile::default();
    let mut positions: Vec<(Pos, Vec<RulePos>)> = Vec::new();
    for (k, v) in de.fields(doc, "rulefmt.RuleGroups", GROUPS_FIELDS) {
        if k != "groups" {
            continue;
        }
        for g in de.seq(v, "[]rulefmt.RuleGroup") {
            let mut group = RuleGroup::default();
            let mut rule_pos = Vec::new();
            for (k, v) in de.fields(g, "rulefmt.RuleGroup", GROUP_FIELDS) {
                match k {
                    "name" => group.name = de.string(v),
                    "interval" => group.interval_ms = de.duration(v),
                    "query_offset" => group.query_offset_ms = Some(de.duration(v)),
                    "limit" => group.limit = de.int(v),
                    "labels" => group.labels = de.string_map(v),
                    "rules" => {
                        for r in de.seq(v, "[]rulefmt.Rule") {
                            let mut rule = Rule::default();
                            let mut p = RulePos {
                                record: Pos::default(),
                                alert: Pos::default(),
                                expr: Pos::default(),
                            };
                            for (k, v) in de.fields(r, "rulefmt.Rule", RULE_FIELDS) {
                                match k {
                                    "record" => {
                                        rule.record = de.string(v);
                                        p.record = v.pos();
                                    }
                                    "alert" => {
                                        rule.alert = de.string(v);
                                        p.alert = v.pos();
                                    }
                                    "expr" => {
                                        rule.expr = de.string(v);
                                        p.expr = v.pos();
                                    }
                                    "for" => rule.for_ms = de.duration(v),
                                    "keep_firing_for" => rule.keep_firing_for_ms = de.duration(v),
                                    "labels" => rule.labels = de.string_map(v),
                                    "annotations" => rule.annotations = de.string_map(v),
                                    _ => {}
                                }
                            }
                            group.rules.push(rule);
                            rule_pos.push(p);
                        }
                    }
                    _ => {}
                }
            }
            file.groups.push(group);
            positions.push((g.pos(), rule_pos));
        }
    }
    de.finish().map_err(|e| RuleFileErrors(vec![e]))?;
    let errs = validate(&file, &positions);
    if errs.is_empty() {
        Ok(file)
    } else {
        Err(RuleFileErrors(errs))
    }
}

fn is_valid_label_value(v: &str) -> bool {
    inferdb_query::parser::is_valid_utf8(v)
}

/// Prometheus 3 validates names as UTF-8 (`model.UTF8Validation`): any non-empty valid text.
fn is_valid_label_name(n: &str) -> bool {
    !n.is_empty() && inferdb_query::parser::is_valid_utf8(n)
}

fn is_valid_metric_name(n: &str) -> bool {
    is_valid_label_name(n)
}

fn validate(file: &RuleFile, positions: &[(Pos, Vec<RulePos>)]) -> Vec<String> {
    let mut errs = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (g, (gpos, rpos)) in file.groups.iter().zip(positions) {
        if g.name.is_empty() {
            errs.push(format!(
                "{}:{}: Groupname must not be empty",
                gpos.line, gpos.col
            ));
        }
        if !seen.insert(g.name.as_str()) {
            errs.push(format!(
                "{}:{}: groupname: \"{}\" is repeated in the same file",
                gpos.line, gpos.col, g.name
            ));
        }
        for (k, v) in &g.labels {
            if !is_valid_label_name(k) || k == "__name__" {
                errs.push(format!("invalid label name: {k}"));
            }
            if !is_valid_label_value(v) {
                errs.push(format!("invalid label value: {v}"));
            }
        }
        for (i, (r, p)) in g.rules.iter().zip(rpos).enumerate() {
            let prefix = |at: Option<(Pos, Option<Pos>)>| {
                let head = match at {
                    Some((a, Some(b))) => format!("{}:{}: {}:{}: ", a.line, a.col, b.line, b.col),
                    Some((a, None)) => format!("{}:{}: ", a.line, a.col),
                    None => String::new(),
                };
                format!(
                    "{head}group {}, rule {}, {}: ",
                    go_str(&g.name),
                    i + 1,
                    go_str(r.name())
                )
            };
            for (at, msg) in validate_rule(r, p) {
                errs.push(format!("{}{msg}", prefix(at)));
            }
        }
    }
    errs
}

fn go_str(s: &str) -> String {
    inferdb_query::parser::go_quote(s)
}

type At = Option<(Pos, Option<Pos>)>;

fn validate_rule(r: &Rule, p: &RulePos) -> Vec<(At, String)> {
    let mut out: Vec<(At, String)> = Vec::new();
    let both = Some((p.record, Some(p.alert)));
    if !r.record.is_empty() && !r.alert.is_empty() {
        out.push((both, "only one of 'record' and 'alert' must be set".into()));
    }
    if r.record.is_empty() && r.alert.is_empty() {
        out.push((both, "one of 'record' or 'alert' must be set".into()));
    }
    if r.expr.is_empty() {
        out.push((
            Some((p.expr, None)),
            "field 'expr' must be set in rule".into(),
        ));
    } else if let Err(e) = inferdb_query::parse(&r.expr) {
        out.push((
            Some((p.expr, None)),
            format!("could not parse expression: {e}"),
        ));
    }
    let rec = Some((p.record, None));
    if !r.record.is_empty() {
        if !r.annotations.is_empty() {
            out.push((rec, "invalid field 'annotations' in recording rule".into()));
        }
        if r.for_ms != 0 {
            out.push((rec, "invalid field 'for' in recording rule".into()));
        }
        if r.keep_firing_for_ms != 0 {
            out.push((
                rec,
                "invalid field 'keep_firing_for' in recording rule".into(),
            ));
        }
        if !is_valid_metric_name(&r.record) {
            out.push((rec, format!("invalid recording rule name: {}", r.record)));
        }
        if r.record.contains('{') || r.record.contains('}') {
            out.push((
                rec,
                format!(
                    "braces present in the recording rule name; should it be in expr?: {}",
                    r.record
                ),
            ));
        }
    }
    for (k, v) in &r.labels {
        if !is_valid_label_name(k) || k == "__name__" {
            out.push((None, format!("invalid label name: {k}")));
        }
        if !is_valid_label_value(v) {
            out.push((None, format!("invalid label value: {v}")));
        }
    }
    for (k, _) in &r.annotations {
        if !is_valid_label_name(k) {
            out.push((None, format!("invalid annotation name: {k}")));
        }
    }
    if !r.alert.is_empty() {
        let name = format!("__alert_{}", r.alert);
        for (k, v) in &r.labels {
            if let Err(e) = crate::template::parse_test_alert(&name, v) {
                out.push((None, format!("label {}: {e}", go_str(k))));
            }
        }
        for (k, v) in &r.annotations {
            if let Err(e) = crate::template::parse_test_alert(&name, v) {
                out.push((None, format!("annotation {}: {e}", go_str(k))));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_position_group_and_rule() {
        let text = "groups:\n  - name: bad-syntax\n    rules:\n      - record: x\n        expr: 'test +'\n";
        let e = parse(text, false).unwrap_err();
        assert_eq!(
            e.0,
            vec!["5:15: group \"bad-syntax\", rule 1, \"x\": could not parse expression: 1:7: parse error: unexpected end of input"]
        );
    }

    #[test]
    fn unknown_fields_refused_unless_ignored() {
        let text = "groups:\n  - name: g\n    owner: me\n    rules:\n      - record: x\n        expr: up\n";
        let e = parse(text, false).unwrap_err();
        assert_eq!(
            e.0,
            vec!["yaml: unmarshal errors:\n  line 3: field owner not found in type rulefmt.RuleGroup"]
        );
        let f = parse(text, true).unwrap();
        assert_eq!(f.groups[0].rules[0].expr, "up");
    }

    #[test]
    fn record_and_alert_checks() {
        let text = "groups:\n- name: g\n  rules:\n  - expr: up\n  - record: a\n    alert: b\n    expr: up\n  - record: r\n    for: 5m\n    expr: up\n";
        let e = parse(text, false).unwrap_err();
        assert_eq!(
            e.0,
            vec![
                "0:0: 0:0: group \"g\", rule 1, \"\": one of 'record' or 'alert' must be set",
                "5:13: 6:12: group \"g\", rule 2, \"b\": only one of 'record' and 'alert' must be set",
                "8:13: group \"g\", rule 3, \"r\": invalid field 'for' in recording rule",
            ]
        );
    }

    #[test]
    fn empty_and_repeated_group_names() {
        let text =
            "groups:\n- name: ''\n  rules: []\n- name: a\n  rules: []\n- name: a\n  rules: []\n";
        let e = parse(text, false).unwrap_err();
        assert_eq!(
            e.0,
            vec![
                "2:3: Groupname must not be empty",
                "6:3: groupname: \"a\" is repeated in the same file"
            ]
        );
    }

    #[test]
    fn bad_yaml_and_bad_duration() {
        assert!(parse("groups: [", false).is_err());
        let e = parse("groups:\n- name: g\n  interval: 5x\n  rules: []\n", false).unwrap_err();
        assert_eq!(e.0, vec!["unknown unit \"x\" in duration \"5x\""]);
    }
}
