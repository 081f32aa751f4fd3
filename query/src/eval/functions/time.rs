//! Calendar functions (`year`, `month`, `day_of_week`, ...) on Unix seconds, in UTC.

/// `(year, month 1-12, day 1-31)` of a count of days since 1970-01-01 (proleptic Gregorian).
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in_month_of(y: i64, m: u32) -> u32 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ => {
            if is_leap(y) {
                29
            } else {
                28
            }
        }
    }
}

fn ymd(secs: i64) -> (i64, u32, u32) {
    civil_from_days(secs.div_euclid(86_400))
}

fn year(s: i64) -> f64 {
    ymd(s).0 as f64
}
fn month(s: i64) -> f64 {
    ymd(s).1 as f64
}
fn day_of_month(s: i64) -> f64 {
    ymd(s).2 as f64
}
fn days_in_month(s: i64) -> f64 {
    let (y, m, _) = ymd(s);
    days_in_month_of(y, m) as f64
}
fn day_of_week(s: i64) -> f64 {
    // 1970-01-01 was a Thursday (4).
    (s.div_euclid(86_400) + 4).rem_euclid(7) as f64
}
fn day_of_year(s: i64) -> f64 {
    let (y, m, d) = ymd(s);
    let mut n = d;
    for mm in 1..m {
        n += days_in_month_of(y, mm);
    }
    n as f64
}
fn hour(s: i64) -> f64 {
    (s.rem_euclid(86_400) / 3600) as f64
}
fn minute(s: i64) -> f64 {
    (s.rem_euclid(3600) / 60) as f64
}

/// The calendar function called `name`, taking Unix seconds.
pub fn date_function(name: &str) -> Option<fn(i64) -> f64> {
    Some(match name {
        "year" => year,
        "month" => month,
        "day_of_month" => day_of_month,
        "days_in_month" => days_in_month,
        "day_of_week" => day_of_week,
        "day_of_year" => day_of_year,
        "hour" => hour,
        "minute" => minute,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calendar() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        // 2024-02-29 12:34:56 UTC
        let t = 1_709_210_096;
        assert_eq!(year(t), 2024.0);
        assert_eq!(month(t), 2.0);
        assert_eq!(day_of_month(t), 29.0);
        assert_eq!(days_in_month(t), 29.0);
        assert_eq!(day_of_week(t), 4.0);
        assert_eq!(day_of_year(t), 60.0);
        assert_eq!(hour(t), 12.0);
        assert_eq!(minute(t), 34.0);
        assert_eq!(year(-1), 1969.0);
    }
}
