//! Parse errors: Prometheus' messages at Prometheus' positions.

use inferdb_query::parser::{parse, ParseError};

/// (query, byte position, message) — behaviour of Prometheus 3's parser on bad input.
const CASES: &[(&str, usize, &str)] = &[
    ("", 0, "no expression found in input"),
    ("# just a comment\n\n", 0, "no expression found in input"),
    ("1+", 2, "unexpected end of input"),
    (".", 0, "unexpected character: '.'"),
    ("2.5.", 0, "bad number or duration syntax: \"2.5.\""),
    ("100..4", 0, "bad number or duration syntax: \"100..\""),
    ("0deadbeef", 0, "bad number or duration syntax: \"0de\""),
    ("1 /", 3, "unexpected end of input"),
    ("*1", 0, "unexpected <op:*>"),
    ("(1))", 4, "unexpected right parenthesis ')'"),
    ("((1)", 4, "unclosed left parenthesis"),
    ("999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999", 0, "error parsing number: strconv.ParseFloat: parsing \"999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999\": value out of range"),
    ("(", 1, "unclosed left parenthesis"),
    ("1 and 1", 0, "set operator \"and\" not allowed in binary scalar expression"),
    ("1 == 1", 2, "comparisons between scalars must use BOOL modifier"),
    ("1 or 1", 0, "set operator \"or\" not allowed in binary scalar expression"),
    ("1 unless 1", 0, "set operator \"unless\" not allowed in binary scalar expression"),
    ("1 !~ 1", 2, "unexpected character after '!': '~'"),
    ("1 =~ 1", 2, "unexpected character after '=': '~'"),
    ("-\"string\"", 0, "unary expression only allowed on expressions of type scalar or instant vector, got \"string\""),
    ("-test[5m]", 0, "unary expression only allowed on expressions of type scalar or instant vector, got \"range vector\""),
    ("*test", 0, "unexpected <op:*>"),
    ("@@", 0, "unexpected <op:@>"),
    ("1 offset 1d", 0, "offset modifier must be preceded by an instant vector selector or range vector selector or a subquery"),
    ("foo offset 1s offset 2s", 0, "offset may not be set multiple times"),
    ("a - on(b) ignoring(c) d", 10, "unexpected <ignoring>"),
    ("foo and 1", 0, "set operator \"and\" not allowed in binary scalar expression"),
    ("1 and foo", 0, "set operator \"and\" not allowed in binary scalar expression"),
    ("foo or 1", 0, "set operator \"or\" not allowed in binary scalar expression"),
    ("1 or foo", 0, "set operator \"or\" not allowed in binary scalar expression"),
    ("foo unless 1", 0, "set operator \"unless\" not allowed in binary scalar expression"),
    ("1 unless foo", 0, "set operator \"unless\" not allowed in binary scalar expression"),
    ("1 or on(bar) foo", 0, "vector matching only allowed between instant vectors"),
    ("foo == on(bar) 10", 0, "vector matching only allowed between instant vectors"),
    ("foo + group_left(baz) bar", 6, "unexpected <group_left>"),
    ("foo and on(bar) group_left(baz) bar", 0, "no grouping allowed for \"and\" operation"),
    ("foo and on(bar) group_right(baz) bar", 0, "no grouping allowed for \"and\" operation"),
    ("foo or on(bar) group_left(baz) bar", 0, "no grouping allowed for \"or\" operation"),
    ("foo or on(bar) group_right(baz) bar", 0, "no grouping allowed for \"or\" operation"),
    ("foo unless on(bar) group_left(baz) bar", 0, "no grouping allowed for \"unless\" operation"),
    ("foo unless on(bar) group_right(baz) bar", 0, "no grouping allowed for \"unless\" operation"),
    ("http_requests{group=\"production\"} + on(instance) group_left(job,instance) cpu_count{type=\"smp\"}", 34, "label \"instance\" must not occur in ON and GROUP clause at once"),
    ("foo + bool bar", 4, "bool modifier can only be used on comparison operators"),
    ("foo + bool 10", 4, "bool modifier can only be used on comparison operators"),
    ("foo and bool 10", 4, "bool modifier can only be used on comparison operators"),
    ("http_requests{group=\"production\"} + on(instance) group_left(job,instance) cpu_count{type=\"smp\"}", 34, "label \"instance\" must not occur in ON and GROUP clause at once"),
    ("foo @ +Inf", 0, "timestamp out of bounds for @ modifier: +Inf"),
    ("foo @ -Inf", 0, "timestamp out of bounds for @ modifier: -Inf"),
    ("foo @ NaN", 0, "timestamp out of bounds for @ modifier: NaN"),
    ("{", 1, "unexpected end of input inside braces"),
    ("}", 0, "unexpected character: '}'"),
    ("some{", 5, "unexpected end of input inside braces"),
    ("some}", 4, "unexpected character: '}'"),
    ("some_metric{a=b}", 14, "unexpected identifier \"b\" in label matching, expected string"),
    ("some_metric{a:b=\"b\"}", 13, "unexpected character inside braces: ':'"),
    ("foo{a*\"b\"}", 5, "unexpected character inside braces: '*'"),
    ("foo{gibberish}", 13, "unexpected \"}\" in label matching, expected label matching operator"),
    ("foo{1}", 4, "unexpected character inside braces: '1'"),
    ("{}", 0, "vector selector must contain at least one non-empty matcher"),
    ("{x=\"\"}", 0, "vector selector must contain at least one non-empty matcher"),
    ("{x=~\".*\"}", 0, "vector selector must contain at least one non-empty matcher"),
    ("{x!~\".+\"}", 0, "vector selector must contain at least one non-empty matcher"),
    ("{x!=\"a\"}", 0, "vector selector must contain at least one non-empty matcher"),
    ("foo{__name__=\"bar\"}", 0, "metric name must not be set twice: \"foo\" or \"bar\""),
    ("foo{__name__= =}", 14, "unexpected \"=\" in label matching, expected string"),
    ("foo{,}", 4, "unexpected \",\" in label matching, expected identifier or \"}\""),
    ("foo{__name__ == \"bar\"}", 14, "unexpected \"=\" in label matching, expected string"),
    ("foo{__name__=\"bar\" lol}", 19, "unexpected identifier \"lol\" in label matching, expected \",\" or \"}\""),
    ("foo{\"a\"=}", 8, "unexpected \"}\" in label matching, expected string"),
    ("foo[5mm]", 4, "bad number or duration syntax: \"5mm\""),
    ("foo[5m1]", 4, "bad number or duration syntax: \"5m1\""),
    ("foo[5m:1m1]", 7, "bad number or duration syntax: \"1m1\""),
    ("foo[5y1hs]", 4, "unknown unit \"hs\" in duration \"5y1hs\""),
    ("foo[5m1h]", 4, "not a valid duration string: \"5m1h\""),
    ("foo[5m1m]", 4, "not a valid duration string: \"5m1m\""),
    ("foo[0m]", 4, "duration must be greater than 0"),
    ("foo[]", 4, "unexpected \"]\" in subquery or range selector, expected number, duration, step(), or range()"),
    ("foo[-1]", 4, "duration must be greater than 0"),
    ("some_metric[5m] OFFSET 1mm", 23, "bad number or duration syntax: \"1mm\""),
    ("some_metric[5m] OFFSET", 22, "unexpected end of input in offset, expected number, duration, step(), or range()"),
    ("some_metric OFFSET 1m[5m]", 21, "no offset modifiers allowed before range"),
    ("some_metric[5m] @", 17, "unexpected end of input in @, expected timestamp"),
    ("some_metric @ 1234 [5m]", 19, "no @ modifiers allowed before range"),
    ("some_metric @ start() [5m]", 22, "no @ modifiers allowed before range"),
    ("some_metric @ end()[5m]", 19, "no @ modifiers allowed before range"),
    ("some_metric offset step()[5m]", 25, "no offset modifiers allowed before range"),
    ("(foo + bar)[5m]", 11, "ranges only allowed for vector selectors"),
    ("sum by (\"foo)(some_metric{})", 8, "unterminated quoted string"),
    ("sum without(==)(some_metric)", 12, "unexpected <op:==> in grouping opts, expected label"),
    ("sum without(,)(some_metric)", 12, "unexpected \",\" in grouping opts, expected label"),
    ("sum without(foo,,)(some_metric)", 16, "unexpected \",\" in grouping opts, expected label"),
    ("sum some_metric by (test)", 4, "unexpected identifier \"some_metric\""),
    ("sum (some_metric) by test", 21, "unexpected identifier \"test\" in grouping opts, expected \"(\""),
    ("sum () by (test)", 0, "no arguments for aggregate expression provided"),
    ("MIN keep_common (some_metric)", 4, "unexpected identifier \"keep_common\""),
    ("MIN (some_metric) keep_common", 18, "unexpected identifier \"keep_common\""),
    ("sum (some_metric) without (test) by (test)", 33, "unexpected <by>"),
    ("sum without (test) (some_metric) by (test)", 33, "unexpected <by>"),
    ("topk(some_metric)", 0, "wrong number of arguments for aggregate expression provided, expected 2, got 1"),
    ("topk(some_metric,)", 16, "trailing commas not allowed in function call args"),
    ("topk(some_metric, other_metric)", 5, "expected type scalar in aggregation parameter, got instant vector"),
    ("count_values(5, other_metric)", 13, "expected type string in aggregation parameter, got scalar"),
    ("rate(some_metric[5m]) @ 1234", 0, "@ modifier must be preceded by an instant vector selector or range vector selector or a subquery"),
    ("floor()", 0, "expected 1 argument(s) in call to \"floor\", got 0"),
    ("floor(some_metric, other_metric)", 0, "expected 1 argument(s) in call to \"floor\", got 2"),
    ("floor(some_metric, 1)", 0, "expected 1 argument(s) in call to \"floor\", got 2"),
    ("floor(1)", 6, "expected type instant vector in call to function \"floor\", got scalar"),
    ("hour(some_metric, some_metric, some_metric)", 0, "expected at most 1 argument(s) in call to \"hour\", got 3"),
    ("time(some_metric)", 0, "expected 0 argument(s) in call to \"time\", got 1"),
    ("non_existent_function_far_bar()", 0, "unknown function with name \"non_existent_function_far_bar\""),
    ("rate(some_metric)", 5, "expected type range vector in call to function \"rate\", got instant vector"),
    ("*1", 0, "unexpected <op:*>"),
    ("-=", 1, "unexpected \"=\""),
    ("++-++-+-+-<", 10, "unexpected <op:<>"),
    ("e-+=/(0)", 3, "unexpected \"=\""),
    ("a>b()", 2, "unknown function with name \"b\""),
    ("rate(avg)", 5, "expected type range vector in call to function \"rate\", got instant vector"),
    ("`\\``", 3, "unterminated raw string"),
    ("\"\\", 0, "escape sequence not terminated"),
    ("\"\\c\"", 0, "unknown escape sequence U+0063 'c'"),
    ("\"\\x.\"", 0, "illegal character U+002E '.' in escape sequence"),
    ("foo{bar=\"baz\"}[", 15, "unexpected end of input in duration expression"),
    ("test[5d] OFFSET 10s [10m:5s]", 0, "subquery is only allowed on instant vector, got matrix instead"),
    ("(foo + bar{nm=\"val\"})[5m:][10m:5s]", 0, "subquery is only allowed on instant vector, got matrix instead"),
    ("rate(food[1m])[1h] offset 1h", 14, "ranges only allowed for vector selectors"),
    ("rate(food[1m])[1h] @ 100", 14, "ranges only allowed for vector selectors"),
    ("info(rate(http_request_counter_total{}[5m]), target_info{foo=\"bar\"})", 45, "expected label selectors only, got vector selector instead"),
    ("info(http_request_counter_total{namespace=\"zzz\"}, {foo=\"bar\"} == 1)", 50, "expected label selectors only"),
    ("foo[step]", 8, "unexpected \"]\" in subquery or range selector, expected number, duration, step(), or range()"),
    ("foo[step()/0d]", 10, "division by zero"),
    ("foo[5s/0d]", 6, "division by zero"),
    ("foo offset (4d/0)", 14, "division by zero"),
    ("foo[5s%0d]", 6, "modulo by zero"),
    ("foo offset 9.5e10", 11, "duration out of range"),
    ("foo[9.5e10]", 4, "duration out of range"),
    ("sum(", 4, "unclosed left parenthesis"),
    ("sum(rate(", 9, "unclosed left parenthesis"),
    ("foo[5s x 5s]", 7, "unexpected character: 'x', expected ':'"),
    ("foo[5s s 5s]", 7, "unexpected character: 's', expected ':'"),
    // Go's regexp/syntax limits (checked against Prometheus 2.42's query API: HTTP 400,
    // errorType bad_data, "1:4: parse error: error parsing regexp: ...")
    ("up{job=~\"a{1001}\"}", 3, "error parsing regexp: invalid repeat count: `{1001}`"),
    ("up{job=~\"a{2,1001}\"}", 3, "error parsing regexp: invalid repeat count: `{2,1001}`"),
    ("up{job!~\"(a{100}){100}\"}", 3, "error parsing regexp: invalid repeat count: `{100}`"),
    ("up{job=~\"x{1000}{1000}\"}", 3, "error parsing regexp: invalid nested repetition operator: `{1000}{1000}`"),
    ("up{job=~\"a**\"}", 3, "error parsing regexp: invalid nested repetition operator: `**`"),
    ("up{job=~\"\\\\Z\"}", 3, "error parsing regexp: invalid escape sequence: `\\Z`"),
    ("up{job=~\"(?x)a\"}", 3, "error parsing regexp: invalid or unsupported Perl syntax: `(?x`"),
];

