//! A remote MCP server over Streamable HTTP: every message the session
//! sends it is a POST, its answers (JSON or a stream of events) are handed
//! to the session as they arrive, a `tools/call` admitted by the gate is a
//! POST of its own whose HTTP status and headers the gate reads, and the
//! GET stream carries what the server says unasked.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client as Legacy;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use parking_lot::Mutex;
use serde_json::json;
use sluice::TransportError;
use sluice_config::UpstreamAuth;

use super::sse;
use crate::error::McpError;
use crate::executor::{DirectCall, Sent};
use crate::jsonrpc::{self, Frame, Kind};
use crate::outbox::Inbox;
use crate::proxy::WeakSession;

/// The largest message (a JSON body, or one event) read from the server;
/// past it the answer is abandoned and the call fails.
pub(crate) const MAX_MESSAGE: usize = 8 << 20;
/// The most of a refusal's body (a 429's) kept for the gate.
const MAX_REFUSAL_BODY: usize = 64 << 10;
/// How long to wait before opening the GET stream again after it ended.
const REOPEN_AFTER: Duration = Duration::from_secs(1);
/// `MCP-Session-Id` (header names are case-insensitive).
pub(crate) const SESSION_ID: HeaderName = HeaderName::from_static("mcp-session-id");
/// `MCP-Protocol-Version`.
pub(crate) const PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");
/// `Last-Event-ID`.
pub(crate) const LAST_EVENT_ID: HeaderName = HeaderName::from_static("last-event-id");
const EVENT_STREAM: &str = "text/event-stream";

/// The HTTP client: HTTP/1 over plain TCP or rustls.
pub(crate) type Client = Legacy<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// Builds the client every session shares.
pub(crate) fn client() -> Result<Client, McpError> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let connector = HttpsConnectorBuilder::new()
        .with_provider_and_platform_verifier(provider)
        .map_err(|error| McpError::Io {
            context: "cannot load the platform's TLS roots",
            source: error,
        })?
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    Ok(Legacy::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(90))
        .pool_timer(TokioTimer::new())
        .timer(TokioTimer::new())
        .build(connector))
}

/// Where the remote server is and how sluice authenticates to it.
#[derive(Debug, Clone)]
pub struct Remote {
    /// The server's MCP endpoint (`--upstream URL`).
    pub url: Uri,
    /// The header injected into every request to it (never shown to a client).
    pub auth: Option<UpstreamAuth>,
    /// Pass a client's own `Authorization` on (`[mcp] forward_authorization`).
    pub forward_authorization: bool,
}

/// What a session knows of its upstream session.
#[derive(Debug, Default)]
struct State {
    session_id: Option<HeaderValue>,
    protocol: Option<HeaderValue>,
    /// The HTTP client's own `Authorization`, when it may be forwarded.
    client_auth: Option<HeaderValue>,
    /// The last event id seen on the GET stream.
    last_event: Option<HeaderValue>,
    /// Open the GET stream once the session is initialized (a stdio client
    /// has no GET of its own; an HTTP client's GET is passed through).
    get_wanted: bool,
    get_started: bool,
}

/// One session's connection to the remote server.
pub(crate) struct HttpUpstream {
    client: Client,
    url: Uri,
    auth: Option<(HeaderName, HeaderValue)>,
    forward_authorization: bool,
    /// The session its answers go to (set once the session exists).
    session: OnceLock<WeakSession>,
    state: Mutex<State>,
    /// How long a request sluice does not gate may take (`defaults.deadline`).
    deadline: Duration,
}

