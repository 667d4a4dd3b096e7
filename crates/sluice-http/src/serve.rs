//! Serving an app: on one listener on the caller's runtime ([`serve`],
//! [`serve_router`]), or on worker threads with a runtime each
//! ([`serve_workers`]); one loop runs them all and stops them with a
//! graceful shutdown bounded by a grace period.

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{Semaphore, mpsc, watch};

use sluice_config::ServerSettings;

use crate::listener::{App, Limits, Listeners, accept_loop};

/// Serves `app` on `listener` until `shutdown` resolves; then calls
/// `closing` (to end responses that would never end), stops accepting
/// connections and lets requests in progress finish, for at most `grace`.
/// Connections get `server`'s timeouts and limits; they are served on the
/// caller's runtime.
pub async fn serve(
    listener: TcpListener,
    app: App,
    server: &ServerSettings,
    grace: Duration,
    closing: impl FnOnce(),
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    run(
        Sockets::Here(listener),
        app,
        server,
        grace,
        closing,
        shutdown,
    )
    .await
}

/// Serves `app` on `listeners`, one worker thread per socket, each with
/// its own current-thread runtime, until `shutdown` resolves; then as
/// [`serve`]. The caller's runtime keeps running what the app needs
/// beside its connections (the sidecar's shared budget's connection to Redis).
pub async fn serve_workers(
    listeners: Listeners,
    app: App,
    server: &ServerSettings,
    grace: Duration,
    closing: impl FnOnce(),
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    run(
        Sockets::Workers(listeners),
        app,
        server,
        grace,
        closing,
        shutdown,
    )
    .await
}

/// Serves any axum `router` on `listener` with the sidecar's listener
/// (header-read and idle timeouts and the connection cap of `limits`,
/// accept errors backed off) until `shutdown` resolves; then lets requests
/// in progress finish for at most `grace`. `sluice mcp --listen` uses it.
pub async fn serve_router(
    listener: TcpListener,
    router: axum::Router,
    limits: &ServerSettings,
    grace: Duration,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let app = App::new(router);
    run(Sockets::Here(listener), app, limits, grace, || {}, shutdown).await
}

/// Where connections are accepted.
enum Sockets {
    /// One listener, on the caller's runtime.
    Here(TcpListener),
    /// One worker thread per socket, each with its own runtime.
    Workers(Listeners),
}

/// The one serve loop: an accept loop per socket until `shutdown`
/// resolves (or one of them ends, which only a worker failing to start
/// does: the others stop too); then `closing`, and every accept loop lets
/// its connections finish, for at most `grace`.
async fn run(
    sockets: Sockets,
    app: App,
    server: &ServerSettings,
    grace: Duration,
    closing: impl FnOnce(),
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let limits = Limits::of(server);
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let (stop, stopping) = watch::channel(false);
    let (done, mut finished) = mpsc::channel::<io::Result<()>>(1);
    let mut left = 0;
    // Dropping this loop drops the caller's-runtime accept loop with it, as
    // a plain `.await` would (its listener closes).
    let mut _here = None;
    match sockets {
        Sockets::Here(listener) => {
            let done = done.clone();
            let serving = until_stopped(listener, app, limits, slots, stopping, grace);
            let task = tokio::spawn(async move {
                serving.await;
                let _ = done.send(Ok(())).await;
            });
            _here = Some(AbortOnDrop(task.abort_handle()));
            left += 1;
        }
        Sockets::Workers(listeners) => {
            for (index, socket) in listeners.sockets.into_iter().enumerate() {
                let (app, slots, stopping, done) =
                    (app.clone(), slots.clone(), stopping.clone(), done.clone());
                std::thread::Builder::new()
                    .name(format!("sluice-worker-{index}"))
                    .spawn(move || {
                        let result = tokio::runtime::Builder::new_current_thread()
                            .enable_all()
                            .build()
                            .and_then(|runtime| {
                                runtime.block_on(async move {
                                    let listener = TcpListener::from_std(socket)?;
                                    until_stopped(listener, app, limits, slots, stopping, grace)
                                        .await;
                                    Ok(())
                                })
                            });
                        let _ = done.blocking_send(result);
                    })?;
                left += 1;
            }
        }
    }
    drop(done);
    tokio::pin!(shutdown);
    // An accept loop that ends before the shutdown failed to start: stop the others too.
    let early = tokio::select! {
        () = &mut shutdown => None,
        result = finished.recv() => {
            left -= 1;
            Some(result.unwrap_or(Ok(())))
        }
    };
    if early.is_none() {
        announce(grace);
    }
    // Open pages would hold their connections for the whole grace period.
    closing();
    let _ = stop.send(true);
    let mut outcome = early.unwrap_or(Ok(()));
    while left > 0 {
        let Some(result) = finished.recv().await else {
            break;
        };
        left -= 1;
        if outcome.is_ok() {
            outcome = result;
        }
    }
    outcome
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// One accept loop on `listener` until `stopping` turns true; then its
/// connections finish, for at most `grace`.
async fn until_stopped(
    listener: TcpListener,
    app: App,
    limits: Limits,
    slots: Arc<Semaphore>,
    stopping: watch::Receiver<bool>,
    grace: Duration,
) {
    let mut stopped = stopping.clone();
    let serving = accept_loop(listener, app, limits, slots, stopping);
    tokio::pin!(serving);
    tokio::select! {
        () = &mut serving => return,
        _ = stopped.wait_for(|stop| *stop) => {}
    }
    finish(serving, grace).await;
}

fn announce(grace: Duration) {
    tracing::info!(
        grace_s = grace.as_secs(),
        "shutting down: no new connections; waiting for calls in flight"
    );
}

/// Lets the accept loop's connections finish, for at most `grace`.
async fn finish(serving: impl Future<Output = ()>, grace: Duration) {
    if tokio::time::timeout(grace, serving).await.is_err() {
        tracing::warn!("the grace period ran out; closing the connections still open");
    }
}
