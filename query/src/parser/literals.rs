//! Literal values: numbers (Go's `strconv.ParseInt(s, 0, 64)` then `ParseFloat`), durations
//! (Prometheus' `model.ParseDuration`) and strings (Go escapes in `"…"` and `'…'`, raw
//! `` `…` ``), written with nom.

use nom::branch::alt;
use nom::bytes::complete::{tag, take_while1, take_while_m_n};
use nom::character::complete::{anychar, char as nchar, digit1, one_of};
use nom::combinator::{all_consuming, map, map_res, opt, recognize, value};
use nom::multi::many0;
use nom::sequence::{pair, preceded, tuple};
use nom::IResult;

use super::lexer::go_quote;

/// Nanoseconds per millisecond.
const NS_PER_MS: i128 = 1_000_000;

/// Parses a number token's text as Prometheus does. Errors carry Go's message text.
pub(crate) fn parse_number(s: &str) -> Result<f64, String> {
    if let Some(v) = parse_int_base0(s) {
        return Ok(v as f64);
    }
    parse_float(s).map_err(|why| {
        format!(
            "error parsing number: strconv.ParseFloat: parsing {}: {why}",
            go_quote(s)
        )
    })
}

/// Go's rule for underscores in number literals: only between digits, or between a base
/// prefix and a digit.
fn underscore_ok(s: &str) -> bool {
    let b = s.as_bytes();
    let mut saw = b'^';
    let mut i = 0;
    let mut hex = false;
    if b.len() >= 2 && b[0] == b'0' && matches!(b[1].to_ascii_lowercase(), b'b' | b'o' | b'x') {
        i = 2;
        saw = b'0';
        hex = b[1].eq_ignore_ascii_case(&b'x');
    }
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_digit() || (hex && c.is_ascii_hexdigit()) {
            saw = b'0';
        } else if c == b'_' {
            if saw != b'0' {
                return false;
            }
            saw = b'_';
        } else {
            if saw == b'_' {
                return false;
            }
            saw = b'!';
        }
        i += 1;
    }
    saw != b'_'
}

/// `strconv.ParseInt(s, 0, 64)`: decimal, `0x` hex, `0o`/leading-`0` octal, `0b` binary.
fn parse_int_base0(s: &str) -> Option<i64> {
    let (base, digits) = if let Some(r) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        (16, r)
    } else if let Some(r) = s.strip_prefix("0o").or_else(|| s.strip_prefix("0O")) {
        (8, r)
    } else if let Some(r) = s.strip_prefix("0b").or_else(|| s.strip_prefix("0B")) {
        (2, r)
    } else if s.len() > 1 && s.starts_with('0') {
        (8, &s[1..])
    } else {
        (10, s)
    };
    if s.contains('_') && !underscore_ok(s) {
        return None;
    }
    let clean: String = digits.chars().filter(|&c| c != '_').collect();
    if clean.is_empty() {
        return None;
    }
    i64::from_str_radix(&clean, base)
        .ok()
        .filter(|_| !clean.starts_with(['+', '-']))
}

/// nom: a decimal float literal (`1`, `1.`, `.5`, `1e5`, `1.5E-3`), underscores removed later.
fn decimal_float(i: &str) -> IResult<&str, &str> {
    let digits = |i| take_while1(|c: char| c.is_ascii_digit() || c == '_')(i);
    recognize(tuple((
        alt((
            recognize(tuple((digits, opt(pair(nchar('.'), opt(digits)))))),
            recognize(pair(nchar('.'), digits)),
        )),
        opt(tuple((one_of("eE"), opt(one_of("+-")), digits))),
    )))(i)
}

/// `strconv.ParseFloat(s, 64)` for what the lexer can produce; the error is Go's reason.
fn parse_float(s: &str) -> Result<f64, &'static str> {
    let lower = s.to_ascii_lowercase();
    match lower.as_str() {
        "inf" | "+inf" | "infinity" | "+infinity" => return Ok(f64::INFINITY),
        "-inf" | "-infinity" => return Ok(f64::NEG_INFINITY),
        "nan" => return Ok(f64::NAN),
        _ => {}
    }
    if all_consuming(decimal_float)(s).is_err() {
        return Err("invalid syntax");
    }
    if s.contains('_') && !underscore_ok(s) {
        return Err("invalid syntax");
    }
    let clean: String = s.chars().filter(|&c| c != '_').collect();
    let v: f64 = clean.parse().map_err(|_| "invalid syntax")?;
    if v.is_infinite() {
        return Err("value out of range");
    }
    Ok(v)
}

/// One `<digits><unit>` part of a duration.
fn duration_part(i: &str) -> IResult<&str, (&str, &str)> {
    pair(digit1, take_while1(|c: char| !c.is_ascii_digit()))(i)
}

