//! Request bodies over `server.max_body` get 413 without being buffered whole.

use std::error::Error as _;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::StatusCode;
use http::header::CONTENT_LENGTH;
use http_body_util::{LengthLimitError, Limited};

use super::error::ApiError;
use crate::state::AppState;

fn too_large(max: u64) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("the request body is larger than server.max_body ({max} bytes)"),
    )
}

/// Refuses a declared `Content-Length` over the limit before reading a
/// byte, and caps any other body (chunked) at the limit while it is read.
pub(crate) async fn limit_body(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let max = state.inner.config.server.max_body;
    let declared = request
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<u64>().ok());
    if declared.is_some_and(|length| length > max) {
        return too_large(max).into_response();
    }
    let limit = usize::try_from(max).unwrap_or(usize::MAX);
    let request = request.map(|body| Body::new(Limited::new(body, limit)));
    next.run(request).await
}

/// Reads a body capped by [`limit_body`]: a body over the limit is 413.
pub(crate) async fn read_body(body: Body, max: u64) -> Result<Bytes, ApiError> {
    axum::body::to_bytes(body, usize::MAX)
        .await
        .map_err(|error| {
            let mut source = error.source();
            while let Some(cause) = source {
                if cause.is::<LengthLimitError>() {
                    return too_large(max);
                }
                source = cause.source();
            }
            ApiError::bad_request(format!("cannot read the request body: {error}"))
        })
}
