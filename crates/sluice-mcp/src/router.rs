//! One session's router: every message between the agent and the MCP
//! server, and `tools/call` through the gate (see [`crate::Proxy`]).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use parking_lot::Mutex;
use serde::Deserialize;
use serde_json::json;
use serde_json::value::RawValue;
use sluice::Call;
use tokio::task::AbortHandle;

use crate::batch::Batch;
use crate::catalog::Catalog;
use crate::executor::{DirectCall, Link, ServerExecutor, ToolCall};
use crate::jsonrpc::{self, Frame, IdKey, Kind, Message};
use crate::limits;
use crate::live::LiveGate;
use crate::outbox::Outbox;
use crate::pending::{ChildReply, Pending};
use crate::progress::Watch;
use crate::reply;
use crate::session_turn::SessionTurn;
use crate::signals::Detector;
use crate::trace_meta::trace_parent;
use sluice_http::scrub::Scrubber;
use sluice_http::trace::{Tracer, traced};

/// Where a handled message's response goes.
#[derive(Debug, Clone)]
enum ReplyTo {
    /// Straight to the agent.
    Direct,
    /// Into the response array of the agent's batch.
    Batch(Arc<Batch>),
}

/// What to do with a message after looking at it.
#[derive(Debug, PartialEq, Eq)]
enum Next {
    /// Pass it on unchanged.
    Forward,
    /// The proxy took care of it.
    Handled,
}

/// A `tools/call` in the gate.
#[derive(Debug)]
struct Gated {
    abort: AbortHandle,
    /// Tells this call from a later one reusing its id.
    serial: u64,
    batch: Option<Arc<Batch>>,
    /// The agent's id (JSON text) and result form, to answer it if the
    /// server goes away first.
    id: String,
    form: reply::Form,
}

pub(crate) struct Router {
    to_agent: Outbox,
    to_server: Outbox,
    pending: Arc<Pending>,
    /// How this session's admitted calls reach its server.
    link: Link,
    session_turn: Arc<SessionTurn<ServerExecutor>>,
    catalog: Mutex<Catalog>,
    deferral: sluice_config::Deferral,
    /// Gated calls by the agent's request id.
    calls: Mutex<HashMap<IdKey, Gated>>,
    /// The agent's `tools/list` requests awaiting their response.
    lists: Mutex<HashSet<IdKey>>,
    /// Requests of agent batches passed on, awaiting their response.
    batch_waits: Mutex<HashMap<IdKey, Arc<Batch>>>,
    serial: AtomicU64,
    /// Masks secrets in the server's lines this proxy logs.
    scrubber: Option<Arc<Scrubber>>,
    /// Where calls' spans go; `None` when traces are off.
    tracer: Option<Arc<Tracer>>,
}

/// `params` of `tools/call`: the name, and whether the agent speaks the
/// per-request envelope (revision 2026-07-28 on), whose results carry `resultType`.
#[derive(Deserialize)]
struct CallParams<'a> {
    #[serde(borrow)]
    name: std::borrow::Cow<'a, str>,
    #[serde(default, rename = "_meta")]
    meta: Option<HashMap<String, serde::de::IgnoredAny>>,
}

impl CallParams<'_> {
    fn envelope(&self) -> bool {
        self.meta
            .as_ref()
            .is_some_and(|meta| meta.contains_key(reply::PROTOCOL_VERSION_META))
    }
}

/// `params` of `notifications/cancelled`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CancelParams<'a> {
    #[serde(borrow)]
    request_id: &'a RawValue,
    #[serde(default)]
    reason: Option<String>,
}

/// What a session's router takes from the proxy it belongs to.
pub(crate) struct Setup<'a> {
    pub(crate) config: &'a sluice_config::McpConfig,
    /// The nonce of the session's proxy-owned ids.
    pub(crate) nonce: u64,
    pub(crate) detector: Arc<Detector>,
    pub(crate) scrubber: Option<Arc<Scrubber>>,
    /// Where calls' spans go; `None` when traces are off.
    pub(crate) tracer: Option<Arc<Tracer>>,
}

