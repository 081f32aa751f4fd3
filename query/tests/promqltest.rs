//! Runner for Prometheus' promqltest scripts (see `../shared/promqltest/FORMAT.md`).
//!
//! Reads the core test files from `../shared/promqltest` (override with
//! `INFERDB_PROMQLTEST_DIR`; skipped with a message when neither exists, failed instead under
//! `INFERDB_REQUIRE_CONFORMANCE=1`), runs every eval case against the engine over an in-memory
//! store, prints `file: P passed, F failed, S skipped` per file and ends with
//! `promqltest core: P passed, F failed, S skipped`; before the per-file lines, one line
//! `promqltest step-wise: P passed, F failed, S skipped` for the whole suite run with
//! [`RangeEvaluation::StepWise`] (no column-wise range evaluation). Cases listed in
//! `tests/promqltest-skip.txt` (`file:line reason`) are skipped; the process fails when fewer
//! cases pass than `tests/promqltest-ratchet.txt` says. `--verbose` or `PROMQLTEST_VERBOSE=1`
//! prints every failure; `PROMQLTEST_FILE=name` runs one file, `PROMQLTEST_LINE=n` one case.
//!
//! As Prometheus' own runner does, every instant query is also run as a range query around
//! its time, and again with `@ <time>` added to its selectors at other evaluation times.

mod common;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use inferdb_query::ast::{AtModifier, Expr, ExprKind};
use inferdb_query::storage::MemStorage;
use inferdb_query::{Engine, EngineOptions, QueryError, QueryResult, RangeEvaluation, Value};
use inferdb_storage::{stale_nan, Labels};
use regex::Regex;

use common::{promqltest_dir, PROMQLTEST_CORE as CORE};

// ---------------------------------------------------------------- series notation

#[derive(Debug, Clone, Copy)]
enum SeqVal {
    Omitted,
    Value(f64),
    Histogram,
}

fn parse_duration(s: &str) -> Option<i64> {
    inferdb_query::parser::parse_model_duration_ms(s.trim()).ok()
}

fn parse_float(s: &str) -> Option<f64> {
    let l = s.to_ascii_lowercase();
    match l.as_str() {
        "inf" | "+inf" => return Some(f64::INFINITY),
        "-inf" => return Some(f64::NEG_INFINITY),
        "nan" => return Some(f64::NAN),
        _ => {}
    }
    if let Some(h) = l.strip_prefix("0x") {
        return i64::from_str_radix(h, 16).ok().map(|v| v as f64);
    }
    s.parse::<f64>().ok()
}

/// Splits a number prefix off `s`: sign, digits, dot, exponent, or Inf/NaN.
fn split_number(s: &str) -> Option<(f64, &str)> {
    let b = s.as_bytes();
    let mut i = 0;
    if i < b.len() && (b[i] == b'-' || b[i] == b'+') {
        i += 1;
    }
    let rest = &s[i..];
    for word in ["Inf", "inf", "NaN", "nan"] {
        if rest.starts_with(word) {
            let end = i + word.len();
            return parse_float(&s[..end]).map(|f| (f, &s[end..]));
        }
    }
    let start_digits = i;
    while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'.') {
        i += 1;
    }
    if i == start_digits {
        return None;
    }
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        let mut j = i + 1;
        if j < b.len() && (b[j] == b'-' || b[j] == b'+') {
            j += 1;
        }
        let d = j;
        while j < b.len() && b[j].is_ascii_digit() {
            j += 1;
        }
        if j > d {
            i = j;
        }
    }
    parse_float(&s[..i]).map(|f| (f, &s[i..]))
}

fn tokenize_values(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut depth = 0;
    let chars: Vec<char> = s.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '{' && i + 1 < chars.len() && chars[i + 1] == '{' {
            depth += 1;
            cur.push_str("{{");
            i += 2;
            continue;
        }
        if c == '}' && i + 1 < chars.len() && chars[i + 1] == '}' && depth > 0 {
            depth -= 1;
            cur.push_str("}}");
            i += 2;
            continue;
        }
        if c.is_whitespace() && depth == 0 {
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
        } else {
            cur.push(c);
        }
        i += 1;
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

fn parse_values(s: &str) -> Result<Vec<SeqVal>, String> {
    let mut out = Vec::new();
    for tok in tokenize_values(s) {
        if tok.contains("{{") {
            // Native histogram(s), possibly `{{..}}xN` or `{{..}}+{{..}}xN`.
            let n = tok
                .rsplit_once("}}x")
                .and_then(|(_, n)| n.parse::<usize>().ok())
                .map(|n| n + 1)
                .unwrap_or(1);
            for _ in 0..n {
                out.push(SeqVal::Histogram);
            }
            continue;
        }
        if tok == "_" {
            out.push(SeqVal::Omitted);
            continue;
        }
        if let Some(n) = tok.strip_prefix("_x") {
            let n: usize = n.parse().map_err(|_| format!("bad repeat {tok}"))?;
            for _ in 0..n {
                out.push(SeqVal::Omitted);
            }
            continue;
        }
        if tok == "stale" {
            out.push(SeqVal::Value(stale_nan()));
            continue;
        }
        let (a, rest) = split_number(&tok).ok_or_else(|| format!("bad value {tok}"))?;
        if rest.is_empty() {
            out.push(SeqVal::Value(a));
            continue;
        }
        if let Some(n) = rest.strip_prefix('x') {
            let n: usize = n.parse().map_err(|_| format!("bad repeat {tok}"))?;
            for _ in 0..=n {
                out.push(SeqVal::Value(a));
            }
            continue;
        }
        let (sign, rest2) = match rest.as_bytes()[0] {
            b'+' => (1.0, &rest[1..]),
            b'-' => (-1.0, &rest[1..]),
            _ => return Err(format!("bad value {tok}")),
        };
        let (b, rest3) = split_number(rest2).ok_or_else(|| format!("bad value {tok}"))?;
        let n: usize = rest3
            .strip_prefix('x')
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| format!("bad value {tok}"))?;
        let step = sign * b;
        let mut v = a;
        for _ in 0..=n {
            out.push(SeqVal::Value(v));
            v += step;
        }
    }
    Ok(out)
}

