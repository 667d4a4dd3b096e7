//! The gate's executor: sends a `tools/call` to the MCP server under a proxy-owned id and turns its answer into an HTTP response.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use http::StatusCode;
use serde_json::value::RawValue;
use sluice::{Executor, NoRetry, Payload, Reply, Request, TransportError};
use sluice_http::trace::ClientSpan;

use crate::jsonrpc::{self, IdKey};
use crate::outbox::Outbox;
use crate::pending::{ChildReply, Pending};
use crate::signals::{self, Detector, Found};
use crate::trace_meta::with_trace_parent;

/// The header that says which member of the JSON-RPC response the body is.
pub(crate) const MEMBER_HEADER: &str = "x-sluice-mcp-member";

/// One agent's `tools/call`, as the gate carries it.
#[derive(Debug)]
pub(crate) struct ToolCall {
    /// The request's `params`, as the agent wrote them.
    params: Box<RawValue>,
    /// Its identity for coalescing: the canonical JSON of `params` without
    /// `_meta` (a progress token or protocol metadata does not make two
    /// calls different).
    key: Option<String>,
    /// `params.arguments`, for costs taken from an argument.
    arguments: serde_json::Value,
    /// `params.name`, which the forwarded request's span is named after.
    tool: Option<String>,
    /// The agent's request id, so that its cancellation can find this call.
    owner: IdKey,
    /// The session's way to its server.
    link: Link,
    /// What may be repeated after the server's answer.
    policy: Policy,
}

/// What a tool's class allows after an answer that did not succeed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Policy {
    /// A read or an idempotent tool: safe to run again.
    pub(crate) retry_safe: bool,
    /// Destructive and not idempotent: any answer from the server ends the call.
    pub(crate) destructive: bool,
}

impl ToolCall {
    pub(crate) fn new(params: Box<RawValue>, owner: IdKey, link: Link, policy: Policy) -> Self {
        let value = serde_json::from_str::<serde_json::Value>(params.get())
            .ok()
            .map(|mut value| {
                if let Some(object) = value.as_object_mut() {
                    object.remove("_meta");
                }
                value
            });
        let arguments = value
            .as_ref()
            .and_then(|value| value.get("arguments"))
            .cloned()
            .unwrap_or_default();
        let tool = value
            .as_ref()
            .and_then(|value| value.get("name"))
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned);
        let key = value.and_then(|value| value.coalesce_key());
        ToolCall {
            params,
            key,
            arguments,
            tool,
            owner,
            link,
            policy,
        }
    }
}

impl Payload for ToolCall {
    fn coalesce_key(&self) -> Option<String> {
        self.key.clone()
    }

    /// The tool's argument, for `cost = { U = "{arg}" }`.
    fn argument(&self, name: &str) -> Option<&serde_json::Value> {
        self.arguments.get(name)
    }
}

/// How a session's `tools/call` reaches its server: the session's
/// ordered message stream, or (Streamable HTTP) a request of its own
/// whose HTTP status and headers the gate reads as signals.
#[derive(Clone)]
pub(crate) struct Link {
    /// The session's messages to the server, in order.
    pub(crate) to_server: Outbox,
    /// The session's requests awaiting answers.
    pub(crate) pending: Arc<Pending>,
    /// Sends each `tools/call` itself, when the server is not a stream of lines.
    pub(crate) direct: Option<Arc<dyn DirectCall>>,
    /// Reads the server's answers for rate signals.
    pub(crate) detector: Arc<Detector>,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("direct", &self.direct.is_some())
            .finish_non_exhaustive()
    }
}

/// What [`DirectCall::send`] resolves to.
pub(crate) type Sent =
    Pin<Box<dyn Future<Output = Result<Option<http::Response<Bytes>>, TransportError>> + Send>>;

/// A transport that sends a `tools/call` as its own exchange (a POST on
/// Streamable HTTP).
pub(crate) trait DirectCall: Send + Sync + 'static {
    /// Sends the request `line`. The messages the server answers with are
    /// handed to the session as they arrive (the response among them
    /// reaches [`Pending`]); the future resolves once the answer's stream
    /// has ended (`Ok(None)`), or with the HTTP response when the server
    /// refused the request at the HTTP level (a status other than 2xx, its
    /// headers kept so the gate reads the signals). Dropping it abandons
    /// the exchange.
    fn send(self: Arc<Self>, line: Vec<u8>) -> Sent;
}

/// Sends calls to the server of the session each call belongs to, and
/// awaits their answers. One gate serves every session of a proxy.
#[derive(Debug, Clone, Default)]
pub(crate) struct ServerExecutor;

