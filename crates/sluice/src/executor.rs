//! The boundary to the network: the harness hands the gate an [`Executor`]; the engine never opens a socket.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::stream::BodyStream;

/// What a call carries to the executor. Its coalescing identity decides
/// which reads in a turn are "the same call".
pub trait Payload: Send + Sync + 'static {
    /// A key equal for requests that are interchangeable, `None` to never
    /// coalesce. For tool arguments it is their canonical JSON.
    fn coalesce_key(&self) -> Option<String>;

    /// The call's argument `name`, for a cost taken from an argument
    /// (`cost = { tokens = "{max_tokens}" }`); `None` when there is none.
    fn argument(&self, name: &str) -> Option<&serde_json::Value> {
        let _ = name;
        None
    }
}

impl Payload for serde_json::Value {
    fn coalesce_key(&self) -> Option<String> {
        Some(crate::canonical::canonical_json(self))
    }

    fn argument(&self, name: &str) -> Option<&serde_json::Value> {
        self.get(name)
    }
}

/// One attempt at a call, as the executor receives it. Cheap to clone.
#[derive(Debug)]
pub struct Request<P> {
    /// The tool's name (or the label of a routed call).
    pub tool: Arc<str>,
    /// The credential it spends.
    pub credential: Arc<str>,
    /// The call's payload, e.g. the tool's JSON arguments.
    pub payload: Arc<P>,
    /// 0 for the first attempt, then 1, 2, ...
    pub attempt: u32,
    /// The call's remaining deadline; the gate also enforces it.
    pub timeout: Duration,
}

impl<P> Request<P> {
    /// The same attempt carrying `payload` instead: for an executor whose
    /// payload wraps another executor's (a binding's HTTP tools beside its
    /// function tools), handing the attempt on.
    pub fn with_payload<Q>(&self, payload: Arc<Q>) -> Request<Q> {
        Request {
            tool: self.tool.clone(),
            credential: self.credential.clone(),
            payload,
            attempt: self.attempt,
            timeout: self.timeout,
        }
    }
}

impl<P> Clone for Request<P> {
    fn clone(&self) -> Self {
        Request {
            tool: self.tool.clone(),
            credential: self.credential.clone(),
            payload: self.payload.clone(),
            attempt: self.attempt,
            timeout: self.timeout,
        }
    }
}

/// Turns a request into an HTTP response, or a transport error.
///
/// The gate times out and drops the returned future when the call's
/// deadline runs out, so it must be cancel-safe (reqwest and hyper are).
pub trait Executor: Send + Sync + 'static {
    /// What calls carry.
    type Payload: Payload;

    /// Sends one attempt.
    fn execute(
        &self,
        request: Request<Self::Payload>,
    ) -> impl Future<Output = Result<Reply, TransportError>> + Send;
}

/// Marks a response after which the call must not go again, whatever its
/// status says: the executor knows the request may have acted (an MCP tool
/// that reported its API's rate limit after doing part of its work), so
/// only the engine's learning applies. The scope is still penalized by the
/// response's signals, and a refusal still ends as `rate_limited`.
///
/// ```
/// let mut response = http::Response::new(bytes::Bytes::new());
/// response.extensions_mut().insert(sluice::NoRetry);
/// assert!(response.extensions().get::<sluice::NoRetry>().is_some());
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NoRetry;

/// What an executor answers: the upstream's response, and the rest of its
/// body when that is still arriving.
///
/// Most executors read the body whole and return the response
/// (`Ok(response.into())`). One that returns the head before the body has
/// ended (an event stream, a long download) puts what it read of the body
/// and the rest in [`Reply::stream`], with an empty body in the response:
/// the engine reads signals from the head, and the call keeps its
/// concurrency permit and in-flight count until the body has ended
/// ([`BodyStream`]). Only a call that nothing else shares holds them so;
/// for a read that may be coalesced (its payload has a coalesce key), the
/// permit goes back at completion as for a body read whole.
///
/// ```
/// use bytes::Bytes;
/// use http_body_util::Empty;
///
/// let whole: sluice::Reply = http::Response::new(Bytes::from("{}")).into();
/// assert!(whole.stream.is_none());
/// let streamed = sluice::Reply::streaming(
///     http::Response::new(()),
///     sluice::BodyStream::new(Bytes::new(), Empty::<Bytes>::new()),
/// );
/// assert!(streamed.stream.is_some());
/// ```
#[derive(Debug)]
pub struct Reply {
    /// The status, the headers and the body read (all of it unless
    /// `stream` is set, then none).
    pub response: http::Response<Bytes>,
    /// The body, when it is still arriving.
    pub stream: Option<BodyStream>,
}

impl Reply {
    /// A head whose body is still arriving.
    pub fn streaming(head: http::Response<()>, body: BodyStream) -> Self {
        Reply {
            response: head.map(|()| Bytes::new()),
            stream: Some(body),
        }
    }
}

impl From<http::Response<Bytes>> for Reply {
    fn from(response: http::Response<Bytes>) -> Self {
        Reply {
            response,
            stream: None,
        }
    }
}

/// An executor from an async closure over JSON-argument requests.
///
/// ```
/// use bytes::Bytes;
/// let executor = sluice::executor_fn(|request: sluice::Request<serde_json::Value>| async move {
///     let body = format!("{{\"tool\":\"{}\"}}", request.tool);
///     Ok(http::Response::new(Bytes::from(body)))
/// });
/// # let _ = executor;
/// ```
pub fn executor_fn<F, Fut>(f: F) -> FnExecutor<F>
where
    F: Fn(Request<serde_json::Value>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<http::Response<Bytes>, TransportError>> + Send,
{
    FnExecutor(f)
}

/// See [`executor_fn`].
#[derive(Debug, Clone)]
pub struct FnExecutor<F>(F);

impl<F, Fut> Executor for FnExecutor<F>
where
    F: Fn(Request<serde_json::Value>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<http::Response<Bytes>, TransportError>> + Send,
{
    type Payload = serde_json::Value;

    fn execute(
        &self,
        request: Request<serde_json::Value>,
    ) -> impl Future<Output = Result<Reply, TransportError>> + Send {
        let answer = (self.0)(request);
        async move { answer.await.map(Reply::from) }
    }
}

/// A request that got no HTTP response.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct TransportError {
    /// True when the request certainly never reached the server (the
    /// connection was refused), so even a write may be retried.
    pub not_sent: bool,
    /// What happened, for the outcome's message. Never include a secret.
    pub message: String,
}

impl TransportError {
    /// The connection failed before anything was sent.
    pub fn connect(message: impl Into<String>) -> Self {
        TransportError {
            not_sent: true,
            message: message.into(),
        }
    }

    /// Something failed after the request may have been sent.
    pub fn other(message: impl Into<String>) -> Self {
        TransportError {
            not_sent: false,
            message: message.into(),
        }
    }
}
