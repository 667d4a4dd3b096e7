//! hyper's HTTP/1 client, one per thread that sends (so that a request, its
//! pooled connection and the task driving that connection stay on one
//! thread and one runtime), over rustls for `https://` upstreams.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client as Legacy;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use thread_local::ThreadLocal;

/// How long an idle pooled connection to an upstream is kept (reqwest's
/// and hyper's default).
const POOL_IDLE: Duration = Duration::from_secs(90);

/// The client one thread sends with.
pub(super) type Client = Legacy<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// Why the HTTP client could not be built.
#[derive(Debug, thiserror::Error)]
#[error("cannot build the HTTP client: {0}")]
pub struct ClientError(pub(super) String);

/// A client per thread, built on first use from one connector.
pub(super) struct Clients {
    connector: HttpsConnector<HttpConnector>,
    per_thread: ThreadLocal<Client>,
}

impl std::fmt::Debug for Clients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Clients").finish_non_exhaustive()
    }
}

impl Clients {
    pub(super) fn new() -> Result<Arc<Self>, ClientError> {
        let mut http = HttpConnector::new();
        // The scheme is checked by the https wrapper; requests are small
        // and latency matters more than packet count.
        http.enforce_http(false);
        http.set_nodelay(true);
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let connector = HttpsConnectorBuilder::new()
            .with_provider_and_platform_verifier(provider)
            .map_err(|error| ClientError(format!("TLS roots: {error}")))?
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        Ok(Arc::new(Clients {
            connector,
            per_thread: ThreadLocal::new(),
        }))
    }

    /// This thread's client.
    pub(super) fn get(&self) -> &Client {
        self.per_thread.get_or(|| {
            Legacy::builder(TokioExecutor::new())
                .pool_idle_timeout(POOL_IDLE)
                .pool_timer(TokioTimer::new())
                .timer(TokioTimer::new())
                .build(self.connector.clone())
        })
    }
}
