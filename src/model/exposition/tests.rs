use super::*;

fn samples(page: &str, f: Format) -> Vec<Sample<'_>> {
    parse(page, f)
        .filter_map(|e| match e.expect("parse") {
            Entry::Sample(s) => Some(s),
            _ => None,
        })
        .collect()
}

fn labels(s: &Sample<'_>) -> Vec<(String, String)> {
    s.labels
        .iter()
        .map(|(n, v)| (n.into_owned(), v.into_owned()))
        .collect()
}

#[test]
fn names_with_colons_and_values() {
    let page = "vllm:num_requests_running{engine=\"0\",model_name=\"m/x\"} 29.0\n\
                a 4.833385e+06\nb NaN\nc +Inf\nd -Inf\ne 1.1701968896e+010\nf -0.5 1700000000000\n";
    let s = samples(page, Format::PromText);
    assert_eq!(s.len(), 7);
    assert_eq!(s[0].name, "vllm:num_requests_running");
    assert_eq!(
        labels(&s[0]),
        vec![
            ("engine".into(), "0".into()),
            ("model_name".into(), "m/x".into())
        ]
    );
    assert_eq!(s[0].value, 29.0);
    assert_eq!(s[1].value, 4_833_385.0);
    assert!(s[2].value.is_nan());
    assert_eq!(s[3].value, f64::INFINITY);
    assert_eq!(s[4].value, f64::NEG_INFINITY);
    assert_eq!(s[5].value, 1.1701968896e10);
    assert_eq!(s[6].timestamp_ms, Some(1_700_000_000_000));
    assert_eq!(s[0].timestamp_ms, None);
    assert_eq!(
        s[0].series_text,
        "vllm:num_requests_running{engine=\"0\",model_name=\"m/x\"}"
    );
}

#[test]
fn escaping_and_special_chars_in_values() {
    let page = r#"m{a="x\\y",b="say \"hi\"",c="l1\nl2",d="} , = {",e="",f="[]"} 1
"#;
    let s = samples(page, Format::PromText);
    let l = labels(&s[0]);
    assert_eq!(l[0].1, "x\\y");
    assert_eq!(l[1].1, "say \"hi\"");
    assert_eq!(l[2].1, "l1\nl2");
    assert_eq!(l[3].1, "} , = {");
    assert_eq!(l[4].1, "");
    assert_eq!(l[5].1, "[]");
    // Values without escapes are borrowed from the page.
    let (_, v) = s[0].labels.iter().nth(3).unwrap();
    assert!(matches!(v, Cow::Borrowed(_)));
    let (_, v) = s[0].labels.iter().next().unwrap();
    assert!(matches!(v, Cow::Owned(_)));
}

#[test]
fn help_type_unit_metadata() {
    let page = "# HELP foo Some help \\n with a \\\\ backslash \n# TYPE foo counter\n# UNIT foo seconds\n# random comment\nfoo_total 1\n";
    let e: Vec<_> = parse(page, Format::PromText).map(|e| e.unwrap()).collect();
    assert_eq!(e.len(), 4);
    assert_eq!(
        e[0],
        Entry::Help {
            name: "foo".into(),
            help: "Some help \n with a \\ backslash ".into()
        }
    );
    assert_eq!(
        e[1],
        Entry::Type {
            name: "foo".into(),
            kind: MetricType::Counter
        }
    );
    assert_eq!(
        e[2],
        Entry::Unit {
            name: "foo".into(),
            unit: "seconds"
        }
    );
}

#[test]
fn le_and_quantile_normalised_by_type() {
    let page = "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"0.5\"} 1\nh_bucket{le=\"1e6\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_bucket{le=\"100000\"} 2\n\
                # TYPE s summary\ns{quantile=\"0.99\"} 1\ns{quantile=\"1\"} 1\n\
                # TYPE g gauge\ng{le=\"1\"} 1\n";
    let s = samples(page, Format::PromText);
    let le: Vec<String> = s.iter().map(|s| labels(s)[0].1.clone()).collect::<Vec<_>>();
    assert_eq!(
        le,
        vec!["1.0", "0.5", "1e+06", "+Inf", "100000.0", "0.99", "1.0", "1"]
    );
}

