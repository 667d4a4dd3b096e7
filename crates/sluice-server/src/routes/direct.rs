//! The proxy route answered without the router: exactly the layers `app()`
//! puts around `/proxy/{*rest}` (scrubber, token, body limit, handler), as
//! plain calls, for the listener's hot path: the router's boxed services
//! and futures were a large share of a proxied request's cost
//! (docs/PERFORMANCE.md). Tests reach this path through the listener.

use axum::extract::Request;
use axum::response::Response;
use http::Method;

use super::{auth, limit, proxy};
use crate::state::AppState;
use sluice_http::scrub::scrub;

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

#[cfg(test)]
mod tests {
    /// Bytes a proxied request's future may take: hyper boxes it, and
    /// every byte is copied into the box on every request, whatever state
    /// the request reaches. 1,992 when this was written (a test build);
    /// 5,440 while the engine's steps sat in it, and 7,608 while the state
    /// of opening a new upstream connection did too (docs/PERFORMANCE.md).
    /// The margin lets a compiler's layout move a little without the test
    /// failing on it.
    const MOST: usize = 2_400;

    /// The size of the future `f` returns, without making one.
    fn future_size<A, B, F, Fut>(_: &F) -> usize
    where
        F: FnOnce(A, B) -> Fut,
    {
        std::mem::size_of::<Fut>()
    }

    #[test]
    fn a_proxied_requests_future_holds_no_connection_opening() {
        let size = future_size(&super::proxy);
        assert!(
            size <= MOST,
            "a proxied request's future takes {size} bytes"
        );
    }
}
