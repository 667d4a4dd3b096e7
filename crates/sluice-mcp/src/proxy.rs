//! The proxy: routes every message between the agent and the MCP server, and `tools/call` through the gate.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use serde::Deserialize;
use serde_json::json;
use serde_json::value::RawValue;
use sluice::{Call, Gate};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, BufReader};
use tokio::task::AbortHandle;

use crate::batch::Batch;
use crate::catalog::Catalog;
use crate::config::McpConfig;
use crate::error::McpError;
use crate::executor::{ChildExecutor, ToolCall};
use crate::jsonrpc::{self, Frame, IdKey, Kind, Message};
use crate::outbox::Outbox;
use crate::pending::{ChildReply, Pending};
use crate::reply;
use crate::turns::Turns;

/// An MCP proxy over any pair of byte streams. [`crate::run`] wires it to
/// a child process and this process's standard input and output.
///
/// Every message passes through unchanged, in the order it arrived, except:
///
/// - a `tools/call` request from the agent goes through the gate: once
///   admitted, it is sent to the server under a proxy-owned id, and the
///   agent gets the answer under its own id; a call sluice defers gets a
///   tool result with `isError: true` and the outcome as `structuredContent`;
/// - a `notifications/cancelled` from the agent for a gated call: a call
///   still waiting in sluice is dropped (nothing reaches the server, and
///   the agent gets no response, as the spec asks); one already sent is
///   cancelled at the server under the proxy's id;
/// - a line from the agent that is not JSON gets a parse error (`id: null`),
///   and JSON that is neither an object nor a non-empty array gets an
///   invalid-request error; a line from the server that is not a message
///   is logged and dropped;
/// - a batch from the agent is split into its elements, each handled as
///   above, and the responses go back as one array.
///
/// `tools/list` responses are read on their way to the agent to learn which
/// tools are read-only (see [`McpConfig::tools`] for overrides).
#[derive(Debug)]
pub struct Proxy {
    config: McpConfig,
    seed: Option<u64>,
}

impl Proxy {
    /// A proxy with this configuration.
    pub fn new(config: McpConfig) -> Self {
        Proxy { config, seed: None }
    }

    /// Seeds the gate's jitter and the proxy's ids (tests, reproducible runs).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Proxies between the agent (`agent_in`, `agent_out`) and the server
    /// (`server_in`, `server_out`) until the server's output ends.
    ///
    /// When the agent's input ends, calls still in sluice are dropped,
    /// calls sent are cancelled, and the server's input is closed; what the
    /// server writes is still passed on until its output ends. When the
    /// server's output ends, calls in progress are dropped, everything
    /// queued for the agent is written, and this returns.
    pub async fn serve<AI, AO, SI, SO>(
        self,
        agent_in: AI,
        agent_out: AO,
        server_in: SI,
        server_out: SO,
    ) -> Result<(), McpError>
    where
        AI: AsyncRead + Unpin + Send + 'static,
        AO: AsyncWrite + Unpin + Send + 'static,
        SI: AsyncWrite + Unpin + Send + 'static,
        SO: AsyncRead + Unpin + Send + 'static,
    {
        let nonce = self.seed.unwrap_or_else(rand::random);
        let (to_agent, agent_writer) = Outbox::spawn("agent", agent_out);
        let (to_server, server_writer) = Outbox::spawn("server", server_in);
        let pending = Arc::new(Pending::new(nonce));
        let executor = ChildExecutor {
            to_child: to_server.clone(),
            pending: pending.clone(),
        };
        let mut builder = Gate::builder(self.config.gate.clone(), executor);
        if let Some(seed) = self.seed {
            builder = builder.seed(seed);
        }
        let gate = builder.build()?;
        let router = Arc::new(Router {
            to_agent: to_agent.clone(),
            to_server: to_server.clone(),
            pending,
            turns: Turns::new(gate),
            catalog: Mutex::new(Catalog::new(
                self.config.credential.clone(),
                self.config.tools.clone(),
            )),
            calls: Mutex::new(HashMap::new()),
            lists: Mutex::new(HashSet::new()),
            batch_waits: Mutex::new(HashMap::new()),
            serial: AtomicU64::new(0),
        });

        let agent_reader = {
            let router = router.clone();
            tokio::spawn(async move {
                read_lines("agent", agent_in, |line| router.on_agent_line(line)).await;
                router.agent_closed();
            })
        };
        read_lines("server", server_out, |line| router.on_server_line(line)).await;
        agent_reader.abort();
        router.server_closed();
        drop(router);
        drop(to_server);
        to_agent.close();
        drop(to_agent);
        let _ = agent_writer.await;
        server_writer.abort();
        Ok(())
    }
}

