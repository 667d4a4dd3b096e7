//! Serving the app on a listener, with a graceful shutdown bounded by a grace period.

use std::future::Future;
use std::io;

use tokio::net::TcpListener;
use tokio::sync::oneshot;

use crate::routes::app;
use crate::state::AppState;

/// Serves `state`'s app on `listener` until `shutdown` resolves; then stops
/// accepting connections and lets requests in progress finish, for at most
/// [`AppState::shutdown_grace`] (the longest deadline a call can have, so
/// every accepted call gets its outcome).
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let grace = state.shutdown_grace();
    let (signalled, on_signal) = oneshot::channel::<()>();
    let server = axum::serve(listener, app(state)).with_graceful_shutdown(async move {
        shutdown.await;
        let _ = signalled.send(());
    });
    let mut server = tokio::spawn(server.into_future());
    tokio::select! {
        finished = &mut server => return finished.map_err(io::Error::other)?,
        Ok(()) = on_signal => {}
    }
    tracing::info!(
        grace_s = grace.as_secs(),
        "shutting down: no new connections; waiting for calls in flight"
    );
    match tokio::time::timeout(grace, &mut server).await {
        Ok(finished) => finished.map_err(io::Error::other)?,
        Err(_) => {
            tracing::warn!("the grace period ran out; closing the connections still open");
            server.abort();
            Ok(())
        }
    }
}