impl Router {
    /// A session's router; `direct`, when given, sends each admitted
    /// `tools/call` itself instead of through `to_server`.
    pub(crate) fn new(
        live: &Arc<LiveGate<ServerExecutor>>,
        setup: Setup<'_>,
        to_agent: Outbox,
        to_server: Outbox,
        direct: Option<Arc<dyn DirectCall>>,
    ) -> Router {
        let config = setup.config;
        let pending = Arc::new(Pending::new(setup.nonce));
        let link = Link {
            to_server: to_server.clone(),
            pending: pending.clone(),
            direct,
            detector: setup.detector,
        };
        Router {
            to_agent,
            to_server,
            pending,
            link,
            session_turn: SessionTurn::new(live.clone()),
            catalog: Mutex::new(Catalog::new(
                config.credential.clone(),
                config.tools.clone(),
                config.trust_annotations,
            )),
            deferral: config.deferral,
            calls: Mutex::new(HashMap::new()),
            lists: Mutex::new(HashSet::new()),
            batch_waits: Mutex::new(HashMap::new()),
            serial: AtomicU64::new(0),
            scrubber: setup.scrubber,
            tracer: setup.tracer,
        }
    }

    pub(crate) fn on_agent_line(self: &Arc<Self>, line: &[u8]) {
        match jsonrpc::parse(line) {
            Frame::Blank => {}
            Frame::Malformed(why) => {
                tracing::warn!(%why, "the client sent a line that is not JSON; answered with a parse error");
                self.to_agent.send(parse_error(&why));
            }
            Frame::Invalid => {
                self.to_agent.send(invalid_request());
            }
            Frame::Single(message) => {
                if self.agent_message(&message, &ReplyTo::Direct) == Next::Forward
                    && !self.to_server.send(line.to_vec())
                    && message.kind() == Kind::Request
                    && let Some(id) = message.id
                {
                    self.unreachable(id);
                }
            }
            Frame::Batch(elements) => {
                let batch = Batch::new(self.to_agent.clone());
                let reply_to = ReplyTo::Batch(batch.clone());
                let mut forward = Vec::new();
                for element in elements {
                    match element {
                        Ok(message) => {
                            if self.agent_message(&message, &reply_to) == Next::Forward {
                                forward.push(message.raw.as_bytes().to_vec());
                            }
                        }
                        Err(_) => batch.answer_now(invalid_request()),
                    }
                }
                // One message each: a server on a revision without batches
                // (2025-06-18 removed them) still understands every one.
                for message in forward {
                    // A request refused here is answered when its batch
                    // is: the server will never see it.
                    let _ = self.to_server.send(message);
                }
                batch.seal();
            }
        }
    }

