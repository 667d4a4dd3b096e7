//! Connections to the upstreams: hyper's HTTP/1 client connections over
//! rustls for `https://`, kept idle per credential's origin and per thread
//! (so that a request, its connection and the task driving that connection
//! stay on one thread and one runtime).
//!
//! Each credential's [`Pool`] is found by the credential, not by hashing an
//! origin per request; a request reuses the newest idle connection, and one
//! that the upstream closed before the request was written is sent again on
//! another connection (the request is handed back untouched, so this is
//! safe for any method).

use std::cell::RefCell;
use std::error::Error as StdError;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::Uri;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use thread_local::ThreadLocal;
use tokio::time::Instant;
use tower_service::Service;

/// How long an idle connection to an upstream is kept (reqwest's and
/// hyper's default).
const POOL_IDLE: Duration = Duration::from_secs(90);

/// At most this many idle connections per origin and thread; a connection
/// given back past it is closed.
const MAX_IDLE: usize = 64;

/// A request as the connections send it.
pub(super) type Outgoing = http::Request<Full<Bytes>>;

/// Why the HTTP client could not be built.
#[derive(Debug, thiserror::Error)]
#[error("cannot build the HTTP client: {0}")]
pub struct ClientError(pub(super) String);

/// Why a request got no answer.
#[derive(Debug)]
pub(super) enum SendError {
    /// No connection could be made: nothing was sent.
    Connect(String),
    /// The request failed on its connection.
    Request(String),
}

/// Opens connections to any upstream (TCP, and TLS for `https://`).
#[derive(Clone)]
pub(super) struct Connector(HttpsConnector<HttpConnector>);

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connector").finish_non_exhaustive()
    }
}

impl Connector {
    pub(super) fn new() -> Result<Self, ClientError> {
        https_connector().map(Connector)
    }

    /// A new connection to `origin`, its driving task spawned on this runtime.
    async fn open(&self, origin: &Uri) -> Result<SendRequest<Full<Bytes>>, SendError> {
        let io = self.0.clone().call(origin.clone()).await.map_err(|error| {
            SendError::Connect(chain("cannot connect to the upstream", &*error))
        })?;
        let (sender, connection) = http1::handshake(io)
            .await
            .map_err(|error| SendError::Connect(chain("cannot connect to the upstream", &error)))?;
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "upstream connection ended");
            }
        });
        Ok(sender)
    }
}

/// TCP, and TLS for `https://` (rustls, the platform's roots): the
/// upstreams' connections, and the trace exporter's.
pub(crate) fn https_connector() -> Result<HttpsConnector<HttpConnector>, ClientError> {
    let mut http = HttpConnector::new();
    // The scheme is checked by the https wrapper; requests are small
    // and latency matters more than packet count.
    http.enforce_http(false);
    http.set_nodelay(true);
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let https = HttpsConnectorBuilder::new()
        .with_provider_and_platform_verifier(provider)
        .map_err(|error| ClientError(format!("TLS roots: {error}")))?
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    Ok(https)
}

/// One connection not in use, and since when.
struct Idle {
    sender: SendRequest<Full<Bytes>>,
    since: Instant,
}

/// The idle connections to one origin, per thread.
#[derive(Default)]
pub(super) struct Pool {
    idle: ThreadLocal<RefCell<Vec<Idle>>>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool").finish_non_exhaustive()
    }
}

/// A connection a request is using: given back with [`Lease::give_back`]
/// once its answer was read to the end, or closed when dropped.
pub(super) struct Lease<'a> {
    pool: &'a Pool,
    sender: SendRequest<Full<Bytes>>,
}

impl Lease<'_> {
    /// The connection is free for the next request (its answer was read whole).
    pub(super) fn give_back(self) {
        if self.sender.is_closed() {
            return;
        }
        let idle = self.pool.idle.get_or_default();
        let mut idle = idle.borrow_mut();
        if idle.len() < MAX_IDLE {
            idle.push(Idle {
                sender: self.sender,
                since: Instant::now(),
            });
        }
    }
}

