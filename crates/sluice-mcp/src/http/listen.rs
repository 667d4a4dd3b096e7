//! Clients over Streamable HTTP at `http://ADDR/mcp` (`sluice mcp --listen`).
//!
//! Each client session is a [`Session`] of its own, with its own server
//! session (a child process for a stdio server, an upstream session for a
//! remote one), and every session spends the one gate. A POST's requests
//! are answered on that POST, as a stream of events (or one JSON body
//! when the client accepts no stream); what the server says unasked goes
//! to the session's GET stream, else to a POST stream still open
//! (`routes.rs`). Sessions expire when idle and are capped in number and
//! in requests in progress (`sessions.rs`, `overload.rs`). A request whose
//! `Host` or `Origin` the listener was not set up for is refused before
//! anything else (`guard.rs`).

use std::convert::Infallible;
use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, WWW_AUTHENTICATE};
use http::{HeaderMap, HeaderValue, Method, StatusCode};
use http_body_util::BodyExt;
use serde_json::json;
use sluice::Gate;
use sluice_config::{Secret, ServerSettings};
use subtle::ConstantTimeEq;
use tokio::sync::{mpsc, watch};

use super::client::ClientSession;
use super::routes::{self, first_response_id, response_ids};
use super::sessions::{self, Sessions};
use super::upstream::{Client, HttpUpstream, LAST_EVENT_ID, Remote, SESSION_ID};
use super::{guard, overload, sse};
use crate::error::McpError;
use crate::executor::ServerExecutor;
use crate::jsonrpc::{self, Frame, IdKey, Kind};
use crate::process::Command;
use crate::proxy::Proxy;

/// Where the MCP endpoint is served.
pub const MCP_PATH: &str = "/mcp";

/// The server behind `sluice mcp --listen`.
#[derive(Debug, Clone)]
pub enum Server {
    /// A stdio server: one child process per client session.
    Command(Command),
    /// A remote server over Streamable HTTP: one upstream session per client session.
    Remote(Remote),
}

/// Shared by every request to the listener.
pub(super) struct Hub {
    pub(super) proxy: Proxy,
    pub(super) gate: Gate<ServerExecutor>,
    pub(super) server: Server,
    pub(super) client: Option<Client>,
    token: Option<Secret>,
    exposure: sluice_config::McpExposure,
    pub(super) sessions: Arc<Sessions>,
    stop: watch::Receiver<bool>,
}

/// Serves clients on `listener` until `shutdown` resolves. The first
/// stdout line is the caller's to print (`listening on http://ADDR`).
pub async fn serve_http(
    proxy: Proxy,
    server: Server,
    listener: tokio::net::TcpListener,
    settings: ServerSettings,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), McpError> {
    let gate = proxy.gate().await?;
    let mut server = server;
    if let Server::Remote(remote) = &mut server
        && settings.auth_token.is_some()
    {
        // A client's `Authorization` is then sluice's own token: never passed on.
        remote.forward_authorization = false;
    }
    let client = match &server {
        Server::Remote(_) => Some(super::upstream::client()?),
        Server::Command(_) => None,
    };
    let (stopping, stop) = watch::channel(false);
    let grace = proxy.config().gate.defaults.deadline;
    let proxy_sessions = proxy.config().sessions;
    let proxy_exposure = proxy.config().exposure.clone();
    let hub = Arc::new(Hub {
        proxy,
        gate,
        server,
        client,
        token: settings.auth_token.clone(),
        exposure: proxy_exposure,
        sessions: Arc::new(Sessions::new(proxy_sessions)),
        stop,
    });
    tokio::spawn(hub.sessions.clone().sweep(hub.stop.clone()));
    let router = app(hub.clone(), settings.max_body);
    let shutdown = async move {
        shutdown.await;
        let _ = stopping.send(true);
    };
    let served = sluice_http::serve_router(listener, router, &settings, grace, shutdown).await;
    // Each session's child is stopped at once; together they take one grace.
    let ending: Vec<_> = hub
        .sessions
        .drain()
        .into_iter()
        .map(|session| tokio::spawn(async move { session.end().await }))
        .collect();
    for ended in ending {
        let _ = ended.await;
    }
    served.map_err(|source| McpError::Io {
        context: "the listener failed",
        source,
    })
}

