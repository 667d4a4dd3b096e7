//! Step 8's verdicts: a response or a transport error sorted into the call's outcome, or a failure to consider retrying.

use std::sync::Arc;

use bytes::Bytes;

use super::reserve::next_slot;
use crate::body::Body;
use crate::call::Completion;
use crate::engine::Engine;
use crate::executor::{NoRetry, TransportError};
use crate::outcome::{Outcome, Reason};
use crate::retry::Failure;
use crate::scope::ScopeRef;
use crate::signal::Signal;

/// Longest upstream body quoted in an error outcome's message.
const MAX_ERROR_BODY: usize = 1_000;

/// How an attempt ended when it did not end the call.
pub(super) struct Failed {
    pub(super) kind: Failure,
    /// The server asked for a wait (now charged to the scope's cell).
    pub(super) server_wait: bool,
    /// The server refused for too many in flight: the retry waits for a
    /// permit under the lowered cap.
    pub(super) concurrency: bool,
    /// The executor marked the response [`NoRetry`].
    pub(super) final_attempt: bool,
    response: Option<Arc<http::Response<Bytes>>>,
    message: String,
    blamed: ScopeRef,
}

/// Sorts a response into the call's outcome, or a failure to consider
/// retrying, blamed on the scope `blame` finds. An `ok` completion keeps
/// the response only when `kept`.
pub(super) fn response(
    response: http::Response<Bytes>,
    signal: &Signal,
    blame: impl FnOnce() -> ScopeRef,
    kept: bool,
) -> Result<Completion, Failed> {
    let status = response.status();
    if !signal.throttled && status.as_u16() < 400 {
        let outcome = Outcome::Ok {
            http_status: status.as_u16(),
            body: Body::from_bytes(response.body().clone()),
        };
        return Ok(Completion {
            outcome,
            response: kept.then(|| Arc::new(response)),
            stream: None,
            coalesced: false,
        });
    }
    let message = upstream_message(&response);
    let kind = if signal.throttled {
        Failure::Throttled
    } else if status == http::StatusCode::SERVICE_UNAVAILABLE {
        Failure::Unavailable
    } else if status.is_server_error() {
        Failure::ServerError
    } else {
        // Any other 4xx: the request itself was refused; say so.
        let outcome = Outcome::error(Some(status.as_u16()), message);
        return Ok(Completion {
            outcome,
            response: Some(Arc::new(response)),
            stream: None,
            coalesced: false,
        });
    };
    Err(Failed {
        kind,
        server_wait: signal.throttled
            && !signal.concurrency
            && signal.wait().is_some_and(|w| !w.delay.is_zero()),
        concurrency: signal.concurrency,
        final_attempt: response.extensions().get::<NoRetry>().is_some(),
        response: Some(Arc::new(response)),
        message,
        blamed: blame(),
    })
}

/// A request that got no response, blamed on the credential's own scope.
pub(super) fn transport(error: TransportError, primary: &ScopeRef) -> Failed {
    Failed {
        kind: if error.not_sent {
            Failure::NotSent
        } else {
            Failure::Transport
        },
        server_wait: false,
        concurrency: false,
        final_attempt: false,
        response: None,
        message: format!("request failed: {}", error.message),
        blamed: primary.clone(),
    }
}

/// The call ends after a failure: a refusal becomes `rate_limited` with
/// the wait the scope now needs; anything else is reported as it was.
pub(super) fn give_up<E>(engine: &Engine<E>, failed: Failed, reason: Option<Reason>) -> Completion {
    let outcome = match failed.kind {
        Failure::Throttled => {
            let wait = next_slot(engine, &failed.blamed);
            Outcome::rate_limited(
                &failed.blamed.name,
                reason.unwrap_or(Reason::Throttled),
                wait,
                None,
            )
        }
        _ => {
            let status = failed.response.as_ref().map(|r| r.status().as_u16());
            Outcome::error(status, failed.message)
        }
    };
    Completion {
        outcome,
        response: failed.response,
        stream: None,
        coalesced: false,
    }
}

/// `upstream answered 404: {start of body}`.
fn upstream_message(response: &http::Response<Bytes>) -> String {
    let body = String::from_utf8_lossy(response.body());
    let mut snippet: String = body.chars().take(MAX_ERROR_BODY).collect();
    if snippet.len() < body.len() {
        snippet.push('…');
    }
    if snippet.is_empty() {
        format!("upstream answered {}", response.status())
    } else {
        format!("upstream answered {}: {}", response.status(), snippet)
    }
}