impl Pool {
    /// The newest idle connection still open and not idle too long; the
    /// closed and the expired ones are dropped on the way.
    fn checkout(&self) -> Option<SendRequest<Full<Bytes>>> {
        let idle = self.idle.get()?;
        let mut idle = idle.borrow_mut();
        while let Some(connection) = idle.pop() {
            if !connection.sender.is_closed() && connection.since.elapsed() < POOL_IDLE {
                return Some(connection.sender);
            }
        }
        None
    }

    /// Sends `request` to `origin` on an idle connection, or a new one.
    pub(super) async fn send(
        &self,
        connector: &Connector,
        origin: &Uri,
        mut request: Outgoing,
    ) -> Result<(http::Response<Incoming>, Lease<'_>), SendError> {
        loop {
            let (mut sender, reused) = match self.checkout() {
                Some(sender) => (sender, true),
                // Boxed: opening a connection (TCP, TLS and the handshake)
                // holds about 2.4 KB of state, and a request that reuses an
                // idle connection would otherwise carry it in its future,
                // copied whole wherever the future moves.
                None => (Box::pin(connector.open(origin)).await?, false),
            };
            // A reused connection the upstream closed meanwhile fails here,
            // or hands the request back below: either way nothing was sent.
            if let Err(error) = sender.ready().await {
                if reused {
                    continue;
                }
                return Err(SendError::Connect(chain(
                    "cannot connect to the upstream",
                    &error,
                )));
            }
            match sender.try_send_request(request).await {
                Ok(response) => {
                    return Ok((response, Lease { pool: self, sender }));
                }
                Err(mut failed) => match failed.take_message() {
                    Some(unsent) if reused => request = unsent,
                    _ => {
                        let error = failed.into_error();
                        return Err(SendError::Request(chain(
                            "the request to the upstream failed",
                            &error,
                        )));
                    }
                },
            }
        }
    }
}

/// `what`, then an error and its causes, on one line (a hyper error names
/// no URL).
fn chain(what: &str, error: &(dyn StdError + 'static)) -> String {
    let mut parts = vec![what.to_owned()];
    let mut source = Some(error);
    while let Some(cause) = source {
        let text = cause.to_string();
        if parts.last() != Some(&text) {
            parts.push(text);
        }
        source = cause.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use hyper_util::rt::TokioIo;
    use tokio::io::DuplexStream;

    use super::*;

    /// A client connection, driven, whose other end is `peer`.
    async fn connection() -> (SendRequest<Full<Bytes>>, DuplexStream) {
        let (ours, peer) = tokio::io::duplex(1024);
        let (sender, connection) = http1::handshake(TokioIo::new(ours)).await.unwrap();
        tokio::spawn(connection);
        (sender, peer)
    }

    fn give_back(pool: &Pool, sender: SendRequest<Full<Bytes>>) {
        Lease { pool, sender }.give_back();
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_connection_expires_and_the_idle_are_capped() {
        let pool = Pool::default();
        assert!(pool.checkout().is_none(), "nothing yet");
        let (sender, _peer) = connection().await;
        give_back(&pool, sender);
        tokio::time::advance(POOL_IDLE - Duration::from_secs(1)).await;
        let sender = pool.checkout().expect("idle for less than POOL_IDLE");
        give_back(&pool, sender);
        tokio::time::advance(POOL_IDLE).await;
        assert!(pool.checkout().is_none(), "idle for POOL_IDLE: dropped");

        let mut peers = Vec::new();
        for _ in 0..MAX_IDLE + 3 {
            let (sender, peer) = connection().await;
            peers.push(peer);
            give_back(&pool, sender);
        }
        let mut kept = 0;
        while pool.checkout().is_some() {
            kept += 1;
        }
        assert_eq!(kept, MAX_IDLE);
    }

    #[tokio::test]
    async fn a_connection_its_peer_closed_is_neither_kept_nor_checked_out() {
        let pool = Pool::default();
        let (sender, peer) = connection().await;
        give_back(&pool, sender);
        drop(peer);
        // The connection's task reads the end of the stream on its next turns.
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        assert!(pool.checkout().is_none());

        let (sender, peer) = connection().await;
        drop(peer);
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        assert!(sender.is_closed());
        give_back(&pool, sender);
        assert_eq!(pool.idle.get().map_or(0, |idle| idle.borrow().len()), 0);
    }
}
