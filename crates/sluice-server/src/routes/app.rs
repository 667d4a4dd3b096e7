//! The router: every endpoint, behind the bearer token and the body limit, inside the secret scrubber.

use axum::Router;
use axum::middleware::from_fn_with_state;
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use http::StatusCode;

use super::auth::require_token;
use super::error::ApiError;
use super::limit::limit_body;
use super::{proxy, reload, status, turns, ui};
use crate::state::AppState;
use sluice_http::scrub::scrub_responses;

/// The sidecar as an axum [`Router`], testable without a socket.
///
/// The bearer token check wraps everything, the fallback included, so an
/// unauthenticated client learns nothing about which paths exist. When a
/// credential has a secret, every response (headers and body, streamed or
/// not) has it masked as `***`; routes added here get that too.
///
/// On a socket, [`crate::serve`] answers `/proxy/...` through
/// `routes/direct.rs`, which calls the same token check, body limit, handler
/// and scrubber without the router (its hot path): a layer added here for
/// the proxy route belongs there too.
pub fn app(state: AppState) -> Router {
    let routes = Router::new()
        .route("/v1/turns", post(turns::run_turn))
        .route("/proxy/{*rest}", any(proxy::forward))
        .route("/v1/status", get(status::status))
        .route("/v1/reload", post(reload::reload))
        .route("/metrics", get(status::metrics))
        .route("/healthz", get(status::healthz))
        .route(ui::PAGE_PATH, get(ui::page))
        .route("/v1/events", get(ui::events))
        .fallback(not_found)
        .layer(from_fn_with_state(state.clone(), limit_body))
        .with_state(state.clone());
    // The token is checked around the routing, not inside each route: a
    // route's own refusal of a method adds `Allow`, which would tell an
    // unauthenticated client that the path exists (a 401 for `DELETE
    // /v1/turns` carried `allow: POST`).
    let app = Router::new()
        .fallback_service(routes)
        .layer(from_fn_with_state(state.clone(), require_token));
    // Outermost, so that every byte any route returns passes it; not there
    // at all without a secret, so that it costs nothing then.
    match &state.inner.scrubber {
        Some(scrubber) => app.layer(from_fn_with_state(scrubber.clone(), scrub_responses)),
        None => app,
    }
}

async fn not_found() -> Response {
    ApiError::new(StatusCode::NOT_FOUND, "no such endpoint").into_response()
}