/// Prometheus' `model.ParseDuration`, in nanoseconds (the caller converts).
pub(crate) fn parse_duration_ns(s: &str) -> Result<i128, String> {
    match s {
        "0" => return Ok(0),
        "" => return Err("empty duration string".into()),
        _ => {}
    }
    let invalid = || format!("not a valid duration string: {}", go_quote(s));
    let parts = match all_consuming(many0(duration_part))(s) {
        Ok((_, p)) => p,
        Err(_) => return Err(invalid()),
    };
    let mut total: i128 = 0;
    let mut last_pos = 0;
    for (digits, unit) in parts {
        let v: u64 = digits.parse().map_err(|_| invalid())?;
        let (pos, mult): (u32, i128) = match unit {
            "y" => (1, 365 * 24 * 3600 * 1_000_000_000),
            "w" => (2, 7 * 24 * 3600 * 1_000_000_000),
            "d" => (3, 24 * 3600 * 1_000_000_000),
            "h" => (4, 3600 * 1_000_000_000),
            "m" => (5, 60 * 1_000_000_000),
            "s" => (6, 1_000_000_000),
            "ms" => (7, 1_000_000),
            _ => {
                return Err(format!(
                    "unknown unit {} in duration {}",
                    go_quote(unit),
                    go_quote(s)
                ))
            }
        };
        if pos <= last_pos {
            return Err(invalid());
        }
        last_pos = pos;
        let max = i128::from(i64::MAX);
        if i128::from(v) > (max + 1) / mult {
            return Err("duration out of range".into());
        }
        total += i128::from(v) * mult;
        if total > max {
            return Err("duration out of range".into());
        }
    }
    Ok(total)
}

/// A duration string in milliseconds.
pub(crate) fn parse_duration_ms(s: &str) -> Result<i64, String> {
    parse_duration_ns(s).map(|ns| (ns / NS_PER_MS) as i64)
}

/// Seconds (as Prometheus holds a duration literal) to milliseconds: rounded to the
/// nanosecond, then truncated to the millisecond as Prometheus does.
pub(crate) fn seconds_to_ms(secs: f64) -> i64 {
    let ns = (secs * 1e9).round();
    let ns = if ns.is_nan() {
        0i128
    } else {
        ns.clamp(i64::MIN as f64, i64::MAX as f64) as i128
    };
    (ns / NS_PER_MS) as i64
}

/// Whether a duration literal in seconds overflows Go's `time.Duration`.
pub(crate) fn duration_out_of_range(secs: f64) -> bool {
    let lim = 9_223_372_036.854_776_f64;
    secs > lim || secs < -lim
}

/// A piece of a quoted string's body.
#[derive(Clone, Copy)]
enum Piece {
    Char(char),
    Byte(u8),
}

fn hex_digits(n: usize) -> impl Fn(&str) -> IResult<&str, u32> {
    move |i| {
        map_res(take_while_m_n(n, n, |c: char| c.is_ascii_hexdigit()), |d| {
            u32::from_str_radix(d, 16)
        })(i)
    }
}

/// nom: one escape sequence after a backslash, for a string quoted with `quote`.
fn escape(quote: char) -> impl Fn(&str) -> IResult<&str, Piece> {
    move |i| {
        alt((
            value(Piece::Char('\x07'), nchar('a')),
            value(Piece::Char('\x08'), nchar('b')),
            value(Piece::Char('\x0c'), nchar('f')),
            value(Piece::Char('\n'), nchar('n')),
            value(Piece::Char('\r'), nchar('r')),
            value(Piece::Char('\t'), nchar('t')),
            value(Piece::Char('\x0b'), nchar('v')),
            value(Piece::Char('\\'), nchar('\\')),
            value(Piece::Char(quote), nchar(quote)),
            map_res(
                take_while_m_n(3, 3, |c: char| ('0'..='7').contains(&c)),
                |d| {
                    u32::from_str_radix(d, 8)
                        .ok()
                        .filter(|v| *v <= 255)
                        .map(|v| Piece::Byte(v as u8))
                        .ok_or(())
                },
            ),
            map(preceded(nchar('x'), hex_digits(2)), |v| {
                Piece::Byte(v as u8)
            }),
            map_res(preceded(nchar('u'), hex_digits(4)), |v| {
                char::from_u32(v).map(Piece::Char).ok_or(())
            }),
            map_res(preceded(nchar('U'), hex_digits(8)), |v| {
                char::from_u32(v).map(Piece::Char).ok_or(())
            }),
        ))(i)
    }
}

fn string_body(quote: char) -> impl Fn(&str) -> IResult<&str, Vec<Piece>> {
    move |i| {
        many0(alt((
            preceded(tag("\\"), escape(quote)),
            map_res(anychar, |c| {
                if c == quote || c == '\\' || c == '\n' {
                    Err(())
                } else {
                    Ok(Piece::Char(c))
                }
            }),
        )))(i)
    }
}

