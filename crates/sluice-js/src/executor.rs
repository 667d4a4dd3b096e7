//! The gate's executor and what its calls carry: a configured tool's request
//! or a `gate.fetch` request goes through the sidecar's HTTP executor (to
//! the credential's origin only); a function tool runs in JavaScript, called
//! back through a thread-safe function whose promise is awaited here.

use std::future::Future;
use std::sync::Arc;

use crate::{HttpExecutor, Outbound};
use bytes::Bytes;
use http::{HeaderName, HeaderValue, StatusCode};
use napi::Status;
use napi::bindgen_prelude::Promise;
use napi::threadsafe_function::ThreadsafeFunction;
use serde_json::Value;
use sluice::{Executor, Reply, Request, TransportError};

/// A function tool's attempt: called with nothing, it answers a promise of
/// the attempt's answer as JSON text (`js/lib/attempt.js`). Weak: a call
/// that is never run does not keep Node's event loop alive.
pub(crate) type Start = ThreadsafeFunction<(), Promise<String>, (), Status, false, true>;

/// What one call carries to the executor.
pub(crate) enum Payload {
    /// A configured tool's rendered request, or a `gate.fetch` request.
    Http(Arc<Outbound>),
    /// A function tool, run in JavaScript.
    Js(JsWork),
}

/// One function tool call: `start` is called once per attempt.
pub(crate) struct JsWork {
    /// The call's identity for coalescing (reads only).
    pub(crate) key: Option<String>,
    /// Begins an attempt.
    pub(crate) start: Arc<Start>,
}

impl sluice::Payload for Payload {
    fn coalesce_key(&self) -> Option<String> {
        match self {
            Payload::Http(outbound) => outbound.coalesce_key(),
            Payload::Js(work) => work.key.clone(),
        }
    }
}

// A function tool that raised: one home for both bindings.
pub(crate) use sluice_http::{Raised, outcome_of};

/// Sends HTTP through the sidecar's executor and function tools through
/// JavaScript.
pub(crate) struct JsExecutor {
    http: HttpExecutor,
}

impl JsExecutor {
    pub(crate) fn new(http: HttpExecutor) -> Self {
        JsExecutor { http }
    }
}

impl Executor for JsExecutor {
    type Payload = Payload;

    fn execute(
        &self,
        request: Request<Payload>,
    ) -> impl Future<Output = Result<Reply, TransportError>> + Send {
        let http = self.http.clone();
        async move {
            match &*request.payload {
                Payload::Http(outbound) => {
                    http.execute(request.with_payload(outbound.clone())).await
                }
                Payload::Js(work) => {
                    let promise = work.start.call_async(()).await.map_err(|error| {
                        TransportError::other(format!("cannot call the tool: {error}"))
                    })?;
                    let answer = promise.await.map_err(|error| {
                        TransportError::other(format!("the tool's attempt failed: {error}"))
                    })?;
                    read_answer(&answer).map(Reply::from)
                }
            }
        }
    }
}

/// What the JavaScript side of an attempt answered (`js/lib/attempt.js`):
/// `{"kind":"response","status":200,"headers":[[name,value]],"body":"…"}`,
/// `{"kind":"failed","notSent":false,"message":"…"}` or
/// `{"kind":"raised","message":"…"}`.
fn read_answer(answer: &str) -> Result<http::Response<Bytes>, TransportError> {
    let malformed =
        |what: &str| TransportError::other(format!("the attempt's answer is malformed: {what}"));
    let answer: Value =
        serde_json::from_str(answer).map_err(|error| malformed(&error.to_string()))?;
    let text = |field: &str| answer.get(field).and_then(Value::as_str);
    match text("kind") {
        Some("response") => {
            let status = answer
                .get("status")
                .and_then(Value::as_u64)
                .and_then(|status| u16::try_from(status).ok())
                .ok_or_else(|| malformed("no status"))?;
            let Ok(status) = StatusCode::from_u16(status) else {
                return Err(TransportError::other(format!(
                    "invalid HTTP status {status}"
                )));
            };
            let mut response = http::Response::new(Bytes::new());
            *response.status_mut() = status;
            let headers = response.headers_mut();
            for pair in answer
                .get("headers")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let (Some(name), Some(value)) = (
                    pair.get(0).and_then(Value::as_str),
                    pair.get(1).and_then(Value::as_str),
                ) else {
                    continue;
                };
                // fetch's Headers have checked both; one still invalid is left out.
                if let (Ok(name), Ok(value)) = (
                    HeaderName::from_bytes(name.as_bytes()),
                    HeaderValue::from_str(value),
                ) {
                    headers.append(name, value);
                }
            }
            let body = text("body").unwrap_or_default();
            *response.body_mut() = Bytes::copy_from_slice(body.as_bytes());
            Ok(response)
        }
        Some("failed") => Err(TransportError {
            not_sent: answer
                .get("notSent")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            message: text("message").unwrap_or("the attempt failed").to_owned(),
        }),
        Some("raised") => {
            let message = text("message").unwrap_or("the tool threw").to_owned();
            // A refusal: answered as an error, never retried, never cached.
            let mut response = http::Response::new(Bytes::new());
            *response.status_mut() = StatusCode::BAD_REQUEST;
            response.extensions_mut().insert(Raised(message));
            Ok(response)
        }
        _ => Err(malformed("unknown kind")),
    }
}
