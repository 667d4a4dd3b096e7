//! What a gated HTTP call carries to the engine, and the executor that sends it however the caller's stack sends requests.

use std::future::Future;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use http::{HeaderMap, Method};
use parking_lot::Mutex;
use sluice::{Executor, Payload, Reply, Request, TransportError};

/// An error from the stack below sluice.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// One attempt's failure, with whether the request certainly never left.
pub(crate) struct AttemptError {
    pub(crate) not_sent: bool,
    pub(crate) error: BoxError,
}

/// Sends the call's request once; called again for each retry, so the
/// request must be re-sendable (a clone per attempt).
pub(crate) trait Attempt: Send + Sync + 'static {
    fn send(&self) -> BoxFuture<'static, Result<http::Response<Bytes>, AttemptError>>;
}

/// The payload of a call made through [`crate::SluiceService`] or the
/// reqwest middleware: the request and how to send it. Opaque.
pub struct HttpCall {
    key: Option<String>,
    attempt: Box<dyn Attempt>,
    /// The last failure of the stack below, handed back to the caller when
    /// the call ends without a response.
    failure: Arc<Mutex<Option<BoxError>>>,
}

impl std::fmt::Debug for HttpCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpCall")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl HttpCall {
    pub(crate) fn new(key: String, attempt: impl Attempt) -> (Self, Arc<Mutex<Option<BoxError>>>) {
        let failure = Arc::new(Mutex::new(None));
        let call = HttpCall {
            key: Some(key),
            attempt: Box::new(attempt),
            failure: failure.clone(),
        };
        (call, failure)
    }
}

impl Payload for HttpCall {
    fn coalesce_key(&self) -> Option<String> {
        self.key.clone()
    }
}

/// The executor of every gate built by [`crate::Sluice`]: each call carries
/// its own way to send (a clone of the inner tower service, or a reqwest
/// client), so one gate, one set of limits, serves every stack built on it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Dispatch;

impl Executor for Dispatch {
    type Payload = HttpCall;

    fn execute(
        &self,
        request: Request<HttpCall>,
    ) -> impl Future<Output = Result<Reply, TransportError>> + Send {
        let call = request.payload;
        async move {
            match call.attempt.send().await {
                Ok(response) => Ok(response.into()),
                Err(failed) => {
                    let message = failed.error.to_string();
                    *call.failure.lock() = Some(failed.error);
                    Err(if failed.not_sent {
                        TransportError::connect(message)
                    } else {
                        TransportError::other(message)
                    })
                }
            }
        }
    }
}

/// A read's identity: method, target URI, the headers that select a
/// representation (`Accept`, `Range`; `Host` when the URI has no
/// authority) and the body. Two requests with the same key in one turn are
/// the same read.
pub(crate) fn read_key(method: &Method, uri: &str, headers: &HeaderMap, body: &[u8]) -> String {
    let header = |name: &str| {
        headers
            .get_all(name)
            .iter()
            .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned())
            .collect::<Vec<_>>()
            .join(",")
    };
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    body.hash(&mut hasher);
    format!(
        "{method} {uri} host={} accept={} range={} body={}:{:016x}",
        header("host"),
        header("accept"),
        header("range"),
        body.len(),
        hasher.finish()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_are_identified_by_what_selects_the_representation() {
        let mut json = HeaderMap::new();
        json.insert("accept", "application/json".parse().unwrap());
        let a = read_key(&Method::GET, "http://h/x?q=1", &json, b"");
        assert_eq!(a, read_key(&Method::GET, "http://h/x?q=1", &json, b""));
        assert_ne!(a, read_key(&Method::GET, "http://h/x?q=2", &json, b""));
        assert_ne!(a, read_key(&Method::HEAD, "http://h/x?q=1", &json, b""));
        assert_ne!(
            a,
            read_key(&Method::GET, "http://h/x?q=1", &HeaderMap::new(), b"")
        );
        assert_ne!(
            read_key(&Method::POST, "/s", &json, b"{\"q\":1}"),
            read_key(&Method::POST, "/s", &json, b"{\"q\":2}")
        );
    }
}
