//! Request parameters as Prometheus reads them: URL query string and
//! `application/x-www-form-urlencoded` body merged (body values first, as Go's `r.Form`),
//! times as RFC 3339 or Unix seconds with decimals, durations as PromQL durations or float
//! seconds, `limit`, and `match[]`.

use axum::extract::{FromRequest, Request};
use axum::http::{header, Method};
use chrono::DateTime;
use inferdb_query::parser::parse_duration_ns;

use super::error::{ApiError, ErrorType};

/// The smallest timestamp Prometheus' API accepts (its `MinTime`), in milliseconds.
pub const MIN_TIME_MS: i64 = -9_223_309_901_257_974_000;
/// The largest timestamp Prometheus' API accepts (its `MaxTime`), in milliseconds.
pub const MAX_TIME_MS: i64 = 9_223_309_901_257_974_999;
/// `MinTime` as Prometheus formats it; accepted as a literal.
const MIN_TIME_FORMATTED: &str = "-292273086-05-16T16:47:06Z";
/// `MaxTime` as Prometheus formats it; accepted as a literal.
const MAX_TIME_FORMATTED: &str = "292277026-12-04T15:30:07.999999999Z";

/// Default limit on request bodies (form-encoded parameters), bytes.
pub const DEFAULT_MAX_BODY_BYTES: usize = 8 << 20;

/// Merged request parameters in order: body values first, then URL values.
#[derive(Debug, Clone, Default)]
pub struct Params {
    pairs: Vec<(String, String)>,
}

impl Params {
    /// Parameters from a URL query string and a form body.
    pub fn from_parts(query: Option<&str>, body: Option<&[u8]>) -> Self {
        let mut pairs = Vec::new();
        if let Some(b) = body {
            pairs.extend(form_urlencoded::parse(b).into_owned());
        }
        if let Some(q) = query {
            pairs.extend(form_urlencoded::parse(q.as_bytes()).into_owned());
        }
        Params { pairs }
    }

    /// The first value of `key`, treating an empty value as absent (as Go's `FormValue` use in
    /// Prometheus does).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .filter(|v| !v.is_empty())
    }

    /// Every value of `key` (e.g. `match[]`), body values first.
    pub fn get_all(&self, key: &str) -> Vec<&str> {
        self.pairs
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// A time parameter in milliseconds, `default` when absent.
    pub fn time_or(&self, key: &str, default: i64) -> Result<i64, ApiError> {
        match self.get(key) {
            None => Ok(default),
            Some(s) => parse_time(s).map_err(|e| ApiError::invalid_param(key, e)),
        }
    }

    /// A required time parameter in milliseconds.
    pub fn time(&self, key: &str) -> Result<i64, ApiError> {
        parse_time(self.get(key).unwrap_or("")).map_err(|e| ApiError::invalid_param(key, e))
    }

    /// An optional duration parameter in milliseconds.
    pub fn duration_opt(&self, key: &str) -> Result<Option<i64>, ApiError> {
        match self.get(key) {
            None => Ok(None),
            Some(s) => parse_duration_ns(s)
                .map(|ns| Some(ns / 1_000_000))
                .map_err(|e| ApiError::invalid_param(key, e)),
        }
    }

    /// The `limit` parameter: 0 (absent) means no limit.
    pub fn limit(&self) -> Result<usize, ApiError> {
        match self.get("limit") {
            None => Ok(0),
            Some(s) => match s.parse::<i64>() {
                Ok(n) if n < 0 => Err(ApiError::invalid_param(
                    "limit",
                    "limit must be non-negative",
                )),
                Ok(n) => Ok(usize::try_from(n).unwrap_or(usize::MAX)),
                Err(_) => Err(ApiError::invalid_param(
                    "limit",
                    format!("strconv.Atoi: parsing {s:?}: invalid syntax"),
                )),
            },
        }
    }
}

fn is_form(req: &Request) -> bool {
    match req.headers().get(header::CONTENT_TYPE) {
        // Go parses a body without a content type as nothing; accept it as a form to be lenient
        None => true,
        Some(ct) => ct
            .to_str()
            .map(|s| {
                s.split(';')
                    .next()
                    .unwrap_or("")
                    .trim()
                    .eq_ignore_ascii_case("application/x-www-form-urlencoded")
            })
            .unwrap_or(false),
    }
}

/// The query string of a GET whose request line was longer than the `http` crate's URI type
/// holds (see `conn.rs`): [`Params`] reads it in place of the URI's.
#[derive(Debug, Clone)]
pub struct LongQuery(pub String);

/// The largest body [`Params`] reads; set per router through a request extension.
#[derive(Debug, Clone, Copy)]
pub struct MaxBodyBytes(pub usize);

impl<S: Send + Sync> FromRequest<S> for Params {
    type Rejection = ApiError;

    async fn from_request(req: Request, _state: &S) -> Result<Self, Self::Rejection> {
        let query = match req.extensions().get::<LongQuery>() {
            Some(q) => Some(q.0.clone()),
            None => req.uri().query().map(str::to_owned),
        };
        let has_body = matches!(*req.method(), Method::POST | Method::PUT | Method::PATCH);
        if !has_body || !is_form(&req) {
            return Ok(Params::from_parts(query.as_deref(), None));
        }
        let limit = req
            .extensions()
            .get::<MaxBodyBytes>()
            .map(|m| m.0)
            .unwrap_or(DEFAULT_MAX_BODY_BYTES);
        let body = axum::body::to_bytes(req.into_body(), limit)
            .await
            .map_err(|e| {
                let msg = e.to_string();
                if msg.contains("length limit") {
                    ApiError::new(
                        ErrorType::TooLarge,
                        format!("request body larger than {limit} bytes"),
                    )
                } else {
                    ApiError::bad_data(format!("error parsing form values: {msg}"))
                }
            })?;
        Ok(Params::from_parts(query.as_deref(), Some(&body)))
    }
}

