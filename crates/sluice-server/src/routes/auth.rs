//! The bearer token: when set, every endpoint but `/healthz` requires it,
//! compared in constant time, and every failure looks the same.

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use http::header::{AUTHORIZATION, WWW_AUTHENTICATE};
use subtle::ConstantTimeEq;

use super::error::ApiError;
use crate::state::AppState;

/// The one path open without a token, for liveness probes.
const OPEN_PATH: &str = "/healthz";

pub(crate) async fn require_token(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let Some(token) = &state.inner.config.server.auth_token else {
        return next.run(request).await;
    };
    if request.uri().path() == OPEN_PATH {
        return next.run(request).await;
    }
    let presented = request
        .headers()
        .get(AUTHORIZATION)
        .map(|value| value.as_bytes())
        // RFC 6750: the scheme is case-insensitive.
        .filter(|value| value.len() > 7 && value[..7].eq_ignore_ascii_case(b"bearer "))
        .map_or(&b""[..], |value| &value[7..]);
    // Constant time in the token's content; the same answer for a wrong
    // token, a missing one, and a path that does not exist.
    let matches: bool = presented.ct_eq(token.expose().as_bytes()).into();
    if matches {
        return next.run(request).await;
    }
    let mut response =
        ApiError::new(StatusCode::UNAUTHORIZED, "a valid bearer token is required").into_response();
    response
        .headers_mut()
        .insert(WWW_AUTHENTICATE, http::HeaderValue::from_static("Bearer"));
    response
}