    fn agent_message(self: &Arc<Self>, message: &Message<'_>, reply_to: &ReplyTo) -> Next {
        match (message.kind(), message.method()) {
            (Kind::Request, Some("tools/call")) => {
                let name = message
                    .params
                    .and_then(|params| serde_json::from_str::<CallParams<'_>>(params.get()).ok());
                match (name, message.id, message.params) {
                    (Some(params), Some(id), Some(raw_params))
                        if self.catalog.lock().routed(&params.name).charged =>
                    {
                        let form = if params.envelope() {
                            reply::Form::Envelope
                        } else {
                            reply::Form::Handshake
                        };
                        self.gate_call(id, &params.name, raw_params, form, reply_to);
                        Next::Handled
                    }
                    // Without a tool name there is nothing to gate: the
                    // server answers it (with an invalid-params error). A
                    // tool that calls no third-party API (`openWorldHint:
                    // false`) spends nothing: it goes straight to the server.
                    _ => {
                        self.await_response(message, reply_to);
                        Next::Forward
                    }
                }
            }
            (Kind::Request, Some("tools/list")) => {
                if let Some(id) = message.id_key() {
                    self.lists.lock().insert(id);
                }
                self.await_response(message, reply_to);
                Next::Forward
            }
            (Kind::Request, _) => {
                self.await_response(message, reply_to);
                Next::Forward
            }
            (Kind::Notification, Some("notifications/cancelled")) => self.cancel(message),
            _ => Next::Forward,
        }
    }

    /// A request passed on from a batch: its response joins the batch's array.
    fn await_response(&self, message: &Message<'_>, reply_to: &ReplyTo) {
        if let (ReplyTo::Batch(batch), Some(id)) = (reply_to, message.id_key()) {
            batch.expect();
            self.batch_waits.lock().insert(id, batch.clone());
        }
    }

    fn gate_call(
        self: &Arc<Self>,
        id: &RawValue,
        tool: &str,
        params: &RawValue,
        form: reply::Form,
        reply_to: &ReplyTo,
    ) {
        let key = IdKey::of(id);
        let id_text = id.get().to_owned();
        let parent = trace_parent(self.tracer.as_ref(), params);
        // Kept for the span only when traces are on: no copy otherwise.
        // A string id is named without its quotes.
        let span_names = self.tracer.as_ref().map(|_| {
            let id =
                serde_json::from_str::<String>(id.get()).unwrap_or_else(|_| id.get().to_owned());
            (tool.to_owned(), id)
        });
        let (routed, spend) = {
            let catalog = self.catalog.lock();
            (catalog.routed(tool), catalog.spend(tool))
        };
        let route = routed.route;
        tracing::debug!(tool, read = route.read, credential = %route.credential, "tools/call enters the gate");
        let watch = Watch::of(
            params,
            &self.to_agent,
            &self.session_turn.gate(),
            &route.credential,
            spend.as_ref().and_then(|spend| spend.group.as_deref()),
        );
        let mut call = Call::routed(
            tool,
            route,
            ToolCall::new(
                params.to_owned(),
                key.clone(),
                self.link.clone(),
                routed.policy,
            ),
        );
        if let Some(spend) = spend {
            // `[tools.NAME]`'s group, cost, settle and priority.
            call = call.spend(spend);
        }
        let membership = self.session_turn.enter();
        let batch = match reply_to {
            ReplyTo::Batch(batch) => {
                batch.expect();
                Some(batch.clone())
            }
            ReplyTo::Direct => None,
        };
        let serial = self.serial.fetch_add(1, Ordering::Relaxed);
        let router = self.clone();
        let reply_to = reply_to.clone();
        // Held across the spawn, so the call's entry exists before its task can finish.
        let mut calls = self.calls.lock();
        let task = tokio::spawn(async move {
            let tracer = router.tracer.as_ref();
            let run = membership.turn.complete(call);
            let (tool, call_id) = span_names
                .as_ref()
                .map_or(("", None), |(tool, id)| (tool.as_str(), Some(id.as_str())));
            let traced = traced(tracer, parent, tool, call_id, run);
            let completion = Watch::run(watch, traced).await;
            drop(membership);
            let message = reply::message(&id_text, &completion, form, router.deferral);
            {
                let mut calls = router.calls.lock();
                if calls.get(&key).is_some_and(|gated| gated.serial == serial) {
                    calls.remove(&key);
                }
            }
            match reply_to {
                ReplyTo::Direct => {
                    router.to_agent.send(message);
                }
                ReplyTo::Batch(batch) => batch.reply(message),
            }
        });
        let previous = calls.insert(
            IdKey::of(id),
            Gated {
                abort: task.abort_handle(),
                serial,
                batch,
                id: id.get().to_owned(),
                form,
            },
        );
        if previous.is_some() {
            tracing::warn!(id = %id.get(), "the client reused the id of a tools/call still in progress");
        }
    }

    /// `notifications/cancelled` from the agent.
    fn cancel(&self, message: &Message<'_>) -> Next {
        let Some(params) = message
            .params
            .and_then(|params| serde_json::from_str::<CancelParams<'_>>(params.get()).ok())
        else {
            return Next::Forward;
        };
        let target = IdKey::of(params.request_id);
        self.lists.lock().remove(&target);
        if let Some(batch) = self.batch_waits.lock().remove(&target) {
            batch.forgo();
        }
        let Some(gated) = self.calls.lock().remove(&target) else {
            // Not a gated call: the server knows the request; pass it on.
            return Next::Forward;
        };
        let sent = self.pending.cancel_owned_by(&target);
        tracing::debug!(id = %params.request_id.get(), sent = sent.len(), "the client cancelled a gated call");
        for id in sent {
            let id = serde_json::Value::String(id).to_string();
            self.to_server
                .send(jsonrpc::cancelled(&id, params.reason.as_deref()));
        }
        gated.abort.abort();
        if let Some(batch) = gated.batch {
            batch.forgo();
        }
        Next::Handled
    }

    /// A request the server's input cannot take (it stopped reading): the
    /// agent gets an error at once instead of a wait without end.
    fn unreachable(&self, id: &RawValue) {
        let key = IdKey::of(id);
        self.lists.lock().remove(&key);
        let error = json!({"code": jsonrpc::INTERNAL_ERROR,
            "message": "the MCP server is not reading its input; the request was not sent"});
        self.to_agent
            .send(jsonrpc::error_response(id.get(), &error.to_string()));
    }

    /// The agent wrote a line over `max_message_size`: a request is
    /// answered with an error under its id, anything else dropped.
    pub(crate) fn on_agent_too_long(&self, refused: &limits::Refused) {
        let shape = refused.shape();
        match (&shape.id, shape.method) {
            (Some(id), true) => {
                tracing::warn!(bytes = refused.len, %id, "the client sent a request larger than max_message_size; refused");
                self.to_agent.send(too_large(id, refused.len));
            }
            _ => {
                tracing::warn!(
                    bytes = refused.len,
                    "the client sent a message larger than max_message_size that is not a request; dropped"
                );
            }
        }
    }

    /// The server wrote a line over `max_message_size`: the call or request
    /// it answers gets an error instead; a request from the server is
    /// refused; a notification is dropped.
    pub(crate) fn on_server_too_long(&self, refused: &limits::Refused) {
        let shape = refused.shape();
        let Some(id) = shape.id else {
            tracing::warn!(
                bytes = refused.len,
                "the MCP server wrote a message larger than max_message_size without an id; dropped"
            );
            return;
        };
        if shape.method {
            tracing::warn!(bytes = refused.len, %id, "the MCP server sent a request larger than max_message_size; refused");
            self.to_server.send(too_large(&id, refused.len));
            return;
        }
        tracing::warn!(bytes = refused.len, %id, "the MCP server's answer is larger than max_message_size; the request gets an error");
        let key = serde_json::from_str::<Box<RawValue>>(&id)
            .ok()
            .map(|raw| IdKey::of(&raw));
        let Some(key) = key else {
            return;
        };
        let error = too_large_error(refused.len);
        if self.pending.owns(&key) {
            if let Some(owned) = key.as_str() {
                self.pending
                    .answer(owned, ChildReply::Error(Bytes::from(error.into_bytes())));
            }
            return;
        }
        self.lists.lock().remove(&key);
        let response = jsonrpc::error_response(&id, &error);
        match self.batch_waits.lock().remove(&key) {
            Some(batch) => batch.reply(response),
            None => {
                self.to_agent.send(response);
            }
        }
    }

    pub(crate) fn on_server_line(&self, line: &[u8]) {
        match jsonrpc::parse(line) {
            Frame::Blank => {}
            Frame::Malformed(_) | Frame::Invalid => {
                // Masked before it is cut short, so no part of a secret shows.
                let masked = crate::scrub::line(self.scrubber.as_deref(), line.to_vec());
                let shown = String::from_utf8_lossy(&masked[..masked.len().min(200)]).into_owned();
                tracing::warn!(line = %shown, "the MCP server wrote a line that is not a JSON-RPC message; dropped (servers must write only messages to stdout)");
            }
            Frame::Single(message) => {
                if self.server_message(&message) == Next::Forward {
                    self.to_agent.send(line.to_vec());
                }
            }
            Frame::Batch(elements) => {
                let total = elements.len();
                let kept: Vec<Vec<u8>> = elements
                    .into_iter()
                    .filter_map(|element| match element {
                        Ok(message) => (self.server_message(&message) == Next::Forward)
                            .then(|| message.raw.as_bytes().to_vec()),
                        Err(value) => Some(value.get().as_bytes().to_vec()),
                    })
                    .collect();
                if kept.len() == total {
                    self.to_agent.send(line.to_vec());
                } else if !kept.is_empty() {
                    self.to_agent.send(jsonrpc::batch(&kept));
                }
            }
        }
    }

    fn server_message(&self, message: &Message<'_>) -> Next {
        match message.kind() {
            Kind::Response => {
                let Some(id) = message.id_key() else {
                    return Next::Forward;
                };
                if self.pending.owns(&id) {
                    let reply = match (message.result, message.error) {
                        (Some(result), _) => ChildReply::Result(copy(result)),
                        (None, Some(error)) => ChildReply::Error(copy(error)),
                        (None, None) => return Next::Handled,
                    };
                    let waited = id.as_str().is_some_and(|id| self.pending.answer(id, reply));
                    if !waited {
                        tracing::debug!("an answer to a call sluice no longer waits for; dropped");
                    }
                    return Next::Handled;
                }
                if self.lists.lock().remove(&id)
                    && let Some(result) = message.result
                {
                    self.catalog.lock().learn(result);
                }
                if let Some(batch) = self.batch_waits.lock().remove(&id) {
                    batch.reply(message.raw.as_bytes().to_vec());
                    return Next::Handled;
                }
                Next::Forward
            }
            Kind::Notification if message.method() == Some("notifications/tools/list_changed") => {
                self.catalog.lock().forget();
                Next::Forward
            }
            _ => Next::Forward,
        }
    }

    /// The agent closed its input: nothing more will be asked or waited for.
    pub(crate) fn agent_closed(&self) {
        for id in self.pending.cancel_all() {
            let id = serde_json::Value::String(id).to_string();
            self.to_server.send(jsonrpc::cancelled(
                &id,
                Some("the client closed the connection"),
            ));
        }
        self.drop_calls();
        self.to_server.close();
    }

    /// The server's output ended: nothing more will be answered. Every
    /// call still in progress gets one `error` outcome (issue 19).
    pub(crate) fn server_closed(&self) {
        let calls: Vec<Gated> = self.calls.lock().drain().map(|(_, gated)| gated).collect();
        let gone = sluice::Completion::from(sluice::Outcome::error(
            None,
            "the MCP server exited before answering",
        ));
        for gated in calls {
            gated.abort.abort();
            let message = reply::message(&gated.id, &gone, gated.form, self.deferral);
            match gated.batch {
                Some(batch) => batch.reply(message),
                None => {
                    self.to_agent.send(message);
                }
            }
        }
        self.batch_waits.lock().clear();
        self.pending.clear();
        self.to_server.close();
    }

    fn drop_calls(&self) {
        let calls: Vec<Gated> = self.calls.lock().drain().map(|(_, gated)| gated).collect();
        for gated in calls {
            gated.abort.abort();
        }
        self.batch_waits.lock().clear();
    }
}

fn copy(raw: &RawValue) -> Bytes {
    Bytes::copy_from_slice(raw.get().as_bytes())
}

fn parse_error(why: &str) -> Vec<u8> {
    let error = json!({"code": jsonrpc::PARSE_ERROR, "message": format!("Parse error: {why}")});
    jsonrpc::error_response("null", &error.to_string())
}

/// The error object for a message over `max_message_size`.
fn too_large_error(bytes: usize) -> String {
    json!({"code": jsonrpc::INVALID_REQUEST,
           "message": format!("Message too large: {bytes} bytes is more than sluice's max_message_size")})
    .to_string()
}

/// The error response to a request over `max_message_size`.
fn too_large(id: &str, bytes: usize) -> Vec<u8> {
    jsonrpc::error_response(id, &too_large_error(bytes))
}

fn invalid_request() -> Vec<u8> {
    let error = json!({"code": jsonrpc::INVALID_REQUEST, "message": "Invalid Request: not a JSON-RPC message object"});
    jsonrpc::error_response("null", &error.to_string())
}
