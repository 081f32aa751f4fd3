//! inferdb's templates (`src/template/`, Go `text/template` through the gtmpl crate) measured
//! against what Prometheus' own template tests expect (`template/template_test.go`,
//! `TestTemplateExpansion`): each case below is a template text, its data, the query
//! result the `query` function sees and the output or error Prometheus gives, written for
//! this table from that test's inputs and expected outputs.
//!
//! Every case must pass except those marked `gap`, which say what is missing; a gap that
//! starts passing fails the test too, so the table stays true. The test prints the figure
//! (cases passing of all cases).

use gtmpl::Value;
use inferdb::template::{expand, ExpandOptions, LabelPairs, QueryResult};

/// The data a case gives the template as `.`.
#[derive(Clone)]
enum Input {
    None,
    F64(&'static [f64]),
    Str(&'static [&'static str]),
    I64(&'static [i64]),
    U64(&'static [u64]),
}

impl Input {
    fn value(&self) -> Value {
        match self {
            Input::None => Value::Nil,
            Input::F64(v) => Value::Array(v.iter().map(|x| Value::from(*x)).collect()),
            Input::Str(v) => Value::Array(v.iter().map(|x| Value::from(*x)).collect()),
            Input::I64(v) => Value::Array(v.iter().map(|x| Value::from(*x)).collect()),
            Input::U64(v) => Value::Array(v.iter().map(|x| Value::from(*x)).collect()),
        }
    }
}

/// A query result: each sample's labels and value.
type Samples = &'static [(&'static [(&'static str, &'static str)], f64)];

struct Case {
    text: &'static str,
    input: Input,
    /// The query result: (labels, value) per sample; `None`: no query function needed.
    query: Option<Samples>,
    html: bool,
    missingkey_error: bool,
    /// The output, or the error message when `fails`.
    want: &'static str,
    fails: bool,
    /// Why inferdb does not give Prometheus' answer yet; empty when it does.
    gap: &'static str,
}

const fn ok(text: &'static str, want: &'static str) -> Case {
    Case {
        text,
        input: Input::None,
        query: None,
        html: false,
        missingkey_error: false,
        want,
        fails: false,
        gap: "",
    }
}

const fn err(text: &'static str, want: &'static str) -> Case {
    Case {
        fails: true,
        ..ok(text, want)
    }
}

impl Case {
    const fn input(mut self, i: Input) -> Self {
        self.input = i;
        self
    }
    const fn html(mut self) -> Self {
        self.html = true;
        self
    }
    const fn missingkey_error(mut self) -> Self {
        self.missingkey_error = true;
        self
    }
    const fn query(mut self, q: Samples) -> Self {
        self.query = Some(q);
        self
    }
    const fn gap(mut self, why: &'static str) -> Self {
        self.gap = why;
        self
    }
}

const METRIC_A: &[(&str, &str)] = &[("__name__", "metric"), ("instance", "a")];
const METRIC_B: &[(&str, &str)] = &[("__name__", "metric"), ("instance", "b")];