#[test]
fn go_float_format() {
    assert_eq!(format_openmetrics_float(1.0), "1.0");
    assert_eq!(format_openmetrics_float(0.001), "0.001");
    assert_eq!(format_openmetrics_float(0.0001), "0.0001");
    assert_eq!(format_openmetrics_float(0.00001), "1e-05");
    assert_eq!(format_openmetrics_float(2560.0), "2560.0");
    assert_eq!(format_openmetrics_float(1048576.0), "1.048576e+06");
    assert_eq!(format_openmetrics_float(-2.5), "-2.5");
    assert_eq!(format_openmetrics_float(123456.5), "123456.5");
}

#[test]
fn openmetrics_page() {
    let page = "# TYPE foo counter\n# HELP foo a \\\"quoted\\\" help\nfoo_total{a=\"b\"} 17.0 1520879607.789 # {trace_id=\"KOO5S4vxi0o\"} 0.67\nfoo_created{a=\"b\"} 1520430000.123\n# EOF\n";
    let e: Vec<_> = parse(page, Format::OpenMetrics).collect();
    assert_eq!(e.len(), 4, "{e:?}");
    match &e[1] {
        Ok(Entry::Help { help, .. }) => assert_eq!(help, "a \"quoted\" help"),
        o => panic!("{o:?}"),
    }
    match &e[2] {
        Ok(Entry::Sample(s)) => {
            assert_eq!(s.name, "foo_total");
            assert_eq!(s.value, 17.0);
            assert_eq!(s.timestamp_ms, Some(1_520_879_607_789));
        }
        o => panic!("{o:?}"),
    }
    match &e[3] {
        Ok(Entry::Sample(s)) => assert_eq!(s.name, "foo_created"),
        o => panic!("{o:?}"),
    }
}

#[test]
fn openmetrics_requires_eof_and_nothing_after() {
    let e: Vec<_> = parse("a 1\n", Format::OpenMetrics).collect();
    let err = e.last().unwrap().as_ref().unwrap_err();
    assert!(err.reason.contains("EOF"), "{err}");
    let e: Vec<_> = parse("a 1\n# EOF\nb 2\n", Format::OpenMetrics).collect();
    let err = e.last().unwrap().as_ref().unwrap_err();
    assert_eq!(err.line, 3);
    assert!(err.reason.contains("after # EOF"));
    // 0.0.4 accepts a trailing # EOF too
    assert_eq!(samples("a 1\n# EOF\n", Format::PromText).len(), 1);
}

#[test]
fn utf8_quoted_names() {
    let page = "{\"my.metric\",\"label.with.dots\"=\"v\",b=\"c\"} 3\n# HELP \"my.metric\" dotted\n";
    let e: Vec<_> = parse(page, Format::PromText).map(|e| e.unwrap()).collect();
    match &e[0] {
        Entry::Sample(s) => {
            assert_eq!(s.name, "my.metric");
            assert_eq!(
                labels(s),
                vec![
                    ("label.with.dots".into(), "v".into()),
                    ("b".into(), "c".into())
                ]
            );
        }
        o => panic!("{o:?}"),
    }
    assert!(matches!(&e[1], Entry::Help { name, .. } if name == "my.metric"));
}

#[test]
fn malformed_lines_name_line_and_reason() {
    let cases: &[(&str, usize, &str)] = &[
        ("a 1\nb{x=\"1\" 2\n", 2, "label"),
        ("a 1\n\nb{x=1} 2\n", 3, "label"),
        ("a 1\nb{=\"1\"} 2\n", 2, "label name"),
        ("9abc 1\n", 1, "metric name"),
        ("a\n", 1, "missing value"),
        ("a 1\nb 1.2.3\n", 2, "invalid value"),
        ("a 1 12.5\n", 1, "invalid timestamp"),
        ("a 1 5 extra\n", 1, "after timestamp"),
        ("# TYPE a nonsense\n", 1, "metric type"),
        ("a{b=\"c\"\n", 1, "unterminated"),
        ("a{b=\"c} 1\n", 1, "label"),
    ];
    for (page, line, reason) in cases {
        let err = parse(page, Format::PromText)
            .find_map(|e| e.err())
            .unwrap_or_else(|| panic!("no error for {page:?}"));
        assert_eq!(err.line, *line, "{page:?}: {err}");
        assert!(err.reason.contains(reason), "{page:?}: {err}");
        assert!(err.to_string().starts_with(&format!("line {line}: ")));
    }
}

#[test]
fn dcgm_error_value_is_value_only() {
    let page = "DCGM_FI_DEV_X{gpu=\"0\"} ERROR - FAILED TO CONVERT TO STRING\nDCGM_FI_DEV_Y{gpu=\"0\"} 3\n";
    let e: Vec<_> = parse(page, Format::PromText).collect();
    assert_eq!(e.len(), 2);
    let err = e[0].as_ref().unwrap_err();
    assert!(err.bad_value_only);
    assert!(e[1].is_ok());
}

