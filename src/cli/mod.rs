//! The command line: `inferdb serve`, `inferdb query`, `inferdb simulate`, `inferdb tsdb`, `inferdb rules`.

pub mod advise;
pub mod export;
pub mod import;
pub mod query;
pub mod rules;
pub mod serve;
pub mod simulate;
pub mod tsdb;

/// Parses a command-line time: RFC 3339, Unix seconds (as the HTTP API takes them), `now`, or
/// `now`/nothing plus a signed Prometheus duration (`now-1h`, `-1h`, `now+5m`). Returns
/// milliseconds.
pub fn parse_time(s: &str, now_ms: i64) -> Result<i64, String> {
    let s = s.trim();
    if s == "now" {
        return Ok(now_ms);
    }
    let rel = s.strip_prefix("now").unwrap_or(s);
    if let Some((sign, d)) = rel
        .strip_prefix('-')
        .map(|d| (-1, d))
        .or_else(|| rel.strip_prefix('+').map(|d| (1, d)))
    {
        if let Ok(ms) = inferdb_query::parser::parse_model_duration_ms(d) {
            return Ok(now_ms.saturating_add(sign * ms));
        }
    }
    crate::api::params::parse_time(s).map_err(|_| {
        format!("cannot parse {s:?} as a time (RFC 3339, Unix seconds, now, -1h, now-30m)")
    })
}

/// Parses a duration flag (`--query.timeout 2m`, `--step 15`): a Prometheus duration or
/// seconds, as the HTTP API takes them. Returns milliseconds; the error names the flag.
pub fn duration_ms(flag: &str, s: &str) -> anyhow::Result<i64> {
    inferdb_query::parser::parse_duration_ns(s)
        .map(|ns| ns / 1_000_000)
        .map_err(|e| anyhow::anyhow!("--{flag}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_durations() {
        let now = 1_754_006_437_512;
        assert_eq!(parse_time("now", now), Ok(now));
        assert_eq!(parse_time("-1h", now), Ok(now - 3_600_000));
        assert_eq!(parse_time("now-30m", now), Ok(now - 1_800_000));
        assert_eq!(parse_time("now+5m", now), Ok(now + 300_000));
        assert_eq!(parse_time("1754006437.512", 0), Ok(now));
        assert_eq!(parse_time("2025-08-01T00:00:37.512Z", 0), Ok(now));
        assert_eq!(parse_time("1970-01-01T00:00:01Z", now), Ok(1000));
        assert!(parse_time("yesterday", now).is_err());
        assert_eq!(duration_ms("step", "15").unwrap(), 15_000);
        assert_eq!(duration_ms("step", "1m30s").unwrap(), 90_000);
        let e = duration_ms("query.timeout", "2x").unwrap_err().to_string();
        assert_eq!(
            e,
            r#"--query.timeout: cannot parse "2x" to a valid duration"#
        );
    }
}
