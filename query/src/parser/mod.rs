//! The PromQL parser: query text to [`crate::ast::Expr`], with Prometheus 3's grammar, type
//! checks and error messages.
//!
//! ```
//! use inferdb_query::parser::parse;
//! let e = parse("sum by (job) (rate(http_requests_total[5m]))").unwrap();
//! assert_eq!(e.to_string(), "sum by (job) (rate(http_requests_total[5m]))");
//! let err = parse("sum(").unwrap_err();
//! assert_eq!(err.to_string(), "1:5: parse error: unclosed left parenthesis");
//! ```
//!
//! Everything Prometheus' experimental parser options enable for the core test suite is
//! accepted: experimental functions and aggregators (`limitk`, `limit_ratio`, …) and
//! duration expressions (`[5m * 2]`, `offset step()`, `min_of(…)`). Binop fill modifiers and
//! the `anchored`/`smoothed` modifiers are rejected as Prometheus does by default.
//!
//! Strings are Rust strings; a Go escape that makes invalid UTF-8 (`"\xff"`) is kept
//! losslessly: each byte of an invalid sequence becomes the character [`byte_char`]`(b)`
//! (private-use plane 16), which [`raw_byte`] and [`go_bytes`] turn back into the byte and
//! [`is_valid_utf8`] reports as invalid, so the evaluator can reject such label names as
//! Prometheus does and print them with [`go_quote`].

mod check;
mod expr;
mod lexer;
mod literals;

use inferdb_storage::Matcher;

use crate::ast::Expr;

pub use expr::MAX_NESTING;

/// A parse error: where and what, as Prometheus reports it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{line}:{column}: parse error: {message}")]
pub struct ParseError {
    /// Line of the error, 1-based.
    pub line: usize,
    /// Column of the error in bytes from the start of the line, 1-based.
    pub column: usize,
    /// Byte offset of the error in the input.
    pub position: usize,
    /// What went wrong, in Prometheus' words.
    pub message: String,
}

impl ParseError {
    /// An error at byte `position` of `input`.
    pub(crate) fn at(input: &str, position: usize, message: impl Into<String>) -> Self {
        let position = position.min(input.len());
        let before = input.get(..position).unwrap_or(input);
        let line = 1 + before.matches('\n').count();
        let column = match before.rfind('\n') {
            Some(nl) => position - nl,
            None => position + 1,
        };
        ParseError {
            line,
            column,
            position,
            message: message.into(),
        }
    }
}

/// Parses a PromQL expression and type-checks it.
pub fn parse(input: &str) -> Result<Expr, ParseError> {
    expr::Parser::new(input).parse_expression()
}

/// Parses a series selector (`up{job="x"}` or `{job="x"}`) as the HTTP API's `match[]`
/// takes it, returning its matchers (the metric name last, as `__name__="…"`). Like
/// Prometheus' `ParseMetricSelector`, it does not demand a non-empty matcher.
pub fn parse_matchers(input: &str) -> Result<Vec<Matcher>, ParseError> {
    expr::Parser::new(input).parse_metric_selector()
}

/// Prometheus' `model.ParseDuration` (`1y2w3d4h5m6s7ms`, units in that order, each at most
/// once, `0` alone allowed), in milliseconds: the duration of PromQL literals and of
/// `prometheus.yml`. The messages are Go's.
pub fn parse_model_duration_ms(input: &str) -> Result<i64, String> {
    literals::parse_duration_ms(input)
}

/// Parses a duration as the HTTP API takes it (`step`, `timeout`, `lookback_delta`) and as
/// inferdb's flags take it: a number of seconds (`15`, `0.5`) or a Prometheus duration
/// (`1m30s`, `500ms`). Returns nanoseconds. The messages are Prometheus' (`cannot parse "x" to
/// a valid duration`).
pub fn parse_duration_ns(input: &str) -> Result<i64, String> {
    if let Ok(secs) = input.parse::<f64>() {
        let ns = secs * 1e9;
        if ns.is_nan() {
            return Err(format!(
                "cannot parse {} to a valid duration",
                go_quote(input)
            ));
        }
        if ns >= i64::MAX as f64 || ns < i64::MIN as f64 {
            return Err(format!(
                "cannot parse {} to a valid duration. It overflows int64",
                go_quote(input)
            ));
        }
        return Ok(ns as i64);
    }
    literals::parse_duration_ns(input)
        .ok()
        .and_then(|ns| i64::try_from(ns).ok())
        .ok_or_else(|| format!("cannot parse {} to a valid duration", go_quote(input)))
}

