//! JSON encoding exactly as Prometheus' HTTP API writes it.
//!
//! Sample values are JSON strings formatted like Go's `strconv.FormatFloat`: plain notation
//! (`'f'`, shortest round-trip digits) except below `1e-6` or at and above `1e21` in magnitude,
//! where exponent notation (`'e'`, e.g. `1e-07`, `1.5e+21`) is used; `NaN`, `+Inf`, `-Inf`
//! spelled as Go spells them. Timestamps are JSON numbers of seconds: integral milliseconds
//! printed without a fraction when the millisecond part is zero, otherwise with exactly three
//! decimals. Strings are escaped as Go's `encoding/json` escapes them (HTML-safe).

use std::fmt::Write as _;

use inferdb_storage::Labels;

/// Formats a sample value as Prometheus does (without the surrounding quotes).
pub fn format_float(v: f64) -> String {
    let mut s = String::with_capacity(24);
    push_float(&mut s, v);
    s
}

/// Appends a sample value formatted as Prometheus does (without quotes) to `out`.
pub fn push_float(out: &mut String, v: f64) {
    if v.is_nan() {
        out.push_str("NaN");
        return;
    }
    if v.is_infinite() {
        out.push_str(if v > 0.0 { "+Inf" } else { "-Inf" });
        return;
    }
    let abs = v.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        // Rust's `{:e}` gives the shortest round-trip mantissa, like Go's precision -1;
        // only the exponent is written differently ("e-7" vs Go's "e-07").
        let e = format!("{v:e}");
        match e.split_once('e') {
            Some((mant, exp)) => {
                out.push_str(mant);
                out.push('e');
                let (sign, digits) = match exp.strip_prefix('-') {
                    Some(d) => ('-', d),
                    None => ('+', exp),
                };
                out.push(sign);
                if digits.len() < 2 {
                    out.push('0');
                }
                out.push_str(digits);
            }
            None => out.push_str(&e),
        }
    } else {
        // Rust's Display never uses exponent notation and prints the shortest round-trip
        // digits, which is Go's FormatFloat(v, 'f', -1, 64).
        let _ = write!(out, "{v}");
    }
}

/// Formats a millisecond timestamp as a JSON number of seconds, as Prometheus does.
pub fn format_timestamp(t_ms: i64) -> String {
    let mut s = String::with_capacity(16);
    push_timestamp(&mut s, t_ms);
    s
}

/// Appends a millisecond timestamp as a JSON number of seconds to `out`.
pub fn push_timestamp(out: &mut String, t_ms: i64) {
    let mut t = t_ms.unsigned_abs();
    if t_ms < 0 {
        out.push('-');
    }
    let secs = t / 1000;
    t %= 1000;
    let _ = write!(out, "{secs}");
    if t != 0 {
        let _ = write!(out, ".{t:03}");
    }
}

/// Appends `s` as a JSON string literal (with quotes), escaped as Go's `encoding/json` does.
pub fn push_str(out: &mut String, s: &str) {
    out.push('"');
    let mut start = 0;
    for (i, c) in s.char_indices() {
        let esc: Option<&str> = match c {
            '"' => Some("\\\""),
            '\\' => Some("\\\\"),
            '\n' => Some("\\n"),
            '\r' => Some("\\r"),
            '\t' => Some("\\t"),
            '<' => Some("\\u003c"),
            '>' => Some("\\u003e"),
            '&' => Some("\\u0026"),
            '\u{2028}' => Some("\\u2028"),
            '\u{2029}' => Some("\\u2029"),
            c if (c as u32) < 0x20 => None,
            _ => continue,
        };
        out.push_str(&s[start..i]);
        match esc {
            Some(e) => out.push_str(e),
            None => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
        }
        start = i + c.len_utf8();
    }
    out.push_str(&s[start..]);
    out.push('"');
}

/// Appends a label set as a JSON object `{"name":"value",...}` in label order.
pub fn push_labels(out: &mut String, labels: &Labels) {
    out.push('{');
    for (i, l) in labels.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        push_str(out, &l.name);
        out.push(':');
        push_str(out, &l.value);
    }
    out.push('}');
}