/// Reads newline-delimited messages until the stream ends or fails.
async fn read_lines<R>(peer: &'static str, reader: R, mut each: impl FnMut(&[u8]))
where
    R: AsyncRead + Unpin,
{
    let mut reader = BufReader::new(reader);
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line).await {
            Ok(0) => return,
            Ok(_) => {
                if line.last() == Some(&b'\n') {
                    line.pop();
                }
                each(&line);
            }
            Err(error) => {
                tracing::warn!(peer, %error, "cannot read; treating it as the end of the stream");
                return;
            }
        }
    }
}

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
}

struct Router {
    to_agent: Outbox,
    to_server: Outbox,
    pending: Arc<Pending>,
    turns: Arc<Turns<ChildExecutor>>,
    catalog: Mutex<Catalog>,
    /// Gated calls by the agent's request id.
    calls: Mutex<HashMap<IdKey, Gated>>,
    /// The agent's `tools/list` requests awaiting their response.
    lists: Mutex<HashSet<IdKey>>,
    /// Requests of agent batches passed on, awaiting their response.
    batch_waits: Mutex<HashMap<IdKey, Arc<Batch>>>,
    serial: AtomicU64,
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

impl Router {
    fn on_agent_line(self: &Arc<Self>, line: &[u8]) {
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
                if self.agent_message(&message, &ReplyTo::Direct) == Next::Forward {
                    self.to_server.send(line.to_vec());
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
                    self.to_server.send(message);
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
                    (Some(params), Some(id), Some(raw_params)) => {
                        let form = if params.envelope() {
                            reply::Form::Envelope
                        } else {
                            reply::Form::Handshake
                        };
                        self.gate_call(id, &params.name, raw_params, form, reply_to);
                        Next::Handled
                    }
                    // Without a tool name there is nothing to gate: the
                    // server answers it (with an invalid-params error).
                    _ => {
                        self.await_response(message, reply_to);
                        Next::Forward
                    }
                }
            }
            (Kind::Request, Some("tools/list")) => {
                if let Some(id) = message.id_key() {
                    lock(&self.lists).insert(id);
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
            lock(&self.batch_waits).insert(id, batch.clone());
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
        let route = lock(&self.catalog).route(tool);
        tracing::debug!(tool, read = route.read, credential = %route.credential, "tools/call enters the gate");
        let call = Call::routed(tool, route, ToolCall::new(params.to_owned(), key.clone()));
        let entered = self.turns.enter();
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
        let mut calls = lock(&self.calls);
        let task = tokio::spawn(async move {
            let completion = entered.turn.complete(call).await;
            drop(entered);
            let message = reply::message(&id_text, &completion, form);
            {
                let mut calls = lock(&router.calls);
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
        lock(&self.lists).remove(&target);
        if let Some(batch) = lock(&self.batch_waits).remove(&target) {
            batch.forgo();
        }
        let Some(gated) = lock(&self.calls).remove(&target) else {
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

    fn on_server_line(&self, line: &[u8]) {
        match jsonrpc::parse(line) {
            Frame::Blank => {}
            Frame::Malformed(_) | Frame::Invalid => {
                let shown = String::from_utf8_lossy(&line[..line.len().min(200)]).into_owned();
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
                if lock(&self.lists).remove(&id)
                    && let Some(result) = message.result
                {
                    lock(&self.catalog).learn(result);
                }
                if let Some(batch) = lock(&self.batch_waits).remove(&id) {
                    batch.reply(message.raw.as_bytes().to_vec());
                    return Next::Handled;
                }
                Next::Forward
            }
            Kind::Notification if message.method() == Some("notifications/tools/list_changed") => {
                lock(&self.catalog).forget();
                Next::Forward
            }
            _ => Next::Forward,
        }
    }

    /// The agent closed its input: nothing more will be asked or waited for.
    fn agent_closed(&self) {
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

    /// The server's output ended: nothing more will be answered.
    fn server_closed(&self) {
        self.drop_calls();
        self.pending.clear();
        self.to_server.close();
    }

    fn drop_calls(&self) {
        let calls: Vec<Gated> = lock(&self.calls).drain().map(|(_, gated)| gated).collect();
        for gated in calls {
            gated.abort.abort();
        }
        lock(&self.batch_waits).clear();
    }
}

fn copy(raw: &RawValue) -> Bytes {
    Bytes::copy_from_slice(raw.get().as_bytes())
}

fn parse_error(why: &str) -> Vec<u8> {
    let error = json!({"code": jsonrpc::PARSE_ERROR, "message": format!("Parse error: {why}")});
    jsonrpc::error_response("null", &error.to_string())
}

fn invalid_request() -> Vec<u8> {
    let error = json!({"code": jsonrpc::INVALID_REQUEST, "message": "Invalid Request: not a JSON-RPC message object"});
    jsonrpc::error_response("null", &error.to_string())
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