/// Sends `notifications/cancelled` for a forwarded request whose answer
/// nobody waits for any more: the gate dropped it at its deadline, or the
/// proxy is shutting down.
struct Forwarded {
    id: String,
    pending: Arc<Pending>,
    to_child: Outbox,
}

impl Drop for Forwarded {
    fn drop(&mut self) {
        if self.pending.abandon(&self.id) == Some(true) {
            let id = serde_json::Value::String(self.id.clone()).to_string();
            self.to_child.send(jsonrpc::cancelled(
                &id,
                Some("sluice: the call ran out of time"),
            ));
        }
    }
}

impl Executor for ServerExecutor {
    type Payload = ToolCall;

    async fn execute(&self, request: Request<ToolCall>) -> Result<Reply, TransportError> {
        // Sent: no more "waiting in the queue" for this call.
        crate::progress::past_queue();
        {
            let call = &request.payload;
            let link = call.link.clone();
            let pending = link.pending.clone();
            let (id, mut reply) = pending.open(call.owner.clone());
            let forwarded = Forwarded {
                id: id.clone(),
                pending: pending.clone(),
                to_child: link.to_server.clone(),
            };
            // A traced call's request is its CLIENT span, which the server
            // is told is its parent (replacing the agent's own); an
            // untraced one is forwarded byte for byte.
            let span = ClientSpan::json_rpc("tools/call", call.tool.as_deref(), &id);
            let traced = span
                .as_ref()
                .and_then(|span| with_trace_parent(&call.params, span.traceparent()));
            let params = traced.as_deref().unwrap_or(call.params.get());
            let id_json = serde_json::Value::String(id).to_string();
            let line = jsonrpc::request(&id_json, "tools/call", Some(params));
            let answer = match link.direct {
                None => {
                    if !link.to_server.send(line) {
                        pending.abandon(&forwarded.id);
                        end(span, Some("transport"));
                        return Err(TransportError::connect(
                            "the MCP server's input is closed, or full (it is not reading)",
                        ));
                    }
                    (&mut reply).await.ok()
                }
                Some(direct) => {
                    let mut sending = direct.send(line);
                    tokio::select! {
                        biased;
                        answer = &mut reply => answer.ok(),
                        sent = &mut sending => match sent {
                            // Refused at the HTTP level: nothing to cancel.
                            Ok(Some(mut response)) => {
                                pending.abandon(&forwarded.id);
                                end(span, Some(response.status().as_str()));
                                if call.policy.destructive && ambiguous(response.status()) {
                                    response.extensions_mut().insert(NoRetry);
                                }
                                return Ok(response.into());
                            }
                            // The stream ended; what it carried was handed on already.
                            Ok(None) => match reply.try_recv() {
                                Ok(answer) => Some(answer),
                                Err(_) => {
                                    pending.abandon(&forwarded.id);
                                    end(span, Some("transport"));
                                    return Err(TransportError::other(
                                        "the MCP server ended its answer without the response",
                                    ));
                                }
                            },
                            Err(error) => {
                                pending.abandon(&forwarded.id);
                                end(span, Some("transport"));
                                return Err(error);
                            }
                        },
                    }
                }
            };
            drop(forwarded);
            if let Some(span) = span {
                span.end(error_type(answer.as_ref()).as_deref());
            }
            match answer {
                Some(reply) => Ok(into_response(reply, &link.detector, call.policy).into()),
                None => Err(TransportError::other(
                    "the MCP server stopped before answering",
                )),
            }
        }
    }
}

/// Ends the forwarded request's span, if the call is traced: `error` is
/// its `error.type` (the JSON-RPC error's code, the HTTP status that
/// refused it, or `transport` when no answer came).
fn end(span: Option<ClientSpan>, error: Option<&str>) {
    if let Some(span) = span {
        span.end(error);
    }
}

/// The forwarded request's `error.type` for the server's answer: the
/// JSON-RPC error's code, or `transport` when none came.
fn error_type(answer: Option<&ChildReply>) -> Option<String> {
    match answer {
        Some(ChildReply::Error(body)) => {
            Some(error_code(body).map_or_else(|| "error".to_owned(), |code| code.to_string()))
        }
        Some(ChildReply::Result(_)) => None,
        None => Some("transport".to_owned()),
    }
}