/// Appends a `[<ts>,"<value>"]` pair.
pub fn push_point(out: &mut String, t_ms: i64, v: f64) {
    out.push('[');
    push_timestamp(out, t_ms);
    out.push_str(",\"");
    push_float(out, v);
    out.push_str("\"]");
}

/// Appends a JSON array of strings.
pub fn push_str_array<S: AsRef<str>>(out: &mut String, items: &[S]) {
    out.push('[');
    for (i, s) in items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        push_str(out, s.as_ref());
    }
    out.push(']');
}

/// Builds the success envelope `{"status":"success","data":<data>[,"warnings":[..]][,"infos":[..]]}`
/// around already-encoded `data`. `warnings` and `infos` appear only when non-empty.
pub fn success_envelope(data: &str, warnings: &[String], infos: &[String]) -> String {
    let mut out = String::with_capacity(data.len() + 64);
    out.push_str("{\"status\":\"success\",\"data\":");
    out.push_str(data);
    if !warnings.is_empty() {
        out.push_str(",\"warnings\":");
        push_str_array(&mut out, warnings);
    }
    if !infos.is_empty() {
        out.push_str(",\"infos\":");
        push_str_array(&mut out, infos);
    }
    out.push('}');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_like_prometheus() {
        let cases: &[(f64, &str)] = &[
            (2.0, "2"),
            (1.5, "1.5"),
            (0.25, "0.25"),
            (0.0, "0"),
            (-0.0, "-0"),
            (1e6, "1000000"),
            (1e20, "100000000000000000000"),
            (1e21, "1e+21"),
            (1.5e21, "1.5e+21"),
            (-2.5e300, "-2.5e+300"),
            (1e-6, "0.000001"),
            (1e-7, "1e-07"),
            (1.2345e-7, "1.2345e-07"),
            (5e-324, "5e-324"),
            (0.1 + 0.2, "0.30000000000000004"),
            (812.4, "812.4"),
            (4.833385e6, "4833385"),
            (f64::NAN, "NaN"),
            (f64::INFINITY, "+Inf"),
            (f64::NEG_INFINITY, "-Inf"),
            (inferdb_storage::stale_nan(), "NaN"),
        ];
        for (v, want) in cases {
            assert_eq!(format_float(*v), *want, "value {v:?}");
        }
    }

    #[test]
    fn timestamps_like_prometheus() {
        assert_eq!(format_timestamp(1_754_006_420_000), "1754006420");
        assert_eq!(format_timestamp(1_754_006_437_512), "1754006437.512");
        assert_eq!(format_timestamp(1_754_006_437_050), "1754006437.050");
        assert_eq!(format_timestamp(1_754_006_437_005), "1754006437.005");
        assert_eq!(format_timestamp(4000), "4");
        assert_eq!(format_timestamp(0), "0");
        assert_eq!(format_timestamp(-1500), "-1.500");
        assert_eq!(format_timestamp(-1), "-0.001");
        assert_eq!(format_timestamp(i64::MIN), "-9223372036854775.808");
    }

    #[test]
    fn strings_escaped_like_go() {
        let mut s = String::new();
        push_str(&mut s, "a\"b\\c\nd<e>&\u{1}é");
        assert_eq!(s, r#""a\"b\\c\nd\u003ce\u003e\u0026\u0001é""#);
        // round-trips through a JSON parser
        let back: String = serde_json::from_str(&s).unwrap();
        assert_eq!(back, "a\"b\\c\nd<e>&\u{1}é");
    }

    #[test]
    fn envelope_omits_empty_warnings() {
        assert_eq!(
            success_envelope("[]", &[], &[]),
            r#"{"status":"success","data":[]}"#
        );
        let w = vec!["results truncated due to limit".to_string()];
        let i = vec!["info".to_string()];
        assert_eq!(
            success_envelope("1", &w, &i),
            r#"{"status":"success","data":1,"warnings":["results truncated due to limit"],"infos":["info"]}"#
        );
    }

    #[test]
    fn labels_and_points() {
        let l = Labels::from_pairs([("__name__", "vllm:x"), ("model_name", "a/b")]);
        let mut s = String::new();
        push_labels(&mut s, &l);
        push_point(&mut s, 1500, 3.0);
        assert_eq!(s, r#"{"__name__":"vllm:x","model_name":"a/b"}[1.500,"3"]"#);
    }
}
