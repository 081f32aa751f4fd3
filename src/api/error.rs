//! API errors: Prometheus' `errorType` values and the HTTP status codes Prometheus 3 sends.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::json;

/// Prometheus' `errorType` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorType {
    /// Bad parameters or an unparsable query (400).
    BadData,
    /// A runtime evaluation error (422).
    Execution,
    /// The query ran past its timeout (503).
    Timeout,
    /// The client went away (499).
    Canceled,
    /// A storage or other internal error (500).
    Internal,
    /// The storage is not ready (500, as Prometheus' default branch).
    Unavailable,
    /// Unknown resource (404).
    NotFound,
    /// Codec negotiation failed (406).
    NotAcceptable,
    /// The request body is larger than the server accepts (413; sent as `bad_data`).
    TooLarge,
}

impl ErrorType {
    /// The `errorType` string.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorType::BadData | ErrorType::TooLarge => "bad_data",
            ErrorType::Execution => "execution",
            ErrorType::Timeout => "timeout",
            ErrorType::Canceled => "canceled",
            ErrorType::Internal => "internal",
            ErrorType::Unavailable => "unavailable",
            ErrorType::NotFound => "not_found",
            ErrorType::NotAcceptable => "not_acceptable",
        }
    }

    /// The HTTP status Prometheus 3 answers with.
    pub fn status(self) -> StatusCode {
        match self {
            ErrorType::BadData => StatusCode::BAD_REQUEST,
            ErrorType::Execution => StatusCode::UNPROCESSABLE_ENTITY,
            ErrorType::Timeout => StatusCode::SERVICE_UNAVAILABLE,
            // 499 "client closed request" is not a registered code but valid.
            ErrorType::Canceled => StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST),
            ErrorType::Internal | ErrorType::Unavailable => StatusCode::INTERNAL_SERVER_ERROR,
            ErrorType::NotFound => StatusCode::NOT_FOUND,
            ErrorType::NotAcceptable => StatusCode::NOT_ACCEPTABLE,
            ErrorType::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        }
    }
}

/// An error answered as `{"status":"error","errorType":...,"error":...}`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}: {message}", typ.as_str())]
pub struct ApiError {
    /// The kind, which decides the HTTP status.
    pub typ: ErrorType,
    /// The human-readable message.
    pub message: String,
}

impl ApiError {
    /// An error of kind `typ`.
    pub fn new(typ: ErrorType, message: impl Into<String>) -> Self {
        ApiError {
            typ,
            message: message.into(),
        }
    }

    /// `bad_data` (400).
    pub fn bad_data(message: impl Into<String>) -> Self {
        Self::new(ErrorType::BadData, message)
    }

    /// `bad_data` for one parameter: `invalid parameter "<name>": <reason>`, as Prometheus words it.
    pub fn invalid_param(name: &str, reason: impl std::fmt::Display) -> Self {
        Self::bad_data(format!("invalid parameter {name:?}: {reason}"))
    }

    /// `execution` (422).
    pub fn execution(message: impl Into<String>) -> Self {
        Self::new(ErrorType::Execution, message)
    }

    /// `internal` (500).
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorType::Internal, message)
    }

    /// `timeout` (503) with Prometheus' wording.
    pub fn timeout() -> Self {
        Self::new(
            ErrorType::Timeout,
            "query timed out in expression evaluation",
        )
    }

    /// `canceled` (499).
    pub fn canceled() -> Self {
        Self::new(
            ErrorType::Canceled,
            "query was canceled in expression evaluation",
        )
    }

    /// The JSON body.
    pub fn to_json(&self) -> String {
        let mut out = String::with_capacity(64 + self.message.len());
        out.push_str("{\"status\":\"error\",\"errorType\":");
        json::push_str(&mut out, self.typ.as_str());
        out.push_str(",\"error\":");
        json::push_str(&mut out, &self.message);
        out.push('}');
        out
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (self.typ.status(), self.to_json()).into_response();
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_codes_match_prometheus_3() {
        assert_eq!(ErrorType::BadData.status().as_u16(), 400);
        assert_eq!(ErrorType::Execution.status().as_u16(), 422);
        assert_eq!(ErrorType::Timeout.status().as_u16(), 503);
        assert_eq!(ErrorType::Canceled.status().as_u16(), 499);
        assert_eq!(ErrorType::NotFound.status().as_u16(), 404);
        assert_eq!(ErrorType::Internal.status().as_u16(), 500);
        assert_eq!(ErrorType::Unavailable.status().as_u16(), 500);
    }

    #[test]
    fn error_body() {
        let e = ApiError::invalid_param("query", "1:36: parse error: unclosed left parenthesis");
        assert_eq!(
            e.to_json(),
            r#"{"status":"error","errorType":"bad_data","error":"invalid parameter \"query\": 1:36: parse error: unclosed left parenthesis"}"#
        );
        let v: serde_json::Value = serde_json::from_str(&ApiError::timeout().to_json()).unwrap();
        assert_eq!(v["errorType"], "timeout");
    }
}
