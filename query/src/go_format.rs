//! Go's text forms of floats, the one implementation behind every place inferdb prints a
//! float the way Prometheus does: `strconv.FormatFloat(v, 'g', -1, 64)` ([`FloatFormat::G`],
//! PromQL values in messages and labels, the text exposition format),
//! `strconv.FormatFloat(v, 'f', -1, 64)` ([`FloatFormat::F`]), `'e'` ([`FloatFormat::E`],
//! alert values in the API), and the HTTP API's JSON layout
//! ([`FloatFormat::Json`]: `'f'`, or `'e'` below `1e-6` and from `1e21` in magnitude).
//!
//! The shortest round-trip digits come from `zmij` (Schubfach), laid out as Go lays them out.
//! zmij and Go pick the same digits, rounding a tie between two shortest candidates to even
//! (Rust's `Display` rounds it up: `1197576326630583.25` is `...583.2` in Prometheus and here,
//! `...583.3` with `{}`). Writers append to a [`TextSink`] (a `String`, or a `Vec<u8>` for
//! response bodies, without UTF-8 checks per number).

/// Where the writers append: `String` or `Vec<u8>`.
pub trait TextSink {
    /// Appends `s`.
    fn put(&mut self, s: &str);
    /// Appends ASCII bytes (digits, punctuation); never called with other bytes.
    fn put_ascii(&mut self, b: &[u8]);
    /// Appends one ASCII byte.
    fn put_byte(&mut self, b: u8);
}

impl TextSink for String {
    fn put(&mut self, s: &str) {
        self.push_str(s);
    }
    fn put_ascii(&mut self, b: &[u8]) {
        self.extend(b.iter().map(|&c| char::from(c)));
    }
    fn put_byte(&mut self, b: u8) {
        self.push(char::from(b));
    }
}

impl TextSink for Vec<u8> {
    fn put(&mut self, s: &str) {
        self.extend_from_slice(s.as_bytes());
    }
    fn put_ascii(&mut self, b: &[u8]) {
        self.extend_from_slice(b);
    }
    fn put_byte(&mut self, b: u8) {
        self.push(b);
    }
}

/// Which of Go's layouts, all with the shortest digits that read back as the same float.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FloatFormat {
    /// `strconv.FormatFloat(v, 'g', -1, 64)`: exponent form when the decimal exponent is
    /// below -4 or at least 6 (Go's rule for the shortest `'g'`).
    G,
    /// `strconv.FormatFloat(v, 'f', -1, 64)`: never an exponent.
    F,
    /// Prometheus' API JSON values: `'f'`, except `'e'` when `|v| < 1e-6` or `|v| >= 1e21`.
    Json,
    /// `strconv.FormatFloat(v, 'e', -1, 64)`: always an exponent of at least two digits
    /// (`9.5e-01`, `1e+00`, `0e+00`), as the alerts API writes values.
    E,
}

/// `v` in Go's layout `fmt`; `NaN`, `+Inf`, `-Inf` as Prometheus spells them.
pub fn format_float(v: f64, fmt: FloatFormat) -> String {
    let mut s = String::with_capacity(24);
    push_float(&mut s, v, fmt);
    s
}

/// Appends `v` in Go's layout `fmt` to `out`.
#[inline]
pub fn push_float<W: TextSink + ?Sized>(out: &mut W, v: f64, fmt: FloatFormat) {
    if let Some(t) = non_finite(v) {
        out.put_ascii(t.as_bytes());
        return;
    }
    let abs = v.abs();
    // Integral values below 1e15 (gauges, counters, counts): their shortest digits are the
    // integer's, in plain notation in every layout but `'e'` (and `'g'` from 1e6 on).
    let int_limit = match fmt {
        FloatFormat::G => 1e6,
        FloatFormat::F | FloatFormat::Json => 1e15,
        FloatFormat::E => 0.0,
    };
    if abs < int_limit && abs.trunc() == abs {
        if v.is_sign_negative() {
            out.put_byte(b'-');
        }
        push_u64(out, abs as u64);
        return;
    }
    push_float_shortest(out, v, fmt);
}

