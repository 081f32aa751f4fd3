//! JSON encoding exactly as Prometheus' HTTP API writes it.
//!
//! Sample values are JSON strings formatted like Go's `strconv.FormatFloat`: plain notation
//! (`'f'`, shortest round-trip digits) except below `1e-6` or at and above `1e21` in magnitude,
//! where exponent notation (`'e'`, e.g. `1e-07`, `1.5e+21`) is used; `NaN`, `+Inf`, `-Inf`
//! spelled as Go spells them. Timestamps are JSON numbers of seconds: integral milliseconds
//! printed without a fraction when the millisecond part is zero, otherwise with exactly three
//! decimals. Strings are escaped as Go's `encoding/json` escapes them (HTML-safe).
//!
//! Floats are laid out by [`inferdb_query::go_format`]. Every writer appends to a
//! [`inferdb_query::go_format::TextSink`]: a `String`, or a `Vec<u8>` for response bodies (query
//! results are written straight into one byte buffer, without UTF-8 checks per number).

use inferdb_query::go_format::{push_float, push_u64, FloatFormat, TextSink};
use inferdb_storage::Labels;

/// Formats a millisecond timestamp as a JSON number of seconds, as Prometheus does.
pub fn format_timestamp(t_ms: i64) -> String {
    let mut s = String::with_capacity(16);
    push_timestamp(&mut s, t_ms);
    s
}

/// Appends a millisecond timestamp as a JSON number of seconds to `out`.
pub fn push_timestamp<W: TextSink + ?Sized>(out: &mut W, t_ms: i64) {
    let mut t = t_ms.unsigned_abs();
    if t_ms < 0 {
        out.put_byte(b'-');
    }
    let secs = t / 1000;
    t %= 1000;
    push_u64(out, secs);
    if t != 0 {
        out.put_ascii(&[
            b'.',
            b'0' + (t / 100) as u8,
            b'0' + (t / 10 % 10) as u8,
            b'0' + (t % 10) as u8,
        ]);
    }
}

/// Appends a time as Go's `encoding/json` writes a `time.Time` in UTC (RFC 3339 with up to
/// nine fraction digits, trailing zeros dropped), quoted; `None` is Go's zero time
/// `"0001-01-01T00:00:00Z"`.
pub fn push_go_time<W: TextSink + ?Sized>(out: &mut W, t: Option<std::time::SystemTime>) {
    use chrono::{DateTime, Utc};
    let Some(t) = t else {
        out.put("\"0001-01-01T00:00:00Z\"");
        return;
    };
    let d = DateTime::<Utc>::from(t);
    out.put_byte(b'"');
    out.put(&d.format("%Y-%m-%dT%H:%M:%S").to_string());
    let ns = d.timestamp_subsec_nanos();
    if ns != 0 {
        let frac = format!("{ns:09}");
        out.put_byte(b'.');
        out.put(frac.trim_end_matches('0'));
    }
    out.put("Z\"");
}

/// Appends `s` as a JSON string literal (with quotes), escaped as Go's `encoding/json` does.
pub fn push_str<W: TextSink + ?Sized>(out: &mut W, s: &str) {
    out.put_byte(b'"');
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
        out.put(&s[start..i]);
        match esc {
            Some(e) => out.put(e),
            None => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                let c = c as usize;
                out.put_ascii(&[b'\\', b'u', b'0', b'0', HEX[c >> 4], HEX[c & 15]]);
            }
        }
        start = i + c.len_utf8();
    }
    out.put(&s[start..]);
    out.put_byte(b'"');
}

/// Appends a label set as a JSON object `{"name":"value",...}` in label order.
pub fn push_labels<W: TextSink + ?Sized>(out: &mut W, labels: &Labels) {
    out.put_byte(b'{');
    for (i, l) in labels.iter().enumerate() {
        if i > 0 {
            out.put_byte(b',');
        }
        push_str(out, &l.name);
        out.put_byte(b':');
        push_str(out, &l.value);
    }
    out.put_byte(b'}');
}

