//! The router: every endpoint, behind the bearer token and the body limit.

use axum::Router;
use axum::middleware::from_fn_with_state;
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use http::StatusCode;

use super::auth::require_token;
use super::error::ApiError;
use super::limit::limit_body;
use super::{proxy, status, turns};
use crate::state::AppState;

/// The sidecar as an axum [`Router`], testable without a socket.
///
/// The bearer token check wraps everything, the fallback included, so an
/// unauthenticated client learns nothing about which paths exist.
pub fn app(state: AppState) -> Router {
    let routes = Router::new()
        .route("/v1/turns", post(turns::run_turn))
        .route("/proxy/{*rest}", any(proxy::forward))
        .route("/v1/status", get(status::status))
        .route("/metrics", get(status::metrics))
        .route("/healthz", get(status::healthz))
        .fallback(not_found)
        .layer(from_fn_with_state(state.clone(), limit_body))
        .with_state(state.clone());
    // The token is checked around the routing, not inside each route: a
    // route's own refusal of a method adds `Allow`, which would tell an
    // unauthenticated client that the path exists (a 401 for `DELETE
    // /v1/turns` carried `allow: POST`).
    Router::new()
        .fallback_service(routes)
        .layer(from_fn_with_state(state, require_token))
}

async fn not_found() -> Response {
    ApiError::new(StatusCode::NOT_FOUND, "no such endpoint").into_response()
}
