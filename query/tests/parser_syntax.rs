//! Parser behaviour: precedence and associativity, literals, selectors, modifiers,
//! aggregations, vector matching, duration expressions, spans and error positions.

use inferdb_query::ast::*;
use inferdb_query::parser::{parse, parse_duration, parse_matchers};
use inferdb_storage::MatchOp;

/// The tree as an S-expression, to check structure independently of the printer.
fn sx(e: &Expr) -> String {
    match &e.kind {
        ExprKind::Number(n) => {
            if n.duration {
                format!("{}s", n.value)
            } else {
                format!("{}", n.value)
            }
        }
        ExprKind::String(s) => format!("{s:?}"),
        ExprKind::VectorSelector(vs) => sel(vs),
        ExprKind::MatrixSelector(ms) => format!("{}[{}]", sel(&ms.selector), dur(&ms.range)),
        ExprKind::Subquery(sq) => format!(
            "(subquery {} {} {}{}{})",
            sx(&sq.expr),
            dur(&sq.range),
            sq.step.as_ref().map_or("-".into(), dur),
            sq.offset
                .as_ref()
                .map_or(String::new(), |d| format!(" offset {}", dur(d))),
            sq.at.as_ref().map_or(String::new(), |a| format!(" @{a:?}")),
        ),
        ExprKind::Paren(i) => format!("(paren {})", sx(i)),
        ExprKind::Unary(op, i) => format!(
            "({} {})",
            if *op == UnaryOp::Neg { "neg" } else { "pos" },
            sx(i)
        ),
        ExprKind::Binary(b) => {
            let mut m = String::new();
            if b.return_bool {
                m.push_str(" bool");
            }
            if let Some(vm) = &b.matching {
                m.push_str(&format!(
                    " {:?}{}{:?}{:?}",
                    vm.card,
                    if vm.on { " on" } else { " ignoring" },
                    vm.labels,
                    vm.include
                ));
            }
            format!("({}{m} {} {})", b.op.as_str(), sx(&b.lhs), sx(&b.rhs))
        }
        ExprKind::Aggregate(a) => format!(
            "({}{}{:?} {}{})",
            a.op.as_str(),
            if a.without { " without" } else { " by" },
            a.grouping,
            a.param
                .as_ref()
                .map_or(String::new(), |p| format!("{} ", sx(p))),
            sx(&a.expr)
        ),
        ExprKind::Call(c) => format!(
            "({} {})",
            c.func,
            c.args.iter().map(sx).collect::<Vec<_>>().join(" ")
        ),
        ExprKind::StepInvariant(i) => sx(i),
    }
}

fn dur(d: &Duration) -> String {
    match d {
        Duration::Millis(ms) => format!("{ms}ms"),
        Duration::Expr(e) => format!("<{}>", sx(e)),
    }
}

fn sel(vs: &VectorSelector) -> String {
    let ms: Vec<String> = vs
        .matchers
        .iter()
        .map(|m| format!("{}{}{:?}", m.name, m.op, m.value))
        .collect();
    let mut s = format!(
        "{}{{{}}}",
        vs.name.clone().unwrap_or_default(),
        ms.join(",")
    );
    if let Some(o) = &vs.offset {
        s.push_str(&format!(" offset {}", dur(o)));
    }
    if let Some(a) = &vs.at {
        s.push_str(&format!(" @{a:?}"));
    }
    s
}

fn p(q: &str) -> String {
    let e = parse(q).unwrap_or_else(|e| panic!("{q}: {e}"));
    // Every successful parse also round-trips through the printer.
    let printed = e.to_string();
    let again = parse(&printed).unwrap_or_else(|err| panic!("{q} printed as {printed}: {err}"));
    assert_eq!(again, e, "{q} printed as {printed}");
    sx(&e)
}