#[test]
fn whitespace_and_trailing_comma_tolerated_in_text() {
    let s = samples("a{ b = \"c\" , d=\"e\", }   1  \n", Format::PromText);
    assert_eq!(
        labels(&s[0]),
        vec![("b".into(), "c".into()), ("d".into(), "e".into())]
    );
    assert_eq!(s[0].value, 1.0);
}

#[test]
fn content_type_detection() {
    assert_eq!(
        Format::from_content_type("application/openmetrics-text; version=1.0.0; charset=utf-8"),
        Format::OpenMetrics
    );
    assert_eq!(
        Format::from_content_type("text/plain; version=1.0.0; charset=utf-8"),
        Format::PromText
    );
    assert_eq!(Format::from_content_type(""), Format::PromText);
}

fn fixture_pages() -> Vec<std::path::PathBuf> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut out = vec![];
    for dir in ["vllm", "dcgm"] {
        for e in std::fs::read_dir(root.join(dir)).expect("fixtures present") {
            let p = e.unwrap().path();
            let n = p.file_name().unwrap().to_string_lossy().to_string();
            if n.starts_with("metrics") && n.ends_with(".txt") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn every_fixture_page_parses_fully() {
    let pages = fixture_pages();
    assert_eq!(pages.len(), 4, "{pages:?}");
    for p in pages {
        let page = std::fs::read_to_string(&p).unwrap();
        let expected = page
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
            .count();
        let expected_meta = page
            .lines()
            .filter(|l| l.starts_with("# HELP ") || l.starts_with("# TYPE "))
            .count();
        let mut n = 0;
        let mut meta = 0;
        for e in parse(&page, Format::PromText) {
            match e.unwrap_or_else(|e| panic!("{}: {e}", p.display())) {
                Entry::Sample(s) => {
                    n += 1;
                    assert!(!s.name.is_empty());
                    for (name, _) in s.labels.iter() {
                        assert!(!name.is_empty());
                    }
                    // Re-rendering the series text parses back to the same labels.
                }
                _ => meta += 1,
            }
        }
        assert_eq!(n, expected, "{}", p.display());
        assert_eq!(meta, expected_meta, "{}", p.display());
        assert!(n > 100, "{}", p.display());
    }
}

#[test]
fn fixture_values_match_spot_checks() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let page = std::fs::read_to_string(root.join("vllm/metrics-load.txt")).unwrap();
    let s = samples(&page, Format::PromText);
    let running = s
        .iter()
        .find(|s| s.name == "vllm:num_requests_running")
        .unwrap();
    assert_eq!(running.value, 29.0);
    assert_eq!(
        running.labels.get("model_name").unwrap(),
        "meta-llama/Llama-3.1-8B-Instruct"
    );
    let start = s
        .iter()
        .find(|s| s.name == "process_start_time_seconds")
        .unwrap();
    assert_eq!(start.value, 1.79619840037e9);
    // le values of the fixtures are already normal: nothing to rewrite.
    let buckets: Vec<_> = s
        .iter()
        .filter(|s| s.name == "vllm:time_to_first_token_seconds_bucket")
        .map(|s| s.labels.get("le").unwrap().into_owned())
        .collect();
    assert_eq!(buckets.first().unwrap(), "0.001");
    assert_eq!(buckets.last().unwrap(), "+Inf");
    assert_eq!(buckets.len(), 23);
    let cfg = s
        .iter()
        .find(|s| s.name == "vllm:cache_config_info")
        .unwrap();
    assert_eq!(cfg.labels.len(), 40);
    let dcgm = std::fs::read_to_string(root.join("dcgm/metrics-8gpu.txt")).unwrap();
    let d = samples(&dcgm, Format::PromText);
    assert_eq!(d.len(), 200);
    assert_eq!(
        d[0].labels.get("modelName").unwrap(),
        "NVIDIA H100 80GB HBM3"
    );
    assert_eq!(d[0].labels.get("pci_bus_id").unwrap(), "00000000:18:00.0");
}

/// What Prometheus' text 0.0.4 parser accepts (checked against Prometheus 2.42 scraping
/// these lines, and its lexer `promlex.l`: blanks are spaces and tabs, skipped between every
/// token of a sample line; the page is read as if it ended with a newline).
#[test]
fn text_blanks_as_prometheus_reads_them() {
    type Case<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)], f64, Option<i64>);
    let cases: &[Case<'_>] = &[
        ("m {a=\"b\"} 1\n", "m", &[("a", "b")], 1.0, None),
        ("m\t{a=\"b\"} 1\n", "m", &[("a", "b")], 1.0, None),
        ("m \t {a=\"b\"} \t 2 \t\n", "m", &[("a", "b")], 2.0, None),
        ("m {a=\"b\"}3\n", "m", &[("a", "b")], 3.0, None),
        ("m\t4\n", "m", &[], 4.0, None),
        (
            "m{a=\"b\"}\t5\t1700000000000\n",
            "m",
            &[("a", "b")],
            5.0,
            Some(1_700_000_000_000),
        ),
        ("m 6   \n", "m", &[], 6.0, None),
        ("m{a=\"b\"} 7 8 \t\n", "m", &[("a", "b")], 7.0, Some(8)),
        ("m 9", "m", &[], 9.0, None),
        ("m{a=\"b\"} 10", "m", &[("a", "b")], 10.0, None),
        (
            "m{ a = \"b\" , c=\"d\" ,} 11\n",
            "m",
            &[("a", "b"), ("c", "d")],
            11.0,
            None,
        ),
        ("m 12\n  \t\n", "m", &[], 12.0, None),
    ];
    for (page, name, want, value, ts) in cases {
        let s = samples(page, Format::PromText);
        assert_eq!(s.len(), 1, "{page:?}");
        assert_eq!(s[0].name, *name, "{page:?}");
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        assert_eq!(labels(&s[0]), want, "{page:?}");
        assert_eq!((s[0].value, s[0].timestamp_ms), (*value, *ts), "{page:?}");
        // the series text is a cache key that reads back the same
        let back = parse_series_text(s[0].series_text, None).unwrap();
        assert_eq!(labels(&back), want, "{page:?}");
    }
    // blanks before a comment; `# EOF` is an ordinary comment in text 0.0.4
    let e: Vec<_> = parse("  # HELP m x\nm 1\n# EOF\nn 2\n", Format::PromText)
        .map(|e| e.unwrap())
        .collect();
    assert!(matches!(&e[0], Entry::Help { name, help } if name == "m" && help == "x"));
    assert_eq!(e.len(), 3, "{e:?}");
}

