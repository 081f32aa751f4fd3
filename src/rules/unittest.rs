//! `inferdb rules test`: promtool's rule unit-test format (`rule_files`,
//! `evaluation_interval`, `input_series` in expanding notation, `alert_rule_test`,
//! `promql_expr_test`, `fuzzy_compare`, `external_labels`, `external_url`,
//! `group_eval_order`, per-test `name` and `start_timestamp`), with promtool's messages and
//! output shape.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use inferdb_query::ast::Expr;
use inferdb_query::storage::MemStorage;
use inferdb_query::value::{Value, Vector};
use inferdb_query::{Engine, EngineOptions};
use inferdb_storage::Labels;

use super::file::{go_io_error, parse_file};
use super::group::{AlertState, Group, GroupOptions, RuleStore};
use super::series::parse_series_desc;
use super::yaml::{self, Decoder, Node};

/// Options of a test run (promtool's flags).
#[derive(Debug, Clone, Default)]
pub struct TestOptions {
    /// `--run`: only test groups whose name matches one of these regexes.
    pub run: Vec<String>,
    /// `--ignore-unknown-fields`.
    pub ignore_unknown_fields: bool,
    /// `--junit`: where to write the results as JUnit XML.
    pub junit: Option<PathBuf>,
}

/// One test file's results as promtool's JUnit report holds them (`util/junitxml`).
#[derive(Debug, Default)]
struct JunitSuite {
    name: String,
    timestamp: String,
    failures: usize,
    errors: usize,
    /// Each test group: its name, its failures, the error that stopped the file.
    cases: Vec<(String, Vec<String>, String)>,
}

impl JunitSuite {
    fn case(&mut self, name: String) {
        self.cases.push((name, Vec::new(), String::new()));
    }

    fn last(&mut self) -> &mut (String, Vec<String>, String) {
        if self.cases.is_empty() {
            self.case("unknown".into());
        }
        let n = self.cases.len() - 1;
        &mut self.cases[n]
    }

    fn fail(&mut self, msg: String) {
        self.failures += 1;
        self.last().1.push(msg);
    }

    fn abort(&mut self, msg: String) {
        self.errors += 1;
        self.last().2 = msg;
    }
}

/// Go's `xml.EscapeText`.
fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("&#34;"),
            '\'' => out.push_str("&#39;"),
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\t' => out.push_str("&#x9;"),
            '\n' => out.push_str("&#xA;"),
            '\r' => out.push_str("&#xD;"),
            c => out.push(c),
        }
    }
    out
}

/// The JUnit XML promtool writes with `--junit` (Go's `encoding/xml`, no header, no indent).
fn junit_xml(suites: &[JunitSuite]) -> String {
    let mut x = String::from("<testsuites>");
    for s in suites {
        x.push_str(&format!(
            "<testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"0\" timestamp=\"{}\">",
            xml_escape(&s.name),
            s.cases.len(),
            s.failures,
            s.errors,
            xml_escape(&s.timestamp)
        ));
        for (name, failures, error) in &s.cases {
            x.push_str(&format!("<testcase name=\"{}\">", xml_escape(name)));
            for f in failures {
                x.push_str(&format!("<failure>{}</failure>", xml_escape(f)));
            }
            if !error.is_empty() {
                x.push_str(&format!("<error>{}</error>", xml_escape(error)));
            }
            x.push_str("</testcase>");
        }
        x.push_str("</testsuite>");
    }
    x.push_str("</testsuites>");
    x
}

/// The outcome of one test file: `None` when it passed, or promtool's error texts.
pub type FileOutcome = Option<Vec<String>>;

