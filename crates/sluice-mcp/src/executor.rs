//! The gate's executor: sends a `tools/call` to the MCP server under a proxy-owned id and turns its answer into an HTTP response.

use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use http::StatusCode;
use serde_json::value::RawValue;
use sluice::{Executor, Payload, Request, TransportError};

use crate::jsonrpc::{self, IdKey};
use crate::outbox::Outbox;
use crate::pending::{ChildReply, Pending};

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
    /// The agent's request id, so that its cancellation can find this call.
    owner: IdKey,
}

impl ToolCall {
    pub(crate) fn new(params: Box<RawValue>, owner: IdKey) -> Self {
        let key = serde_json::from_str::<serde_json::Value>(params.get())
            .ok()
            .map(|mut value| {
                if let Some(object) = value.as_object_mut() {
                    object.remove("_meta");
                }
                value
            })
            .and_then(|value| value.coalesce_key());
        ToolCall { params, key, owner }
    }
}

impl Payload for ToolCall {
    fn coalesce_key(&self) -> Option<String> {
        self.key.clone()
    }
}

/// Sends calls to the MCP server (the child process) and awaits their answers.
#[derive(Debug, Clone)]
pub(crate) struct ChildExecutor {
    pub(crate) to_child: Outbox,
    pub(crate) pending: Arc<Pending>,
}

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

impl Executor for ChildExecutor {
    type Payload = ToolCall;

    fn execute(
        &self,
        request: Request<ToolCall>,
    ) -> impl Future<Output = Result<http::Response<Bytes>, TransportError>> + Send {
        let to_child = self.to_child.clone();
        let pending = self.pending.clone();
        async move {
            let call = &request.payload;
            let (id, reply) = pending.open(call.owner.clone());
            let forwarded = Forwarded {
                id: id.clone(),
                pending: pending.clone(),
                to_child: to_child.clone(),
            };
            let id_json = serde_json::Value::String(id).to_string();
            let line = jsonrpc::request(&id_json, "tools/call", Some(call.params.get()));
            if !to_child.send(line) {
                pending.abandon(&forwarded.id);
                return Err(TransportError::connect("the MCP server's input is closed"));
            }
            let answer = reply.await;
            drop(forwarded);
            match answer {
                Ok(reply) => Ok(into_response(reply)),
                Err(_) => Err(TransportError::other(
                    "the MCP server stopped before answering",
                )),
            }
        }
    }
}

/// The HTTP form of a JSON-RPC answer: a result is a 200 (a tool result
/// with `isError: true` included: it is the tool's answer, for the model),
/// an error a status the gate treats as its code deserves.
fn into_response(reply: ChildReply) -> http::Response<Bytes> {
    let (status, member, body) = match reply {
        ChildReply::Result(body) => (StatusCode::OK, "result", body),
        ChildReply::Error(body) => (status_of(&body), "error", body),
    };
    let mut response = http::Response::new(body);
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(MEMBER_HEADER, http::HeaderValue::from_static(member));
    response
}

/// The status for a JSON-RPC error object. Only an internal error or a
/// timeout may be worth repeating (a server error, retried for reads and
/// idempotent tools); every other code says the request itself cannot
/// succeed as sent (a client error: answered at once, never retried).
fn status_of(error: &[u8]) -> StatusCode {
    #[derive(serde::Deserialize)]
    struct Code {
        code: i64,
    }
    match serde_json::from_slice::<Code>(error).map(|error| error.code) {
        // JSON-RPC 2.0 §5.1 internal error.
        Ok(-32603) => StatusCode::INTERNAL_SERVER_ERROR,
        // The SDKs' request timeout.
        Ok(-32001) => StatusCode::GATEWAY_TIMEOUT,
        // MCP 2025-06-18: resource not found.
        Ok(-32002) => StatusCode::NOT_FOUND,
        _ => StatusCode::BAD_REQUEST,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(json: &str) -> Box<RawValue> {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn coalescing_ignores_meta_and_key_order() {
        let owner = IdKey::Num("1".to_owned());
        let a = ToolCall::new(
            raw(r#"{"name":"t","arguments":{"x":1,"y":2},"_meta":{"progressToken":7}}"#),
            owner.clone(),
        );
        let b = ToolCall::new(
            raw(r#"{"arguments":{"y":2,"x":1},"name":"t"}"#),
            owner.clone(),
        );
        let c = ToolCall::new(
            raw(r#"{"name":"t","arguments":{"x":2,"y":2}}"#),
            owner.clone(),
        );
        // A continuation (2026-07-28 input responses) is a different call.
        let d = ToolCall::new(
            raw(r#"{"name":"t","arguments":{"x":1,"y":2},"requestState":"s"}"#),
            owner,
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
        let response = into_response(ChildReply::Result(Bytes::from_static(b"{}")));
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()[MEMBER_HEADER], "result");
    }
}