impl std::fmt::Debug for HttpUpstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The url may carry no secret we add; the auth header is never shown.
        f.debug_struct("HttpUpstream")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl HttpUpstream {
    pub(crate) fn new(client: Client, remote: &Remote, deadline: Duration) -> Arc<Self> {
        let auth = remote.auth.as_ref().and_then(|auth| {
            let mut value = HeaderValue::from_str(auth.value.expose()).ok()?;
            value.set_sensitive(true);
            Some((auth.header.clone(), value))
        });
        Arc::new(HttpUpstream {
            client,
            url: remote.url.clone(),
            forward_authorization: remote.forward_authorization && auth.is_none(),
            auth,
            session: OnceLock::new(),
            state: Mutex::new(State::default()),
            deadline,
        })
    }

    /// Opens the GET stream once the client has sent `notifications/initialized`.
    pub(crate) fn open_get_when_ready(&self) {
        self.state.lock().get_wanted = true;
    }

    /// Ties it to its session.
    pub(crate) fn attach(&self, session: WeakSession) {
        let _ = self.session.set(session);
    }

    /// An HTTP client's headers on its latest request: its protocol
    /// version is passed on, and its `Authorization` when configured.
    pub(crate) fn client_headers(&self, headers: &HeaderMap) {
        let mut state = self.state.lock();
        if let Some(version) = headers.get(&PROTOCOL_VERSION) {
            state.protocol = Some(version.clone());
        }
        if self.forward_authorization
            && let Some(auth) = headers.get(AUTHORIZATION)
        {
            let mut auth = auth.clone();
            auth.set_sensitive(true);
            state.client_auth = Some(auth);
        }
    }

    /// The upstream's session id, once it gave one.
    pub(crate) fn session_id(&self) -> Option<HeaderValue> {
        self.state.lock().session_id.clone()
    }

    fn deliver(&self, message: &[u8]) {
        if let Some(session) = self.session.get() {
            session.server_says(message);
        }
    }

    pub(crate) fn request(&self, method: Method, body: Bytes) -> http::Request<Full<Bytes>> {
        let mut request = http::Request::new(Full::new(body));
        *request.method_mut() = method.clone();
        *request.uri_mut() = self.url.clone();
        let headers = request.headers_mut();
        let accept = if method == Method::GET {
            HeaderValue::from_static(EVENT_STREAM)
        } else {
            headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            HeaderValue::from_static("application/json, text/event-stream")
        };
        headers.insert(ACCEPT, accept);
        let state = self.state.lock();
        if let Some(id) = &state.session_id {
            headers.insert(SESSION_ID, id.clone());
        }
        if let Some(version) = &state.protocol {
            headers.insert(PROTOCOL_VERSION, version.clone());
        }
        if let Some(auth) = &state.client_auth {
            headers.insert(AUTHORIZATION, auth.clone());
        }
        if let Some((name, value)) = &self.auth {
            headers.insert(name.clone(), value.clone());
        }
        request
    }

    /// Learns the session id the server handed out.
    fn learn(&self, headers: &HeaderMap) {
        if let Some(id) = headers.get(&SESSION_ID) {
            let mut state = self.state.lock();
            if state.session_id.as_ref() != Some(id) {
                state.session_id = Some(id.clone());
            }
        }
    }

    /// Hands every message of a 2xx answer to the session as it arrives;
    /// `each` sees each message too. Returns when the body has ended.
    async fn stream(
        &self,
        response: http::Response<Incoming>,
        mut each: impl FnMut(&[u8]),
    ) -> Result<(), String> {
        let events = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .is_some_and(|value| value.trim_start().starts_with(EVENT_STREAM));
        let mut body = response.into_body();
        if events {
            let mut reader = sse::Reader::new(MAX_MESSAGE);
            while let Some(frame) = body.frame().await {
                let frame = frame.map_err(|error| format!("the stream broke: {error}"))?;
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                let mut ready = Vec::new();
                reader
                    .push(&data, |event| ready.push(event))
                    .map_err(|too| format!("an event over {} bytes", too.0))?;
                for event in ready {
                    if !event.data.trim().is_empty() {
                        each(event.data.as_bytes());
                        self.deliver(event.data.as_bytes());
                    }
                }
            }
            return Ok(());
        }
        let mut whole = Vec::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|error| format!("the body broke: {error}"))?;
            if let Ok(data) = frame.into_data() {
                if whole.len() + data.len() > MAX_MESSAGE {
                    return Err(format!("a body over {MAX_MESSAGE} bytes"));
                }
                whole.extend_from_slice(&data);
            }
        }
        if !whole.iter().all(u8::is_ascii_whitespace) {
            each(&whole);
            self.deliver(&whole);
        }
        Ok(())
    }

    /// Sends one message the gate does not see (anything but an admitted
    /// `tools/call`); a request that gets no answer gets an error response.
    async fn forward(self: Arc<Self>, line: Vec<u8>) {
        let (requests, initialize, initialized) = {
            match jsonrpc::parse(&line) {
                Frame::Single(message) => (
                    ids(std::slice::from_ref(&message)),
                    message.method() == Some("initialize"),
                    message.method() == Some("notifications/initialized"),
                ),
                Frame::Batch(elements) => {
                    let messages: Vec<_> = elements.into_iter().filter_map(Result::ok).collect();
                    (ids(&messages), false, false)
                }
                _ => (Vec::new(), false, false),
            }
        };
        let mut request = self.request(Method::POST, Bytes::from(line));
        if initialize {
            // A new session begins: the server hands out its id in the answer.
            request.headers_mut().remove(&SESSION_ID);
        }
        let exchange = async {
            let response = self.client.request(request).await.map_err(|error| {
                Refused::Text(format!("cannot reach the MCP server: {}", describe(&error)))
            })?;
            let status = response.status();
            if !status.is_success() {
                let had_session = self.session_id().is_some() && !initialize;
                let body = read_bounded(response.into_body(), MAX_REFUSAL_BODY).await;
                return Err(match error_member(&body) {
                    Some(error) => Refused::Error(error),
                    None => Refused::Text(refusal_message(status, had_session)),
                });
            }
            self.learn(response.headers());
            let mut answered = Vec::new();
            self.stream(response, |message| {
                if initialize {
                    self.learn_version(message);
                }
                answered.extend(response_ids(message));
            })
            .await
            .map_err(Refused::Text)?;
            Ok::<_, Refused>(answered)
        };
        let result = if requests.is_empty() {
            exchange.await
        } else {
            tokio::time::timeout(self.deadline, exchange)
                .await
                .unwrap_or_else(|_| {
                    Err(Refused::Text(
                        "the MCP server did not answer within the deadline".to_owned(),
                    ))
                })
        };
        let (answered, why) = match result {
            Ok(answered) => (
                answered,
                Refused::Text("the MCP server ended its answer without a response".to_owned()),
            ),
            Err(why) => (Vec::new(), why),
        };
        for id in requests.iter().filter(|id| !answered.contains(id)) {
            // The server's own JSON-RPC error when it gave one (under the
            // request's id: a refusal at the HTTP level names none), else ours.
            let error = match &why {
                Refused::Error(error) => error.clone(),
                Refused::Text(why) => {
                    tracing::debug!(%why, "a request to the MCP server got no response; answered with an error");
                    json!({"code": -32603, "message": format!("sluice: {why}")}).to_string()
                }
            };
            self.deliver(&jsonrpc::error_response(id, &error));
        }
        if initialized {
            self.open_get_stream();
        }
    }

    fn learn_version(&self, message: &[u8]) {
        #[derive(serde::Deserialize)]
        struct Init {
            result: InitResult,
        }
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct InitResult {
            protocol_version: String,
        }
        if let Ok(init) = serde_json::from_slice::<Init>(message)
            && let Ok(version) = HeaderValue::from_str(&init.result.protocol_version)
        {
            let mut state = self.state.lock();
            if state.protocol.is_none() {
                state.protocol = Some(version);
            }
        }
    }

    /// Opens the GET stream for what the server says unasked (once per
    /// session; reopened with `Last-Event-ID` when it ends, until the
    /// server says it offers none, 405, or the session is gone).
    fn open_get_stream(self: &Arc<Self>) {
        {
            let mut state = self.state.lock();
            if state.get_started || !state.get_wanted {
                return;
            }
            state.get_started = true;
        }
        let upstream = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut failures = 0u32;
            loop {
                let Some(this) = upstream.upgrade() else {
                    return;
                };
                let mut request = this.request(Method::GET, Bytes::new());
                if let Some(last) = this.state.lock().last_event.clone() {
                    request.headers_mut().insert(LAST_EVENT_ID, last);
                }
                match this.client.request(request).await {
                    Ok(response) if response.status().is_success() => {
                        failures = 0;
                        let mut reader = sse::Reader::new(MAX_MESSAGE);
                        let mut body = response.into_body();
                        while let Some(Ok(frame)) = body.frame().await {
                            let Ok(data) = frame.into_data() else {
                                continue;
                            };
                            let mut ready = Vec::new();
                            if reader.push(&data, |event| ready.push(event)).is_err() {
                                tracing::warn!(
                                    "the MCP server sent an event too large on its GET stream; reopening it"
                                );
                                break;
                            }
                            for event in ready {
                                if let Some(id) = event
                                    .id
                                    .as_deref()
                                    .and_then(|id| HeaderValue::from_str(id).ok())
                                {
                                    this.state.lock().last_event = Some(id);
                                }
                                if !event.data.trim().is_empty() {
                                    this.deliver(event.data.as_bytes());
                                }
                            }
                        }
                    }
                    Ok(response) if response.status() == StatusCode::METHOD_NOT_ALLOWED => return,
                    Ok(response) if response.status() == StatusCode::NOT_FOUND => return,
                    Ok(_) | Err(_) => {
                        failures += 1;
                        if failures > 5 {
                            tracing::warn!(
                                "the MCP server's GET stream keeps failing; not reopening it"
                            );
                            return;
                        }
                    }
                }
                drop(this);
                tokio::time::sleep(REOPEN_AFTER).await;
            }
        });
    }

    /// Ends the upstream session (DELETE), if the server gave one.
    pub(crate) async fn end(&self) {
        if self.session_id().is_none() {
            return;
        }
        let request = self.request(Method::DELETE, Bytes::new());
        match tokio::time::timeout(Duration::from_secs(5), self.client.request(request)).await {
            Ok(Ok(response)) => {
                tracing::debug!(status = %response.status(), "ended the MCP server's session")
            }
            Ok(Err(_)) | Err(_) => tracing::debug!("could not end the MCP server's session"),
        }
    }

    /// Sends what the session queues for the server until it closes its
    /// outbox; each message is its own POST, sent as soon as it is queued.
    pub(crate) async fn pump(self: Arc<Self>, mut inbox: Inbox) {
        let mut tasks = tokio::task::JoinSet::new();
        while let Some(line) = inbox.next().await {
            while tasks.try_join_next().is_some() {}
            tasks.spawn(self.clone().forward(line));
        }
        // Let notifications already on their way (cancellations) arrive.
        let _ = tokio::time::timeout(Duration::from_secs(2), async {
            while tasks.join_next().await.is_some() {}
        })
        .await;
        tasks.abort_all();
    }
}