/// Runs the unit tests of each file, printing promtool's output (`  SUCCESS` on stdout, or
/// `  FAILED:` and the errors on stderr). Returns the exit code (0 all passed, 1 otherwise).
pub fn run_files(files: &[PathBuf], opts: &TestOptions) -> i32 {
    let run = if opts.run.is_empty() {
        None
    } else {
        match inferdb_storage::re2::translate(&opts.run.join("|"))
            .map_err(|e| e.to_string())
            .and_then(|t| regex::Regex::new(&t).map_err(|e| e.to_string()))
        {
            Ok(r) => Some(r),
            Err(e) => {
                eprintln!("inferdb: bad --run regex: {e}");
                return 1;
            }
        }
    };
    let mut failed = false;
    let mut suites = Vec::new();
    for f in files {
        let mut suite = JunitSuite {
            name: f.display().to_string(),
            timestamp: chrono::Utc::now().format("%Y-%m-%dT%H:%M:%S").to_string(),
            ..Default::default()
        };
        let outcome = test_file(f, opts, run.as_ref(), &mut suite);
        suites.push(suite);
        match outcome {
            Some(errs) => {
                eprintln!("  FAILED:");
                for e in errs {
                    eprintln!("{e}");
                    println!();
                }
                failed = true;
            }
            None => println!("  SUCCESS"),
        }
        println!();
    }
    if let Some(path) = &opts.junit {
        if let Err(e) = std::fs::write(path, junit_xml(&suites)) {
            eprintln!("failed to write JUnit XML: {}", go_io_error(&e));
            return 1;
        }
    }
    i32::from(failed)
}

struct SeriesDef {
    series: String,
    values: String,
}

struct ExpAlert {
    labels: Vec<(String, String)>,
    annotations: Vec<(String, String)>,
}

struct AlertTest {
    eval_time: i64,
    alertname: String,
    exp_alerts: Vec<ExpAlert>,
}

struct ExpSample {
    labels: String,
    value: f64,
    histogram: String,
}

struct PromqlTest {
    expr: String,
    eval_time: i64,
    exp_samples: Vec<ExpSample>,
}

struct TestGroup {
    interval: i64,
    input_series: Vec<SeriesDef>,
    alert_tests: Vec<AlertTest>,
    promql_tests: Vec<PromqlTest>,
    external_labels: Vec<(String, String)>,
    external_url: String,
    name: String,
    start_ms: Option<i64>,
}

struct UnitTestFile {
    rule_files: Vec<String>,
    evaluation_interval: i64,
    group_eval_order: Vec<String>,
    tests: Vec<TestGroup>,
    fuzzy_compare: bool,
}

/// Parses a time as promtool's `start_timestamp` takes it: Unix seconds or RFC 3339.
fn parse_time(s: &str) -> Result<i64, String> {
    if let Ok(f) = s.parse::<f64>() {
        return Ok((f * 1000.0).round() as i64);
    }
    chrono::DateTime::parse_from_rfc3339(s)
        .map(|t| t.timestamp_millis())
        .map_err(|_| format!("cannot parse {s:?} to a valid timestamp"))
}