fn err(q: &str) -> String {
    match parse(q) {
        Ok(e) => panic!("{q} parsed as {e}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn precedence_and_associativity() {
    assert_eq!(p("1 + 2 * 3"), "(+ 1 (* 2 3))");
    assert_eq!(p("1 * 2 + 3"), "(+ (* 1 2) 3)");
    assert_eq!(p("1 - 2 - 3"), "(- (- 1 2) 3)");
    assert_eq!(p("8 / 4 / 2"), "(/ (/ 8 4) 2)");
    assert_eq!(p("2 ^ 3 ^ 2"), "(^ 2 (^ 3 2))");
    assert_eq!(p("2 * 3 ^ 2"), "(* 2 (^ 3 2))");
    assert_eq!(
        p("a % b atan2 c * d"),
        "(* (atan2 (% a{__name__=\"a\"} b{__name__=\"b\"}) c{__name__=\"c\"}) d{__name__=\"d\"})"
    );
    // Unary minus binds lower than ^ and like * otherwise.
    assert_eq!(p("-2 ^ 2"), "(neg (^ 2 2))");
    assert_eq!(p("-2 * 3"), "(* -2 3)");
    assert_eq!(p("- 1 + 2"), "(+ -1 2)");
    assert_eq!(p("2 ^ -1"), "(^ 2 -1)");
    assert_eq!(p("2 ^ -x ^ 2"), "(^ 2 (neg (^ x{__name__=\"x\"} 2)))");
    assert_eq!(p("1 - -1"), "(- 1 -1)");
    assert_eq!(p("--1"), "1");
    assert_eq!(p("+1"), "1");
    assert_eq!(p("-a * b"), "(* (neg a{__name__=\"a\"}) b{__name__=\"b\"})");
    // Comparison below arithmetic, and below it the set operators: and/unless above or.
    assert_eq!(
        p("a > b + 1"),
        "(> a{__name__=\"a\"} (+ b{__name__=\"b\"} 1))"
    );
    assert_eq!(
        p("a or b and c"),
        "(or ManyToMany ignoring[][] a{__name__=\"a\"} (and ManyToMany ignoring[][] b{__name__=\"b\"} c{__name__=\"c\"}))"
    );
    assert_eq!(
        p("a and b unless c"),
        "(unless ManyToMany ignoring[][] (and ManyToMany ignoring[][] a{__name__=\"a\"} b{__name__=\"b\"}) c{__name__=\"c\"})"
    );
    assert_eq!(
        p("a == b > c"),
        "(> (== a{__name__=\"a\"} b{__name__=\"b\"}) c{__name__=\"c\"})"
    );
    assert_eq!(p("(1 + 2) * 3"), "(* (paren (+ 1 2)) 3)");
    // Postfix modifiers bind tightest.
    assert_eq!(
        p("a + b offset 5m"),
        "(+ a{__name__=\"a\"} b{__name__=\"b\"} offset 300000ms)"
    );
    assert_eq!(p("-a offset 1m"), "(neg a{__name__=\"a\"} offset 60000ms)");
}

#[test]
fn number_and_string_literals() {
    assert_eq!(p("0x1f"), "31");
    assert_eq!(p("0X_1F"), "31");
    assert_eq!(p("1_000"), "1000");
    assert_eq!(p("1_000.5"), "1000.5");
    assert_eq!(p("12.34e6"), "12340000");
    assert_eq!(p(".2"), "0.2");
    assert_eq!(p("2."), "2");
    assert_eq!(p("inF"), "inf");
    assert_eq!(p("-Inf"), "-inf");
    assert_eq!(p("nan"), "NaN");
    assert_eq!(p("5m"), "300s");
    assert_eq!(p("1h30m"), "5400s");
    assert_eq!(p("1m0s"), "60s");
    assert_eq!(p("500ms"), "0.5s");
    assert_eq!(p(r#""a\tb\"c""#), r#""a\tb\"c""#);
    assert_eq!(p(r#"'it\'s'"#), r#""it's""#);
    assert_eq!(p(r#"`raw\n`"#), r#""raw\\n""#);
    assert_eq!(p(r#""\u00e9\x41\101""#), r#""éAA""#);
    assert!(err("1e400").contains("value out of range"));
    assert_eq!(
        err("\"\\.\""),
        "1:1: parse error: unknown escape sequence U+002E '.'"
    );
}

#[test]
fn selectors() {
    assert_eq!(p("up"), "up{__name__=\"up\"}");
    assert_eq!(
        p("vllm:num_requests_running{model_name=~\"x.*\", job!=\"a\", instance!~'b', env=\"p\"}"),
        "vllm:num_requests_running{model_name=~\"x.*\",job!=\"a\",instance!~\"b\",env=\"p\",__name__=\"vllm:num_requests_running\"}"
    );
    assert_eq!(p("{__name__=~\"foo|bar\"}"), "{__name__=~\"foo|bar\"}");
    assert_eq!(
        p("{\"metric.name\", \"a.b\"=\"c\"}"),
        "{__name__=\"metric.name\",a.b=\"c\"}"
    );
    assert_eq!(p("foo{a=\"b\",}"), "foo{a=\"b\",__name__=\"foo\"}");
    // Keywords are metric names where an expression is expected.
    assert_eq!(p("sum"), "sum{__name__=\"sum\"}");
    assert_eq!(
        p("by + offset"),
        "(+ by{__name__=\"by\"} offset{__name__=\"offset\"})"
    );
    assert_eq!(p("step{a=\"b\"}"), "step{a=\"b\",__name__=\"step\"}");
    assert_eq!(
        p("foo offset -5m"),
        "foo{__name__=\"foo\"} offset -300000ms"
    );
    assert_eq!(
        p("foo offset 1h30m"),
        "foo{__name__=\"foo\"} offset 5400000ms"
    );
    assert_eq!(
        p("foo @ 1603775091.5"),
        "foo{__name__=\"foo\"} @Timestamp(1603775091500)"
    );
    assert_eq!(p("foo @ -10"), "foo{__name__=\"foo\"} @Timestamp(-10000)");
    assert_eq!(p("foo @ start()"), "foo{__name__=\"foo\"} @Start");
    assert_eq!(
        p("foo @ end() offset 1m"),
        "foo{__name__=\"foo\"} offset 60000ms @End"
    );
    assert_eq!(
        p("foo[5m] offset 1m @ 10"),
        "foo{__name__=\"foo\"} offset 60000ms @Timestamp(10000)[300000ms]"
    );
    assert_eq!(p("foo[90]"), "foo{__name__=\"foo\"}[90000ms]");
    assert_eq!(p("foo[1m0s]"), "foo{__name__=\"foo\"}[60000ms]");
}

#[test]
fn subqueries_and_duration_expressions() {
    assert_eq!(
        p("rate(x[5m])[30m:1m]"),
        "(subquery (rate x{__name__=\"x\"}[300000ms]) 1800000ms 60000ms)"
    );
    assert_eq!(p("x[30m:]"), "(subquery x{__name__=\"x\"} 1800000ms -)");
    assert_eq!(
        p("x[30m:] offset 5m @ 100"),
        "(subquery x{__name__=\"x\"} 1800000ms - offset 300000ms @Timestamp(100000))"
    );
    assert_eq!(p("x[5m * 2]"), "x{__name__=\"x\"}[<(* 300s 2)>]");
    assert_eq!(p("x[-5m + 35m]"), "x{__name__=\"x\"}[<(+ -300s 2100s)>]");
    assert_eq!(p("x[step()]"), "x{__name__=\"x\"}[<(step )>]");
    assert_eq!(p("x[STep() + 1]"), "x{__name__=\"x\"}[<(+ (step ) 1)>]");
    assert_eq!(
        p("x[min_of(step()+1, 1h)]"),
        "x{__name__=\"x\"}[<(min_of (+ (step ) 1) 3600s)>]"
    );
    assert_eq!(
        p("x[29s+1s:5s+5s]"),
        "(subquery x{__name__=\"x\"} <(+ 29s 1s)> <(+ 5s 5s)>)"
    );
    // offset takes a literal or an atom; a following operator applies to the selector.
    assert_eq!(
        p("x offset 100 + 2"),
        "(+ x{__name__=\"x\"} offset 100000ms 2)"
    );
    assert_eq!(
        p("x offset (100 + 2)"),
        "x{__name__=\"x\"} offset <(paren (+ 100 2))>"
    );
    assert_eq!(
        p("x offset -2 ^ 2"),
        "(^ x{__name__=\"x\"} offset -2000ms 2)"
    );
    assert_eq!(
        p("x offset -step()*2"),
        "(* x{__name__=\"x\"} offset <(neg (step ))> 2)"
    );
    assert_eq!(p("x offset STEP()"), "x{__name__=\"x\"} offset <(step )>");
    assert_eq!(
        p("x offset -(min_of(step(), 1s))+8000"),
        "(+ x{__name__=\"x\"} offset <(neg (paren (min_of (step ) 1s)))> 8000)"
    );
    assert_eq!(err("x[5m/0]"), "1:5: parse error: division by zero");
    assert_eq!(
        err("x[0]"),
        "1:3: parse error: duration must be greater than 0"
    );
    assert_eq!(
        err("x[5m] offset"),
        "1:13: parse error: unexpected end of input in offset, expected number, duration, step(), or range()"
    );
}

#[test]
fn aggregations_and_calls() {
    assert_eq!(p("sum by (job) (x)"), "(sum by[\"job\"] x{__name__=\"x\"})");
    assert_eq!(
        p("sum(x) by (job, le,)"),
        "(sum by[\"job\", \"le\"] x{__name__=\"x\"})"
    );
    assert_eq!(p("SUM without () (x)"), "(sum without[] x{__name__=\"x\"})");
    assert_eq!(
        p("avg without (instance) (x)"),
        "(avg without[\"instance\"] x{__name__=\"x\"})"
    );
    assert_eq!(p("topk(3, x)"), "(topk by[] 3 x{__name__=\"x\"})");
    assert_eq!(
        p("quantile(0.9, x)"),
        "(quantile by[] 0.9 x{__name__=\"x\"})"
    );
    assert_eq!(
        p("count_values(\"v\", x)"),
        "(count_values by[] \"v\" x{__name__=\"x\"})"
    );
    assert_eq!(
        p("limit_ratio(-0.5, x)"),
        "(limit_ratio by[] -0.5 x{__name__=\"x\"})"
    );
    assert_eq!(
        p("sum by (on, bool, sum, \"a.b\") (x)"),
        "(sum by[\"on\", \"bool\", \"sum\", \"a.b\"] x{__name__=\"x\"})"
    );
    assert_eq!(
        p("histogram_quantile(0.99, sum by (le) (rate(x_bucket[5m])))"),
        "(histogram_quantile 0.99 (sum by[\"le\"] (rate x_bucket{__name__=\"x_bucket\"}[300000ms])))"
    );
    assert_eq!(p("round(x)"), "(round x{__name__=\"x\"})");
    assert_eq!(p("round(x, 5)"), "(round x{__name__=\"x\"} 5)");
    assert_eq!(
        p("label_join(x, \"d\", \",\")"),
        "(label_join x{__name__=\"x\"} \"d\" \",\")"
    );
    assert_eq!(p("vector(step())"), "(vector (step ))");
    assert_eq!(p("time()"), "(time )");
    assert_eq!(p("end() - start()"), "(- (end ) (start ))");
    assert_eq!(
        err("rate(x)"),
        "1:6: parse error: expected type range vector in call to function \"rate\", got instant vector"
    );
    assert_eq!(
        err("label_join(x, \"d\")"),
        "1:1: parse error: expected at least 3 argument(s) in call to \"label_join\", got 2"
    );
    assert_eq!(
        err("histogram_quantiles(x, \"q\", 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11)"),
        "1:1: parse error: expected at most 12 argument(s) in call to \"histogram_quantiles\", got 13"
    );
    assert_eq!(
        err("nope(x)"),
        "1:1: parse error: unknown function with name \"nope\""
    );
}

#[test]
fn binary_modifiers() {
    assert_eq!(
        p("a > bool b"),
        "(> bool a{__name__=\"a\"} b{__name__=\"b\"})"
    );
    assert_eq!(p("1 > bool 2"), "(> bool 1 2)");
    assert_eq!(
        p("a * on(x, y) group_left(z) b"),
        "(* ManyToOne on[\"x\", \"y\"][\"z\"] a{__name__=\"a\"} b{__name__=\"b\"})"
    );
    assert_eq!(
        p("a / ignoring(x) group_right b"),
        "(/ OneToMany ignoring[\"x\"][] a{__name__=\"a\"} b{__name__=\"b\"})"
    );
    assert_eq!(
        p("a + ignoring() b"),
        "(+ OneToOne ignoring[][] a{__name__=\"a\"} b{__name__=\"b\"})"
    );
    assert_eq!(p("a + b"), "(+ a{__name__=\"a\"} b{__name__=\"b\"})");
    assert_eq!(
        p("a and on(x) b"),
        "(and ManyToMany on[\"x\"][] a{__name__=\"a\"} b{__name__=\"b\"})"
    );
    // Matching is dropped where a scalar is involved, as in Prometheus.
    assert_eq!(p("a + ignoring() 1"), "(+ a{__name__=\"a\"} 1)");
    // group_left followed by "(" takes it as its label list.
    assert_eq!(
        p("a * on(x) group_left (y) b"),
        "(* ManyToOne on[\"x\"][\"y\"] a{__name__=\"a\"} b{__name__=\"b\"})"
    );
    assert_eq!(
        err("1 == 1"),
        "1:3: parse error: comparisons between scalars must use BOOL modifier"
    );
    assert_eq!(
        err("a + bool b"),
        "1:3: parse error: bool modifier can only be used on comparison operators"
    );
    assert_eq!(
        err("a + fill(0) b"),
        "1:5: parse error: binop fill modifiers are experimental and not enabled"
    );
}

#[test]
fn comments_and_whitespace() {
    assert_eq!(
        p("# leading\nsum(x) # trailing"),
        "(sum by[] x{__name__=\"x\"})"
    );
    assert_eq!(
        p("foo{a=\"b\", # inside braces\n c=\"d\"}\n"),
        "foo{a=\"b\",c=\"d\",__name__=\"foo\"}"
    );
    assert_eq!(p("rate(\n  x[5m]\n)"), "(rate x{__name__=\"x\"}[300000ms])");
}

#[test]
fn spans() {
    let e = parse("sum(rate(foo{a=\"b\"}[5m])) + 1").unwrap();
    assert_eq!(e.span, Span { start: 0, end: 29 });
    let ExprKind::Binary(b) = &e.kind else {
        panic!()
    };
    assert_eq!(b.lhs.span, Span { start: 0, end: 25 });
    let ExprKind::Aggregate(a) = &b.lhs.kind else {
        panic!()
    };
    assert_eq!(a.expr.span, Span { start: 4, end: 24 });
    let ExprKind::Call(c) = &a.expr.kind else {
        panic!()
    };
    assert_eq!(c.args[0].span, Span { start: 9, end: 23 });
    let e = parse("limit_ratio(-1.1, x)").unwrap();
    let ExprKind::Aggregate(a) = &e.kind else {
        panic!()
    };
    assert_eq!(a.param.as_ref().unwrap().span.start, 12);
    let e = parse("x offset 5m").unwrap();
    assert_eq!(e.span, Span { start: 0, end: 11 });
}

#[test]
fn error_positions_and_format() {
    let e = parse("sum(x) +\n  foo{").unwrap_err();
    assert_eq!((e.line, e.column, e.position), (2, 7, 15));
    assert_eq!(
        e.to_string(),
        "2:7: parse error: unexpected end of input inside braces"
    );
    let e = parse("foo bar").unwrap_err();
    assert_eq!(
        e.to_string(),
        "1:5: parse error: unexpected identifier \"bar\""
    );
    let e = parse("rate(x[5m]) offset 1m").unwrap_err();
    assert_eq!(
        e.message,
        "offset modifier must be preceded by an instant vector selector or range vector selector or a subquery"
    );
    assert_eq!(err("sum(x"), "1:6: parse error: unclosed left parenthesis");
    assert_eq!(
        err("{job=\"\"}"),
        "1:1: parse error: vector selector must contain at least one non-empty matcher"
    );
    assert!(err("{a=~\"(\"}").contains("error parsing regexp"));
}

#[test]
fn matchers_api() {
    let ms = parse_matchers("up{job=\"x\", i=~\"a.*\"}").unwrap();
    assert_eq!(ms.len(), 3);
    assert_eq!(
        (ms[0].name.as_str(), ms[0].op, ms[0].value.as_str()),
        ("job", MatchOp::Equal, "x")
    );
    assert_eq!(ms[1].op, MatchOp::RegexMatch);
    assert_eq!(
        (ms[2].name.as_str(), ms[2].value.as_str()),
        ("__name__", "up")
    );
    let ms = parse_matchers("{job=\"x\"}").unwrap();
    assert_eq!(ms.len(), 1);
    assert!(parse_matchers("up + 1").is_err());
    assert!(parse_matchers("rate(x[5m])").is_err());
    assert!(parse_matchers("").is_err());
}

#[test]
fn duration_api() {
    assert_eq!(parse_duration("15").unwrap(), 15_000);
    assert_eq!(parse_duration("0.5").unwrap(), 500);
    assert_eq!(parse_duration("1m30s").unwrap(), 90_000);
    assert_eq!(parse_duration("500ms").unwrap(), 500);
    assert_eq!(
        parse_duration("abc").unwrap_err().message,
        "cannot parse \"abc\" to a valid duration"
    );
    assert!(parse_duration("1e300")
        .unwrap_err()
        .message
        .contains("overflows int64"));
}

#[test]
fn invalid_utf8_string_escapes_are_kept_as_bytes() {
    use inferdb_query::parser::{go_bytes, go_quote, is_valid_utf8};
    let e = parse("count_values(\"a\\xc5z\", x)").unwrap();
    let ExprKind::Aggregate(a) = &e.kind else {
        panic!()
    };
    let ExprKind::String(s) = &a.param.as_ref().unwrap().kind else {
        panic!()
    };
    assert!(!is_valid_utf8(s));
    assert_eq!(go_bytes(s), b"a\xc5z");
    assert_eq!(go_quote(s), "\"a\\xc5z\"");
    let e2 = parse(&e.to_string()).unwrap();
    assert_eq!(e, e2);
    let e = parse("\"\\xc3\\xa9\"").unwrap();
    assert_eq!(e.kind, ExprKind::String("é".into()));
}

#[test]
fn info_label_selector_may_match_empty() {
    assert_eq!(
        p("info(metric, {data=~\".*\"})"),
        "(info metric{__name__=\"metric\"} {data=~\".*\"})"
    );
    assert_eq!(
        err("info(metric, target_info{data=\"x\"})"),
        "1:14: parse error: expected label selectors only, got vector selector instead"
    );
}

#[test]
fn deep_nesting_is_an_error_not_a_stack_overflow() {
    use inferdb_query::parser::MAX_NESTING;
    let n = 100_000;
    for q in [
        format!("{}1{}", "(".repeat(n), ")".repeat(n)),
        format!("{}1", "-".repeat(n)),
        format!("{}x{}", "sum(".repeat(n), ")".repeat(n)),
        format!("x{}", "[1m:]".repeat(n)),
        format!("x[{}1{}]", "(".repeat(n), ")".repeat(n)),
        format!("x offset ({}1{})", "(".repeat(n), ")".repeat(n)),
    ] {
        let e = parse(&q).unwrap_err();
        assert!(e.message.contains("nested too deeply"), "{}", e.message);
    }
    // Realistic depths are fine.
    let q = format!(
        "{}1{}",
        "(".repeat(MAX_NESTING / 2),
        ")".repeat(MAX_NESTING / 2)
    );
    assert!(parse(&q).is_ok());
    // A flat chain of binary operators is not nesting, however long (as in Prometheus).
    for q in [
        format!("x{}", " + x".repeat(n)),
        format!("x{}", " or x".repeat(n)),
        format!("2{}", " ^ 1".repeat(n)),
    ] {
        assert!(parse(&q).is_ok(), "{}", &q[..20]);
    }
}
