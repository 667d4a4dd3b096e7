//! GET `/mcp`, the session's stream of what the server says unasked
//! (sluice's own, resumable by event id, or a remote server's passed
//! through), and DELETE `/mcp`, the session's end.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderValue, Method, StatusCode};
use http_body_util::BodyExt;
use tokio::sync::mpsc;

use super::hub::{Hub, refuse};
use super::sse;
use super::upstream::{Client, HttpUpstream, LAST_EVENT_ID, SESSION_ID};

pub(super) async fn get_stream(State(hub): State<Arc<Hub>>, headers: HeaderMap) -> Response {
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

pub(super) async fn delete(State(hub): State<Arc<Hub>>, headers: HeaderMap) -> Response {
    let Some(id) = headers.get(&SESSION_ID).and_then(|id| id.to_str().ok()) else {
        return refuse(StatusCode::BAD_REQUEST, "missing Mcp-Session-Id");
    };
    let Some(client) = hub.sessions.remove(id) else {
        return refuse(StatusCode::NOT_FOUND, "no such session");
    };
    client.end().await;
    StatusCode::NO_CONTENT.into_response()
}
