//! `GET /ui` (the live page) and `GET /v1/events` (its Server-Sent Events feed), from `sluice-ui`.

use axum::body::Body;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use http::{HeaderName, HeaderValue};
use sluice_ui::{EVENTS_HEADERS, PAGE, PAGE_HEADERS, Snapshot};

use crate::state::AppState;

/// Where the page is served.
pub(crate) const PAGE_PATH: &str = "/ui";

pub(crate) async fn page() -> Response {
    with_headers(PAGE.into_response(), &PAGE_HEADERS)
}

/// A snapshot now and every half second, until the sidecar shuts down.
pub(crate) async fn events(State(state): State<AppState>) -> Response {
    let stop = state.inner.closing();
    let inner = state.inner.clone();
    let stream = sluice_ui::events(
        move || Snapshot::new(&inner.live.gate_config(), inner.gate().status()),
        stop,
    );
    with_headers(Body::from_stream(stream).into_response(), &EVENTS_HEADERS)
}

fn with_headers(mut response: Response, headers: &[(&'static str, &'static str)]) -> Response {
    for (name, value) in headers {
        response.headers_mut().insert(
            HeaderName::from_static(name),
            HeaderValue::from_static(value),
        );
    }
    response
}