/// Unquotes a string token (quotes included), as Prometheus' `strutil.Unquote`. Bytes
/// that do not form valid UTF-8 (from `\x` or octal escapes) become the characters of
/// [`super::byte_char`].
pub(crate) fn unquote(s: &str) -> Result<String, String> {
    let err = || "invalid syntax".to_string();
    let quote = s.chars().next().ok_or_else(err)?;
    if s.len() < 2 || !s.ends_with(quote) {
        return Err(err());
    }
    let body = &s[quote.len_utf8()..s.len() - quote.len_utf8()];
    if quote == '`' {
        if body.contains('`') {
            return Err(err());
        }
        return Ok(body.to_string());
    }
    if quote != '"' && quote != '\'' {
        return Err(err());
    }
    let (_, pieces) = all_consuming(string_body(quote))(body).map_err(|_| err())?;
    let mut bytes: Vec<u8> = Vec::with_capacity(body.len());
    for p in pieces {
        match p {
            Piece::Char(c) => {
                let mut buf = [0u8; 4];
                bytes.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
            Piece::Byte(b) => bytes.push(b),
        }
    }
    Ok(bytes_to_string(&bytes))
}

/// Decodes bytes as UTF-8, mapping each byte of an invalid sequence to
/// [`super::byte_char`].
pub(crate) fn bytes_to_string(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    let mut rest = bytes;
    loop {
        match std::str::from_utf8(rest) {
            Ok(s) => {
                out.push_str(s);
                return out;
            }
            Err(e) => {
                let good = e.valid_up_to();
                // The prefix is valid UTF-8 by construction.
                out.push_str(std::str::from_utf8(&rest[..good]).unwrap_or_default());
                let bad = e.error_len().unwrap_or(rest.len() - good);
                for &b in &rest[good..good + bad] {
                    out.push(super::byte_char(b));
                }
                rest = &rest[good + bad..];
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers() {
        assert_eq!(parse_number("1").unwrap(), 1.0);
        assert_eq!(parse_number("0x1f").unwrap(), 31.0);
        assert_eq!(parse_number("0X_1F").unwrap(), 31.0);
        assert_eq!(parse_number("0755").unwrap(), 493.0);
        assert_eq!(parse_number("08").unwrap(), 8.0);
        assert_eq!(parse_number("1_000").unwrap(), 1000.0);
        assert_eq!(parse_number("00_1_23_4.56_7_8").unwrap(), 1234.5678);
        assert_eq!(parse_number(".5").unwrap(), 0.5);
        assert_eq!(parse_number("5.").unwrap(), 5.0);
        assert_eq!(parse_number("1.e2").unwrap(), 100.0);
        assert_eq!(parse_number("12.34e-6").unwrap(), 12.34e-6);
        assert!(parse_number("Inf").unwrap().is_infinite());
        assert!(parse_number("nAn").unwrap().is_nan());
        assert!(parse_number("1e400")
            .unwrap_err()
            .ends_with("value out of range"));
        assert!(parse_number("0x").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration_ms("1h30m").unwrap(), 5_400_000);
        assert_eq!(parse_duration_ms("1m0s").unwrap(), 60_000);
        assert_eq!(parse_duration_ms("500ms").unwrap(), 500);
        assert_eq!(parse_duration_ms("1y").unwrap(), 365 * 86_400_000);
        assert_eq!(parse_duration_ms("0").unwrap(), 0);
        assert!(parse_duration_ms("5m1h")
            .unwrap_err()
            .starts_with("not a valid"));
        assert_eq!(
            parse_duration_ms("5y1hs").unwrap_err(),
            "unknown unit \"hs\" in duration \"5y1hs\""
        );
        assert!(parse_duration_ms("1.5h").is_err());
        assert_eq!(
            parse_duration_ms("300y").unwrap_err(),
            "duration out of range"
        );
    }

    #[test]
    fn strings() {
        assert_eq!(unquote(r#""a\tb""#).unwrap(), "a\tb");
        assert_eq!(unquote(r#"'a\'b'"#).unwrap(), "a'b");
        assert_eq!(unquote("`a\\tb`").unwrap(), "a\\tb");
        assert_eq!(unquote(r#""\u00e9\U0001F600\101""#).unwrap(), "é😀A");
        assert_eq!(unquote(r#""\xc3\xa9""#).unwrap(), "é");
        let s = unquote(r#""a\xc5z""#).unwrap();
        assert_eq!(s, format!("a{}z", super::super::byte_char(0xc5)));
        assert!(unquote(r#""\'""#).is_err());
    }
}
