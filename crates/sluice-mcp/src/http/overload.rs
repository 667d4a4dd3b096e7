//! The answer to a POST that would take a `--listen` session past
//! `[mcp] session_queue` requests in progress: each of its requests is
//! refused at once, in the form a deferral by the gate takes, so that no
//! client can queue unbounded work in one session.

use std::time::Duration;

use serde_json::value::RawValue;
use sluice::{Completion, Outcome, Reason};
use sluice_config::Deferral;

use crate::jsonrpc::{self, Frame, Kind, Message};
use crate::reply;

/// The scope named in the refusal: the session's own bound, not a credential's.
pub(super) const SCOPE: &str = "session";
/// The wait suggested: requests of a session end at the pace of its calls,
/// which sluice does not foretell; a second is a retry soon, not a flood.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// The JSON body refusing every request of `body` (a message or a batch),
/// `running` being the session's requests in progress; `None` when it
/// holds no request. A `tools/call` gets the `rate_limited` outcome with
/// reason `shed` (a tool result, or a `-32023` error with `deferral =
/// "error"`), any other request the `-32023` error.
pub(super) fn refusal(body: &[u8], running: usize, deferral: Deferral) -> Option<Vec<u8>> {
    let outcome = Outcome::rate_limited(SCOPE, Reason::Shed, RETRY_AFTER, Some(running));
    let completion = Completion::from(outcome.clone());
    let answer = |message: &Message<'_>| -> Option<Vec<u8>> {
        if message.kind() != Kind::Request {
            return None;
        }
        let id = message.id?.get();
        if message.method() == Some("tools/call") {
            return Some(reply::message(
                id,
                &completion,
                form(message.params),
                deferral,
            ));
        }
        let error = reply::deferral_error(&outcome)?;
        Some(jsonrpc::error_response(id, &error))
    };
    match jsonrpc::parse(body) {
        Frame::Single(message) => answer(&message),
        Frame::Batch(elements) => {
            let answers: Vec<Vec<u8>> = elements
                .iter()
                .filter_map(|element| element.as_ref().ok().and_then(answer))
                .collect();
            (!answers.is_empty()).then(|| jsonrpc::batch(&answers))
        }
        Frame::Blank | Frame::Malformed(_) | Frame::Invalid => None,
    }
}

/// The result shape a `tools/call` with these `params` expects.
fn form(params: Option<&RawValue>) -> reply::Form {
    #[derive(serde::Deserialize)]
    struct Params {
        #[serde(default, rename = "_meta")]
        meta: Option<std::collections::HashMap<String, serde::de::IgnoredAny>>,
    }
    let envelope = params
        .and_then(|params| serde_json::from_str::<Params>(params.get()).ok())
        .and_then(|params| params.meta)
        .is_some_and(|meta| meta.contains_key(reply::PROTOCOL_VERSION_META));
    if envelope {
        reply::Form::Envelope
    } else {
        reply::Form::Handshake
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    #[test]
    fn a_call_is_shed_and_another_request_gets_the_rate_limited_error() {
        let body = br#"[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t"}},
            {"jsonrpc":"2.0","id":"p","method":"ping"},
            {"jsonrpc":"2.0","method":"notifications/initialized"}]"#;
        let answer: Value =
            serde_json::from_slice(&refusal(body, 4, Deferral::Result).unwrap()).unwrap();
        let answers = answer.as_array().unwrap();
        assert_eq!(answers.len(), 2);
        let outcome = &answers[0]["result"]["structuredContent"];
        assert_eq!(answers[0]["id"], 1);
        assert_eq!(outcome["status"], "rate_limited");
        assert_eq!(outcome["reason"], "shed");
        assert_eq!(outcome["scope"], SCOPE);
        assert_eq!(answers[1]["id"], "p");
        assert_eq!(answers[1]["error"]["code"], crate::signals::RATE_LIMITED);
        assert_eq!(answers[1]["error"]["data"]["retryAfterMs"], 1000);
        assert!(refusal(br#"{"jsonrpc":"2.0","method":"x"}"#, 0, Deferral::Result).is_none());
    }
}