fn parse_label_value(chars: &[char], i: &mut usize) -> Result<String, String> {
    let q = chars[*i];
    *i += 1;
    let mut s = String::new();
    while *i < chars.len() && chars[*i] != q {
        let c = chars[*i];
        if c == '\\' && q != '`' && *i + 1 < chars.len() {
            *i += 1;
            match chars[*i] {
                'n' => s.push('\n'),
                't' => s.push('\t'),
                '\\' => s.push('\\'),
                '"' => s.push('"'),
                '\'' => s.push('\''),
                'x' if *i + 2 < chars.len() => {
                    let h: String = chars[*i + 1..*i + 3].iter().collect();
                    if let Ok(b) = u8::from_str_radix(&h, 16) {
                        s.push(b as char);
                    }
                    *i += 2;
                }
                'u' if *i + 4 < chars.len() => {
                    let h: String = chars[*i + 1..*i + 5].iter().collect();
                    if let Some(c) = u32::from_str_radix(&h, 16).ok().and_then(char::from_u32) {
                        s.push(c);
                    }
                    *i += 4;
                }
                other => {
                    s.push('\\');
                    s.push(other);
                }
            }
        } else {
            s.push(c);
        }
        *i += 1;
    }
    if *i >= chars.len() {
        return Err("unterminated label value".into());
    }
    *i += 1;
    Ok(s)
}

/// Parses `name{a="b"} values...` into labels and the rest of the line.
fn parse_series(line: &str) -> Result<(Labels, String), String> {
    let chars: Vec<char> = line.chars().collect();
    let mut i = 0;
    let mut pairs: Vec<(String, String)> = Vec::new();
    let mut name = String::new();
    while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_' || chars[i] == ':') {
        name.push(chars[i]);
        i += 1;
    }
    if !name.is_empty() {
        pairs.push(("__name__".into(), name));
    }
    if i < chars.len() && chars[i] == '{' {
        i += 1;
        loop {
            while i < chars.len() && (chars[i].is_whitespace() || chars[i] == ',') {
                i += 1;
            }
            if i >= chars.len() {
                return Err("unterminated labels".into());
            }
            if chars[i] == '}' {
                i += 1;
                break;
            }
            let lname = if chars[i] == '"' {
                parse_label_value(&chars, &mut i)?
            } else {
                let mut n = String::new();
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    n.push(chars[i]);
                    i += 1;
                }
                n
            };
            while i < chars.len() && chars[i].is_whitespace() {
                i += 1;
            }
            if i >= chars.len() || chars[i] != '=' {
                // A bare quoted name is a metric name (`{"name"}`).
                pairs.push(("__name__".into(), lname));
                continue;
            }
            i += 1;
            while i < chars.len() && chars[i].is_whitespace() {
                i += 1;
            }
            if i >= chars.len() || !matches!(chars[i], '"' | '\'' | '`') {
                return Err(format!("bad label value in {line}"));
            }
            let v = parse_label_value(&chars, &mut i)?;
            pairs.push((lname, v));
        }
    }
    let rest: String = chars[i..].iter().collect();
    Ok((Labels::from_pairs(pairs), rest.trim().to_string()))
}

// ---------------------------------------------------------------- test commands

#[derive(Debug, Clone)]
struct ExpectAnno {
    kind: String,
    msg: Option<String>,
    regex: Option<Regex>,
}

impl ExpectAnno {
    fn matches(&self, s: &str) -> bool {
        if let Some(r) = &self.regex {
            return r.is_match(s);
        }
        match &self.msg {
            Some(m) => m == s,
            None => true,
        }
    }
}

#[derive(Debug, Clone)]
struct Expected {
    pos: usize,
    vals: Vec<SeqVal>,
}

#[derive(Debug, Clone)]
struct EvalCmd {
    line: usize,
    expr: String,
    is_range: bool,
    start: i64,
    end: i64,
    step: i64,
    fail: bool,
    warn: bool,
    info: bool,
    ordered: bool,
    expects: Vec<ExpectAnno>,
    expected_fail_message: Option<String>,
    expected_fail_regexp: Option<Regex>,
    scalar: Option<f64>,
    metrics: Vec<(Labels, Expected)>,
    expected_string: Option<String>,
    exclude_from_range: bool,
    has_histograms: bool,
}