fn decode_file(doc: &Node, strict: bool) -> Result<UnitTestFile, String> {
    let mut de = Decoder::new(strict);
    let mut f = UnitTestFile {
        rule_files: vec![],
        evaluation_interval: 0,
        group_eval_order: vec![],
        tests: vec![],
        fuzzy_compare: false,
    };
    let mut fatal = None;
    for (k, v) in de.fields(
        doc,
        "main.unitTestFile",
        &[
            "rule_files",
            "evaluation_interval",
            "group_eval_order",
            "tests",
            "fuzzy_compare",
        ],
    ) {
        match k {
            "rule_files" => {
                for n in de.seq(v, "[]string") {
                    let s = de.string(n);
                    f.rule_files.push(s);
                }
            }
            "evaluation_interval" => f.evaluation_interval = de.duration(v),
            "group_eval_order" => {
                for n in de.seq(v, "[]string") {
                    let s = de.string(n);
                    f.group_eval_order.push(s);
                }
            }
            "fuzzy_compare" => f.fuzzy_compare = de.bool(v),
            "tests" => {
                for t in de.seq(v, "[]main.testGroup") {
                    let mut tg = TestGroup {
                        interval: 0,
                        input_series: vec![],
                        alert_tests: vec![],
                        promql_tests: vec![],
                        external_labels: vec![],
                        external_url: String::new(),
                        name: String::new(),
                        start_ms: None,
                    };
                    for (k, v) in de.fields(
                        t,
                        "main.testGroup",
                        &[
                            "interval",
                            "input_series",
                            "alert_rule_test",
                            "promql_expr_test",
                            "external_labels",
                            "external_url",
                            "name",
                            "start_timestamp",
                        ],
                    ) {
                        match k {
                            "interval" => tg.interval = de.duration(v),
                            "name" => tg.name = de.string(v),
                            "external_url" => tg.external_url = de.string(v),
                            "external_labels" => tg.external_labels = de.string_map(v),
                            "start_timestamp" => {
                                let s = de.string(v);
                                match parse_time(&s) {
                                    Ok(t) => tg.start_ms = Some(t),
                                    Err(e) => fatal = fatal.or(Some(e)),
                                }
                            }
                            "input_series" => {
                                for s in de.seq(v, "[]main.series") {
                                    let mut d = SeriesDef {
                                        series: String::new(),
                                        values: String::new(),
                                    };
                                    for (k, v) in de.fields(s, "main.series", &["series", "values"])
                                    {
                                        if k == "series" {
                                            d.series = de.string(v);
                                        } else {
                                            d.values = de.string(v);
                                        }
                                    }
                                    tg.input_series.push(d);
                                }
                            }
                            "alert_rule_test" => {
                                for a in de.seq(v, "[]main.alertTestCase") {
                                    let mut at = AlertTest {
                                        eval_time: 0,
                                        alertname: String::new(),
                                        exp_alerts: vec![],
                                    };
                                    for (k, v) in de.fields(
                                        a,
                                        "main.alertTestCase",
                                        &["eval_time", "alertname", "exp_alerts"],
                                    ) {
                                        match k {
                                            "eval_time" => at.eval_time = de.duration(v),
                                            "alertname" => at.alertname = de.string(v),
                                            _ => {
                                                for e in de.seq(v, "[]main.alert") {
                                                    let mut ea = ExpAlert {
                                                        labels: vec![],
                                                        annotations: vec![],
                                                    };
                                                    for (k, v) in de.fields(
                                                        e,
                                                        "main.alert",
                                                        &["exp_labels", "exp_annotations"],
                                                    ) {
                                                        if k == "exp_labels" {
                                                            ea.labels = de.string_map(v);
                                                        } else {
                                                            ea.annotations = de.string_map(v);
                                                        }
                                                    }
                                                    at.exp_alerts.push(ea);
                                                }
                                            }
                                        }
                                    }
                                    tg.alert_tests.push(at);
                                }
                            }
                            "promql_expr_test" => {
                                for p in de.seq(v, "[]main.promqlTestCase") {
                                    let mut pt = PromqlTest {
                                        expr: String::new(),
                                        eval_time: 0,
                                        exp_samples: vec![],
                                    };
                                    for (k, v) in de.fields(
                                        p,
                                        "main.promqlTestCase",
                                        &["expr", "eval_time", "exp_samples"],
                                    ) {
                                        match k {
                                            "expr" => pt.expr = de.string(v),
                                            "eval_time" => pt.eval_time = de.duration(v),
                                            _ => {
                                                for s in de.seq(v, "[]main.sample") {
                                                    let mut es = ExpSample {
                                                        labels: String::new(),
                                                        value: 0.0,
                                                        histogram: String::new(),
                                                    };
                                                    for (k, v) in de.fields(
                                                        s,
                                                        "main.sample",
                                                        &["labels", "value", "histogram"],
                                                    ) {
                                                        match k {
                                                            "labels" => es.labels = de.string(v),
                                                            "value" => es.value = de.float(v),
                                                            _ => es.histogram = de.string(v),
                                                        }
                                                    }
                                                    pt.exp_samples.push(es);
                                                }
                                            }
                                        }
                                    }
                                    tg.promql_tests.push(pt);
                                }
                            }
                            _ => {}
                        }
                    }
                    f.tests.push(tg);
                }
            }
            _ => {}
        }
    }
    if let Some(e) = fatal {
        return Err(e);
    }
    de.finish()?;
    Ok(f)
}

/// Decodes a unit-test file's text (for the fuzz target); errors are dropped.
pub fn fuzz_decode(text: &str) {
    if let Ok(docs) = yaml::parse(text) {
        if let Some(d) = docs.first() {
            let _ = decode_file(d, true);
        }
    }
}

fn glob_rule_files(base: &Path, files: &[String]) -> Result<Vec<PathBuf>, String> {
    let mut out = Vec::new();
    for rf in files {
        let p = if !rf.is_empty() && !Path::new(rf).is_absolute() {
            base.join(rf)
        } else {
            PathBuf::from(rf)
        };
        let m = super::glob(&p).map_err(|e| e.to_string())?;
        if m.is_empty() {
            eprintln!("  WARNING: no file match pattern {}", p.display());
        }
        out.extend(m);
    }
    Ok(out)
}

