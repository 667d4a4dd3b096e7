//! A POST to `/mcp`: its messages handed to the client's session (one
//! made for an `initialize`, or for the stateless revision's request),
//! and its requests answered on the POST, as a stream of events or, for a
//! client that accepts no stream, one JSON body.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use http::header::{ACCEPT, CONTENT_TYPE};
use http::{HeaderMap, HeaderValue, StatusCode};
use tokio::sync::mpsc;

use super::client::ClientSession;
use super::hub::{Hub, Server, refuse};
use super::routes::{self, first_response_id, response_ids};
use super::sessions;
use super::upstream::SESSION_ID;
use super::{overload, sse};
use crate::jsonrpc::{self, Frame, IdKey, Kind};

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

pub(super) async fn post(State(hub): State<Arc<Hub>>, headers: HeaderMap, body: Bytes) -> Response {
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

/// An id as JSON text.
fn id_json(id: &IdKey) -> String {
    match id {
        IdKey::Str(text) => serde_json::Value::String(text.clone()).to_string(),
        IdKey::Num(text) | IdKey::Other(text) => text.clone(),
    }
}