impl EvalCmd {
    fn is_fail(&self) -> bool {
        self.fail || self.expects.iter().any(|e| e.kind == "fail")
    }
    fn is_ordered(&self) -> bool {
        self.ordered || self.expects.iter().any(|e| e.kind == "ordered")
    }
    fn of_kind(&self, k: &str) -> Vec<&ExpectAnno> {
        self.expects.iter().filter(|e| e.kind == k).collect()
    }
}

#[derive(Debug)]
enum Cmd {
    Clear,
    Load {
        interval: i64,
        nhcb: bool,
        series: Vec<(Labels, Vec<SeqVal>)>,
    },
    Eval(Box<EvalCmd>),
}

fn parse_expect(line: &str) -> Result<ExpectAnno, String> {
    let re =
        Regex::new(r"^expect\s+(ordered|fail|warn|no_warn|info|no_info)(?:\s+(regex|msg):(.+))?$")
            .map_err(|e| e.to_string())?;
    let caps = re
        .captures(line.trim())
        .ok_or_else(|| format!("invalid expect statement: {line}"))?;
    let kind = caps[1].to_string();
    let mut e = ExpectAnno {
        kind,
        msg: None,
        regex: None,
    };
    if let Some(m) = caps.get(2) {
        let v = caps[3].trim().to_string();
        if m.as_str() == "msg" {
            e.msg = Some(v);
        } else {
            e.regex = Some(Regex::new(&v).map_err(|err| format!("bad regex {v}: {err}"))?);
        }
    }
    Ok(e)
}

fn parse_file(content: &str) -> Result<Vec<Cmd>, String> {
    let lines: Vec<String> = content
        .split('\n')
        .map(|l| {
            let t = l.trim();
            if t.starts_with('#') {
                String::new()
            } else {
                t.to_string()
            }
        })
        .collect();
    let re_load = Regex::new(r"^load(?:_(with_nhcb))?\s+(.+?)$").unwrap();
    let re_inst =
        Regex::new(r"^eval(?:_(fail|warn|ordered|info))?\s+instant\s+(?:at\s+(.+?))?\s+(.+)$")
            .unwrap();
    let re_range = Regex::new(
        r"^eval(?:_(fail|warn|info))?\s+range\s+from\s+(.+)\s+to\s+(.+)\s+step\s+(.+?)\s+(.+)$",
    )
    .unwrap();
    let re_exp_range =
        Regex::new(r"^expect range vector\s+from\s+(.+)\s+to\s+(.+)\s+step\s+(.+)$").unwrap();
    let mut cmds = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let l = &lines[i];
        if l.is_empty() {
            i += 1;
            continue;
        }
        let first = l.split_whitespace().next().unwrap_or("").to_lowercase();
        if first == "clear" {
            cmds.push(Cmd::Clear);
            i += 1;
        } else if first.starts_with("load") {
            let caps = re_load
                .captures(l)
                .ok_or_else(|| format!("line {}: bad load", i + 1))?;
            let interval =
                parse_duration(&caps[2]).ok_or_else(|| format!("line {}: bad interval", i + 1))?;
            let mut series = Vec::new();
            i += 1;
            while i < lines.len() && !lines[i].is_empty() {
                let (labels, rest) =
                    parse_series(&lines[i]).map_err(|e| format!("line {}: {e}", i + 1))?;
                let vals = parse_values(&rest).map_err(|e| format!("line {}: {e}", i + 1))?;
                series.push((labels, vals));
                i += 1;
            }
            let nhcb = caps.get(1).is_some();
            cmds.push(Cmd::Load {
                interval,
                nhcb,
                series,
            });
        } else if first.starts_with("eval") {
            let mut cmd = EvalCmd {
                line: i + 1,
                expr: String::new(),
                is_range: false,
                start: 0,
                end: 0,
                step: 0,
                fail: false,
                warn: false,
                info: false,
                ordered: false,
                expects: vec![],
                expected_fail_message: None,
                expected_fail_regexp: None,
                scalar: None,
                metrics: vec![],
                expected_string: None,
                exclude_from_range: false,
                has_histograms: false,
            };
            let modifier;
            if let Some(c) = re_inst.captures(l) {
                modifier = c.get(1).map(|m| m.as_str().to_string());
                let at = c.get(2).map(|m| m.as_str()).unwrap_or("0");
                let t =
                    parse_duration(at).ok_or_else(|| format!("line {}: bad time {at}", i + 1))?;
                cmd.start = t;
                cmd.end = t;
                cmd.expr = c[3].to_string();
            } else if let Some(c) = re_range.captures(l) {
                modifier = c.get(1).map(|m| m.as_str().to_string());
                cmd.is_range = true;
                cmd.start = parse_duration(&c[2]).ok_or("bad start")?;
                cmd.end = parse_duration(&c[3]).ok_or("bad end")?;
                cmd.step = parse_duration(&c[4]).ok_or("bad step")?;
                cmd.expr = c[5].to_string();
            } else {
                return Err(format!("line {}: bad eval", i + 1));
            }
            match modifier.as_deref() {
                Some("fail") => cmd.fail = true,
                Some("warn") => cmd.warn = true,
                Some("info") => cmd.info = true,
                Some("ordered") => cmd.ordered = true,
                _ => {}
            }
            let mut j = 0usize;
            i += 1;
            while i < lines.len() && !lines[i].is_empty() {
                let d = &lines[i];
                j += 1;
                if cmd.fail && d.starts_with("expected_fail_message") {
                    cmd.expected_fail_message =
                        Some(d["expected_fail_message".len()..].trim().to_string());
                    i += 1;
                    break;
                }
                if cmd.fail && d.starts_with("expected_fail_regexp") {
                    cmd.expected_fail_regexp =
                        Regex::new(d["expected_fail_regexp".len()..].trim()).ok();
                    i += 1;
                    break;
                }
                if let Some(c) = re_exp_range.captures(d) {
                    cmd.start = parse_duration(&c[1]).ok_or("bad from")?;
                    cmd.end = parse_duration(&c[2]).ok_or("bad to")?;
                    cmd.step = parse_duration(&c[3]).ok_or("bad step")?;
                    cmd.exclude_from_range = true;
                    j -= 1;
                    i += 1;
                    continue;
                }
                if let Some(rest) = d.strip_prefix("expect string") {
                    cmd.expected_string = Some(go_unquote(rest.trim()));
                    cmd.exclude_from_range = true;
                    j -= 1;
                    i += 1;
                    continue;
                }
                if d.split(' ').next() == Some("expect") {
                    cmd.expects
                        .push(parse_expect(d).map_err(|e| format!("line {}: {e}", i + 1))?);
                    j -= 1;
                    i += 1;
                    continue;
                }
                if let Some(f) = parse_number(d) {
                    cmd.scalar = Some(f);
                    i += 1;
                    break;
                }
                let (labels, rest) = parse_series(d).map_err(|e| format!("line {}: {e}", i + 1))?;
                let vals = parse_values(&rest).map_err(|e| format!("line {}: {e}", i + 1))?;
                if vals.iter().any(|v| matches!(v, SeqVal::Histogram)) {
                    cmd.has_histograms = true;
                }
                cmd.metrics.push((labels, Expected { pos: j, vals }));
                i += 1;
            }
            // Skip to the end of the block (lines after an early break are ignored as
            // Prometheus ignores them too).
            while i < lines.len() && !lines[i].is_empty() {
                i += 1;
            }
            cmds.push(Cmd::Eval(Box::new(cmd)));
        } else {
            return Err(format!("line {}: invalid command {l:?}", i + 1));
        }
    }
    Ok(cmds)
}