fn test_file(
    path: &Path,
    opts: &TestOptions,
    run: Option<&regex::Regex>,
    suite: &mut JunitSuite,
) -> FileOutcome {
    let outcome = test_file_cases(path, opts, run, suite);
    if let Some(errs) = &outcome {
        if suite.cases.is_empty() {
            suite.abort(errs.join("\n"));
        }
    }
    outcome
}

fn test_file_cases(
    path: &Path,
    opts: &TestOptions,
    run: Option<&regex::Regex>,
    suite: &mut JunitSuite,
) -> FileOutcome {
    let text = match std::fs::read(path) {
        Ok(t) => String::from_utf8_lossy(&t).into_owned(),
        Err(e) => {
            return Some(vec![format!(
                "open {}: {}",
                path.display(),
                go_io_error(&e)
            )])
        }
    };
    let docs = match yaml::parse(&text) {
        Ok(d) => d,
        Err(e) => return Some(vec![e.to_string()]),
    };
    let empty = Node::Scalar {
        value: String::new(),
        plain: true,
        pos: Default::default(),
    };
    let mut f = match decode_file(docs.first().unwrap_or(&empty), true) {
        Ok(f) => f,
        Err(e) => return Some(vec![e]),
    };
    let base = path.parent().unwrap_or(Path::new("."));
    let rule_files = match glob_rule_files(base, &f.rule_files) {
        Ok(r) => r,
        Err(e) => return Some(vec![e]),
    };
    if f.evaluation_interval == 0 {
        f.evaluation_interval = 60_000;
    }
    let mut order: HashMap<String, usize> = HashMap::new();
    for (i, g) in f.group_eval_order.iter().enumerate() {
        if order.insert(g.clone(), i).is_some() {
            return Some(vec![format!(
                "group name repeated in evaluation order: {g}"
            )]);
        }
    }
    let mut errs = Vec::new();
    for (i, tg) in f.tests.iter_mut().enumerate() {
        if let Some(r) = run {
            if !r.is_match(&tg.name) {
                continue;
            }
        }
        suite.case(if tg.name.is_empty() {
            format!("unnamed#{i}")
        } else {
            tg.name.clone()
        });
        if tg.interval == 0 {
            tg.interval = f.evaluation_interval;
        }
        let group_errs = run_group(
            tg,
            f.evaluation_interval,
            &order,
            opts.ignore_unknown_fields,
            f.fuzzy_compare,
            &rule_files,
        );
        for e in &group_errs {
            suite.fail(e.clone());
        }
        errs.extend(group_errs);
    }
    if errs.is_empty() {
        None
    } else {
        Some(errs)
    }
}

/// Go's `time.Duration.String()` for whole milliseconds (`0s`, `1m0s`, `1h5m0s`, `1.5s`).
fn go_duration(ms: i64) -> String {
    if ms == 0 {
        return "0s".into();
    }
    let neg = ms < 0;
    let ms = ms.unsigned_abs();
    let mut s = String::new();
    if neg {
        s.push('-');
    }
    if ms < 1000 {
        let _ = write!(s, "{ms}ms");
        return s;
    }
    let (h, m) = (ms / 3_600_000, ms / 60_000 % 60);
    let secs = ms % 60_000;
    if h > 0 {
        let _ = write!(s, "{h}h");
    }
    if h > 0 || m > 0 {
        let _ = write!(s, "{m}m");
    }
    let whole = secs / 1000;
    let frac = secs % 1000;
    if frac == 0 {
        let _ = write!(s, "{whole}s");
    } else {
        let f = format!("{frac:03}");
        let _ = write!(s, "{whole}.{}s", f.trim_end_matches('0'));
    }
    s
}

/// Prometheus' `model.Duration.String()`.
fn model_duration(ms: i64) -> String {
    inferdb_query::printer::format_duration_ms(ms)
}

/// Go's `labels.Labels.String()`: `{a="1", b="2"}`, values quoted as Go's `strconv.Quote`.
pub fn go_labels(l: &[(String, String)]) -> String {
    let mut s = String::from("{");
    for (i, (k, v)) in l.iter().enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        let _ = write!(s, "{k}={}", inferdb_query::parser::go_quote(v));
    }
    s.push('}');
    s
}

