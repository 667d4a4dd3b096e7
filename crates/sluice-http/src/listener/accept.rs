//! The accept loop: a connection slot, then a connection, served on its own
//! task; a failed accept (a full file-descriptor table) backs off instead of
//! spinning, and the loop stops when told, letting connections finish.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};

use super::connection::{self, App, Control};
use super::limits::Limits;

/// The first wait after a failed accept, doubled on each failure in a row
/// up to [`MAX_BACKOFF`] (Go's net/http does the same, 5 ms to 1 s).
const FIRST_BACKOFF: Duration = Duration::from_millis(5);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// Accepts connections on `listener` and serves `app` on each until
/// `stop` turns true; then asks every connection to finish its request in
/// progress and waits for all of them (the caller bounds that wait).
/// `slots` bounds connections open at once (shared by every worker).
pub(crate) async fn accept_loop(
    listener: TcpListener,
    app: App,
    limits: Limits,
    slots: Arc<Semaphore>,
    mut stop: watch::Receiver<bool>,
) {
    let control = Arc::new(Control::default());
    let mut tasks = tokio::task::JoinSet::new();
    let mut backoff = FIRST_BACKOFF;
    let mut full_warned = false;
    // True, or the sender gone: either way, stop.
    let stopped = async move {
        let _ = stop.wait_for(|stop| *stop).await;
    };
    tokio::pin!(stopped);
    loop {
        // Reap finished connections so the set stays as large as what is open.
        while tasks.try_join_next().is_some() {}
        let slot = match slots.clone().try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) => {
                if !full_warned {
                    tracing::warn!(
                        max_connections = limits.max_connections,
                        "server.max_connections connections are open: closing idle ones, accepting again when one closes"
                    );
                    full_warned = true;
                }
                // Keep-alive connections that are idle make room first.
                control.drain();
                tokio::select! {
                    slot = slots.clone().acquire_owned() => match slot {
                        Ok(slot) => slot,
                        Err(_) => break,
                    },
                    () = &mut stopped => break,
                }
            }
        };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut stopped => break,
        };
        match accepted {
            Ok((stream, _)) => {
                backoff = FIRST_BACKOFF;
                full_warned = false;
                // Answers are small and latency matters more than packets.
                let _ = stream.set_nodelay(true);
                let (app, control) = (app.clone(), control.clone());
                tasks.spawn(async move {
                    connection::serve(stream, app, limits, control).await;
                    drop(slot);
                });
            }
            // The client gave up before we took its connection: nothing to wait for.
            Err(error) if per_connection(&error) => {}
            Err(error) => {
                tracing::warn!(
                    %error,
                    retry_in_ms = u64::try_from(backoff.as_millis()).unwrap_or(u64::MAX),
                    "cannot accept a connection; backing off"
                );
                tokio::select! {
                    () = tokio::time::sleep(backoff) => {}
                    () = &mut stopped => break,
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
    // No new connections; those open finish their request and close.
    drop(listener);
    control.stop();
    while tasks.join_next().await.is_some() {}
}

/// Errors about one connection that hardly began, not about the listener.
fn per_connection(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
            | io::ErrorKind::WouldBlock
    )
}
