//! Series in promqltest's expanding notation, as promtool's `input_series` take them:
//! `metric{l="v"}` with values like `1 2 3`, `1+2x10` (eleven values from 1 by 2),
//! `5x3` (four 5s), `1-1x4`, `_` / `_x3` (no sample), `stale` (a staleness marker).

use inferdb_storage::{Label, Labels};

/// Parses one input series: its labels and one value per step (`None`: no sample there).
/// Errors are worded as Prometheus' series-description parser words them, with positions in
/// `series + " " + values`.
pub fn parse_series_desc(series: &str, values: &str) -> Result<(Labels, Vec<Option<f64>>), String> {
    let whole = format!("{series} {values}");
    let labels = parse_labels(series).map_err(|_| {
        // Prometheus parses the series and its values as one text: report what it reports.
        match inferdb_query::parser::parse_matchers(&whole) {
            Err(e) => e.to_string(),
            Ok(_) => format!(
                "1:1: parse error: invalid series {}",
                inferdb_query::parser::go_quote(series)
            ),
        }
    })?;
    let base = series.chars().count() + 2;
    let mut out = Vec::new();
    let mut col = base;
    for tok in values.split(' ') {
        if tok.is_empty() {
            col += 1;
            continue;
        }
        expand(tok, &mut out).map_err(|m| format!("1:{col}: parse error: {m}"))?;
        col += tok.chars().count() + 1;
    }
    Ok((labels, out))
}

fn parse_labels(series: &str) -> Result<Labels, String> {
    let ms = inferdb_query::parser::parse_matchers(series.trim()).map_err(|e| e.to_string())?;
    let mut v = Vec::with_capacity(ms.len());
    for m in ms {
        if m.op != inferdb_storage::MatchOp::Equal {
            return Err("only equality in series".into());
        }
        v.push(Label::new(m.name.to_string(), m.value.to_string()));
    }
    Ok(Labels::new(v))
}

fn number(s: &str) -> Option<f64> {
    let (neg, body) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    // No hexadecimal here: in a series description `0x10` is 0 eleven times.
    let v = match body.to_ascii_lowercase().as_str() {
        "inf" => f64::INFINITY,
        "nan" => f64::NAN,
        b if b.starts_with(|c: char| c.is_ascii_digit() || c == '.') => b.parse::<f64>().ok()?,
        _ => return None,
    };
    Some(if neg { -v } else { v })
}

fn times(s: &str) -> Result<u64, String> {
    s.parse::<u64>().map_err(|_| {
        format!(
            "unexpected {} in series values",
            inferdb_query::parser::go_quote(s)
        )
    })
}

fn expand(tok: &str, out: &mut Vec<Option<f64>>) -> Result<(), String> {
    if tok.starts_with("{{") {
        return Err("native histograms are not supported".into());
    }
    if tok == "_" {
        out.push(None);
        return Ok(());
    }
    if let Some(n) = tok.strip_prefix("_x") {
        for _ in 0..times(n)? {
            out.push(None);
        }
        return Ok(());
    }
    if tok == "stale" {
        out.push(Some(inferdb_storage::stale_nan()));
        return Ok(());
    }
    if let Some(v) = number(tok) {
        out.push(Some(v));
        return Ok(());
    }
    let bad = || {
        format!(
            "unexpected {} in series values",
            inferdb_query::parser::go_quote(tok)
        )
    };
    let (head, n) = tok.rsplit_once('x').ok_or_else(bad)?;
    let n = times(n)?;
    if let Some(v) = number(head) {
        for _ in 0..=n {
            out.push(Some(v));
        }
        return Ok(());
    }
    // a+b or a-b: the operator is the first sign after the start that does not follow an
    // exponent marker.
    let bytes = head.as_bytes();
    let split = (1..bytes.len())
        .find(|&i| (bytes[i] == b'+' || bytes[i] == b'-') && !matches!(bytes[i - 1], b'e' | b'E'))
        .ok_or_else(bad)?;
    let start = number(&head[..split]).ok_or_else(bad)?;
    let step = number(&head[split + 1..]).ok_or_else(bad)?;
    let step = if bytes[split] == b'-' { -step } else { step };
    let mut v = start;
    for _ in 0..=n {
        out.push(Some(v));
        v += step;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vals(s: &str) -> Vec<Option<f64>> {
        parse_series_desc("m", s).unwrap().1
    }

    #[test]
    fn expanding_notation() {
        assert_eq!(
            vals("1+2x3"),
            vec![Some(1.0), Some(3.0), Some(5.0), Some(7.0)]
        );
        assert_eq!(vals("5x2"), vec![Some(5.0); 3]);
        assert_eq!(vals("0x2"), vec![Some(0.0); 3]);
        assert_eq!(vals("1-1x2"), vec![Some(1.0), Some(0.0), Some(-1.0)]);
        assert_eq!(
            vals("0 _ _x2 1"),
            vec![Some(0.0), None, None, None, Some(1.0)]
        );
        assert_eq!(vals("-1e3 +Inf"), vec![Some(-1000.0), Some(f64::INFINITY)]);
        let s = vals("0 stale");
        assert!(inferdb_storage::is_stale_nan(s[1].unwrap()));
    }

    #[test]
    fn labels_and_errors() {
        let (l, _) = parse_series_desc("up{job=\"a\", instance=\"b\"}", "1").unwrap();
        assert_eq!(l.get("job"), Some("a"));
        assert_eq!(l.get("__name__"), Some("up"));
        assert!(parse_series_desc("up{job=\"a\"", "0+0x1440").is_err());
        assert!(parse_series_desc("up", "1+x").is_err());
    }
}