impl DirectCall for HttpUpstream {
    fn send(self: Arc<Self>, line: Vec<u8>) -> Sent {
        Box::pin(async move {
            let request = self.request(Method::POST, Bytes::from(line));
            let response = self.client.request(request).await.map_err(|error| {
                let message = format!("cannot reach the MCP server: {}", describe(&error));
                if error.is_connect() {
                    TransportError::connect(message)
                } else {
                    TransportError::other(message)
                }
            })?;
            let status = response.status();
            if !status.is_success() {
                let (parts, body) = response.into_parts();
                let body = read_bounded(body, MAX_REFUSAL_BODY).await;
                let mut refused = http::Response::new(body);
                *refused.status_mut() = parts.status;
                *refused.headers_mut() = parts.headers;
                return Ok(Some(refused));
            }
            self.learn(response.headers());
            self.stream(response, |_| {}).await.map_err(|why| {
                TransportError::other(format!("the MCP server's answer failed: {why}"))
            })?;
            Ok(None)
        })
    }
}

/// Why a forwarded request got no response.
enum Refused {
    /// The server's JSON-RPC error object (JSON text).
    Error(String),
    /// What went wrong, for an error of sluice's.
    Text(String),
}

/// The `error` member of a JSON-RPC error response in `body`.
fn error_member(body: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct ErrorResponse<'a> {
        #[serde(borrow)]
        error: &'a serde_json::value::RawValue,
    }
    serde_json::from_slice::<ErrorResponse<'_>>(body)
        .ok()
        .map(|response| response.error.get().to_owned())
}

