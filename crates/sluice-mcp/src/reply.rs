//! What the agent gets for a gated `tools/call`: the server's answer, or sluice's outcome as a tool result.

use serde_json::json;
use sluice::{Completion, Outcome};
use sluice_config::Deferral;

use crate::executor::MEMBER_HEADER;
use crate::jsonrpc;

/// The `_meta` key that carries the protocol revision on every request of
/// the per-request envelope (revision 2026-07-28 on).
pub(crate) const PROTOCOL_VERSION_META: &str = "io.modelcontextprotocol/protocolVersion";

/// Which revisions' result shape the agent expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Form {
    /// Revisions with the `initialize` handshake (2024-11-05 to 2025-11-25).
    Handshake,
    /// The per-request envelope (2026-07-28 on): every result carries
    /// `resultType` ("Servers implementing this protocol version MUST
    /// include this field").
    Envelope,
}

/// The JSON-RPC response to the agent's request `id` (JSON text, echoed as written).
///
/// An `ok` outcome returns the server's result byte for byte; a server's
/// JSON-RPC error returns that error. Everything sluice decided itself
/// (`rate_limited`, `quota_exhausted`, `timed_out`, or an `error` with no
/// answer from the server) is a tool result with `isError: true`, the
/// outcome object as `structuredContent` and its JSON as a text block: the
/// MCP spec's form for tool errors the model should see and act on, never
/// a protocol error. With `deferral = "error"`, a deferral (`rate_limited`,
/// `quota_exhausted`) is instead a JSON-RPC error `-32023` ([`deferral_error`]).
pub(crate) fn message(
    id: &str,
    completion: &Completion,
    form: Form,
    deferral: Deferral,
) -> Vec<u8> {
    let answer = completion.response.as_deref().and_then(|response| {
        let member = response.headers().get(MEMBER_HEADER)?.to_str().ok()?;
        let body = std::str::from_utf8(response.body()).ok()?;
        Some((member, body))
    });
    match (&completion.outcome, answer) {
        (Outcome::Ok { .. }, Some(("result", result))) => jsonrpc::result_response(id, result),
        (Outcome::Ok { body, .. }, None) => jsonrpc::result_response(id, &body.to_string()),
        (Outcome::Error { .. }, Some(("error", error))) => jsonrpc::error_response(id, error),
        (outcome, _) => match (deferral, deferral_error(outcome)) {
            (Deferral::Error, Some(error)) => jsonrpc::error_response(id, &error),
            _ => jsonrpc::result_response(id, &tool_error(outcome, form)),
        },
    }
}

/// A deferral as SEP-3304's RateLimited error: code `-32023`, and in
/// `data` the wait in milliseconds (`retryAfterMs`, the SEP's member),
/// the scope, the reason (`quota_exhausted` for a spent quota) and the
/// hint. `None` for an outcome that is not a deferral.
pub(crate) fn deferral_error(outcome: &Outcome) -> Option<String> {
    let (scope, reason, retry_after_ms, window, hint) = match outcome {
        Outcome::RateLimited {
            scope,
            reason,
            retry_after_ms,
            window,
            hint,
        } => (scope, reason.as_str(), retry_after_ms, window, hint),
        Outcome::QuotaExhausted {
            scope,
            retry_after_ms,
            hint,
        } => (scope, "quota_exhausted", retry_after_ms, &None, hint),
        _ => return None,
    };
    let mut data =
        json!({"retryAfterMs": retry_after_ms, "scope": scope, "reason": reason, "hint": hint});
    // The window of sluice's own that deferred it, when one did (issue 14).
    if let Some(window) = window {
        data["window"] = json!(window);
    }
    let error = json!({
        "code": crate::signals::RATE_LIMITED,
        "message": format!("Rate limited by sluice: retry after {retry_after_ms} ms"),
        "data": data,
    });
    Some(error.to_string())
}