/// What Prometheus' text 0.0.4 parser refuses among near misses (Prometheus 2.42 fails the
/// scrape on each): a carriage return before the newline (`1\r` is not a float), a signed
/// timestamp, an exemplar, a TYPE line with blanks around the type.
#[test]
fn text_refusals_as_prometheus() {
    for (page, reason, value_only) in [
        ("m 1\r\n", "invalid value", false),
        ("m 1 -5\n", "invalid timestamp", true),
        ("m 1 +5\n", "invalid timestamp", true),
        ("m 1 # {a=\"b\"} 2\n", "exemplar", false),
        ("# TYPE m counter \n", "metric type", false),
        ("# TYPE m  counter\n", "metric type", false),
        ("# TYPE m counter\r\n", "metric type", false),
    ] {
        let err = parse(page, Format::PromText)
            .find_map(|e| e.err())
            .unwrap_or_else(|| panic!("no error for {page:?}"));
        assert!(err.reason.contains(reason), "{page:?}: {err}");
        assert_eq!(err.bad_value_only, value_only, "{page:?}: {err}");
    }
}

/// OpenMetrics separates tokens by exactly one space and allows no other blanks
/// (`openmetricslex.l`); Prometheus 2.42 fails the scrape on each refused page, and
/// accepts `# EOF` without a final newline.
#[test]
fn openmetrics_blanks_as_prometheus_reads_them() {
    for page in [
        "m 1\n# EOF\n",
        "m 1\n# EOF",
        "m{a=\"b\",} 1\n# EOF\n", // Prometheus 3 (2.42 refused the trailing comma)
        "# TYPE m counter\nm_total 1 # {a=\"b\"} 2\n# EOF\n",
        "m 1 1.5\n# EOF\n",
        "m 1 1.5 # {a=\"b\"} 2\n# EOF\n",
        "# HELP m  two spaces kept\n# EOF\n",
    ] {
        assert!(
            parse(page, Format::OpenMetrics).all(|e| e.is_ok()),
            "{page:?}: {:?}",
            parse(page, Format::OpenMetrics).collect::<Vec<_>>()
        );
    }
    for page in [
        "m {a=\"b\"} 1\n# EOF\n",
        "m\t1\n# EOF\n",
        "m 1\t\n# EOF\n",
        "m 1 \n# EOF\n",
        "m  1\n# EOF\n",
        "m 1 1.5 \n# EOF\n",
        "m 1 1.5  # {a=\"b\"} 2\n# EOF\n",
        "m{a=\"b\", c=\"d\"} 1\n# EOF\n",
        "m{ a=\"b\"} 1\n# EOF\n",
        "m{a = \"b\"} 1\n# EOF\n",
        " m 1\n# EOF\n",
        "m 1\r\n# EOF\n",
        "m 1\n\nn 1\n# EOF\n",
        "m 1\n# EOF\n\n",
        "#  TYPE m counter\n# EOF\n",
        "# TYPE m  counter\n# EOF\n",
        "# HELP m\n# EOF\n",
    ] {
        let err = parse(page, Format::OpenMetrics).find_map(|e| e.err());
        let err = err.unwrap_or_else(|| panic!("no error for {page:?}"));
        assert!(!err.bad_value_only, "{page:?}: {err}");
    }
    let s = samples("m 1 1.5\n# EOF\n", Format::OpenMetrics);
    assert_eq!(s[0].timestamp_ms, Some(1500));
}