/// The HTTP form of a JSON-RPC answer, as the gate reads it.
///
/// A result is a 200 (a tool result with `isError: true` included: it is
/// the tool's answer, for the model), an error a status the gate treats as
/// its code deserves. A rate signal, a `-32023` error or a tool error that
/// reports its API's limit ([`signals`]), is a 429 with `retry-after-ms`
/// when the server stated a wait: the gate penalizes the scope and paces a
/// retry. A `-32023` says the server did not run the call, so any tool
/// may go again, as after an HTTP 429; a tool error means the tool ran,
/// so it is retried only for a retry-safe tool. A destructive tool is not
/// repeated after any other failure ([`NoRetry`]).
pub(crate) fn into_response(
    reply: ChildReply,
    detector: &Detector,
    policy: Policy,
) -> http::Response<Bytes> {
    let (status, member, body, signal) = match reply {
        ChildReply::Result(body) => match detector.tool_result(&body) {
            Some(found) => (
                StatusCode::TOO_MANY_REQUESTS,
                "result",
                body,
                Some((found, true)),
            ),
            None => (StatusCode::OK, "result", body, None),
        },
        ChildReply::Error(body) => match signals::jsonrpc_error(&body) {
            Some(found) => (
                StatusCode::TOO_MANY_REQUESTS,
                "error",
                body,
                Some((found, false)),
            ),
            None => (status_of(&body), "error", body, None),
        },
    };
    let mut response = http::Response::new(body);
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(MEMBER_HEADER, http::HeaderValue::from_static(member));
    if let Some((Found { wait, source }, tool_ran)) = signal {
        tracing::debug!(
            source,
            wait_ms = wait.map(|w| w.as_millis() as u64),
            "the MCP server reported a rate limit"
        );
        if let Some(wait) = wait {
            // Rounded up: never start before the server said.
            let ms = wait.as_micros().div_ceil(1_000);
            if let Ok(value) = http::HeaderValue::from_str(&ms.to_string()) {
                response.headers_mut().insert("retry-after-ms", value);
            }
        }
        if tool_ran && !policy.retry_safe {
            response.extensions_mut().insert(NoRetry);
        }
    }
    if policy.destructive && ambiguous(status) {
        response.extensions_mut().insert(NoRetry);
    }
    response
}

/// A failure after which the server may have acted: anything but a
/// success or a refusal (429, or its JSON-RPC form `-32023`, says the
/// server did not run the call).
fn ambiguous(status: StatusCode) -> bool {
    !status.is_success() && status != StatusCode::TOO_MANY_REQUESTS
}

/// The status for a JSON-RPC error object. Only an internal error or a
/// timeout may be worth repeating (a server error, retried for reads and
/// idempotent tools); every other code says the request itself cannot
/// succeed as sent (a client error: answered at once, never retried).
fn status_of(error: &[u8]) -> StatusCode {
    match error_code(error) {
        // JSON-RPC 2.0 §5.1 internal error.
        Some(-32603) => StatusCode::INTERNAL_SERVER_ERROR,
        // The SDKs' request timeout.
        Some(-32001) => StatusCode::GATEWAY_TIMEOUT,
        // MCP 2025-06-18: resource not found.
        Some(-32002) => StatusCode::NOT_FOUND,
        _ => StatusCode::BAD_REQUEST,
    }
}

/// The `code` of a JSON-RPC error object.
fn error_code(error: &[u8]) -> Option<i64> {
    #[derive(serde::Deserialize)]
    struct Code {
        code: i64,
    }
    serde_json::from_slice::<Code>(error)
        .ok()
        .map(|error| error.code)
}

#[cfg(test)]
mod tests {

    /// Issue 14: a cost `"{arg}"` reads `arguments.arg` of the `tools/call`.
    #[test]
    fn arguments_are_read_for_costs() {
        let params: Box<RawValue> = serde_json::from_str(
            r#"{"name":"chat","arguments":{"max_tokens":300},"_meta":{"progressToken":1}}"#,
        )
        .unwrap();
        let (to_server, _inbox) = Outbox::channel();
        let link = Link {
            to_server,
            pending: Arc::new(Pending::new(1)),
            direct: None,
            detector: Arc::new(Detector::default()),
        };
        let call = ToolCall::new(
            params,
            IdKey::of(&serde_json::from_str::<Box<RawValue>>("1").unwrap()),
            link,
            Policy::default(),
        );
        assert_eq!(call.argument("max_tokens"), Some(&serde_json::json!(300)));
        assert_eq!(call.argument("name"), None);
    }

    use super::*;

