//! Wall-clock time as Prometheus timestamps (milliseconds since the Unix epoch).

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Timestamps from this one on (1e11 seconds, the year 5138) are taken for milliseconds given
/// where seconds are expected: a millisecond timestamp of any date after March 1973 is larger.
pub const PLAUSIBLY_MILLISECONDS_MS: i64 = 100_000_000_000_000;

/// Whether `t_ms` (a timestamp read as seconds, in milliseconds) is plausibly a millisecond
/// timestamp given as seconds (see [`PLAUSIBLY_MILLISECONDS_MS`]).
pub fn plausibly_milliseconds(t_ms: i64) -> bool {
    t_ms >= PLAUSIBLY_MILLISECONDS_MS
}