fn pairs(l: &Labels) -> Vec<(String, String)> {
    l.iter()
        .map(|l| (l.name.to_string(), l.value.to_string()))
        .collect()
}

/// Go's `strconv.FormatFloat(v, 'E', -1, 64)`.
fn go_float_e(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "+Inf" } else { "-Inf" }.into();
    }
    let s = format!("{v:E}");
    let (m, e) = s.split_once('E').unwrap_or((&s, "0"));
    let e: i32 = e.parse().unwrap_or(0);
    format!("{m}E{}{:02}", if e < 0 { '-' } else { '+' }, e.abs())
}

struct Suite {
    storage: MemStorage,
    engine: Engine,
    pending: Vec<(Labels, Vec<(i64, f64)>)>,
}

/// Converts a query result as Prometheus' `EngineQueryFunc` does.
pub fn result_vector(v: Value) -> Result<Vector, String> {
    match v {
        Value::Vector(v) => Ok(v),
        Value::Scalar { t, v } => Ok(vec![inferdb_query::value::Sample {
            metric: Labels::default(),
            t,
            f: v,
            drop_name: false,
        }]),
        _ => Err("rule result is not a vector or scalar".into()),
    }
}

impl RuleStore for Suite {
    fn query(&self, expr: &Expr, t_ms: i64) -> Result<Vector, String> {
        let r = self
            .engine
            .instant_expr(&self.storage, expr, t_ms)
            .map_err(|e| e.to_string())?;
        result_vector(r.value)
    }

    fn append(&mut self, labels: &Labels, t_ms: i64, v: f64) {
        self.storage.add(labels, t_ms, v);
    }

    fn commit(&mut self) {}
}

impl Suite {
    fn append_till(&mut self, ts: i64) {
        for (l, pts) in &mut self.pending {
            let n = pts.partition_point(|p| p.0 <= ts);
            for (t, v) in pts.drain(..n) {
                self.storage.add(l, t, v);
            }
        }
    }
}

fn cmp_float(a: f64, b: f64, fuzzy: bool) -> bool {
    a == b
        || (fuzzy && (next_after(a, f64::NEG_INFINITY) == b || next_after(a, f64::INFINITY) == b))
}

fn next_after(x: f64, toward: f64) -> f64 {
    if x.is_nan() || toward.is_nan() {
        return f64::NAN;
    }
    if x == toward {
        return x;
    }
    if x == 0.0 {
        return f64::from_bits(1).copysign(toward);
    }
    let bits = x.to_bits();
    let up = (toward > x) == (x > 0.0);
    f64::from_bits(if up { bits + 1 } else { bits - 1 })
}

type Pairs = Vec<(String, String)>;
type LabelsAndAnnotations = Vec<(Pairs, Pairs)>;

fn la_string(la: &LabelsAndAnnotations) -> String {
    if la.is_empty() {
        return "[]".into();
    }
    let one = |(l, a): &(Pairs, Pairs)| {
        indent(
            &format!("\nLabels:{}\nAnnotations:{}", go_labels(l), go_labels(a)),
            "  ",
        )
    };
    let mut s = format!("[\n0:{}", one(&la[0]));
    for (i, x) in la[1..].iter().enumerate() {
        let _ = write!(s, ",\n{}:{}", i + 1, one(x));
    }
    s.push_str("\n]");
    s
}

fn indent(lines: &str, ind: &str) -> String {
    let parts: Vec<&str> = lines.split('\n').collect();
    let mut s = String::new();
    for (i, l) in parts.iter().enumerate() {
        if i > 0 {
            s.push_str(ind);
        }
        s.push_str(l);
        if i != parts.len() - 1 {
            s.push('\n');
        }
    }
    s
}

/// Parses `exp_samples[].labels` as Prometheus' `ParseMetric`.
fn parse_metric(s: &str) -> Result<Vec<(String, String)>, String> {
    if s.trim().is_empty() {
        return Ok(vec![]);
    }
    let ms = inferdb_query::parser::parse_matchers(s).map_err(|e| e.to_string())?;
    let mut out: Vec<(String, String)> = ms
        .into_iter()
        .map(|m| (m.name.to_string(), m.value.to_string()))
        .collect();
    out.sort();
    Ok(out)
}