/// The scrape cache's fast path ([`Parser::next_known`], given the series texts of an
/// earlier page) reads every page exactly as [`Parser::next`] alone does, blanks included.
#[test]
fn next_known_agrees_with_next_on_blanks() {
    type Read = Vec<Result<(String, f64, Option<i64>), (usize, bool)>>;
    fn plain(page: &str, f: Format) -> Read {
        parse(page, f)
            .filter_map(|e| match e {
                Ok(Entry::Sample(s)) => {
                    Some(Ok((s.series_text.to_string(), s.value, s.timestamp_ms)))
                }
                Ok(_) => None,
                Err(e) => Some(Err((e.line, e.bad_value_only))),
            })
            .collect()
    }
    fn cached(prev: &[String], page: &str, f: Format) -> Read {
        let mut out = vec![];
        let mut p = parse(page, f);
        let mut next = 0;
        loop {
            if let Some(text) = prev.get(next) {
                if let Some(r) = p.next_known(text) {
                    next += 1;
                    out.push(
                        r.map(|(v, t)| (text.clone(), v, t))
                            .map_err(|e| (e.line, e.bad_value_only)),
                    );
                    continue;
                }
            }
            match p.next() {
                None => break,
                Some(Ok(Entry::Sample(s))) => {
                    if let Some(i) = prev.iter().position(|t| t == s.series_text) {
                        next = i + 1;
                    }
                    out.push(Ok((s.series_text.to_string(), s.value, s.timestamp_ms)));
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => out.push(Err((e.line, e.bad_value_only))),
            }
        }
        out
    }
    let pages: &[(Format, &str)] = &[
        (Format::PromText, "m 1\nm{a=\"b\"} 2\nm {a=\"b\"} 3\n"),
        (Format::PromText, "m {a=\"b\"} 4\nm\t{a=\"b\"} 5\nm 6\t7 \n"),
        (Format::PromText, "m 1 +5\nm 1\r\nm{a=\"b\"} 1 # x\n"),
        (Format::PromText, "m \t{a=\"b\"} 8\nm{a=\"b\"}\t9\n"),
        (Format::OpenMetrics, "m 1\nm{a=\"b\"} 2\n# EOF\n"),
        (Format::OpenMetrics, "m {a=\"b\"} 3\n# EOF\n"),
        (Format::OpenMetrics, "m 1 \n# EOF\n"),
        (Format::OpenMetrics, "m  1\n# EOF\n"),
        (Format::OpenMetrics, "m 1\t2\n# EOF\n"),
        (Format::OpenMetrics, "m{a=\"b\"} 1 2 # {c=\"d\"} 1\n# EOF\n"),
    ];
    for (f, prev_page) in pages {
        let prev: Vec<String> = plain(prev_page, *f)
            .into_iter()
            .filter_map(|r| r.ok().map(|(t, _, _)| t))
            .collect();
        for (g, page) in pages.iter().filter(|(g, _)| g == f) {
            assert_eq!(
                cached(&prev, page, *g),
                plain(page, *g),
                "{page:?} after {prev_page:?}"
            );
        }
    }
}