/// [`push_float`] for a finite `v` through zmij's shortest digits.
fn push_float_shortest<W: TextSink + ?Sized>(out: &mut W, v: f64, fmt: FloatFormat) {
    let abs = v.abs();
    let mut buf = zmij::Buffer::new();
    let r = buf.format_finite(v).as_bytes();
    // zmij writes plain decimals (`12.5`, `3.0`, `0.00123`) for 1e-5 <= |v| < 1e16 and for
    // zero: the common case, where Go's plain notation differs only by the `.0` of integers.
    let plain_range = match fmt {
        FloatFormat::G => 1e-4..1e6,
        FloatFormat::F | FloatFormat::Json => 1e-5..1e16,
        FloatFormat::E => {
            if abs == 0.0 {
                out.put_ascii(if v.is_sign_negative() {
                    b"-0e+00"
                } else {
                    b"0e+00"
                });
                return;
            }
            0.0..0.0
        }
    };
    if abs == 0.0 || plain_range.contains(&abs) {
        out.put_ascii(r.strip_suffix(b".0").unwrap_or(r));
        return;
    }
    push_float_slow(out, r, Rule::from(fmt));
}

/// `strconv.FormatFloat(v, 'g', prec, 64)`: `prec` significant digits (at least 1), trailing
/// zeros dropped, exponent form when the exponent is below -4 or at least the precision.
pub fn format_float_g_prec(v: f64, prec: usize) -> String {
    let mut s = String::with_capacity(24);
    if let Some(t) = non_finite(v) {
        s.push_str(t);
        return s;
    }
    if v == 0.0 {
        // Go drops the zeros of a zero too ("0", "-0"); std's `{:.3e}` writes "0.000e0"
        s.push_str(if v.is_sign_negative() { "-0" } else { "0" });
        return s;
    }
    let prec = prec.max(1);
    // std rounds to `prec` digits exactly, ties to even, as Go's decimal rounding does
    let r = format!("{:.*e}", prec - 1, v);
    push_float_slow(&mut s, r.as_bytes(), Rule::GPrec(prec));
    s
}

/// `strconv.FormatFloat(v, 'f', decimals, 64)` (Go's `%f` is `decimals` = 6); `NaN`, `+Inf`,
/// `-Inf` as Go's `fmt` spells them.
pub fn format_float_fixed(v: f64, decimals: usize) -> String {
    match non_finite(v) {
        Some(t) => t.into(),
        // std rounds exactly, ties to even, as Go's decimal rounding does
        None => format!("{v:.decimals$}"),
    }
}

/// The Go spelling of a value without digits.
fn non_finite(v: f64) -> Option<&'static str> {
    if v.is_nan() {
        Some("NaN")
    } else if v == f64::INFINITY {
        Some("+Inf")
    } else if v == f64::NEG_INFINITY {
        Some("-Inf")
    } else {
        None
    }
}

/// When the slow path writes an exponent.
#[derive(Clone, Copy)]
enum Rule {
    /// Shortest `'g'`: exponent below -4 or at least 6.
    G,
    /// `'g'` with a precision: exponent below -4 or at least the precision (or the number of
    /// digits, when the digits are all before the point).
    GPrec(usize),
    /// Never.
    F,
    /// Exponent below -6 or at least 21.
    Json,
    /// Always.
    E,
}

impl From<FloatFormat> for Rule {
    fn from(f: FloatFormat) -> Rule {
        match f {
            FloatFormat::G => Rule::G,
            FloatFormat::F => Rule::F,
            FloatFormat::Json => Rule::Json,
            FloatFormat::E => Rule::E,
        }
    }
}

/// The rest of [`push_float`]: zmij (or std) wrote `r` in plain or `d.ddde±x` form; lay its
/// digits out as Go does.
#[cold]
fn push_float_slow<W: TextSink + ?Sized>(out: &mut W, r: &[u8], rule: Rule) {
    let (neg, r) = match r.strip_prefix(b"-") {
        Some(rest) => (true, rest),
        None => (false, r),
    };
    let e_at = r.iter().position(|&c| c == b'e').unwrap_or(r.len());
    let (mant, exp) = (&r[..e_at], r.get(e_at + 1..).unwrap_or(b"0"));
    let exp: i32 = std::str::from_utf8(exp)
        .ok()
        .and_then(|e| e.parse().ok())
        .unwrap_or(0);
    let dot = mant.iter().position(|&c| c == b'.').unwrap_or(mant.len());
    let (int_part, frac_part) = (&mant[..dot], mant.get(dot + 1..).unwrap_or(b""));
    // digits d1 d2 ... with the value 0.d1d2... * 10^point
    let mut digits = [0u8; 40];
    let mut n = 0;
    for &b in int_part.iter().chain(frac_part) {
        if n < digits.len() {
            digits[n] = b;
            n += 1;
        }
    }
    let mut point = exp + int_part.len() as i32;
    let mut first = 0;
    while first + 1 < n && digits[first] == b'0' {
        first += 1;
        point -= 1;
    }
    while n > first + 1 && digits[n - 1] == b'0' {
        n -= 1;
    }
    let d = &digits[first..n];
    if neg {
        out.put_byte(b'-');
    }
    // the decimal exponent of the first digit, as in d.ddd × 10^e
    let e = point - 1;
    let exponent_form = match rule {
        Rule::G => !(-4..6).contains(&e),
        Rule::GPrec(prec) => {
            let nd = d.len() as i32;
            let mut eprec = prec as i32;
            if eprec > nd && nd >= point {
                eprec = nd;
            }
            e < -4 || e >= eprec
        }
        Rule::F => false,
        Rule::Json => !(-6..21).contains(&e),
        Rule::E => true,
    };
    if exponent_form {
        out.put_ascii(&d[..1]);
        if d.len() > 1 {
            out.put_byte(b'.');
            out.put_ascii(&d[1..]);
        }
        out.put_byte(b'e');
        out.put_byte(if e < 0 { b'-' } else { b'+' });
        let e = e.unsigned_abs();
        if e < 10 {
            out.put_byte(b'0');
        }
        push_u64(out, u64::from(e));
    } else if point <= 0 {
        out.put_ascii(b"0.");
        for _ in 0..-point {
            out.put_byte(b'0');
        }
        out.put_ascii(d);
    } else if point as usize >= d.len() {
        out.put_ascii(d);
        for _ in d.len()..point as usize {
            out.put_byte(b'0');
        }
    } else {
        out.put_ascii(&d[..point as usize]);
        out.put_byte(b'.');
        out.put_ascii(&d[point as usize..]);
    }
}