/// Parses a time as Prometheus does: Unix seconds as a float (the fraction rounded to
/// milliseconds) or RFC 3339. Very large values saturate at Prometheus' `MinTime`/`MaxTime`
/// instead of overflowing. Returns milliseconds.
pub fn parse_time(s: &str) -> Result<i64, String> {
    if let Some(f) = parse_go_float(s) {
        if f.is_nan() {
            return Err(format!("cannot parse {s:?} to a valid timestamp"));
        }
        let secs = f.trunc();
        let frac = ((f - secs) * 1000.0).round();
        let ms = secs * 1000.0 + frac;
        if ms >= MAX_TIME_MS as f64 {
            return Ok(MAX_TIME_MS);
        }
        if ms <= MIN_TIME_MS as f64 {
            return Ok(MIN_TIME_MS);
        }
        // secs * 1000 is exact below 2^53 ms; above that float precision is the input's anyway
        return Ok((secs as i64)
            .saturating_mul(1000)
            .saturating_add(frac as i64));
    }
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Ok(t.timestamp_millis());
    }
    match s {
        MIN_TIME_FORMATTED => Ok(MIN_TIME_MS),
        MAX_TIME_FORMATTED => Ok(MAX_TIME_MS),
        _ => Err(format!("cannot parse {s:?} to a valid timestamp")),
    }
}

/// Parses a boolean as Go's `strconv.ParseBool` does (`1`, `t`, `T`, `TRUE`, `true`, `True` and
/// their false forms), with Go's error text, for the API parameters Prometheus reads that way.
pub fn parse_bool(s: &str) -> Result<bool, String> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(format!("strconv.ParseBool: parsing {s:?}: invalid syntax")),
    }
}

/// Parses a float as Go's `strconv.ParseFloat` accepts the common forms: decimal, exponent,
/// `Inf`/`+Inf`/`-Inf`/`infinity`, `NaN` (any case), underscores not allowed.
fn parse_go_float(s: &str) -> Option<f64> {
    let t = s.trim_start_matches(['+', '-']);
    let lower = t.to_ascii_lowercase();
    if lower == "inf" || lower == "infinity" || lower == "nan" {
        let v = if lower == "nan" {
            f64::NAN
        } else {
            f64::INFINITY
        };
        return Some(if s.starts_with('-') { -v } else { v });
    }
    if t.is_empty()
        || !t
            .bytes()
            .all(|b| b.is_ascii_digit() || b"eE.+-".contains(&b))
    {
        return None;
    }
    s.parse::<f64>().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_parse_bool() {
        assert_eq!(parse_bool("T"), Ok(true));
        assert_eq!(parse_bool("True"), Ok(true));
        assert_eq!(parse_bool("0"), Ok(false));
        assert_eq!(
            parse_bool("yes"),
            Err("strconv.ParseBool: parsing \"yes\": invalid syntax".into())
        );
    }

    #[test]
    fn times() {
        assert_eq!(parse_time("4"), Ok(4000));
        assert_eq!(parse_time("1754006437.512"), Ok(1_754_006_437_512));
        assert_eq!(parse_time("1754006437.5125"), Ok(1_754_006_437_513));
        assert_eq!(parse_time("1753984820"), Ok(1_753_984_820_000));
        assert_eq!(parse_time("-1.5"), Ok(-1500));
        assert_eq!(parse_time("1e3"), Ok(1_000_000));
        // milliseconds sent as seconds (Grafana's exemplar probe): year ~57,000, no overflow
        assert_eq!(parse_time("1754006437512"), Ok(1_754_006_437_512_000));
        assert_eq!(parse_time("1e300"), Ok(MAX_TIME_MS));
        assert_eq!(parse_time("-1e300"), Ok(MIN_TIME_MS));
        assert_eq!(
            parse_time("2025-08-01T00:00:37.512Z"),
            Ok(1_754_006_437_512)
        );
        assert_eq!(
            parse_time("2025-08-01T02:00:37+02:00"),
            Ok(1_754_006_437_000)
        );
        assert_eq!(parse_time(MAX_TIME_FORMATTED), Ok(MAX_TIME_MS));
        assert!(parse_time("").is_err());
        assert!(parse_time("yesterday").is_err());
        assert!(parse_time("NaN").is_err());
        assert_eq!(
            parse_time("abc").unwrap_err(),
            "cannot parse \"abc\" to a valid timestamp"
        );
    }

    #[test]
    fn merged_params_body_first() {
        let p = Params::from_parts(
            Some("dedup=true&query=url&match%5B%5D=b"),
            Some(b"query=1%2B1&time=4&match[]=a"),
        );
        assert_eq!(p.get("query"), Some("1+1"));
        assert_eq!(p.get("dedup"), Some("true"));
        assert_eq!(p.get("time"), Some("4"));
        assert_eq!(p.get_all("match[]"), vec!["a", "b"]);
        assert_eq!(p.get("missing"), None);
    }

    #[test]
    fn limits() {
        assert_eq!(
            Params::from_parts(Some("limit=40000"), None).limit(),
            Ok(40000)
        );
        assert_eq!(Params::from_parts(None, None).limit(), Ok(0));
        assert!(Params::from_parts(Some("limit=-1"), None).limit().is_err());
        assert!(Params::from_parts(Some("limit=x"), None).limit().is_err());
    }
}
