//! Request bodies over `server.max_body` get 413 without being buffered
//! whole, and a body must arrive within its call's deadline.

use std::error::Error as _;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::StatusCode;
use http::header::CONTENT_LENGTH;
use http_body_util::{LengthLimitError, Limited};
use hyper::body::Body as _;

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
    match refusal(&state, &request) {
        Some(refused) => refused,
        None => next.run(capped(&state, request)).await,
    }
}

/// The `413` for a declared `Content-Length` over the limit.
pub(crate) fn refusal(state: &AppState, request: &Request) -> Option<Response> {
    let max = state.inner.config.server.max_body;
    let declared = request
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<u64>().ok());
    declared
        .is_some_and(|length| length > max)
        .then(|| too_large(max).into_response())
}

/// The request with its body capped at the limit while it is read. A
/// request without a body (most proxied ones) is left as it is: there is
/// nothing to cap, and the wrapper would be one more allocation.
pub(crate) fn capped(state: &AppState, request: Request) -> Request {
    if request.body().is_end_stream() {
        return request;
    }
    let limit = usize::try_from(state.inner.config.server.max_body).unwrap_or(usize::MAX);
    request.map(|body| Body::new(Limited::new(body, limit)))
}

/// Reads a body capped by [`limit_body`], within `within`: a body over
/// the limit is 413, one that takes longer (a client sending it a byte at
/// a time) is 408.
pub(crate) async fn read_body(body: Body, max: u64, within: Duration) -> Result<Bytes, ApiError> {
    if body.is_end_stream() {
        return Ok(Bytes::new());
    }
    let read = tokio::time::timeout(within, axum::body::to_bytes(body, usize::MAX));
    let Ok(read) = read.await else {
        return Err(ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "the request body did not arrive within {} ms (the call's deadline)",
                within.as_millis()
            ),
        ));
    };
    read.map_err(|error| {
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