/// Two decimal digits of every number below 100.
const DIGIT_PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

/// Appends the decimal digits of `n`, two at a time (Go's `strconv.AppendUint(b, n, 10)`).
pub fn push_u64<W: TextSink + ?Sized>(out: &mut W, mut n: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    while n >= 100 {
        let d = (n % 100) as usize * 2;
        n /= 100;
        i -= 2;
        buf[i..i + 2].copy_from_slice(&DIGIT_PAIRS[d..d + 2]);
    }
    if n >= 10 {
        let d = n as usize * 2;
        i -= 2;
        buf[i..i + 2].copy_from_slice(&DIGIT_PAIRS[d..d + 2]);
    } else {
        i -= 1;
        buf[i] = b'0' + n as u8;
    }
    out.put_ascii(&buf[i..]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use FloatFormat::{Json, F, G};

    /// Outputs of Go 1.22's `strconv.FormatFloat(v, 'g'|'f', -1, 64)` and of Prometheus'
    /// API (`'f'`, `'e'` outside `[1e-6, 1e21)`).
    /// Go's `strconv.FormatFloat(v, 'e', -1, 64)`.
    #[test]
    fn e_like_go() {
        for (v, go) in [
            (0.95, "9.5e-01"),
            (1.0, "1e+00"),
            (0.0, "0e+00"),
            (-0.0, "-0e+00"),
            (-2.5, "-2.5e+00"),
            (123456789.0, "1.23456789e+08"),
            (1e-7, "1e-07"),
            (1e100, "1e+100"),
            (5e-324, "5e-324"),
            (0.1 + 0.2, "3.0000000000000004e-01"),
            (f64::NAN, "NaN"),
            (f64::INFINITY, "+Inf"),
            (f64::NEG_INFINITY, "-Inf"),
        ] {
            assert_eq!(format_float(v, FloatFormat::E), go, "{v:e}");
        }
    }

    /// The integral fast path writes what the shortest-digits path writes.
    #[test]
    fn integers_as_the_shortest_digits() {
        let mut vals = vec![0.0, -0.0, 1.0, -1.0, 9.0, 10.0, 99.0, 100.0, 65535.0];
        for e in 0..=16 {
            let p = 10f64.powi(e);
            vals.extend([p - 1.0, p, p + 1.0, 2.0 * p, 9.5 * p]);
        }
        vals.extend([999_999.0, 1_000_001.0, 9_007_199_254_740_991.0, 4.833385e6]);
        let mut x = 0x9e37_79b9_7f4a_7c15_u64;
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            vals.push((x >> (x % 60)) as f64);
        }
        for v in vals {
            for w in [v, -v] {
                for fmt in [G, F, Json, FloatFormat::E] {
                    let (mut fast, mut slow) = (String::new(), String::new());
                    push_float(&mut fast, w, fmt);
                    push_float_shortest(&mut slow, w, fmt);
                    assert_eq!(fast, slow, "{w:e} {fmt:?}");
                }
            }
        }
    }

    #[test]
    fn like_go_strconv() {
        let tie_lo = f64::from_bits(0x4311_04c1_de29_32dd); // 1197576326630583.25
        let cases: &[(f64, &str, &str, &str)] = &[
            // v, 'g', 'f', json
            (0.0, "0", "0", "0"),
            (-0.0, "-0", "-0", "-0"),
            (1.0, "1", "1", "1"),
            (2.5, "2.5", "2.5", "2.5"),
            (100.0, "100", "100", "100"),
            (123456.0, "123456", "123456", "123456"),
            (1e6, "1e+06", "1000000", "1000000"),
            (1234567.0, "1.234567e+06", "1234567", "1234567"),
            (4.833385e6, "4.833385e+06", "4833385", "4833385"),
            (
                1e20,
                "1e+20",
                "100000000000000000000",
                "100000000000000000000",
            ),
            (1e21, "1e+21", "1000000000000000000000", "1e+21"),
            (
                -2.5e300,
                "-2.5e+300",
                &format!("-25{}", "0".repeat(299)),
                "-2.5e+300",
            ),
            (0.0001, "0.0001", "0.0001", "0.0001"),
            (0.00001, "1e-05", "0.00001", "0.00001"),
            (1e-6, "1e-06", "0.000001", "0.000001"),
            (1.5e-7, "1.5e-07", "0.00000015", "1.5e-07"),
            (
                0.1 + 0.2,
                "0.30000000000000004",
                "0.30000000000000004",
                "0.30000000000000004",
            ),
            (812.4, "812.4", "812.4", "812.4"),
            (
                5e-324,
                "5e-324",
                &format!("0.{}5", "0".repeat(323)),
                "5e-324",
            ),
            (
                f64::MAX,
                "1.7976931348623157e+308",
                &format!("17976931348623157{}", "0".repeat(292)),
                "1.7976931348623157e+308",
            ),
            (
                tie_lo,
                "1.1975763266305832e+15",
                "1197576326630583.2",
                "1197576326630583.2",
            ),
            (f64::NAN, "NaN", "NaN", "NaN"),
            (f64::INFINITY, "+Inf", "+Inf", "+Inf"),
            (f64::NEG_INFINITY, "-Inf", "-Inf", "-Inf"),
        ];
        for (v, g, f, json) in cases {
            assert_eq!(format_float(*v, G), *g, "'g' {v:e}");
            assert_eq!(format_float(*v, F), *f, "'f' {v:e}");
            assert_eq!(format_float(*v, Json), *json, "json {v:e}");
        }
    }

    /// Go's `strconv.FormatFloat(v, 'g', prec, 64)` and `fmt.Sprintf("%f", v)`.
    #[test]
    fn precision_like_go() {
        for (v, prec, go) in [
            (0.123, 2, "0.12"),
            (150.0, 2, "1.5e+02"),
            (100.0, 2, "1e+02"),
            (15.0, 2, "15"),
            (1.0, 2, "1"),
            (0.000012345, 3, "1.23e-05"),
            (123456.0, 3, "1.23e+05"),
            (0.5, 1, "0.5"),
            (-2.25, 2, "-2.2"),
            (f64::NAN, 2, "NaN"),
        ] {
            assert_eq!(format_float_g_prec(v, prec), go, "{v} {prec}");
        }
        for (v, go) in [
            (1.5, "1.500000"),
            (-0.0000005, "-0.000000"),
            (1e21, "1000000000000000000000.000000"),
            (0.1234565, "0.123456"),
            (f64::INFINITY, "+Inf"),
            (f64::NEG_INFINITY, "-Inf"),
        ] {
            assert_eq!(format_float_fixed(v, 6), go, "{v}");
        }
    }

    /// The layouts against std's shortest digits on random bit patterns: same digits (but
    /// for std's rounding of exact ties), Go's layout.
    #[test]
    fn g_layout_on_random_values() {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let v = f64::from_bits(x);
            if !v.is_finite() {
                continue;
            }
            for fmt in [G, F, Json] {
                let s = format_float(v, fmt);
                assert_eq!(s.parse::<f64>().ok(), Some(v), "{fmt:?} {s}");
                let has_e = s.contains('e');
                let e = if v == 0.0 {
                    0
                } else {
                    v.abs().log10().floor() as i32
                };
                match fmt {
                    F => assert!(!has_e, "{s}"),
                    // log10 may be off by one at powers of ten: check away from them
                    G if !(-5..=-4).contains(&e) && !(5..=6).contains(&e) => {
                        assert_eq!(has_e, !(-4..6).contains(&e), "{s}")
                    }
                    Json if !(-7..=-6).contains(&e) && !(20..=21).contains(&e) => {
                        assert_eq!(has_e, !(-6..21).contains(&e), "{s}")
                    }
                    _ => {}
                }
            }
        }
    }
}