fn cases() -> Vec<Case> {
    vec![
        ok("plain text", "plain text"),
        ok("{{ 1 }}", "1"),
        err(
            "{{\u{a0}}}",
            "error parsing template test: template: test:1: unrecognized character in action: U+00A0",
        ),
        ok("{{ \"<b>\" }}", "&lt;b&gt;").html(),
        ok("{{ \"<b>\" | safeHtml }}", "<b>").html(),
        ok("{{ \"<b>\" }}", "<b>"),
        ok(
            "{{define \"x\"}}{{.arg0}} {{.arg1}}{{end}}{{template \"x\" (args 1 \"2\")}}",
            "1 2",
        ),
        ok("{{ query \"1.5\" | first | value }}", "1.5").query(&[(&[], 1.5)]),
        ok("{{ query \"metric{instance='a'}\" | first | value }}", "11").query(&[(METRIC_A, 11.0)]),
        ok("{{ query \"metric{instance='a'}\" | first | label \"instance\" }}", "a")
            .query(&[(METRIC_A, 11.0)]),
        ok("{{ query \"metric{__value__='a'}\" | first | strvalue }}", "a")
            .query(&[(&[("__name__", "metric"), ("__value__", "a")], 11.0)]),
        ok("{{ query \"metric{instance='a'}\" | first | label \"foo\" }}", "")
            .query(&[(METRIC_A, 11.0)]),
        ok("{{ $x := query \"metric\" | first }}{{ $x.Labels.foo }}", "")
            .query(&[(METRIC_A, 11.0)]),
        ok("{{ $x := query \"metric\" | first }}{{ $x.Labels.foo }}", "")
            .query(&[(METRIC_A, 11.0)])
            .html(),
        ok(
            "{{ range query \"metric\" | sortByLabel \"instance\" }}{{.Labels.instance}}:{{.Value}}: {{end}}",
            "a:11: b:21: ",
        )
        .query(&[(METRIC_B, 21.0), (METRIC_A, 11.0)]),
        ok("{{ \"foo.example.com\" | stripPort }}", "foo.example.com"),
        ok("{{ \"foo.example.com:12345\" | stripPort }}", "foo.example.com"),
        ok("{{ \"192.0.2.1\" | stripPort }}", "192.0.2.1"),
        ok("{{ \"192.0.2.1:12345\" | stripPort }}", "192.0.2.1"),
        ok("{{ \"2001:0DB8::1\" | stripPort }}", "2001:0DB8::1"),
        ok("{{ \"[2001:0DB8::1]:12345\" | stripPort }}", "2001:0DB8::1"),
        ok("{{ \"[2001:0DB8::1]::12345\" | stripPort }}", "[2001:0DB8::1]::12345"),
        ok("{{ .Foo }}", "<no value>"),
        err(
            "{{ .Foo }}",
            "error executing template test: template: test:1:3: executing \"test\" at <.Foo>: nil data; no entry for key \"Foo\"",
        )
        .missingkey_error(),
        ok("{{ .Foo }}", "").html(),
        err(
            "{{ .Foo }}",
            "error executing template test: template: test:1:3: executing \"test\" at <.Foo>: nil data; no entry for key \"Foo\"",
        )
        .missingkey_error()
        .html(),
        err("{{", "error parsing template test: template: test:1: unclosed action"),
        err(
            "{{ query \"missing\" | first }}",
            "error executing template test: template: test:1:21: executing \"test\" at <first>: error calling first: first() called on vector with no elements",
        )
        .query(&[]),
        err(
            "{{ (query \"missing\").banana }}",
            "error executing template test: template: test:1:10: executing \"test\" at <\"missing\">: can't evaluate field banana in type template.queryResult",
        )
        .query(&[])
        .gap("Go names the value's Go type (template.queryResult) and points at the last argument evaluated; gtmpl's values are untyped, so inferdb says only maps and objects have fields"),
        ok("{{ reReplaceAll \"(a)b\" \"x$1\" \"ab\" }}", "xa"),
        ok("{{ range . }}{{ humanize . }}:{{ end }}", "0:1:1.235M:120m:")
            .input(Input::F64(&[0.0, 1.0, 1234567.0, 0.12])),
        ok("{{ range . }}{{ humanize . }}:{{ end }}", "0:1:1.235M:120m:")
            .input(Input::Str(&["0.0", "1.0", "1234567.0", ".12"])),
        err(
            "{{ humanize \"one\" }}",
            "error executing template test: template: test:1:3: executing \"test\" at <humanize \"one\">: error calling humanize: strconv.ParseFloat: parsing \"one\": invalid syntax",
        ),
        ok("{{ range . }}{{ humanize . }}:{{ end }}", "0:-1:1:1.235M:9.223E:")
            .input(Input::I64(&[0, -1, 1, 1234567, i64::MAX])),
        ok("{{ range . }}{{ humanize . }}:{{ end }}", "0:1:1.235M:18.45E:")
            .input(Input::U64(&[0, 1, 1234567, u64::MAX])),
        ok("{{ range . }}{{ humanize1024 . }}:{{ end }}", "0:1:1Mi:0.12:")
            .input(Input::F64(&[0.0, 1.0, 1048576.0, 0.12])),
        ok("{{ range . }}{{ humanize1024 . }}:{{ end }}", "0:1:1Mi:0.12:")
            .input(Input::Str(&["0.0", "1.0", "1048576.0", ".12"])),
        err(
            "{{ humanize1024 \"one\" }}",
            "error executing template test: template: test:1:3: executing \"test\" at <humanize1024 \"one\">: error calling humanize1024: strconv.ParseFloat: parsing \"one\": invalid syntax",
        ),
        ok("{{ range . }}{{ humanize1024 . }}:{{ end }}", "0:-1:1:1.177Mi:8Ei:")
            .input(Input::I64(&[0, -1, 1, 1234567, i64::MAX])),
        ok("{{ range . }}{{ humanize1024 . }}:{{ end }}", "0:1:1.177Mi:16Ei:")
            .input(Input::U64(&[0, 1, 1234567, u64::MAX])),
        ok(
            "{{ range . }}{{ humanizeDuration . }}:{{ end }}",
            "0s:1s:1m 0s:1h 0m 0s:1d 0h 0m 0s:1d 1h 0m 0s:-2d 3h 4m 5s:14m 59s:",
        )
        .input(Input::F64(&[
            0.0,
            1.0,
            60.0,
            3600.0,
            86400.0,
            86400.0 + 3600.0,
            -(86400.0 * 2.0 + 3600.0 * 3.0 + 60.0 * 4.0 + 5.0),
            899.99,
        ])),
        ok(
            "{{ range . }}{{ humanizeDuration . }}:{{ end }}",
            "0s:1s:1m 0s:1h 0m 0s:1d 0h 0m 0s:",
        )
        .input(Input::Str(&["0", "1", "60", "3600", "86400"])),
        ok(
            "{{ range . }}{{ humanizeDuration . }}:{{ end }}",
            "100ms:100us:123.5ms:1m 0s:1m 0s:1.234s:12.35s:",
        )
        .input(Input::F64(&[0.1, 0.0001, 0.12345, 60.1, 60.5, 1.2345, 12.345])),
        ok(
            "{{ range . }}{{ humanizeDuration . }}:{{ end }}",
            "100ms:100us:123.5ms:1m 0s:1m 0s:1.234s:12.35s:",
        )
        .input(Input::Str(&[".1", ".0001", ".12345", "60.1", "60.5", "1.2345", "12.345"])),
        err(
            "{{ humanizeDuration \"one\" }}",
            "error executing template test: template: test:1:3: executing \"test\" at <humanizeDuration \"one\">: error calling humanizeDuration: strconv.ParseFloat: parsing \"one\": invalid syntax",
        ),
        ok("{{ range . }}{{ humanizeDuration . }}:{{ end }}", "0s:-1s:1s:14d 6h 56m 7s:")
            .input(Input::I64(&[0, -1, 1, 1234567])),
        ok("{{ range . }}{{ humanizeDuration . }}:{{ end }}", "0s:1s:14d 6h 56m 7s:")
            .input(Input::U64(&[0, 1, 1234567])),
        ok(
            "{{ range . }}{{ humanize . }}:{{ humanize1024 . }}:{{ humanizeDuration . }}:{{humanizeTimestamp .}}:{{ end }}",
            "+Inf:+Inf:+Inf:+Inf:-Inf:-Inf:-Inf:-Inf:NaN:NaN:NaN:NaN:",
        )
        .input(Input::F64(&[f64::INFINITY, f64::NEG_INFINITY, f64::NAN])),
        ok(
            "{{ range . }}{{ humanize . }}:{{ humanize1024 . }}:{{ humanizeDuration . }}:{{humanizeTimestamp .}}:{{ end }}",
            "+Inf:+Inf:+Inf:+Inf:-Inf:-Inf:-Inf:-Inf:NaN:NaN:NaN:NaN:",
        )
        .input(Input::Str(&["+Inf", "-Inf", "NaN"])),
        ok(
            "{{ -0.22222 | humanizePercentage }}:{{ 0.0 | humanizePercentage }}:{{ 0.1234567 | humanizePercentage }}:{{ 1.23456 | humanizePercentage }}",
            "-22.22%:0%:12.35%:123.5%",
        ),
        ok("{{ range . }}{{ humanizePercentage . }}:{{ end }}", "0%:-100%:100%:1.235e+08%:9.223e+20%:")
            .input(Input::I64(&[0, -1, 1, 1234567, i64::MAX])),
        ok("{{ range . }}{{ humanizePercentage . }}:{{ end }}", "0%:100%:1.235e+08%:1.845e+21%:")
            .input(Input::U64(&[0, 1, 1234567, u64::MAX])),
        ok(
            "{{ \"-0.22222\" | humanizePercentage }}:{{ \"0.0\" | humanizePercentage }}:{{ \"0.1234567\" | humanizePercentage }}:{{ \"1.23456\" | humanizePercentage }}",
            "-22.22%:0%:12.35%:123.5%",
        ),
        err(
            "{{ \"one\" | humanizePercentage }}",
            "error executing template test: template: test:1:11: executing \"test\" at <humanizePercentage>: error calling humanizePercentage: strconv.ParseFloat: parsing \"one\": invalid syntax",
        ),
        ok(
            "{{ range . }}{{ humanizeTimestamp . }}:{{ end }}",
            "1970-01-01 00:00:00 +0000 UTC:1969-12-31 23:59:59 +0000 UTC:1970-01-01 00:00:01 +0000 UTC:1970-01-15 06:56:07 +0000 UTC:2262-04-11 23:47:16 +0000 UTC:",
        )
        .input(Input::I64(&[0, -1, 1, 1234567, 9223372036])),
        ok(
            "{{ range . }}{{ humanizeTimestamp . }}:{{ end }}",
            "1970-01-01 00:00:00 +0000 UTC:1970-01-01 00:00:01 +0000 UTC:1970-01-15 06:56:07 +0000 UTC:2262-04-11 23:47:16 +0000 UTC:",
        )
        .input(Input::U64(&[0, 1, 1234567, 9223372036])),
        err(
            "{{ range . }}{{ humanizeTimestamp . }}:{{ end }}",
            "error executing template test: template: test:1:16: executing \"test\" at <humanizeTimestamp .>: error calling humanizeTimestamp: -9.223372036854776e+18 cannot be represented as a nanoseconds timestamp since it overflows int64",
        )
        .input(Input::I64(&[i64::MIN, i64::MAX])),
        err(
            "{{ range . }}{{ humanizeTimestamp . }}:{{ end }}",
            "error executing template test: template: test:1:16: executing \"test\" at <humanizeTimestamp .>: error calling humanizeTimestamp: 1.8446744073709552e+19 cannot be represented as a nanoseconds timestamp since it overflows int64",
        )
        .input(Input::U64(&[u64::MAX])),
        ok("{{ 1435065584.128 | humanizeTimestamp }}", "2015-06-23 13:19:44.128 +0000 UTC"),
        ok("{{ \"1435065584.128\" | humanizeTimestamp }}", "2015-06-23 13:19:44.128 +0000 UTC"),
        ok("{{ (1435065584.128 | toTime).Format \"2006\" }}", "2015"),
        ok("{{ (\"1435065584.128\" | toTime).Format \"2006\" }}", "2015"),
        ok("{{ \"aa bb CC\" | title }}", "Aa Bb CC"),
        ok("{{ \"aa bb CC\" | toUpper }}", "AA BB CC"),
        ok("{{ \"aA bB CC\" | toLower }}", "aa bb cc"),
        ok("{{ match \"a+\" \"aa\" }} {{ match \"a+\" \"b\" }}", "true false"),
        ok("{{ graphLink \"up\" }}", "/graph?g0.expr=up&g0.tab=0"),
        ok("{{ tableLink \"up\" }}", "/graph?g0.expr=up&g0.tab=1"),
        ok("{{ define \"a\" }}x{{ end }}{{ $name := \"a\"}}{{ tmpl $name . }}", "x").html(),
        ok("{{ pathPrefix }}", "/path/prefix"),
        ok("{{ externalURL }}", "http://testhost:9090/path/prefix"),
        ok("{{ printf \"%0.2f\" (parseDuration \"1h2m10ms\") }}", "3720.01"),
        ok("{{ \"foo.example.com\" | stripDomain }}", "foo"),
        ok("{{ \"foo.example.com:12345\" | stripDomain }}", "foo:12345"),
        ok("{{ \"192.0.2.1\" | stripDomain }}", "192.0.2.1"),
        ok("{{ \"192.0.2.1:12345\" | stripDomain }}", "192.0.2.1:12345"),
        ok("{{ \"2001:0DB8::1\" | stripDomain }}", "2001:0DB8::1"),
        ok("{{ \"[2001:0DB8::1]:12345\" | stripDomain }}", "[2001:0DB8::1]:12345"),
        ok("{{ \"[2001:0DB8::1]::12345\" | stripDomain }}", "[2001:0DB8::1]::12345"),
        // Beyond the Go table: more of Go's layout (`time.Time.Format`).
        ok(
            "{{ (1435065584.128 | toTime).Format \"2006-01-02T15:04:05.000Z07:00 Mon Jan _2 3PM .999 002\" }}",
            "2015-06-23T13:19:44.128Z Tue Jun 23 1PM .128 174",
        ),
        // Beyond the Go table: `eq` on a label the series lacks compares as "" (Go's
        // map[string]string), as alert templates rely on.
        ok(
            "{{ with query \"metric\" | first }}{{ if eq .Labels.foo \"\" }}none{{ else }}some{{ end }}{{ end }}",
            "none",
        )
        .query(&[(METRIC_A, 11.0)]),
    ]
}

