//! The sidecar on a socket: its router, with the proxy route answered
//! without it, served by `sluice-http`'s listener with `[server]`'s limits
//! and a grace period long enough for every accepted call's outcome.

use std::future::Future;
use std::io;
use std::sync::Arc;

use axum::body::Body;
use http::Request;
use sluice_http::{App, Direct, DirectAnswer, Listeners};
use tokio::net::TcpListener;

use crate::routes::{app, direct};
use crate::state::AppState;

/// Serves `state`'s app on `listener` until `shutdown` resolves; then stops
/// accepting connections and lets requests in progress finish, for at most
/// [`AppState::shutdown_grace`] (the longest deadline a call can have, so
/// every accepted call gets its outcome). Connections get `[server]`'s
/// timeouts and limits; they are served on the caller's runtime.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let grace = state.shutdown_grace();
    let server = state.config().server.clone();
    let streams = state.clone();
    let app = on_socket(state);
    sluice_http::serve(
        listener,
        app,
        &server,
        grace,
        move || streams.close_streams(),
        shutdown,
    )
    .await
}

/// Serves `state`'s app on `listeners`, one worker thread per socket, each
/// with its own current-thread runtime, until `shutdown` resolves; then as
/// [`serve`]. The caller's runtime keeps running what `state` needs (the
/// shared budget's connection to Redis).
pub async fn serve_workers(
    listeners: Listeners,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let grace = state.shutdown_grace();
    let server = state.config().server.clone();
    let streams = state.clone();
    let app = on_socket(state);
    sluice_http::serve_workers(
        listeners,
        app,
        &server,
        grace,
        move || streams.close_streams(),
        shutdown,
    )
    .await
}

/// The app as a socket serves it: the proxy route answered without the
/// router ([`direct`]), everything else through it.
fn on_socket(state: AppState) -> App {
    App::new(app(state.clone())).direct(Arc::new(DirectProxy(state)))
}

/// The proxy route, answered without the router.
struct DirectProxy(AppState);

impl Direct for DirectProxy {
    fn takes(&self, request: &Request<Body>) -> bool {
        direct::is_proxy(request.uri().path())
    }

    fn answer(&self, request: Request<Body>) -> DirectAnswer {
        Box::pin(direct::proxy(self.0.clone(), request))
    }
}
