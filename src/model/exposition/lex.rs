//! nom pieces of the exposition parser: names, quoted strings, label sets, values.

use std::borrow::Cow;

use nom::branch::alt;
use nom::bytes::complete::{escaped, tag, take_while, take_while1};
use nom::character::complete::{char, none_of, one_of, space0};
use nom::combinator::{opt, recognize};
use nom::sequence::{delimited, pair, tuple};
use nom::IResult;

use inferdb_query::go_format;

fn is_name_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':'
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

fn is_label_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

fn is_label_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// A legacy metric name `[a-zA-Z_:][a-zA-Z0-9_:]*`.
fn metric_name(i: &str) -> IResult<&str, &str> {
    recognize(pair(take_while1(is_name_start), take_while(is_name_char)))(i)
}

/// A legacy label name `[a-zA-Z_][a-zA-Z0-9_]*`.
fn label_name(i: &str) -> IResult<&str, &str> {
    recognize(pair(take_while1(is_label_start), take_while(is_label_char)))(i)
}

/// A double-quoted string; gives the raw content between the quotes, escapes kept.
fn quoted(i: &str) -> IResult<&str, &str> {
    alt((
        delimited(
            char('"'),
            escaped(none_of("\\\""), '\\', nom::character::complete::anychar),
            char('"'),
        ),
        // escaped() fails on empty content
        nom::combinator::map(tag("\"\""), |_| ""),
    ))(i)
}

/// A metric name, bare or quoted (HELP/TYPE/UNIT lines), and the rest of the input.
pub(super) fn metric_name_or_quoted(i: &str) -> Option<(Cow<'_, str>, &str)> {
    if let Ok((rest, n)) = metric_name(i) {
        return Some((Cow::Borrowed(n), rest));
    }
    if let Ok((rest, q)) = quoted(i) {
        return Some((unescape(q), rest));
    }
    None
}

/// One item of a label set.
pub(super) enum LabelItem<'a> {
    /// `name="value"` (both raw, escapes kept).
    Pair(&'a str, &'a str),
    /// A bare quoted metric name inside braces (Prometheus 3 UTF-8 names).
    Name(&'a str),
}

fn label_key(i: &str) -> IResult<&str, &str> {
    alt((label_name, quoted))(i)
}

/// One `name="value"` (or a quoted name); `blanks`: blanks allowed around `=` (text
/// 0.0.4, not OpenMetrics).
fn label_item(i: &str, blanks: bool) -> IResult<&str, LabelItem<'_>> {
    let (rest, key) = label_key(i)?;
    let eq: IResult<&str, &str> = if blanks {
        recognize(tuple((space0, char('='), space0)))(rest)
    } else {
        recognize(char('='))(rest)
    };
    match eq {
        Ok((rest, _)) => {
            let (rest, v) = quoted(rest)?;
            Ok((rest, LabelItem::Pair(key, v)))
        }
        Err(_) if i.starts_with('"') => Ok((rest, LabelItem::Name(key))),
        Err(e) => Err(e),
    }
}

/// The next label of an already validated raw label set (the text between the braces).
pub(super) fn next_label(s: &str) -> Option<(&str, LabelItem<'_>)> {
    let s = s.trim_start_matches([' ', '\t']);
    let s = s.strip_prefix(',').unwrap_or(s);
    let s = s.trim_start_matches([' ', '\t']);
    if s.is_empty() {
        return None;
    }
    label_item(s, true).ok()
}