/// Go's `strconv.Unquote` for the three quote styles (common escapes only).
fn go_unquote(r: &str) -> String {
    if let Some(x) = r.strip_prefix('`').and_then(|x| x.strip_suffix('`')) {
        return x.to_string();
    }
    let inner = r
        .strip_prefix('"')
        .and_then(|x| x.strip_suffix('"'))
        .or_else(|| r.strip_prefix('\'').and_then(|x| x.strip_suffix('\'')))
        .unwrap_or(r);
    let chars: Vec<char> = format!("\"{inner}\"").chars().collect();
    let mut i = 0;
    parse_label_value(&chars, &mut i).unwrap_or_else(|_| inner.to_string())
}

/// Go's `strconv.ParseInt(s, 0, 64)` then `ParseFloat`.
fn parse_number(s: &str) -> Option<f64> {
    let t = s.trim();
    let (neg, body) = match t.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let int = if let Some(h) = body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
        i64::from_str_radix(h, 16).ok()
    } else if body.len() > 1 && body.starts_with('0') && body.chars().all(|c| c.is_ascii_digit()) {
        i64::from_str_radix(&body[1..], 8).ok()
    } else if !body.is_empty() && body.chars().all(|c| c.is_ascii_digit()) {
        body.parse::<i64>().ok()
    } else {
        None
    };
    if let Some(v) = int {
        return Some(if neg { -(v as f64) } else { v as f64 });
    }
    let lower = t.to_ascii_lowercase();
    match lower.as_str() {
        "inf" | "+inf" | "infinity" | "+infinity" => return Some(f64::INFINITY),
        "-inf" | "-infinity" => return Some(f64::NEG_INFINITY),
        "nan" | "+nan" | "-nan" => return Some(f64::NAN),
        _ => {}
    }
    if t.chars()
        .any(|c| c.is_ascii_alphabetic() && c != 'e' && c != 'E')
    {
        return None;
    }
    t.parse::<f64>().ok()
}

// ---------------------------------------------------------------- comparison

fn almost_equal(a: f64, b: f64, eps: f64) -> bool {
    let sa = inferdb_storage::is_stale_nan(a);
    let sb = inferdb_storage::is_stale_nan(b);
    if sa || sb {
        return sa && sb;
    }
    if a.is_nan() && b.is_nan() {
        return true;
    }
    if a == b {
        return true;
    }
    let min_normal = f64::from_bits(0x0010_0000_0000_0000);
    let abs_sum = a.abs() + b.abs();
    let diff = (a - b).abs();
    if a == 0.0 || b == 0.0 || abs_sum < min_normal {
        return diff < eps * min_normal;
    }
    diff / abs_sum.min(f64::MAX) < eps
}

