//! Writing messages: the proxy's own requests, notifications and responses, with ids and results spliced in as written.

use serde_json::json;

/// JSON-RPC 2.0 §5.1: invalid JSON was received.
pub(crate) const PARSE_ERROR: i64 = -32700;
/// JSON-RPC 2.0 §5.1: the JSON sent is not a valid request object.
pub(crate) const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC 2.0 §5.1: internal JSON-RPC error.
pub(crate) const INTERNAL_ERROR: i64 = -32603;

/// A request; `id` and `params` are JSON text.
pub(crate) fn request(id: &str, method: &str, params: Option<&str>) -> Vec<u8> {
    let method = json!(method);
    match params {
        Some(params) => {
            format!(r#"{{"jsonrpc":"2.0","id":{id},"method":{method},"params":{params}}}"#)
        }
        None => format!(r#"{{"jsonrpc":"2.0","id":{id},"method":{method}}}"#),
    }
    .into_bytes()
}

/// A success response; `id` and `result` are JSON text, kept byte for byte.
pub(crate) fn result_response(id: &str, result: &str) -> Vec<u8> {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{result}}}"#).into_bytes()
}

/// An error response; `id` and `error` (the error object) are JSON text.
pub(crate) fn error_response(id: &str, error: &str) -> Vec<u8> {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{error}}}"#).into_bytes()
}

/// A notification; `params` is JSON text.
pub(crate) fn notification(method: &str, params: &str) -> Vec<u8> {
    let method = json!(method);
    format!(r#"{{"jsonrpc":"2.0","method":{method},"params":{params}}}"#).into_bytes()
}

/// `notifications/cancelled` for the request `request_id` (JSON text).
pub(crate) fn cancelled(request_id: &str, reason: Option<&str>) -> Vec<u8> {
    let reason = reason.map_or_else(String::new, |reason| {
        format!(r#","reason":{}"#, json!(reason))
    });
    format!(
        r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":{request_id}{reason}}}}}"#
    )
    .into_bytes()
}

/// A batch of messages (each JSON text) as one array.
pub(crate) fn batch(messages: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::with_capacity(messages.iter().map(|m| m.len() + 1).sum::<usize>() + 2);
    out.push(b'[');
    for (index, message) in messages.iter().enumerate() {
        if index > 0 {
            out.push(b',');
        }
        out.extend_from_slice(message);
    }
    out.push(b']');
    out
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    fn value(bytes: &[u8]) -> Value {
        serde_json::from_slice(bytes).unwrap()
    }

    #[test]
    fn messages_are_valid_json_rpc() {
        assert_eq!(
            value(&request(r#""p-1""#, "tools/call", Some(r#"{"name":"t"}"#))),
            json!({"jsonrpc":"2.0","id":"p-1","method":"tools/call","params":{"name":"t"}})
        );
        assert_eq!(
            value(&result_response("7", r#"{"content":[]}"#)),
            json!({"jsonrpc":"2.0","id":7,"result":{"content":[]}})
        );
        assert_eq!(
            value(&error_response(
                "null",
                r#"{"code":-32700,"message":"Parse error"}"#
            )),
            json!({"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}})
        );
        assert_eq!(
            value(&cancelled(r#""p-1""#, Some("the \"agent\" gave up"))),
            json!({"jsonrpc":"2.0","method":"notifications/cancelled",
                   "params":{"requestId":"p-1","reason":"the \"agent\" gave up"}})
        );
        assert_eq!(
            value(&cancelled("3", None)),
            json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}})
        );
        assert_eq!(
            value(&batch(&[b"1".to_vec(), b"{}".to_vec()])),
            json!([1, {}])
        );
    }
}