/// The common case of [`series`] without nom: a bare name, optionally followed by
/// `{name="value",...}` with no blanks (what client libraries write). `None` for anything
/// else (blanks, quoted names, malformed text): the full parser then decides, and words the
/// error. Accepts exactly what the full parser accepts for such lines.
#[allow(clippy::type_complexity)]
fn series_fast(line: &str) -> Option<(&str, (Cow<'_, str>, &str))> {
    let b = line.as_bytes();
    let class = |c: u8| CLASS[c as usize];
    if class(*b.first()?) & NAME_START == 0 {
        return None;
    }
    let mut i = 1;
    while i < b.len() && class(b[i]) & NAME_CHAR != 0 {
        i += 1;
    }
    let name = Cow::Borrowed(&line[..i]);
    match b.get(i) {
        Some(b'{') => {}
        // blanks then a label set (`name {...}`): the full parser decides
        Some(b' ' | b'\t') if line[i..].trim_start_matches([' ', '\t']).starts_with('{') => {
            return None
        }
        _ => return Some((&line[i..], (name, ""))),
    }
    i += 1;
    let body = i;
    if b.get(i) == Some(&b'}') {
        return Some((&line[i + 1..], (name, "")));
    }
    loop {
        // name="value"
        if class(*b.get(i)?) & LABEL_START == 0 {
            return None;
        }
        i += 1;
        while i < b.len() && class(b[i]) & LABEL_CHAR != 0 {
            i += 1;
        }
        if b.get(i) != Some(&b'=') || b.get(i + 1) != Some(&b'"') {
            return None;
        }
        i += 2;
        loop {
            i = skip_plain(b, i);
            match *b.get(i)? {
                b'"' => break,
                // an escape: the backslash and the next byte (quotes and backslashes are
                // ASCII, so skipping one byte of a multi-byte character is harmless)
                b'\\' => {
                    b.get(i + 1)?;
                    i += 2;
                }
                _ => i += 1,
            }
        }
        i += 1;
        match *b.get(i)? {
            b',' => {
                i += 1;
                if b.get(i) == Some(&b'}') {
                    return Some((&line[i + 1..], (name, &line[body..i])));
                }
            }
            b'}' => return Some((&line[i + 1..], (name, &line[body..i]))),
            _ => return None,
        }
    }
}

const NAME_START: u8 = 1;
const NAME_CHAR: u8 = 2;
const LABEL_START: u8 = 4;
const LABEL_CHAR: u8 = 8;

/// Character classes of bytes for the fast path.
static CLASS: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut c = 0usize;
    while c < 256 {
        let b = c as u8;
        let alpha = b.is_ascii_alphabetic() || b == b'_';
        let digit = b.is_ascii_digit();
        let mut k = 0;
        if alpha || b == b':' {
            k |= NAME_START | NAME_CHAR;
        }
        if digit {
            k |= NAME_CHAR | LABEL_CHAR;
        }
        if alpha {
            k |= LABEL_START | LABEL_CHAR;
        }
        t[c] = k;
        c += 1;
    }
    t
};