const EPS: f64 = 0.000001;

fn compare_result(cmd: &EvalCmd, value: &Value) -> Result<(), String> {
    let expected: HashMap<&Labels, &Expected> = cmd.metrics.iter().map(|(l, e)| (l, e)).collect();
    match value {
        Value::Matrix(m) => {
            if cmd.is_ordered() {
                return Err("expected ordered result, but query returned a matrix".into());
            }
            if cmd.scalar.is_some() {
                return Err("expected scalar result, but got matrix".into());
            }
            for w in m.windows(2) {
                if w[0].metric > w[1].metric {
                    return Err("matrix results should always be sorted by labels".into());
                }
            }
            let mut seen = HashSet::new();
            for s in m {
                let Some(exp) = expected.get(&s.metric) else {
                    return Err(format!(
                        "unexpected metric {} in result, has {:?}",
                        s.metric, s.floats
                    ));
                };
                seen.insert(&s.metric);
                let mut exp_points = Vec::new();
                for (i, v) in exp.vals.iter().enumerate() {
                    let t = cmd.start + i as i64 * cmd.step;
                    if t > cmd.end {
                        return Err(format!(
                            "expected {} points for {}, but query time range cannot return this many points",
                            exp.vals.len(),
                            s.metric
                        ));
                    }
                    match v {
                        SeqVal::Value(f) => exp_points.push((t, *f)),
                        SeqVal::Histogram => return Err("histogram expected".into()),
                        SeqVal::Omitted => {}
                    }
                }
                if exp_points.len() != s.floats.len() {
                    return Err(format!(
                        "expected {} float points for {}, but got {:?}",
                        exp_points.len(),
                        s.metric,
                        s.floats
                    ));
                }
                for (i, (t, f)) in exp_points.iter().enumerate() {
                    let a = s.floats[i];
                    if a.t != *t {
                        return Err(format!(
                            "expected float value at index {i} for {} to have timestamp {t}, but it had timestamp {} (result has {:?})",
                            s.metric, a.t, s.floats
                        ));
                    }
                    if !almost_equal(a.f, *f, EPS) {
                        return Err(format!(
                            "expected float value at index {i} (t={t}) for {} to be {f}, but got {} (result has {:?})",
                            s.metric, a.f, s.floats
                        ));
                    }
                }
            }
            for (l, _) in &cmd.metrics {
                if !seen.contains(l) {
                    return Err(format!("expected metric {l} not found"));
                }
            }
            Ok(())
        }
        Value::Vector(v) => {
            if cmd.scalar.is_some() {
                return Err(format!("expected scalar result, but got vector {v:?}"));
            }
            let mut seen = HashSet::new();
            for (pos, s) in v.iter().enumerate() {
                let Some(exp) = expected.get(&s.metric) else {
                    return Err(format!(
                        "unexpected metric {} in result, has value {}",
                        s.metric, s.f
                    ));
                };
                if cmd.is_ordered() && exp.pos != pos + 1 {
                    return Err(format!(
                        "expected metric {} at position {} but was at {}",
                        s.metric,
                        exp.pos,
                        pos + 1
                    ));
                }
                match exp.vals.first() {
                    Some(SeqVal::Value(f)) => {
                        if !almost_equal(*f, s.f, EPS) {
                            return Err(format!("expected {f} for {} but got {}", s.metric, s.f));
                        }
                    }
                    Some(SeqVal::Histogram) => {
                        return Err(format!(
                            "expected histogram for {} but got float value {}",
                            s.metric, s.f
                        ))
                    }
                    _ => return Err(format!("no expected value for {}", s.metric)),
                }
                seen.insert(&s.metric);
            }
            for (l, _) in &cmd.metrics {
                if !seen.contains(l) {
                    return Err(format!("expected metric {l} not found"));
                }
            }
            Ok(())
        }
        Value::Scalar { v, .. } => {
            let Some(exp) = cmd.scalar else {
                return Err(format!(
                    "expected vector or matrix result, but got scalar {v}"
                ));
            };
            if !almost_equal(exp, *v, EPS) {
                return Err(format!("expected scalar {exp} but got {v}"));
            }
            Ok(())
        }
        Value::String { v, .. } => {
            if cmd.expected_string.as_deref() != Some(v.as_str()) {
                return Err(format!(
                    "expected string \"{}\" but got \"{v}\"",
                    cmd.expected_string.clone().unwrap_or_default()
                ));
            }
            Ok(())
        }
    }
}

