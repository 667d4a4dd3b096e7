//! Clients over Streamable HTTP at `http://ADDR/mcp` (`sluice mcp --listen`).
//!
//! Each client session is a [`Session`] of its own, with its own server
//! session (a child process for a stdio server, an upstream session for a
//! remote one), and every session spends the one gate. A POST's requests
//! are answered on that POST, as a stream of events (or one JSON body
//! when the client accepts no stream); what the server says unasked goes
//! to the session's GET stream, else to a POST stream still open
//! (`routes.rs`). Sessions expire when idle and are capped in number and
//! in requests in progress (`sessions.rs`, `activity.rs`, `overload.rs`). A
//! request whose `Host` or `Origin` the listener was not set up for is
//! refused before anything else (`guard.rs`).
//!
//! This file sets the listener up and checks each request's access; what
//! every request shares is in `hub.rs`, a POST is served in `post.rs`, a
//! GET or DELETE in `stream.rs`.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use http::header::{AUTHORIZATION, WWW_AUTHENTICATE};
use http::{HeaderValue, StatusCode};
use sluice_config::ServerSettings;
use subtle::ConstantTimeEq;
use tokio::sync::watch;

use super::guard;
use super::hub::{Hub, Server, refuse};
use super::post::post;
use super::sessions::Sessions;
use super::stream::{delete, get_stream};
use crate::error::McpError;
use crate::proxy::Proxy;

/// Where the MCP endpoint is served.
pub const MCP_PATH: &str = "/mcp";

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
    let live = hub.gate.clone();
    // The limits in force, a reload's included.
    let stream = sluice_ui::events(
        move || sluice_ui::Snapshot::new(&live.config(), live.gate().0.status()),
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