/// Regexes Go's syntax takes and the regex crate's would refuse (Prometheus 2.42 answered
/// each with a result).
#[test]
fn go_regex_syntax_is_accepted() {
    for q in [
        "up{job=~\"a{1000}\"}",
        "up{job=~\"(a{10}){100}\"}",
        "up{job=~\"a{,5}\"}",
        "up{job=~\"x{\"}",
        "up{job=~\"a{01}\"}",
        "up{job=~\"\\\\Qa.b\\\\E\"}",
        "up{job=~\"(?P<n>a)(?P<n>b)\"}",
        "label_replace(up, \"x\", \"$1\", \"job\", \"(a{,2})\")",
    ] {
        parse(q).unwrap_or_else(|e| panic!("{q}: {e}"));
    }
}

#[test]
fn prometheus_error_messages_and_positions() {
    let mut bad = Vec::new();
    for (q, pos, msg) in CASES {
        match parse(q) {
            Ok(e) => bad.push(format!("{q:?}: parsed as {e}, expected error {msg:?}")),
            Err(ParseError {
                position, message, ..
            }) => {
                if message != *msg || position != *pos {
                    bad.push(format!(
                        "{q:?}: got {message:?} at {position}, expected {msg:?} at {pos}"
                    ));
                }
            }
        }
    }
    assert!(
        bad.is_empty(),
        "{} mismatches:\n{}",
        bad.len(),
        bad.join("\n")
    );
}