fn app(hub: Arc<Hub>, max_body: u64) -> Router {
    let scrubber = hub.proxy.scrubber().cloned();
    let router = Router::new()
        .route(MCP_PATH, get(get_stream).post(post).delete(delete))
        .route("/ui", get(page))
        .route("/v1/events", get(events))
        .route("/healthz", get(|| async { "ok" }))
        .layer(axum::middleware::from_fn_with_state(
            hub.clone(),
            require_token,
        ))
        // Outside the token check: a rebound page is turned away first.
        .layer(axum::middleware::from_fn_with_state(
            hub.clone(),
            require_known_host,
        ))
        .layer(DefaultBodyLimit::max(
            usize::try_from(max_body).unwrap_or(usize::MAX),
        ))
        .with_state(hub);
    // Outermost, so that every answer is masked (refusals too): see `scrub.rs`.
    match scrubber {
        Some(scrubber) => router.layer(axum::middleware::from_fn_with_state(
            scrubber,
            sluice_http::scrub::scrub_responses,
        )),
        None => router,
    }
}

/// DNS rebinding: a `Host` or `Origin` the listener was not set up for is
/// refused (421, 403) before any session is looked up or created.
async fn require_known_host(State(hub): State<Arc<Hub>>, request: Request, next: Next) -> Response {
    if request.uri().path() == "/healthz" {
        return next.run(request).await;
    }
    let host = request
        .headers()
        .get(http::header::HOST)
        .map(HeaderValue::as_bytes)
        .or_else(|| request.uri().authority().map(|a| a.as_str().as_bytes()));
    let origin = request
        .headers()
        .get(http::header::ORIGIN)
        .map(HeaderValue::as_bytes);
    match guard::check(&hub.exposure, host, origin) {
        Ok(()) => next.run(request).await,
        Err(guard::Refusal::Host) => {
            tracing::warn!("refused a request naming a host not allowed (Host)");
            refuse(
                StatusCode::MISDIRECTED_REQUEST,
                "this Host is not served here: only loopback names and [mcp] allowed_hosts are",
            )
        }
        Err(guard::Refusal::Origin) => {
            tracing::warn!("refused a request from an origin not allowed (Origin)");
            refuse(
                StatusCode::FORBIDDEN,
                "this Origin is not allowed: only loopback origins and [mcp] allowed_origins are",
            )
        }
    }
}

/// The listener's bearer token, as `sluice serve` checks it.
async fn require_token(State(hub): State<Arc<Hub>>, request: Request, next: Next) -> Response {
    let Some(token) = &hub.token else {
        return next.run(request).await;
    };
    if request.uri().path() == "/healthz" {
        return next.run(request).await;
    }
    let header = request
        .headers()
        .get(AUTHORIZATION)
        .map(HeaderValue::as_bytes)
        .filter(|value| value.len() > 7 && value[..7].eq_ignore_ascii_case(b"bearer "))
        .map(|value| &value[7..]);
    let from_query = (header.is_none() && request.uri().path() == "/ui")
        .then(|| sluice_ui::query_token(request.uri().query()))
        .flatten();
    let presented = header
        .or(from_query.as_deref().map(str::as_bytes))
        .unwrap_or_default();
    if bool::from(presented.ct_eq(token.expose().as_bytes())) {
        return next.run(request).await;
    }
    let mut refused = (
        StatusCode::UNAUTHORIZED,
        "a valid bearer token is required\n",
    )
        .into_response();
    refused
        .headers_mut()
        .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    refused
}

async fn page() -> Response {
    with_headers(sluice_ui::PAGE.into_response(), &sluice_ui::PAGE_HEADERS)
}

async fn events(State(hub): State<Arc<Hub>>) -> Response {
    let mut stop = hub.stop.clone();
    let stop = async move {
        let _ = stop.wait_for(|stop| *stop).await;
    };
    let gate = hub.gate.clone();
    let config = hub.proxy.config().gate.clone();
    let stream = sluice_ui::events(
        move || sluice_ui::Snapshot::new(&config, gate.status()),
        stop,
    );
    with_headers(
        Body::from_stream(stream).into_response(),
        &sluice_ui::EVENTS_HEADERS,
    )
}

