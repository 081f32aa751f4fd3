//! `POST /api/v1/read`: Prometheus remote read, samples response type (a snappy-compressed
//! protobuf `ReadResponse`), so a Prometheus can use inferdb as a `remote_read` source.
//! Clients that accept only streamed chunks get Prometheus' 400 for an unsupported response
//! type; Prometheus 2's own client asks for samples.

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::router::ApiState;
use super::write::{read_body, text_error};
use crate::remote::codec;
use crate::remote::proto::ReadRequest;
use crate::remote::receiver::RemoteError;

/// The largest remote-read request body accepted (Prometheus' decode limit).
const MAX_READ_REQUEST_BYTES: usize = 32 << 20;

/// Handles `POST /api/v1/read`.
pub(crate) async fn handle(State(state): State<ApiState>, req: Request) -> Response {
    let Some(remote) = state.remote().cloned() else {
        return text_error(StatusCode::NOT_FOUND, "not found");
    };
    let body = match read_body(req.into_body(), MAX_READ_REQUEST_BYTES).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let rr: ReadRequest = match codec::decode(&body, MAX_READ_REQUEST_BYTES) {
        Ok(r) => r,
        Err(e) => return text_error(StatusCode::BAD_REQUEST, &e.to_string()),
    };
    let done =
        tokio::task::spawn_blocking(move || remote.read(&rr).map(|r| codec::encode(&r))).await;
    match done {
        Ok(Ok(bytes)) => {
            let mut r = (StatusCode::OK, bytes).into_response();
            let h = r.headers_mut();
            h.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/x-protobuf"),
            );
            h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("snappy"));
            r
        }
        Ok(Err(RemoteError::BadRequest(m))) => text_error(StatusCode::BAD_REQUEST, &m),
        Ok(Err(RemoteError::Internal(m))) => {
            tracing::error!("remote read: {m}");
            text_error(StatusCode::INTERNAL_SERVER_ERROR, &m)
        }
        Err(e) => text_error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}