/// The first index at or after `i` (eight bytes at a time) where a `"` or `\\` may be; the
/// caller looks at the byte there.
#[inline]
fn skip_plain(b: &[u8], mut i: usize) -> usize {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    while i + 8 <= b.len() {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[i..i + 8]);
        let w = u64::from_le_bytes(a);
        let q = w ^ (LO * b'"' as u64);
        let s = w ^ (LO * b'\\' as u64);
        // a zero byte in q or s: the lowest flagged byte is exact
        let z = (q.wrapping_sub(LO) & !q & HI) | (s.wrapping_sub(LO) & !s & HI);
        if z != 0 {
            return i + (z.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    i
}

/// Parses the series part of a sample line: `name`, `name{...}` or `{"name", ...}`.
/// Gives the rest of the line, the metric name and the raw text between the braces.
/// `blanks`: blanks (spaces, tabs) are allowed between the name and the label set and
/// around the label set's items, as Prometheus' text 0.0.4 parser allows; OpenMetrics
/// allows none.
#[allow(clippy::type_complexity)]
pub(super) fn series(line: &str, blanks: bool) -> Result<(&str, (Cow<'_, str>, &str)), String> {
    if let Some(r) = series_fast(line) {
        return Ok(r);
    }
    series_full(line, blanks)
}

/// `s` without its leading blanks; an error where blanks are not allowed.
fn skip_blanks(s: &str, blanks: bool) -> Result<&str, String> {
    let t = s.trim_start_matches([' ', '\t']);
    if !blanks && t.len() < s.len() {
        return Err("blank in a label set".into());
    }
    Ok(t)
}

#[allow(clippy::type_complexity)]
fn series_full(line: &str, blanks: bool) -> Result<(&str, (Cow<'_, str>, &str)), String> {
    let (mut rest, name) = match metric_name(line) {
        Ok((rest, n)) => (rest, Some(Cow::Borrowed(n))),
        Err(_) if line.starts_with('{') => (line, None),
        Err(_) => {
            return Err(format!(
                "invalid metric name at {:?}",
                line.chars().take(32).collect::<String>()
            ))
        }
    };
    if name.is_some() {
        let after = rest.trim_start_matches([' ', '\t']);
        if after.len() < rest.len() && after.starts_with('{') {
            if !blanks {
                return Err("blank between the metric name and its label set".into());
            }
            rest = after;
        }
    }
    let Some(body) = rest.strip_prefix('{') else {
        return match name {
            Some(n) => Ok((rest, (n, ""))),
            None => Err("invalid metric name".into()),
        };
    };
    // Walk the label set to validate it and find the closing brace.
    let mut cur = body;
    let mut qname: Option<Cow<'_, str>> = None;
    let mut first = true;
    loop {
        cur = skip_blanks(cur, blanks)?;
        if let Some(after) = cur.strip_prefix('}') {
            let raw = &body[..body.len() - cur.len()];
            let name = match (name, qname) {
                (Some(_), Some(_)) => return Err("metric name given twice".into()),
                (Some(n), None) => n,
                (None, Some(q)) => q,
                (None, None) => return Err("missing metric name".into()),
            };
            return Ok((after, (name, raw)));
        }
        if !first {
            match cur.strip_prefix(',') {
                Some(c) => {
                    cur = skip_blanks(c, blanks)?;
                    if let Some(after) = cur.strip_prefix('}') {
                        let raw = &body[..body.len() - cur.len()];
                        let name = match (name, qname) {
                            (Some(_), Some(_)) => return Err("metric name given twice".into()),
                            (Some(n), None) => n,
                            (None, Some(q)) => q,
                            (None, None) => return Err("missing metric name".into()),
                        };
                        return Ok((after, (name, raw)));
                    }
                }
                None if cur.is_empty() => return Err("unterminated label set".into()),
                None => {
                    return Err(format!(
                        "expected ',' or '}}' in label set at {:?}",
                        cur.chars().take(32).collect::<String>()
                    ))
                }
            }
        }
        if cur.is_empty() {
            return Err("unterminated label set".into());
        }
        match label_item(cur, blanks) {
            Ok((r, LabelItem::Pair(_, _))) => cur = r,
            Ok((r, LabelItem::Name(q))) => {
                if !first || qname.is_some() {
                    return Err("quoted metric name must come first in the label set".into());
                }
                qname = Some(unescape(q));
                cur = r;
            }
            Err(_) => {
                return Err(
                    if cur.starts_with(|c: char| is_label_start(c) || c == '"') {
                        format!(
                            "invalid label at {:?} (expected name=\"value\")",
                            cur.chars().take(32).collect::<String>()
                        )
                    } else {
                        format!(
                            "invalid label name at {:?}",
                            cur.chars().take(32).collect::<String>()
                        )
                    },
                )
            }
        }
        first = false;
    }
}

/// Unescapes `\\`, `\"` and `\n` in a label value or quoted name; other escapes stay as
/// written. Borrows when there is nothing to unescape.
pub(super) fn unescape(s: &str) -> Cow<'_, str> {
    if !s.contains('\\') {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars();
    while let Some(c) = it.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match it.next() {
            Some('\\') => out.push('\\'),
            Some('"') => out.push('"'),
            Some('n') => out.push('\n'),
            Some(o) => {
                out.push('\\');
                out.push(o);
            }
            None => out.push('\\'),
        }
    }
    Cow::Owned(out)
}

/// Unescapes a HELP text: `\\` and `\n` (and `\"` in OpenMetrics).
pub(super) fn unescape_help(s: &str, format: super::Format) -> Cow<'_, str> {
    if !s.contains('\\') {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars();
    while let Some(c) = it.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match it.next() {
            Some('\\') => out.push('\\'),
            Some('n') => out.push('\n'),
            Some('"') if format == super::Format::OpenMetrics => out.push('"'),
            Some(o) => {
                out.push('\\');
                out.push(o);
            }
            None => out.push('\\'),
        }
    }
    Cow::Owned(out)
}

fn float_literal(i: &str) -> IResult<&str, &str> {
    recognize(tuple((
        opt(one_of("+-")),
        alt((
            recognize(pair(
                take_while1(|c: char| c.is_ascii_digit()),
                opt(pair(char('.'), take_while(|c: char| c.is_ascii_digit()))),
            )),
            recognize(pair(char('.'), take_while1(|c: char| c.is_ascii_digit()))),
        )),
        opt(tuple((
            one_of("eE"),
            opt(one_of("+-")),
            take_while1(|c: char| c.is_ascii_digit()),
        ))),
    )))(i)
}

/// A number written as a plain decimal (`-?digits(.digits)?`, 15 significant digits at most)
/// at the start of `b`: its value, exactly as [`parse_value`] reads it, and its length. `None`
/// for anything else (the caller then takes the general path).
#[inline]
pub(super) fn plain_decimal_token(b: &[u8]) -> Option<(f64, usize)> {
    // m < 10^15 < 2^53 and 10^frac are exact doubles, so one division rounds correctly
    // (Clinger's fast path), as the full decimal parser does
    const POW10: [f64; 16] = [
        1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
    ];
    let neg = b.first() == Some(&b'-');
    let mut i = neg as usize;
    let mut m: u64 = 0;
    let mut digits = 0usize;
    while let Some(&c) = b.get(i) {
        if !c.is_ascii_digit() {
            break;
        }
        m = m * 10 + (c - b'0') as u64;
        digits += 1;
        i += 1;
        if digits > 15 {
            return None;
        }
    }
    if digits == 0 {
        return None;
    }
    let mut frac = 0usize;
    if b.get(i) == Some(&b'.') {
        i += 1;
        while let Some(&c) = b.get(i) {
            if !c.is_ascii_digit() {
                break;
            }
            m = m * 10 + (c - b'0') as u64;
            digits += 1;
            frac += 1;
            i += 1;
            if digits > 15 {
                return None;
            }
        }
        if frac == 0 {
            return None;
        }
    }
    let v = m as f64 / POW10[frac];
    Some((if neg { -v } else { v }, i))
}

/// [`plain_decimal_token`] followed by the line's end (`\n` or the end of `b`; a `\r` is part
/// of the value, which the general path refuses): its value and the bytes up to and including
/// the line break.
#[inline]
pub(super) fn plain_decimal(b: &[u8]) -> Option<(f64, usize)> {
    let (v, i) = plain_decimal_token(b)?;
    let len = match b.get(i) {
        None => i,
        Some(b'\n') => i + 1,
        _ => return None,
    };
    Some((v, len))
}

/// Unsigned decimal digits at the start of `b` (at most 18, so that they fit an `i64`), read
/// as `str::parse::<i64>` reads them: the value and the number of digits.
#[inline]
pub(super) fn plain_digits(b: &[u8]) -> Option<(i64, usize)> {
    let mut n: i64 = 0;
    let mut i = 0;
    while let Some(&c) = b.get(i) {
        if !c.is_ascii_digit() {
            break;
        }
        if i == 18 {
            return None;
        }
        n = n * 10 + (c - b'0') as i64;
        i += 1;
    }
    (i > 0).then_some((n, i))
}

/// Parses a sample value: decimal and exponent forms, `NaN`, `Inf`, `+Inf`, `-Inf`
/// (case-insensitive as Go's ParseFloat).
pub fn parse_value(s: &str) -> Option<f64> {
    // Rust's grammar for f64 is the one below (digits with an optional fraction and
    // exponent, `inf`, `infinity`, `nan`, signed, case-insensitive); this is the fast path
    if let Ok(v) = s.parse::<f64>() {
        return Some(if v.is_nan() { f64::NAN } else { v });
    }
    if let Ok(("", lit)) = float_literal(s) {
        return lit.parse::<f64>().ok();
    }
    let (sign, body) = match s.as_bytes().first() {
        Some(b'+') => (1.0, &s[1..]),
        Some(b'-') => (-1.0, &s[1..]),
        _ => (1.0, s),
    };
    if body.eq_ignore_ascii_case("inf") || body.eq_ignore_ascii_case("infinity") {
        return Some(sign * f64::INFINITY);
    }
    if body.eq_ignore_ascii_case("nan") {
        return Some(f64::NAN);
    }
    None
}

/// Rewrites a float label value as Prometheus 3 does for `le` and `quantile`
/// (`1` -> `1.0`, `1e6` -> `1e+06`); `None` when it is already normal or not a float.
pub(super) fn normalise_float(v: &str) -> Option<String> {
    let f = parse_value(v)?;
    let n = format_openmetrics_float(f);
    if n == v {
        None
    } else {
        Some(n)
    }
}

/// Formats a float as Prometheus formats OpenMetrics floats (`formatOpenMetricsFloat`): Go's
/// shortest `'g'` form with a `.0` added to integers, `+Inf`, `-Inf`, `NaN`.
pub fn format_openmetrics_float(f: f64) -> String {
    let mut s = go_format::format_float(f, go_format::FloatFormat::G);
    if f.is_finite() && !s.contains(['.', 'e']) {
        s.push_str(".0");
    }
    s
}

#[cfg(test)]
mod fast_path_tests {
    use super::*;

    /// Plain decimals read as the full value parser reads them, and nothing else is taken.
    #[test]
    fn plain_decimals_agree_with_parse_value() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut cases: Vec<String> = [
            "0",
            "-0",
            "0.0",
            "1",
            "1.0",
            "-2.5",
            "123456789012345",
            "0.00000000000001",
            "99999.9999999999",
            "3.14159",
            "007.50",
            "1.7976931348623",
            "4.35",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let digits = (x % 15 + 1) as usize;
            let m = x >> 8;
            let m = m % 10u64.pow(digits as u32);
            let frac = ((x >> 4) % (digits as u64 + 1)) as usize;
            let txt = format!("{m:0digits$}");
            let s = if frac == 0 {
                txt
            } else {
                format!("{}.{}", &txt[..digits - frac], &txt[digits - frac..])
            };
            let s = if s.starts_with('.') {
                format!("0{s}")
            } else {
                s
            };
            cases.push(if x & 1 == 1 { format!("-{s}") } else { s });
        }
        for c in &cases {
            for (end, eol) in [("", 0), ("\n", 1), ("\nnext", 1)] {
                let line = format!("{c}{end}");
                let Some((v, n)) = plain_decimal(line.as_bytes()) else {
                    // only for more than 15 digits
                    let digits = c.bytes().filter(u8::is_ascii_digit).count();
                    assert!(digits > 15, "{c:?}");
                    continue;
                };
                let want = parse_value(c).unwrap();
                assert_eq!(v.to_bits(), want.to_bits(), "{c:?}");
                assert_eq!(n, c.len() + eol, "{c:?}");
            }
        }
        for no in [
            "",
            "-",
            "1.",
            ".5",
            "1e5",
            "1 1000",
            "1\t",
            "+1",
            "NaN",
            "1234567890123456",
            "1.23456789012345678",
            "1\r",
            "1\r\n",
            "1x\n",
            "0x10",
        ] {
            assert!(plain_decimal(no.as_bytes()).is_none(), "{no:?}");
        }
    }

    /// The fast path gives what the full parser gives, wherever it answers.
    #[test]
    fn fast_series_agrees_with_the_full_parser() {
        let mut lines: Vec<String> = [
            "a 1",
            "a{} 1",
            "a{b=\"c\"} 1",
            "a{b=\"c\",} 1",
            "a{b=\"\"} 1",
            "a{b=\"x\\\"y\\\\z\\n\",c=\"}{,=\"} 1",
            "vllm:x{le=\"+Inf\",model_name=\"m/é\"} 2",
            "a{b=\"c\" } 1",
            "a{ b=\"c\"} 1",
            "a{b=c} 1",
            "a{b=\"c\"",
            "a{b=\"c\\",
            "a{b=\"c\"x} 1",
            "a{,} 1",
            "a{1b=\"c\"} 1",
            "{\"a.b\"} 1",
            "a{\"b.c\"=\"d\"} 1",
            "1a 1",
            "a{b=\"c\",,d=\"e\"} 1",
            "a{b=\"0123456789\\\"abcdefgh\\\\ijklmnop\",c=\"ééééééééé\\\"\"} 1",
            "a{b=\"0123456789abcdef} 1",
            "a{b=\"0123456789abcde\\",
            "a {b=\"c\"} 1",
            "a\t{b=\"c\"} 1",
            "a  \t{} 1",
            "a 1",
            "a\t1",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        for page in ["vllm/metrics-load.txt", "dcgm/metrics-8gpu.txt"] {
            if let Ok(t) = std::fs::read_to_string(root.join(page)) {
                lines.extend(
                    t.lines()
                        .filter(|l| !l.starts_with('#') && !l.is_empty())
                        .map(String::from),
                );
            }
        }
        let mut fast = 0;
        for l in &lines {
            if let Some(f) = series_fast(l) {
                fast += 1;
                assert_eq!(Ok(f.clone()), series_full(l, true), "{l}");
                assert_eq!(Ok(f), series_full(l, false), "{l}");
            }
        }
        assert!(fast > 100, "the fast path took {fast} lines");
    }
}