fn check_annotations(cmd: &EvalCmd, res: &QueryResult) -> Result<(), String> {
    if cmd.warn && res.warnings.is_empty() {
        return Err("expected warnings but got none".into());
    }
    if cmd.info && res.infos.is_empty() {
        return Err("expected info annotations but got none".into());
    }
    for (kind, actual) in [("warn", &res.warnings), ("info", &res.infos)] {
        let exp = cmd.of_kind(kind);
        if exp.is_empty() {
            continue;
        }
        if actual.is_empty() {
            return Err(format!("expected {kind} annotations but none were found"));
        }
        for e in &exp {
            if !actual.iter().any(|a| e.matches(a)) {
                return Err(format!(
                    "expected {kind} annotation matching {:?}/{:?} but no matching annotation was found, found: {actual:?}",
                    e.msg, e.regex
                ));
            }
        }
        for a in actual.iter() {
            if !exp.iter().any(|e| e.matches(a)) {
                return Err(format!("unexpected {kind} annotation {a:?} found"));
            }
        }
    }
    if !cmd.of_kind("no_warn").is_empty() && !res.warnings.is_empty() {
        return Err(format!(
            "unexpected warning annotations: {:?}",
            res.warnings
        ));
    }
    if !cmd.of_kind("no_info").is_empty() && !res.infos.is_empty() {
        return Err(format!("unexpected info annotations: {:?}", res.infos));
    }
    Ok(())
}