/// A `CallToolResult` carrying an outcome the model should see.
pub(crate) fn tool_error(outcome: &Outcome, form: Form) -> String {
    let value = serde_json::to_value(outcome).unwrap_or_else(|_| json!({"status": "error"}));
    let mut result = json!({
        "content": [{"type": "text", "text": value.to_string()}],
        "structuredContent": value,
        "isError": true,
    });
    if form == Form::Envelope {
        result["resultType"] = json!("complete");
    }
    result.to_string()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use bytes::Bytes;
    use serde_json::Value;
    use sluice::Reason;

    use super::*;

    fn completion(outcome: Outcome, member: Option<(&'static str, &'static str)>) -> Completion {
        Completion {
            outcome,
            response: member.map(|(member, body)| {
                let mut response = http::Response::new(Bytes::from_static(body.as_bytes()));
                response
                    .headers_mut()
                    .insert(MEMBER_HEADER, http::HeaderValue::from_static(member));
                Arc::new(response)
            }),
            stream: None,
            coalesced: false,
        }
    }

    fn value(bytes: &[u8]) -> Value {
        serde_json::from_slice(bytes).unwrap()
    }

    #[test]
    fn results_pass_through_byte_for_byte() {
        let result = r#"{"content":[{"type":"text","text":"hi"}],"isError":false, "extra" : 1}"#;
        let ok = Outcome::Ok {
            http_status: 200,
            body: Value::Null.into(),
        };
        let line = message(
            r#""a-1""#,
            &completion(ok, Some(("result", result))),
            Form::Handshake,
            Deferral::Result,
        );
        assert_eq!(
            String::from_utf8(line).unwrap(),
            format!(r#"{{"jsonrpc":"2.0","id":"a-1","result":{result}}}"#)
        );
        let error = r#"{"code":-32602,"message":"Unknown tool"}"#;
        let failed = Outcome::error(Some(400), "upstream answered 400");
        let line = message(
            "9",
            &completion(failed, Some(("error", error))),
            Form::Envelope,
            Deferral::Error,
        );
        assert_eq!(
            value(&line),
            json!({"jsonrpc":"2.0","id":9,"error":{"code":-32602,"message":"Unknown tool"}})
        );
    }

    #[test]
    fn deferrals_are_tool_results_the_model_can_read() {
        let deferred = Outcome::rate_limited(
            "api_key",
            Reason::Shed,
            Duration::from_millis(1800),
            Some(4),
        );
        let line = value(&message(
            "3",
            &completion(deferred.clone(), None),
            Form::Handshake,
            Deferral::Result,
        ));
        assert_eq!(line["id"], 3);
        assert!(line.get("error").is_none());
        let result = &line["result"];
        assert_eq!(result["isError"], true);
        assert!(result.get("resultType").is_none());
        assert_eq!(result["structuredContent"]["status"], "rate_limited");
        assert_eq!(result["structuredContent"]["retry_after_ms"], 1800);
        let text: Value =
            serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap();
        assert_eq!(text, serde_json::to_value(&deferred).unwrap());

        let gone = Outcome::error(
            None,
            "request failed: the MCP server stopped before answering",
        );
        let line = value(&message(
            "4",
            &completion(gone.clone(), None),
            Form::Envelope,
            Deferral::Result,
        ));
        assert_eq!(line["result"]["structuredContent"]["status"], "error");
        // The per-request envelope's results say what they are.
        assert_eq!(line["result"]["resultType"], "complete");
        // Not a deferral: a tool result whatever the deferral setting.
        let line = value(&message(
            "4",
            &completion(gone, None),
            Form::Envelope,
            Deferral::Error,
        ));
        assert_eq!(line["result"]["structuredContent"]["status"], "error");
    }

    #[test]
    fn deferrals_as_jsonrpc_errors() {
        let deferred = Outcome::rate_limited(
            "search",
            Reason::Throttled,
            Duration::from_millis(4200),
            None,
        );
        let line = value(&message(
            r#""q""#,
            &completion(deferred.clone(), None),
            Form::Handshake,
            Deferral::Error,
        ));
        assert_eq!(line["id"], "q");
        assert!(line.get("result").is_none());
        let error = &line["error"];
        assert_eq!(error["code"], -32023);
        assert_eq!(error["data"]["retryAfterMs"], 4200);
        assert_eq!(error["data"]["scope"], "search");
        assert_eq!(error["data"]["reason"], "throttled");
        let Outcome::RateLimited { hint, .. } = &deferred else {
            unreachable!()
        };
        assert_eq!(error["data"]["hint"], hint.as_str());
        let spent = Outcome::QuotaExhausted {
            scope: "daily".to_owned(),
            retry_after_ms: 60_000,
            hint: "spent".to_owned(),
        };
        let line = value(&message(
            "1",
            &completion(spent, None),
            Form::Handshake,
            Deferral::Error,
        ));
        assert_eq!(line["error"]["data"]["reason"], "quota_exhausted");
        assert_eq!(line["error"]["data"]["retryAfterMs"], 60_000);
    }
}
