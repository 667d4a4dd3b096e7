//! The bearer token: when set, every endpoint but `/healthz` requires it,
//! compared in constant time, and every failure looks the same. A browser
//! opening the live page may present it as `GET /ui?token=` instead.

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use http::header::{AUTHORIZATION, WWW_AUTHENTICATE};
use subtle::ConstantTimeEq;

use super::error::ApiError;
use super::ui::PAGE_PATH;
use crate::state::AppState;

/// The one path open without a token, for liveness probes.
const OPEN_PATH: &str = "/healthz";

pub(crate) async fn require_token(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    match refusal(&state, &request) {
        Some(refused) => refused,
        None => next.run(request).await,
    }
}

/// The `401` for a request without the right token, if one is required.
pub(crate) fn refusal(state: &AppState, request: &Request) -> Option<Response> {
    let token = state.inner.config.server.auth_token.as_ref()?;
    if request.uri().path() == OPEN_PATH {
        return None;
    }
    let matches = presents(request, token.expose().as_bytes());
    if matches {
        return None;
    }
    let mut response =
        ApiError::new(StatusCode::UNAUTHORIZED, "a valid bearer token is required").into_response();
    response
        .headers_mut()
        .insert(WWW_AUTHENTICATE, http::HeaderValue::from_static("Bearer"));
    Some(response)
}

/// True when `request` presents `token`: as `Authorization: Bearer`, or,
/// for `GET /ui` without that header, as `?token=`. Constant time in the
/// token's content; the same answer for a wrong token, a missing one, and
/// a path that does not exist.
fn presents(request: &Request, token: &[u8]) -> bool {
    let header = request
        .headers()
        .get(AUTHORIZATION)
        .map(|value| value.as_bytes())
        // RFC 6750: the scheme is case-insensitive.
        .filter(|value| value.len() > 7 && value[..7].eq_ignore_ascii_case(b"bearer "))
        .map(|value| &value[7..]);
    // A browser cannot send a header when it opens a URL: the page alone
    // takes the token from its query (the page then sends the header).
    let from_query = (header.is_none()
        && request.method() == http::Method::GET
        && request.uri().path() == PAGE_PATH)
        .then(|| sluice_ui::query_token(request.uri().query()))
        .flatten();
    let presented = header
        .or(from_query.as_deref().map(str::as_bytes))
        .unwrap_or_default();
    presented.ct_eq(token).into()
}