/// Appends a `[<ts>,"<value>"]` pair.
pub fn push_point<W: TextSink + ?Sized>(out: &mut W, t_ms: i64, v: f64) {
    push_pair(out, t_ms, v, false);
}

/// Appends a scalar result `[<ts>,"<value>"]` as Prometheus does: the value in Go's `'f'`
/// layout with the shortest digits, never an exponent (`1e-7` is `0.0000001` here, where a
/// sample value gives `1e-07`).
pub fn push_scalar<W: TextSink + ?Sized>(out: &mut W, t_ms: i64, v: f64) {
    push_pair(out, t_ms, v, true);
}

fn push_pair<W: TextSink + ?Sized>(out: &mut W, t_ms: i64, v: f64, plain: bool) {
    if !plain {
        // a sample value takes at most 24 bytes in the JSON layout and a timestamp 24: the
        // pair is laid out on the stack and appended at once (one capacity check per point)
        let mut p = PointBuf::default();
        p.put_byte(b'[');
        push_timestamp(&mut p, t_ms);
        p.put_ascii(b",\"");
        push_float(&mut p, v, FloatFormat::Json);
        p.put_ascii(b"\"]");
        if let Some(b) = p.bytes() {
            out.put_ascii(b);
            return;
        }
    }
    out.put_byte(b'[');
    push_timestamp(out, t_ms);
    out.put_ascii(b",\"");
    push_float(
        out,
        v,
        if plain {
            FloatFormat::F
        } else {
            FloatFormat::Json
        },
    );
    out.put_ascii(b"\"]");
}

/// A point's text on the stack; [`PointBuf::bytes`] is `None` if it did not fit.
struct PointBuf {
    buf: [u8; 64],
    len: usize,
    overflow: bool,
}

impl Default for PointBuf {
    fn default() -> Self {
        PointBuf {
            buf: [0; 64],
            len: 0,
            overflow: false,
        }
    }
}

impl PointBuf {
    fn bytes(&self) -> Option<&[u8]> {
        (!self.overflow).then(|| &self.buf[..self.len])
    }
}

impl TextSink for PointBuf {
    fn put(&mut self, s: &str) {
        self.put_ascii(s.as_bytes());
    }
    fn put_ascii(&mut self, b: &[u8]) {
        match self.buf.get_mut(self.len..self.len + b.len()) {
            Some(dst) => {
                dst.copy_from_slice(b);
                self.len += b.len();
            }
            None => self.overflow = true,
        }
    }
    fn put_byte(&mut self, b: u8) {
        self.put_ascii(&[b]);
    }
}

/// Appends a JSON array of strings.
pub fn push_str_array<W: TextSink + ?Sized, S: AsRef<str>>(out: &mut W, items: &[S]) {
    out.put_byte(b'[');
    for (i, s) in items.iter().enumerate() {
        if i > 0 {
            out.put_byte(b',');
        }
        push_str(out, s.as_ref());
    }
    out.put_byte(b']');
}

/// How every success body starts; `data` follows.
pub const SUCCESS_PREFIX: &str = "{\"status\":\"success\",\"data\":";

/// Builds the success envelope `{"status":"success","data":<data>[,"warnings":[..]][,"infos":[..]]}`
/// around already-encoded `data`. `warnings` and `infos` appear only when non-empty.
pub fn success_envelope(data: &str, warnings: &[String], infos: &[String]) -> String {
    let mut out = String::with_capacity(data.len() + 64);
    out.push_str(SUCCESS_PREFIX);
    out.push_str(data);
    push_envelope_tail(&mut out, warnings, infos);
    out
}