/// Reads at most `max` bytes of a body (a refusal's, for the gate).
async fn read_bounded(mut body: Incoming, max: usize) -> Bytes {
    let mut out = Vec::new();
    let read = async {
        while let Some(Ok(frame)) = body.frame().await {
            if let Ok(data) = frame.into_data() {
                let room = max.saturating_sub(out.len());
                out.extend_from_slice(&data[..data.len().min(room)]);
                if out.len() >= max {
                    break;
                }
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(2), read).await;
    Bytes::from(out)
}

/// The ids (JSON text) of the requests among `messages`.
fn ids(messages: &[jsonrpc::Message<'_>]) -> Vec<String> {
    messages
        .iter()
        .filter(|message| message.kind() == Kind::Request)
        .filter_map(|message| message.id.map(|id| id.get().to_owned()))
        .collect()
}

/// The ids (JSON text) of the responses in one message or batch.
fn response_ids(message: &[u8]) -> Vec<String> {
    jsonrpc::responses(message, |message| message.id.map(|id| id.get().to_owned()))
}

/// Why a request was refused, for the client: the status, never a header or body.
fn refusal_message(status: StatusCode, had_session: bool) -> String {
    if status == StatusCode::NOT_FOUND && had_session {
        "the MCP server ended the session (HTTP 404)".to_owned()
    } else {
        format!("the MCP server answered HTTP {}", status.as_u16())
    }
}

/// A client error without the request (whose headers hold the secret).
fn describe(error: &hyper_util::client::legacy::Error) -> String {
    use std::error::Error as _;
    let mut text = if error.is_connect() {
        "connection failed".to_owned()
    } else {
        "request failed".to_owned()
    };
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