fn check_failure(cmd: &EvalCmd, e: &QueryError) -> Result<(), String> {
    let msg = e.to_string();
    if let Some(m) = &cmd.expected_fail_message {
        if m != &msg {
            return Err(format!("expected error {m:?}, but got: {msg}"));
        }
    }
    if let Some(r) = &cmd.expected_fail_regexp {
        if !r.is_match(&msg) {
            return Err(format!("expected error matching {r}, but got: {msg}"));
        }
    }
    if let Some(f) = cmd.of_kind("fail").first() {
        if !f.matches(&msg) {
            return Err(format!(
                "expected error matching {:?}/{:?}, but got: {msg}",
                f.msg, f.regex
            ));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------- running

const AT_UNSAFE: [&str; 15] = [
    "days_in_month",
    "day_of_month",
    "day_of_week",
    "day_of_year",
    "end",
    "hour",
    "minute",
    "month",
    "year",
    "predict_linear",
    "range",
    "start",
    "step",
    "time",
    "timestamp",
];

fn has_unsafe_call(e: &Expr) -> bool {
    match &e.kind {
        ExprKind::Call(c) => {
            AT_UNSAFE.contains(&c.func.as_str()) || c.args.iter().any(has_unsafe_call)
        }
        ExprKind::Paren(x) | ExprKind::Unary(_, x) | ExprKind::StepInvariant(x) => {
            has_unsafe_call(x)
        }
        ExprKind::Binary(b) => has_unsafe_call(&b.lhs) || has_unsafe_call(&b.rhs),
        ExprKind::Aggregate(a) => {
            has_unsafe_call(&a.expr) || a.param.as_deref().is_some_and(has_unsafe_call)
        }
        ExprKind::Subquery(s) => has_unsafe_call(&s.expr),
        _ => false,
    }
}

/// Adds `@ ts` to every selector and subquery not inside a subquery (as Prometheus' runner).
fn set_at(e: &mut Expr, ts: i64) {
    match &mut e.kind {
        ExprKind::VectorSelector(vs) => {
            if vs.at.is_none() {
                vs.at = Some(AtModifier::Timestamp(ts));
            }
        }
        ExprKind::MatrixSelector(ms) => {
            if ms.selector.at.is_none() {
                ms.selector.at = Some(AtModifier::Timestamp(ts));
            }
        }
        ExprKind::Subquery(sq) => {
            if sq.at.is_none() {
                sq.at = Some(AtModifier::Timestamp(ts));
            }
        }
        ExprKind::Paren(x) | ExprKind::Unary(_, x) | ExprKind::StepInvariant(x) => set_at(x, ts),
        ExprKind::Binary(b) => {
            set_at(&mut b.lhs, ts);
            set_at(&mut b.rhs, ts);
        }
        ExprKind::Aggregate(a) => {
            set_at(&mut a.expr, ts);
            if let Some(p) = a.param.as_mut() {
                set_at(p, ts);
            }
        }
        ExprKind::Call(c) => {
            for a in c.args.iter_mut() {
                set_at(a, ts);
            }
        }
        ExprKind::Number(_) | ExprKind::String(_) => {}
    }
}

struct Runner {
    engine: Engine,
    storage: MemStorage,
}

impl Runner {
    fn run_instant(&self, cmd: &EvalCmd, ast: &Expr, t: i64, ctx_re: &Regex) -> Result<(), String> {
        let res = self
            .engine
            .run(&self.storage, ast, &cmd.expr, t, t, 0, None);
        let res = match res {
            Err(e) => {
                if cmd.is_fail() {
                    return check_failure(cmd, &e);
                }
                return Err(format!("error evaluating query at {t}: {e}"));
            }
            Ok(r) => r,
        };
        if cmd.is_fail() {
            return Err(format!(
                "expected error evaluating query at {t} but got none"
            ));
        }
        check_annotations(cmd, &res)?;
        compare_result(cmd, &res.value).map_err(|e| format!("instant at {t}: {e}"))?;
        if cmd.exclude_from_range || ctx_re.is_match(&cmd.expr) {
            return Ok(());
        }
        let rr = self
            .engine
            .run(
                &self.storage,
                ast,
                &cmd.expr,
                t - 60_000,
                t + 60_000,
                60_000,
                None,
            )
            .map_err(|e| format!("error evaluating query at {t} in range mode: {e}"))?;
        if cmd.is_ordered() {
            return Ok(());
        }
        let Value::Matrix(m) = &rr.value else {
            return Err("range mode did not return a matrix".into());
        };
        for w in m.windows(2) {
            if w[0].metric > w[1].metric {
                return Err("matrix results should always be sorted by labels".into());
            }
        }
        let mut vec = Vec::new();
        for s in m {
            if let Some(p) = s.floats.iter().find(|p| p.t == t) {
                vec.push(inferdb_query::value::Sample {
                    metric: s.metric.clone(),
                    t,
                    f: p.f,
                    drop_name: false,
                });
            }
        }
        let v = if matches!(res.value, Value::Scalar { .. }) {
            match vec.first() {
                Some(s) => Value::Scalar { t, v: s.f },
                None => return Err("range mode: no scalar point".into()),
            }
        } else {
            Value::Vector(vec)
        };
        compare_result(cmd, &v).map_err(|e| format!("range mode at {t}: {e}"))
    }

    fn run_eval(&self, cmd: &EvalCmd) -> Result<(), String> {
        let ast = match inferdb_query::parser::parse(&cmd.expr) {
            Ok(a) => a,
            Err(e) => {
                let err = QueryError::Parse(e.to_string());
                if cmd.is_fail() {
                    return check_failure(cmd, &err);
                }
                return Err(format!("parse error: {e}"));
            }
        };
        if cmd.is_range {
            let res = self.engine.run(
                &self.storage,
                &ast,
                &cmd.expr,
                cmd.start,
                cmd.end,
                cmd.step,
                None,
            );
            let res = match res {
                Err(e) => {
                    if cmd.is_fail() {
                        return check_failure(cmd, &e);
                    }
                    return Err(format!("error evaluating query: {e}"));
                }
                Ok(r) => r,
            };
            if cmd.is_fail() {
                return Err("expected error evaluating query but got none".into());
            }
            check_annotations(cmd, &res)?;
            return compare_result(cmd, &res.value);
        }
        let ctx_re = Regex::new(r"(start|end|range|step)\(\)").unwrap();
        // `expect range vector` queries are instant queries at the range's end.
        let t = cmd.end;
        self.run_instant(cmd, &ast, t, &ctx_re)?;
        if has_unsafe_call(&ast) {
            return Ok(());
        }
        let mut at_ast = ast.clone();
        set_at(&mut at_ast, t);
        let times: Vec<i64> = if t == 0 {
            vec![-1000, 0, 1000]
        } else {
            vec![-10 * t, 0, t / 5, t, 10 * t]
        };
        for et in times {
            let mut c = cmd.clone();
            // With @ fixed, results do not depend on the evaluation time; range-vector
            // expectations keep their timestamps.
            c.end = cmd.end;
            self.run_instant_at(&c, &at_ast, et, &ctx_re)
                .map_err(|e| format!("with @ {t} evaluated at {et}: {e}"))?;
        }
        Ok(())
    }

    fn run_instant_at(
        &self,
        cmd: &EvalCmd,
        ast: &Expr,
        et: i64,
        ctx_re: &Regex,
    ) -> Result<(), String> {
        self.run_instant(cmd, ast, et, ctx_re)
    }
}

fn load(storage: &mut MemStorage, interval: i64, series: &[(Labels, Vec<SeqVal>)]) {
    for (labels, vals) in series {
        for (i, v) in vals.iter().enumerate() {
            if let SeqVal::Value(f) = v {
                storage.add(labels, i as i64 * interval, *f);
            }
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let verbose = args.iter().any(|a| a == "--verbose")
        || std::env::var("PROMQLTEST_VERBOSE").is_ok_and(|v| v == "1");
    let Some(dir) = promqltest_dir("promqltest") else {
        return;
    };
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let skip_text =
        std::fs::read_to_string(manifest.join("tests/promqltest-skip.txt")).unwrap_or_default();
    let mut skips: HashSet<(String, usize)> = HashSet::new();
    for l in skip_text.lines() {
        let l = l.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        let key = l.split_whitespace().next().unwrap_or("");
        if let Some((f, n)) = key.rsplit_once(':') {
            if let Ok(n) = n.parse::<usize>() {
                skips.insert((f.trim_end_matches(".test").to_string(), n));
            }
        }
    }
    let ratchet: usize = std::fs::read_to_string(manifest.join("tests/promqltest-ratchet.txt"))
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.trim().parse().ok()))
        .unwrap_or(0);
    let only_file = std::env::var("PROMQLTEST_FILE").ok();
    let list_nh = args.iter().any(|a| a == "--list-nh");
    let only_line: Option<usize> = std::env::var("PROMQLTEST_LINE")
        .ok()
        .and_then(|s| s.parse().ok());
    // Prometheus' test engine: 10,000 samples per query, 5 m lookback.
    let opts = EngineOptions {
        max_samples: 10_000,
        lookback_delta_ms: 5 * 60 * 1000,
        ..Default::default()
    };
    let ctx = Suite {
        dir,
        skips,
        only_file,
        only_line,
        list_nh,
        verbose,
    };
    if list_nh {
        ctx.run(&opts, None);
        return;
    }
    // The step-wise evaluator alone first (every range query step by step), then the default
    // engine, which evaluates range queries column-wise where it can.
    let step_opts = EngineOptions {
        range_evaluation: RangeEvaluation::StepWise,
        ..opts.clone()
    };
    let (sp, sf, ss) = ctx.run(&step_opts, Some("step-wise"));
    println!("promqltest step-wise: {sp} passed, {sf} failed, {ss} skipped");
    let (tp, tf, ts) = ctx.run(&opts, None);
    println!("promqltest core: {tp} passed, {tf} failed, {ts} skipped");
    if ctx.only_file.is_none() && ctx.only_line.is_none() && tp.min(sp) < ratchet {
        eprintln!("pass count {} is below the ratchet {ratchet}", tp.min(sp));
        std::process::exit(1);
    }
}

/// The suite's settings from the command line and the skip list.
struct Suite {
    dir: PathBuf,
    skips: HashSet<(String, usize)>,
    only_file: Option<String>,
    only_line: Option<usize>,
    list_nh: bool,
    verbose: bool,
}

impl Suite {
    /// Runs every core file with an engine of `opts`; returns passed, failed, skipped. With a
    /// `tag`, per-file lines are not printed and failures (with `--verbose`) carry the tag.
    fn run(&self, opts: &EngineOptions, tag: Option<&str>) -> (usize, usize, usize) {
        let Suite {
            dir,
            skips,
            only_file,
            only_line,
            list_nh,
            verbose,
        } = self;
        let (list_nh, verbose, only_line) = (*list_nh, *verbose, *only_line);
        let (mut tp, mut tf, mut ts) = (0usize, 0usize, 0usize);
        for file in CORE {
            if only_file
                .as_deref()
                .is_some_and(|f| f.trim_end_matches(".test") != file)
            {
                continue;
            }
            let path = dir.join(format!("{file}.test"));
            let content = match std::fs::read_to_string(&path) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("cannot read {}: {e}", path.display());
                    std::process::exit(2);
                }
            };
            let cmds = match parse_file(&content) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("{file}: cannot parse test file: {e}");
                    std::process::exit(2);
                }
            };
            let mut runner = Runner {
                engine: Engine::new(opts.clone()),
                storage: MemStorage::new(),
            };
            let (mut p, mut f, mut s) = (0usize, 0usize, 0usize);
            // Names of native-histogram series loaded since the last clear (for --list-nh).
            let mut nh_names: HashSet<String> = HashSet::new();
            for cmd in &cmds {
                match cmd {
                    Cmd::Clear => {
                        runner.storage = MemStorage::new();
                        nh_names.clear();
                    }
                    Cmd::Load {
                        interval,
                        nhcb,
                        series,
                    } => {
                        for (l, vals) in series.iter() {
                            let name = l.metric_name().unwrap_or("").to_string();
                            if vals.iter().any(|v| matches!(v, SeqVal::Histogram)) {
                                nh_names.insert(name.clone());
                            }
                            if *nhcb {
                                for suffix in ["_bucket", "_sum", "_count"] {
                                    if let Some(base) = name.strip_suffix(suffix) {
                                        nh_names.insert(base.to_string());
                                    }
                                }
                            }
                        }
                        load(&mut runner.storage, *interval, series)
                    }
                    Cmd::Eval(c) if list_nh => {
                        let mut reasons = Vec::new();
                        if c.has_histograms {
                            reasons.push("expects native histogram results".to_string());
                        }
                        let mut names: Vec<&String> = nh_names
                            .iter()
                            .filter(|n| {
                                Regex::new(&format!(
                                    r"(^|[^a-zA-Z0-9_:]){}($|[^a-zA-Z0-9_:])",
                                    regex::escape(n)
                                ))
                                .map(|r| r.is_match(&c.expr))
                                .unwrap_or(false)
                            })
                            .collect();
                        names.sort();
                        if !names.is_empty() {
                            reasons.push(format!(
                                "selects native histogram series {}",
                                names
                                    .iter()
                                    .map(|s| s.as_str())
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            ));
                        }
                        if !reasons.is_empty() {
                            println!(
                                "{file}.test:{} needs native histograms: {}",
                                c.line,
                                reasons.join("; ")
                            );
                        }
                    }
                    Cmd::Eval(c) => {
                        if only_line.is_some_and(|l| l != c.line) {
                            continue;
                        }
                        if skips.contains(&(file.to_string(), c.line)) {
                            s += 1;
                            continue;
                        }
                        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            runner.run_eval(c)
                        }))
                        .unwrap_or_else(|_| Err("panic".into()));
                        match r {
                            Ok(()) => p += 1,
                            Err(e) => {
                                f += 1;
                                if verbose {
                                    println!(
                                        "FAIL{} {file}.test:{} {}\n    {e}",
                                        tag.map(|t| format!(" ({t})")).unwrap_or_default(),
                                        c.line,
                                        c.expr
                                    );
                                }
                            }
                        }
                    }
                }
            }
            if tag.is_none() {
                println!("{file}: {p} passed, {f} failed, {s} skipped");
            }
            tp += p;
            tf += f;
            ts += s;
        }
        (tp, tf, ts)
    }
}
