//! `POST /api/v1/write`: the Prometheus remote-write 1.0 receiver (protobuf `WriteRequest`,
//! snappy block format), on with `--web.enable-remote-write-receiver`. The work is done by
//! [`crate::remote::receiver::RemoteStore`]; this file maps it to HTTP as Prometheus does:
//! 204 when stored, 400 with the reason for a malformed body or a refused sample (nothing of
//! the request is kept), 500 when the store fails, 404 when the receiver is off.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::router::ApiState;
use crate::remote::receiver::RemoteError;

/// A plain-text answer as Go's `http.Error` writes it.
pub(crate) fn text_error(status: StatusCode, msg: &str) -> Response {
    let mut r = (status, format!("{msg}\n")).into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    r
}

/// Reads the whole body, refusing more than `limit` bytes.
pub(crate) async fn read_body(body: Body, limit: usize) -> Result<axum::body::Bytes, Response> {
    axum::body::to_bytes(body, limit).await.map_err(|e| {
        // axum reports a body over the limit as a `LengthLimitError` ("length limit exceeded")
        let mut too_large = false;
        let mut src: Option<&dyn std::error::Error> = Some(&e);
        while let Some(x) = src {
            too_large |= x.to_string().contains("length limit");
            src = x.source();
        }
        if too_large {
            text_error(
                StatusCode::PAYLOAD_TOO_LARGE,
                &format!("request body larger than {limit} bytes"),
            )
        } else {
            text_error(StatusCode::BAD_REQUEST, &format!("reading body: {e}"))
        }
    })
}

/// Handles `POST /api/v1/write`.
pub(crate) async fn handle(State(state): State<ApiState>, req: Request) -> Response {
    let Some(remote) = state
        .remote()
        .filter(|r| r.options().write_enabled)
        .cloned()
    else {
        return text_error(
            StatusCode::NOT_FOUND,
            // Prometheus 2.42's words (both its flags, and inferdb's, turn the receiver on)
            "remote write receiver needs to be enabled with --enable-feature=remote-write-receiver",
        );
    };
    // Remote write 2.0 bodies are another message: say so, as the 2.0 spec asks of 1.0-only
    // receivers, instead of misreading them.
    if let Some(ct) = req.headers().get(header::CONTENT_TYPE) {
        let ct = ct.to_str().unwrap_or("");
        if ct.contains("io.prometheus.write.v2") {
            return text_error(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                &format!("unsupported content type {ct:?}: only remote write 1.0 (prometheus.WriteRequest) is accepted"),
            );
        }
    }
    if let Some(ce) = req.headers().get(header::CONTENT_ENCODING) {
        if !ce.as_bytes().eq_ignore_ascii_case(b"snappy") {
            return text_error(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                &format!(
                    "unsupported content encoding {:?}: remote write bodies are snappy-compressed",
                    ce.to_str().unwrap_or("")
                ),
            );
        }
    }
    let limit = remote.options().max_compressed_bytes;
    let body = match read_body(req.into_body(), limit).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let done = tokio::task::spawn_blocking(move || remote.write_compressed(&body)).await;
    match done {
        Ok(Ok(_)) => StatusCode::NO_CONTENT.into_response(),
        Ok(Err(RemoteError::BadRequest(m))) => text_error(StatusCode::BAD_REQUEST, &m),
        Ok(Err(RemoteError::Internal(m))) => {
            tracing::error!("remote write: {m}");
            text_error(StatusCode::INTERNAL_SERVER_ERROR, &m)
        }
        Err(e) => text_error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}