fn run(c: &Case) -> Result<String, String> {
    let query = c.query.map(|q| {
        move |_: &str| -> QueryResult {
            Ok(q.iter()
                .map(|(l, v)| {
                    let labels: LabelPairs = l
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect();
                    (labels, *v)
                })
                .collect())
        }
    });
    let opts = ExpandOptions {
        html: c.html,
        missingkey_error: c.missingkey_error,
        external_url: "http://testhost:9090/path/prefix",
        query: query.as_ref().map(|q| q as &inferdb::template::QueryFn<'_>),
    };
    expand("test", c.text, c.input.value(), &opts).map_err(|e| e.to_string())
}

#[test]
fn prometheus_template_expansion_table() {
    let cases = cases();
    let mut passed = 0;
    let mut unexpected = Vec::new();
    let mut gaps = Vec::new();
    for c in &cases {
        let got = run(c);
        let good = match (&got, c.fails) {
            (Ok(out), false) => out == c.want,
            (Err(e), true) => e == c.want,
            _ => false,
        };
        if good {
            passed += 1;
        }
        match (good, c.gap.is_empty()) {
            (false, true) => unexpected.push(format!(
                "{:?}: want {}{:?}, got {got:?}",
                c.text,
                if c.fails { "error " } else { "" },
                c.want
            )),
            (true, false) => unexpected.push(format!(
                "{:?} passes now: drop its gap mark ({})",
                c.text, c.gap
            )),
            (false, false) => gaps.push(format!("{:?}: {} (got {got:?})", c.text, c.gap)),
            (true, true) => {}
        }
    }
    println!(
        "Prometheus' TestTemplateExpansion cases: {passed} of {} pass",
        cases.len()
    );
    for g in &gaps {
        println!("  gap: {g}");
    }
    assert!(unexpected.is_empty(), "{}", unexpected.join("\n"));
}

/// Alert templates print `$value` as Go's `fmt` prints a float64 and read a missing label as
/// "" (a Go `map[string]string`), whatever gtmpl's own numbers and maps do.
#[test]
fn alert_values_and_labels_read_as_in_go() {
    use inferdb::template::{expand_alert, AlertData};
    let data = |v: f64| AlertData {
        labels: vec![("instance".into(), "a:9090".into())],
        value: v,
        ..Default::default()
    };
    for (v, want) in [
        (-0.5, "-0.5"),
        (0.95, "0.95"),
        (88.0, "88"),
        (1234567.0, "1234567"),
        (1e21, "1e+21"),
        (1e-5, "1e-05"),
        (-2.5e-7, "-2.5e-07"),
        (f64::NAN, "NaN"),
    ] {
        assert_eq!(
            expand_alert("__alert_X", "{{ $value }}", &data(v), None).unwrap(),
            want,
            "{v}"
        );
    }
    assert_eq!(
        expand_alert(
            "__alert_X",
            "{{ $value | humanizePercentage }}",
            &data(-0.25),
            None
        )
        .unwrap(),
        "-25%"
    );
    let t = "{{ if eq $labels.job \"\" }}no job{{ else }}{{ $labels.job }}{{ end }} on {{ $labels.instance }}";
    assert_eq!(
        expand_alert("__alert_X", t, &data(1.0), None).unwrap(),
        "no job on a:9090"
    );
    assert_eq!(
        expand_alert("__alert_X", "[{{ $labels.missing }}]", &data(1.0), None).unwrap(),
        "[]"
    );
}

/// An execution error's position is found in text with multi-byte characters in its actions
/// (here a comment; Go counts the column in bytes).
#[test]
fn error_positions_count_bytes() {
    let got = expand(
        "test",
        "{{/* é */}}{{ humanize \"x\" }}",
        Value::Nil,
        &ExpandOptions::default(),
    );
    assert_eq!(
        got.unwrap_err().to_string(),
        "error executing template test: template: test:1:15: executing \"test\" at <humanize \"x\">: error calling humanize: strconv.ParseFloat: parsing \"x\": invalid syntax"
    );
}
