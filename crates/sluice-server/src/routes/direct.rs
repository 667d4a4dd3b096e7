//! The proxy route answered without the router: exactly the layers `app()`
//! puts around `/proxy/{*rest}` (scrubber, token, body limit, handler), as
//! plain calls, for the listener's hot path. The router's boxed services
//! and futures cost about a sixth of a proxied request's instructions.

use axum::extract::Request;
use axum::response::Response;
use http::Method;

use super::{auth, limit, proxy};
use crate::scrub::scrub;
use crate::state::AppState;

/// True for a path the router would hand to the proxy route.
pub(crate) fn is_proxy(path: &str) -> bool {
    path.strip_prefix("/proxy/")
        .is_some_and(|rest| !rest.is_empty())
}

/// What `app(state)` answers for a proxy request.
pub(crate) async fn proxy(state: AppState, request: Request) -> Response {
    let head = request.method() == Method::HEAD;
    let refused = auth::refusal(&state, &request).or_else(|| limit::refusal(&state, &request));
    let response = match refused {
        Some(refused) => refused,
        None => proxy::forward_request(&state, limit::capped(&state, request)).await,
    };
    match &state.inner.scrubber {
        Some(scrubber) => scrub(scrubber, head, response).await,
        None => response,
    }
}