/// [`parse_duration_ns`] in milliseconds (truncated), with the message as a [`ParseError`].
pub fn parse_duration(input: &str) -> Result<i64, ParseError> {
    parse_duration_ns(input)
        .map(|ns| ns / 1_000_000)
        .map_err(|m| ParseError::at(input, 0, m))
}

const BYTE_CHAR_BASE: u32 = 0x10_FF00;

/// The character standing for byte `b` (0x80..=0xFF) of a string that is not valid UTF-8.
pub fn byte_char(b: u8) -> char {
    char::from_u32(BYTE_CHAR_BASE + u32::from(b)).unwrap_or(char::REPLACEMENT_CHARACTER)
}

/// The raw byte `c` stands for, if it is one of [`byte_char`]'s characters.
pub fn raw_byte(c: char) -> Option<u8> {
    let u = c as u32;
    if (BYTE_CHAR_BASE + 0x80..=BYTE_CHAR_BASE + 0xFF).contains(&u) {
        Some((u - BYTE_CHAR_BASE) as u8)
    } else {
        None
    }
}

/// The bytes of a parsed string as Go holds them (raw bytes restored).
pub fn go_bytes(s: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    for c in s.chars() {
        match raw_byte(c) {
            Some(b) => out.push(b),
            None => {
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
    out
}

/// Whether the string, as Go holds it, is valid UTF-8 (no raw bytes).
pub fn is_valid_utf8(s: &str) -> bool {
    !s.chars().any(|c| raw_byte(c).is_some())
}

/// Go's `%q` of a string (raw bytes as `\xNN`), as Prometheus' messages quote values.
pub fn go_quote(s: &str) -> String {
    lexer::go_quote(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Go's `model.ParseDuration` (prometheus/common) on the same inputs.
    #[test]
    fn model_durations_like_go() {
        for (s, ms) in [
            ("0", 0),
            ("0s", 0),
            ("1ms", 1),
            ("15s", 15_000),
            ("1m30s", 90_000),
            ("1h30m", 5_400_000),
            ("2d", 172_800_000),
            ("1w", 604_800_000),
            ("1y", 31_536_000_000),
            ("1y2w3d4h5m6s7ms", 33_019_506_007),
        ] {
            assert_eq!(parse_model_duration_ms(s), Ok(ms), "{s}");
        }
        for (s, go) in [
            ("", "empty duration string"),
            ("1.5s", r#"unknown unit "." in duration "1.5s""#),
            ("5x", r#"unknown unit "x" in duration "5x""#),
            ("1s1m", r#"not a valid duration string: "1s1m""#),
            ("1m1m", r#"not a valid duration string: "1m1m""#),
            ("-1s", r#"not a valid duration string: "-1s""#),
            ("s", r#"not a valid duration string: "s""#),
            ("300000000y", "duration out of range"),
        ] {
            assert_eq!(parse_model_duration_ms(s).unwrap_err(), go, "{s}");
        }
    }

    /// Prometheus' API `parseDuration`: float seconds, else `model.ParseDuration`.
    #[test]
    fn api_durations_like_prometheus() {
        assert_eq!(parse_duration_ns("20"), Ok(20_000_000_000));
        assert_eq!(parse_duration_ns("0.5"), Ok(500_000_000));
        assert_eq!(parse_duration_ns("1m0s"), Ok(60_000_000_000));
        assert_eq!(parse_duration_ns("1e3"), Ok(1_000_000_000_000));
        assert_eq!(
            parse_duration_ns("5x").unwrap_err(),
            r#"cannot parse "5x" to a valid duration"#
        );
        assert_eq!(
            parse_duration_ns("1e300").unwrap_err(),
            r#"cannot parse "1e300" to a valid duration. It overflows int64"#
        );
        assert!(parse_duration_ns("NaN").is_err());
        assert!(parse_duration_ns("").is_err());
    }
}