fn run_group(
    tg: &TestGroup,
    eval_interval: i64,
    order: &HashMap<String, usize>,
    ignore_unknown: bool,
    fuzzy: bool,
    rule_files: &[PathBuf],
) -> Vec<String> {
    let mint = tg.start_ms.unwrap_or(0);
    // The input series, as promqltest's `load <interval>` reads them.
    let mut pending = Vec::new();
    for s in &tg.input_series {
        match parse_series_desc(&s.series, &s.values) {
            Ok((labels, values)) => {
                let mut pts = Vec::new();
                for (i, v) in values.into_iter().enumerate() {
                    if let Some(v) = v {
                        pts.push((mint + i as i64 * tg.interval, v));
                    }
                }
                pending.push((labels, pts));
            }
            Err(e) => return vec![e],
        }
    }
    let engine = Engine::new(EngineOptions {
        default_subquery_step_ms: eval_interval,
        ..EngineOptions::default()
    });
    let mut suite = Suite {
        storage: MemStorage::new(),
        engine,
        pending,
    };
    // The rule files.
    let mut groups: Vec<Group> = Vec::new();
    let mut load_errs = Vec::new();
    for f in rule_files {
        match parse_file(f, ignore_unknown) {
            Err(e) => load_errs.extend(e.0),
            Ok(rf) => {
                for g in &rf.groups {
                    let opts = GroupOptions {
                        default_interval_ms: tg.interval,
                        default_query_offset_ms: 0,
                        external_labels: tg.external_labels.clone(),
                        external_url: tg.external_url.clone(),
                    };
                    match Group::new(&f.display().to_string(), g, opts) {
                        Ok(mut g) => {
                            g.set_restored();
                            groups.push(g);
                        }
                        Err(e) => load_errs.push(e),
                    }
                }
            }
        }
    }
    if !load_errs.is_empty() {
        return load_errs;
    }
    // promtool keeps groups in a map keyed by file and name: a later group of the same
    // name replaces an earlier one; the order is only the partial order given.
    let mut by_key: BTreeMap<(String, String), Group> = BTreeMap::new();
    for g in groups {
        by_key.insert((g.file.clone(), g.name.clone()), g);
    }
    let mut groups: Vec<Group> = by_key.into_values().collect();
    groups.sort_by_key(|g| order.get(&g.name).copied().unwrap_or(0));

    let max_eval = tg
        .alert_tests
        .iter()
        .map(|a| a.eval_time)
        .chain(tg.promql_tests.iter().map(|p| p.eval_time))
        .max()
        .unwrap_or(0)
        .max(0);
    let maxt = mint + max_eval;

    let mut alert_times: Vec<i64> = tg.alert_tests.iter().map(|a| a.eval_time).collect();
    for a in &tg.alert_tests {
        if a.alertname.is_empty() {
            let in_group = if tg.name.is_empty() {
                String::new()
            } else {
                format!(" (in TestGroup {})", tg.name)
            };
            return vec![format!(
                "an item under alert_rule_test misses required attribute alertname at eval_time {}{in_group}",
                model_duration(a.eval_time)
            )];
        }
    }
    alert_times.sort();
    alert_times.dedup();
    let mut curr = 0;
    let mut errs = Vec::new();
    let test_name = if tg.name.is_empty() {
        String::new()
    } else {
        format!("    name: {},\n", tg.name)
    };
    let mut ts = mint;
    while ts <= maxt {
        suite.append_till(ts);
        let mut eval_errs = Vec::new();
        for g in &mut groups {
            g.eval(ts, &mut suite);
            for r in &g.rules {
                if let Some(e) = &r.last_error {
                    eval_errs.push(format!(
                        "    rule: {}, time: {}, err: {e}",
                        r.def.name(),
                        go_duration(ts)
                    ));
                }
            }
        }
        if !eval_errs.is_empty() {
            errs.extend(eval_errs);
            return errs;
        }
        while curr < alert_times.len()
            && ts - mint <= alert_times[curr]
            && alert_times[curr] < ts + eval_interval - mint
        {
            let t = alert_times[curr];
            for at in tg.alert_tests.iter().filter(|a| a.eval_time == t) {
                let mut got: LabelsAndAnnotations = Vec::new();
                for g in &groups {
                    for r in g.rules.iter().filter(|r| r.def.alert == at.alertname) {
                        for a in r.active.values() {
                            if a.state == AlertState::Firing {
                                got.push((pairs(&a.labels), a.annotations.clone()));
                            }
                        }
                    }
                }
                let mut exp: LabelsAndAnnotations = at
                    .exp_alerts
                    .iter()
                    .map(|e| {
                        let mut l: BTreeMap<String, String> = e.labels.iter().cloned().collect();
                        l.insert("alertname".into(), at.alertname.clone());
                        l.retain(|_, v| !v.is_empty());
                        let mut a: BTreeMap<String, String> =
                            e.annotations.iter().cloned().collect();
                        a.retain(|_, v| !v.is_empty());
                        (l.into_iter().collect(), a.into_iter().collect())
                    })
                    .collect();
                got.sort();
                exp.sort();
                if got != exp {
                    errs.push(format!(
                        "{test_name}    alertname: {}, time: {}, \n        exp:{}, \n        got:{}",
                        at.alertname,
                        model_duration(at.eval_time),
                        indent(&la_string(&exp), "            "),
                        indent(&la_string(&got), "            ")
                    ));
                }
            }
            curr += 1;
        }
        ts += eval_interval;
    }

    'outer: for pt in &tg.promql_tests {
        let got = inferdb_query::parse(&pt.expr)
            .map_err(|e| e.to_string())
            .and_then(|e| suite.query(&e, mint + pt.eval_time));
        let got = match got {
            Ok(g) => g,
            Err(e) => {
                errs.push(format!(
                    "    expr: {}, time: {}, err: {e}",
                    inferdb_query::parser::go_quote(&pt.expr),
                    model_duration(pt.eval_time)
                ));
                continue;
            }
        };
        let mut got: Vec<(Vec<(String, String)>, f64)> =
            got.into_iter().map(|s| (pairs(&s.metric), s.f)).collect();
        let mut exp = Vec::new();
        for s in &pt.exp_samples {
            if !s.histogram.is_empty() {
                errs.push(format!(
                    "    expr: {}, time: {}, err: labels {}: native histograms are not supported",
                    inferdb_query::parser::go_quote(&pt.expr),
                    model_duration(pt.eval_time),
                    inferdb_query::parser::go_quote(&s.labels)
                ));
                continue 'outer;
            }
            match parse_metric(&s.labels) {
                Ok(l) => exp.push((l, s.value)),
                Err(e) => {
                    errs.push(format!(
                        "    expr: {}, time: {}, err: labels {}: {e}",
                        inferdb_query::parser::go_quote(&pt.expr),
                        model_duration(pt.eval_time),
                        inferdb_query::parser::go_quote(&s.labels)
                    ));
                    continue 'outer;
                }
            }
        }
        exp.sort_by(|a, b| a.0.cmp(&b.0));
        got.sort_by(|a, b| a.0.cmp(&b.0));
        let equal = exp.len() == got.len()
            && exp
                .iter()
                .zip(&got)
                .all(|(e, g)| e.0 == g.0 && cmp_float(e.1, g.1, fuzzy));
        if !equal {
            let show = |v: &[(Vec<(String, String)>, f64)]| {
                if v.is_empty() {
                    return "nil".to_string();
                }
                v.iter()
                    .map(|(l, f)| format!("{} {}", go_labels(l), go_float_e(*f)))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            errs.push(format!(
                "    expr: {}, time: {},\n        exp: {}\n        got: {}",
                inferdb_query::parser::go_quote(&pt.expr),
                model_duration(pt.eval_time),
                show(&exp),
                show(&got)
            ));
        }
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_formats() {
        assert_eq!(go_duration(0), "0s");
        assert_eq!(go_duration(60_000), "1m0s");
        assert_eq!(go_duration(3_900_000), "1h5m0s");
        assert_eq!(go_duration(1500), "1.5s");
        assert_eq!(go_float_e(1.0), "1E+00");
        assert_eq!(go_float_e(60.0), "6E+01");
        assert_eq!(go_float_e(0.000123), "1.23E-04");
        assert_eq!(
            go_labels(&[("__name__".into(), "t".into())]),
            "{__name__=\"t\"}"
        );
    }

    #[test]
    fn fuzzy_compare_is_one_ulp() {
        let a = 0.1 + 0.2;
        assert!(!cmp_float(a, 0.3, false));
        assert!(cmp_float(a, 0.3, true));
        assert!(!cmp_float(0.3, 0.31, true));
    }
}