    fn raw(json: &str) -> Box<RawValue> {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn coalescing_ignores_meta_and_key_order() {
        let owner = IdKey::Num("1".to_owned());
        let (to_server, _inbox) = Outbox::channel();
        let link = Link {
            to_server,
            pending: Arc::new(Pending::new(1)),
            direct: None,
            detector: Arc::new(Detector::default()),
        };
        let a = ToolCall::new(
            raw(r#"{"name":"t","arguments":{"x":1,"y":2},"_meta":{"progressToken":7}}"#),
            owner.clone(),
            link.clone(),
            Policy::default(),
        );
        let b = ToolCall::new(
            raw(r#"{"arguments":{"y":2,"x":1},"name":"t"}"#),
            owner.clone(),
            link.clone(),
            Policy::default(),
        );
        let c = ToolCall::new(
            raw(r#"{"name":"t","arguments":{"x":2,"y":2}}"#),
            owner.clone(),
            link.clone(),
            Policy::default(),
        );
        // A continuation (2026-07-28 input responses) is a different call.
        let d = ToolCall::new(
            raw(r#"{"name":"t","arguments":{"x":1,"y":2},"requestState":"s"}"#),
            owner,
            link,
            Policy::default(),
        );
        assert_eq!(a.coalesce_key(), b.coalesce_key());
        assert_ne!(a.coalesce_key(), c.coalesce_key());
        assert_ne!(a.coalesce_key(), d.coalesce_key());
    }

    #[test]
    fn errors_map_to_statuses_by_code() {
        let status = |json: &str| status_of(json.as_bytes());
        assert_eq!(status(r#"{"code":-32603,"message":"boom"}"#), 500);
        assert_eq!(status(r#"{"code":-32602,"message":"bad"}"#), 400);
        assert_eq!(status(r#"{"code":-32601,"message":"no"}"#), 400);
        assert_eq!(status(r#"{"code":-32001,"message":"slow"}"#), 504);
        assert_eq!(status(r#"{"code":-32002,"message":"gone"}"#), 404);
        assert_eq!(status(r#"{"code":"odd"}"#), 400);
        assert_eq!(status("garbage"), 400);
        let detector = Detector::default();
        let response = into_response(
            ChildReply::Result(Bytes::from_static(b"{}")),
            &detector,
            Policy::default(),
        );
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()[MEMBER_HEADER], "result");
    }

    #[test]
    fn rate_signals_become_429s_the_gate_reads() {
        let detector = Detector::default();
        let write = Policy::default();
        let read = Policy {
            retry_safe: true,
            destructive: false,
        };
        let destructive = Policy {
            retry_safe: false,
            destructive: true,
        };
        let limited = || {
            ChildReply::Result(Bytes::from_static(
                br#"{"content":[{"type":"text","text":"API rate limit exceeded, retry after 1.5s"}],"isError":true}"#,
            ))
        };
        let response = into_response(limited(), &detector, read);
        assert_eq!(response.status(), 429);
        assert_eq!(response.headers()["retry-after-ms"], "1500");
        assert!(response.extensions().get::<NoRetry>().is_none());
        // The tool ran: a write is not run again.
        let response = into_response(limited(), &detector, write);
        assert!(response.extensions().get::<NoRetry>().is_some());

        let refused = || {
            ChildReply::Error(Bytes::from_static(
                br#"{"code":-32023,"message":"Rate limited","data":{"retryAfterMs":250}}"#,
            ))
        };
        // The server refused before running it: even a destructive write may go again ...
        let response = into_response(refused(), &detector, write);
        assert_eq!(response.status(), 429);
        assert_eq!(response.headers()["retry-after-ms"], "250");
        assert_eq!(response.headers()[MEMBER_HEADER], "error");
        assert!(response.extensions().get::<NoRetry>().is_none());
        let response = into_response(refused(), &detector, destructive);
        assert!(response.extensions().get::<NoRetry>().is_none());
        // ... but a destructive one does not after a failure that may have acted.
        let response = into_response(limited(), &detector, destructive);
        assert!(response.extensions().get::<NoRetry>().is_some());
        let failed = ChildReply::Error(Bytes::from_static(br#"{"code":-32603,"message":"x"}"#));
        let response = into_response(failed, &detector, destructive);
        assert_eq!(response.status(), 500);
        assert!(response.extensions().get::<NoRetry>().is_some());
        // An ordinary tool error is the tool's answer.
        let plain = ChildReply::Result(Bytes::from_static(
            br#"{"content":[{"type":"text","text":"no such file"}],"isError":true}"#,
        ));
        assert_eq!(into_response(plain, &detector, read).status(), 200);
    }
}
