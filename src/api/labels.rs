//! `/api/v1/labels` and `/api/v1/label/<name>/values`.

use std::collections::BTreeSet;

use axum::extract::State;
use axum::http::Uri;
use axum::response::Response;
use inferdb_storage::Matcher;

use super::error::ApiError;
use super::json;
use super::params::{Params, MAX_TIME_MS, MIN_TIME_MS};
use super::router::{success, ApiState};
use super::series::matcher_sets;
use super::QueryOptions;

/// Answers a sorted list of strings, cut at `limit` with Prometheus' warning.
fn string_list(mut items: Vec<String>, limit: usize) -> Response {
    let mut warnings = Vec::new();
    if limit > 0 && items.len() > limit {
        items.truncate(limit);
        warnings.push("results truncated due to limit".to_string());
    }
    let mut data = String::with_capacity(items.len() * 24 + 2);
    json::push_str_array(&mut data, &items);
    success(&data, &warnings, &[])
}

/// Runs `f` over every matcher set (or once with no matchers) and unions the results.
async fn union<F>(state: &ApiState, sets: Vec<Vec<Matcher>>, f: F) -> Result<Vec<String>, ApiError>
where
    F: Fn(&dyn super::ApiBackend, &[Matcher]) -> Result<Vec<String>, ApiError> + Send + 'static,
{
    let opts = QueryOptions::with_timeout(state.config().query_timeout);
    state
        .run_blocking(opts.timeout, opts.cancel.clone(), move |b| {
            if sets.is_empty() {
                let mut v = f(b, &[])?;
                v.sort();
                v.dedup();
                return Ok(v);
            }
            let mut all = BTreeSet::new();
            for ms in &sets {
                all.extend(f(b, ms)?);
            }
            Ok(all.into_iter().collect())
        })
        .await
}

/// Handles GET and POST `/api/v1/labels`.
pub(crate) async fn names(
    State(state): State<ApiState>,
    params: Params,
) -> Result<Response, ApiError> {
    let limit = params.limit()?;
    let start = params.time_or("start", MIN_TIME_MS)?;
    let end = params.time_or("end", MAX_TIME_MS)?;
    let sets = matcher_sets(&state, &params)?;
    let names = union(&state, sets, move |b, ms| b.label_names(ms, start, end)).await?;
    Ok(string_list(names, limit))
}

/// Reverses Prometheus' `U__` escaping of label names in URL paths (`U__a_2e_b` is `a.b`,
/// `__` is `_`).
fn unescape_name(name: &str) -> String {
    let Some(rest) = name.strip_prefix("U__") else {
        return name.to_string();
    };
    let mut out = String::new();
    let mut chars = rest.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if c != '_' {
            out.push(c);
            continue;
        }
        if rest[i + 1..].starts_with('_') {
            out.push('_');
            chars.next();
            continue;
        }
        // _<hex>_
        let tail = &rest[i + 1..];
        match tail.find('_') {
            Some(end) => match u32::from_str_radix(&tail[..end], 16)
                .ok()
                .and_then(char::from_u32)
            {
                Some(ch) => {
                    out.push(ch);
                    for _ in 0..=end {
                        chars.next();
                    }
                }
                None => return name.to_string(),
            },
            None => return name.to_string(),
        }
    }
    out
}

/// The `<name>` segment of `.../label/<name>/values`, percent-decoded; bytes that are not
/// UTF-8 are refused as Prometheus refuses them (`bad_data`, the name quoted as Go does).
fn path_label_name(uri: &Uri) -> Result<String, ApiError> {
    let path = uri.path();
    let seg = path
        .strip_suffix("/values")
        .and_then(|p| p.rsplit_once('/'))
        .map(|(_, seg)| seg)
        .unwrap_or("");
    let raw: Vec<u8> = percent_encoding::percent_decode_str(seg).collect();
    String::from_utf8(raw).map_err(|e| {
        ApiError::bad_data(format!(
            "invalid label name: {}",
            go_quote_bytes(e.as_bytes())
        ))
    })
}

/// Quotes bytes as Go's `%q` does: UTF-8 text as `strconv.Quote`, other bytes as `\xNN`.
fn go_quote_bytes(b: &[u8]) -> String {
    let mut out = String::from("\"");
    for chunk in b.utf8_chunks() {
        let q = inferdb_query::parser::go_quote(chunk.valid());
        out.push_str(&q[1..q.len() - 1]);
        for x in chunk.invalid() {
            out.push_str(&format!("\\x{x:02x}"));
        }
    }
    out.push('"');
    out
}

/// Handles GET `/api/v1/label/<name>/values`.
pub(crate) async fn values(
    State(state): State<ApiState>,
    uri: Uri,
    params: Params,
) -> Result<Response, ApiError> {
    let name = unescape_name(&path_label_name(&uri)?);
    // Prometheus 3 accepts any non-empty UTF-8 label name (legacy names need no escaping).
    if name.is_empty() || name.contains('\0') {
        return Err(ApiError::bad_data(format!(
            "invalid label name: {}",
            inferdb_query::parser::go_quote(&name)
        )));
    }
    let limit = params.limit()?;
    let start = params.time_or("start", MIN_TIME_MS)?;
    let end = params.time_or("end", MAX_TIME_MS)?;
    let sets = matcher_sets(&state, &params)?;
    let values = union(&state, sets, move |b, ms| {
        b.label_values(&name, ms, start, end)
    })
    .await?;
    Ok(string_list(values, limit))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unescapes_utf8_names() {
        assert_eq!(unescape_name("model_name"), "model_name");
        assert_eq!(unescape_name("U__a_2e_b"), "a.b");
        assert_eq!(unescape_name("U__a__b"), "a_b");
        assert_eq!(unescape_name("U__bad_zz_"), "U__bad_zz_");
    }

    #[test]
    fn path_names_and_invalid_utf8() {
        let uri: Uri = "/api/v1/label/a%2Fb/values?x=1".parse().unwrap();
        assert_eq!(path_label_name(&uri).unwrap(), "a/b");
        let uri: Uri = "/api/v1/label/a%FFb/values".parse().unwrap();
        let e = path_label_name(&uri).unwrap_err();
        assert_eq!(e.message, r#"invalid label name: "a\xffb""#);
        assert_eq!(go_quote_bytes("é\"\n".as_bytes()), r#""é\"\n""#);
    }
}