fn with_headers(mut response: Response, headers: &[(&'static str, &'static str)]) -> Response {
    for (name, value) in headers {
        response.headers_mut().insert(
            http::HeaderName::from_static(name),
            HeaderValue::from_static(value),
        );
    }
    response
}

/// A JSON-RPC error as an HTTP answer (for what cannot reach a session).
fn refuse(status: StatusCode, message: &str) -> Response {
    let body = jsonrpc::error_response(
        "null",
        &json!({"code": jsonrpc::INVALID_REQUEST, "message": message}).to_string(),
    );
    (status, [(CONTENT_TYPE, "application/json")], body).into_response()
}

/// What a POST body holds.
struct Posted {
    /// The ids of its requests.
    requests: Vec<IdKey>,
    /// The `progressToken`s its requests carry.
    tokens: Vec<IdKey>,
    initialize: bool,
}

fn inspect(body: &[u8]) -> Option<Posted> {
    let messages = match jsonrpc::parse(body) {
        Frame::Single(message) => vec![message],
        Frame::Batch(elements) => elements.into_iter().filter_map(Result::ok).collect(),
        Frame::Blank | Frame::Malformed(_) | Frame::Invalid => return None,
    };
    Some(Posted {
        requests: messages
            .iter()
            .filter(|message| message.kind() == Kind::Request)
            .filter_map(jsonrpc::Message::id_key)
            .collect(),
        tokens: messages
            .iter()
            .filter(|message| message.kind() == Kind::Request)
            .filter_map(|message| routes::request_token(message.params))
            .collect(),
        initialize: messages
            .iter()
            .any(|message| message.method() == Some("initialize")),
    })
}

async fn post(State(hub): State<Arc<Hub>>, headers: HeaderMap, body: Bytes) -> Response {
    let Some(posted) = inspect(&body) else {
        // The session answers what is not JSON-RPC (a parse error); without
        // one, answer it here.
        return refuse(
            StatusCode::BAD_REQUEST,
            "the body is not a JSON-RPC message",
        );
    };
    let named = headers.get(&SESSION_ID).and_then(|id| id.to_str().ok());
    let (client, fresh) = match named {
        Some(id) => match hub.sessions.get(id) {
            Some(client) => (client, false),
            None => {
                return refuse(
                    StatusCode::NOT_FOUND,
                    "no such session (it ended or never began)",
                );
            }
        },
        None if posted.initialize => {
            let Ok(place) = hub.sessions.reserve() else {
                return full();
            };
            match hub.open(Some(place)).await {
                Ok(client) => (client, true),
                Err(why) => return refuse(StatusCode::BAD_GATEWAY, &why),
            }
        }
        // A request without a session: the stateless revision, served by
        // a session of its own that ends with the request.
        None => match &hub.server {
            Server::Remote(_) => match hub.open(None).await {
                Ok(client) => (client, false),
                Err(why) => return refuse(StatusCode::BAD_GATEWAY, &why),
            },
            Server::Command(_) => {
                return refuse(
                    StatusCode::BAD_REQUEST,
                    "missing Mcp-Session-Id: initialize first",
                );
            }
        },
    };
    if let Some(upstream) = &client.upstream {
        upstream.client_headers(&headers);
    }
    let ephemeral = named.is_none() && !fresh;
    if posted.requests.is_empty() {
        client.activity.touch();
        client.session.agent_says(&body);
        if ephemeral {
            client.end().await;
        }
        return StatusCode::ACCEPTED.into_response();
    }
    if let Err(running) = client
        .activity
        .take(posted.requests.len(), hub.sessions.queue())
    {
        tracing::debug!(
            running,
            "a POST would pass session_queue; its requests are refused"
        );
        if ephemeral {
            client.end().await;
        }
        let deferral = hub.proxy.config().deferral;
        return match overload::refusal(&body, running, deferral) {
            Some(answer) => {
                (StatusCode::OK, [(CONTENT_TYPE, "application/json")], answer).into_response()
            }
            None => StatusCode::ACCEPTED.into_response(),
        };
    }
    let (tx, rx) = mpsc::unbounded_channel();
    let events = accepts_events(&headers);
    let stream_id = {
        let mut routes = client.routes.lock();
        for id in &posted.requests {
            routes.waiting.insert(id.clone(), tx.clone());
        }
        if events {
            for token in &posted.tokens {
                routes.progress.insert(token.clone(), tx.clone());
            }
        }
        routes.next_stream += 1;
        let id = routes.next_stream;
        routes.streams.push((id, tx.clone()));
        id
    };
    drop(tx);
    client.session.agent_says(&body);
    let pending = Answering {
        client: client.clone(),
        requests: posted.requests,
        tokens: if events { posted.tokens } else { Vec::new() },
        stream_id,
        ephemeral,
    };
    let mut response = if events {
        Body::from_stream(events_of(rx, pending)).into_response()
    } else {
        return json_answer(rx, pending, fresh.then_some(client.id.clone())).await;
    };
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(
        http::header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache"),
    );
    if fresh && let Ok(id) = HeaderValue::from_str(&client.id) {
        headers.insert(SESSION_ID, id);
    }
    response
}