/// Appends what follows `data` in the success envelope: `warnings` and `infos` when
/// non-empty, then the closing brace.
pub fn push_envelope_tail<W: TextSink + ?Sized>(
    out: &mut W,
    warnings: &[String],
    infos: &[String],
) {
    if !warnings.is_empty() {
        out.put(",\"warnings\":");
        push_str_array(out, warnings);
    }
    if !infos.is_empty() {
        out.put(",\"infos\":");
        push_str_array(out, infos);
    }
    out.put_byte(b'}');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn format_float(v: f64) -> String {
        inferdb_query::go_format::format_float(v, FloatFormat::Json)
    }

    /// The layout rules written with std's formatting (shortest round-trip digits too): the
    /// reference the fast path must match.
    fn reference_float(v: f64) -> String {
        if v.is_nan() {
            return "NaN".into();
        }
        if v.is_infinite() {
            return if v > 0.0 { "+Inf" } else { "-Inf" }.into();
        }
        let abs = v.abs();
        if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
            let e = format!("{v:e}");
            let (mant, exp) = e.split_once('e').unwrap();
            let (sign, digits) = match exp.strip_prefix('-') {
                Some(d) => ('-', d),
                None => ('+', exp),
            };
            let pad = if digits.len() < 2 { "0" } else { "" };
            format!("{mant}e{sign}{pad}{digits}")
        } else {
            format!("{v}")
        }
    }

    #[test]
    fn floats_match_std_formatting() {
        // random bit patterns (every exponent), random values near the layout thresholds,
        // integers and short decimals
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let (mut checked, mut ties) = (0, 0);
        for i in 0..400_000u64 {
            let r = next();
            let v = match i % 4 {
                0 => f64::from_bits(r),
                1 => {
                    let e = [-7, -6, -5, -4, 15, 16, 17, 20, 21, 22][(r % 10) as usize];
                    (1.0 + (r >> 11) as f64 / (1u64 << 53) as f64) * 10f64.powi(e)
                }
                2 => (r % 1_000_000_000) as f64 * if r & 1 == 0 { 1.0 } else { -1.0 },
                _ => (r % 100_000) as f64 / 1000.0,
            };
            let (got, want) = (format_float(v), reference_float(v));
            if got != want {
                // std rounds a tie between two shortest candidates up, Go (and zmij) to even:
                // same layout and length, and both read back as `v`
                assert_eq!(
                    got.len(),
                    want.len(),
                    "bits {:#x}: {got} vs {want}",
                    v.to_bits()
                );
                assert_eq!(
                    got.parse::<f64>().unwrap(),
                    v,
                    "bits {:#x}: {got}",
                    v.to_bits()
                );
                let (g, w) = (got.as_bytes(), want.as_bytes());
                let last = g.len() - 1;
                assert!(
                    g[..last] == w[..last] && g[last] + 1 == w[last],
                    "bits {:#x}: {got} vs {want}",
                    v.to_bits()
                );
                ties += 1;
            }
            checked += 1;
        }
        assert_eq!(checked, 400_000);
        // exact ties need a quarter-unit fraction in the 17th digit: values of ~1e15
        assert!(
            ties < checked / 50,
            "{ties} values formatted differently from std"
        );
        // ties as Prometheus 2.42 writes them (checked against its API)
        // 1197576326630583.25 and .75 (the spacing of floats there is 0.25)
        assert_eq!(
            format_float(f64::from_bits(0x4311_04c1_de29_32dd)),
            "1197576326630583.2"
        );
        assert_eq!(
            format_float(f64::from_bits(0x4311_04c1_de29_32df)),
            "1197576326630583.8"
        );
        for v in [
            1e-6,
            1e-5,
            1e15,
            1e16,
            1e21,
            9.999999999999999e20,
            123456789012345680.0,
        ] {
            assert_eq!(format_float(v), reference_float(v), "{v:e}");
            assert_eq!(format_float(-v), reference_float(-v), "{v:e}");
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

    /// The widest timestamps and values fit the point's stack buffer and come out whole.
    #[test]
    fn widest_points() {
        for t in [i64::MIN, i64::MAX, -1, 0, 1_796_083_200_123] {
            for v in [
                -1.2345678901234567e-300,
                f64::MIN,
                -0.000_001_234_567_890_123_456_7,
                f64::NAN,
                f64::NEG_INFINITY,
                -123_456_789_012_345.6,
            ] {
                let mut s = String::new();
                push_point(&mut s, t, v);
                let want = format!("[{},\"{}\"]", format_timestamp(t), format_float(v));
                assert_eq!(s, want);
                let mut b = Vec::new();
                push_point(&mut b, t, v);
                assert_eq!(b, want.as_bytes());
            }
        }
    }
}