/// Every session is busy and there are `max_sessions`: try again soon.
fn full() -> Response {
    let mut refused = refuse(
        StatusCode::SERVICE_UNAVAILABLE,
        "too many sessions (max_sessions), each with a request in progress; retry later",
    );
    refused.headers_mut().insert(
        http::header::RETRY_AFTER,
        HeaderValue::from(sessions::FULL_RETRY_AFTER.as_secs()),
    );
    refused
}

fn accepts_events(headers: &HeaderMap) -> bool {
    headers
        .get_all(ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .any(|value| value.contains("text/event-stream"))
}

/// A POST's requests not yet answered. Dropped when the client has its
/// answers, or when it closed the request: then a call still waiting in
/// sluice is dropped (sending nothing), one in flight is cancelled.
struct Answering {
    client: Arc<ClientSession>,
    requests: Vec<IdKey>,
    /// The progress tokens routed to this POST's stream.
    tokens: Vec<IdKey>,
    stream_id: u64,
    ephemeral: bool,
}

impl Answering {
    /// A message reached the client: the requests it answers are done.
    fn answered(&mut self, message: &[u8]) {
        let ids = response_ids(message);
        let before = self.requests.len();
        self.requests.retain(|id| !ids.contains(id));
        self.client.activity.release(before - self.requests.len());
    }
}

impl Drop for Answering {
    fn drop(&mut self) {
        let mut routes = self.client.routes.lock();
        routes.streams.retain(|(id, _)| *id != self.stream_id);
        for id in &self.requests {
            routes.waiting.remove(id);
        }
        for token in &self.tokens {
            routes.progress.remove(token);
        }
        drop(routes);
        self.client.activity.release(self.requests.len());
        for id in &self.requests {
            let id = id_json(id);
            self.client.session.agent_says(&jsonrpc::cancelled(
                &id,
                Some("the client closed its HTTP request"),
            ));
        }
        if self.ephemeral {
            let client = self.client.clone();
            tokio::spawn(async move { client.end().await });
        }
    }
}

fn events_of(
    rx: mpsc::UnboundedReceiver<Vec<u8>>,
    pending: Answering,
) -> impl futures_util::Stream<Item = Result<Bytes, Infallible>> + Send {
    // Each message is written as it arrives; the stream ends once every
    // request of the POST is answered. hyper drops it (and `pending`)
    // when the client goes away.
    futures_util::stream::unfold((rx, pending), |(mut rx, mut pending)| async move {
        if pending.requests.is_empty() {
            return None;
        }
        let message = rx.recv().await?;
        pending.answered(&message);
        Some((Ok(Bytes::from(sse::encode(None, &message))), (rx, pending)))
    })
}

async fn json_answer(
    mut rx: mpsc::UnboundedReceiver<Vec<u8>>,
    mut pending: Answering,
    session_id: Option<String>,
) -> Response {
    // Without a stream, only responses can be carried; what the server
    // says unasked waits for the GET stream.
    let mut responses = Vec::new();
    while !pending.requests.is_empty() {
        let Some(message) = rx.recv().await else {
            break;
        };
        if first_response_id(&message).is_some() {
            pending.answered(&message);
            responses.push(message);
        } else {
            pending.client.routes.lock().backlog.push_back(message);
        }
    }
    drop(pending);
    let body = if responses.len() == 1 {
        responses.swap_remove(0)
    } else {
        jsonrpc::batch(&responses)
    };
    let mut response = (StatusCode::OK, [(CONTENT_TYPE, "application/json")], body).into_response();
    if let Some(id) = session_id.and_then(|id| HeaderValue::from_str(&id).ok()) {
        response.headers_mut().insert(SESSION_ID, id);
    }
    response
}

async fn get_stream(State(hub): State<Arc<Hub>>, headers: HeaderMap) -> Response {
    let Some(id) = headers.get(&SESSION_ID).and_then(|id| id.to_str().ok()) else {
        return refuse(StatusCode::BAD_REQUEST, "missing Mcp-Session-Id");
    };
    let Some(client) = hub.sessions.get(id) else {
        return refuse(StatusCode::NOT_FOUND, "no such session");
    };
    if let (Some(upstream), Some(http)) = (&client.upstream, &hub.client) {
        return upstream_get(upstream, http, &headers).await;
    }
    // A stream sluice writes: its event ids let a client resume it.
    let resume = headers
        .get(&LAST_EVENT_ID)
        .and_then(|id| id.to_str().ok())
        .and_then(|id| id.trim().parse::<u64>().ok());
    let (tx, rx) = mpsc::unbounded_channel();
    client.routes.lock().open_get(tx, resume);
    let stream = futures_util::stream::unfold((rx, client), |(mut rx, client)| async move {
        let (id, message) = rx.recv().await?;
        Some((
            Ok::<_, Infallible>(Bytes::from(sse::encode(Some(&id.to_string()), &message))),
            (rx, client),
        ))
    });
    let mut response = Body::from_stream(stream).into_response();
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    response
}

/// The remote server's GET stream, passed through as it is (event ids
/// included, so that the client's `Last-Event-ID` resumes it there).
async fn upstream_get(
    upstream: &Arc<HttpUpstream>,
    http: &Client,
    headers: &HeaderMap,
) -> Response {
    let mut request = upstream.request(Method::GET, Bytes::new());
    if let Some(last) = headers.get(&LAST_EVENT_ID) {
        request.headers_mut().insert(LAST_EVENT_ID, last.clone());
    }
    match http.request(request).await {
        Ok(answer) => {
            let (parts, body) = answer.into_parts();
            let mut response = Response::new(Body::new(body.map_err(axum::Error::new)));
            *response.status_mut() = parts.status;
            if let Some(kind) = parts.headers.get(CONTENT_TYPE) {
                response.headers_mut().insert(CONTENT_TYPE, kind.clone());
            }
            // Masked as it streams, never read whole first.
            response
                .extensions_mut()
                .insert(sluice_http::scrub::Streamed);
            response
        }
        Err(_) => refuse(StatusCode::BAD_GATEWAY, "cannot reach the MCP server"),
    }
}

async fn delete(State(hub): State<Arc<Hub>>, headers: HeaderMap) -> Response {
    let Some(id) = headers.get(&SESSION_ID).and_then(|id| id.to_str().ok()) else {
        return refuse(StatusCode::BAD_REQUEST, "missing Mcp-Session-Id");
    };
    let Some(client) = hub.sessions.remove(id) else {
        return refuse(StatusCode::NOT_FOUND, "no such session");
    };
    client.end().await;
    StatusCode::NO_CONTENT.into_response()
}

/// An id as JSON text.
fn id_json(id: &IdKey) -> String {
    match id {
        IdKey::Str(text) => serde_json::Value::String(text.clone()).to_string(),
        IdKey::Num(text) | IdKey::Other(text) => text.clone(),
    }
}
