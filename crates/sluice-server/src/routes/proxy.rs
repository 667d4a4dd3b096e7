//! `ANY /proxy/{credential}/{*path}`: a plain HTTP request forwarded to the
//! credential's base URL through the gate; the upstream response comes back
//! as is, its body streamed as it arrives, sluice's own refusals as 429 or
//! 504 with the outcome.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::header::{ACCEPT, CONTENT_LENGTH, RETRY_AFTER};
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use percent_encoding::percent_decode_str;
use sluice::{BodyStream, Call, Completion, Outcome, Priority, Route, StreamSlot};
use sluice_http::scrub::Streamed;
use sluice_http::trace::{TraceParent, traced};
use sluice_http::{HttpRequest, Outbound, Refused, client_deadline, forward};

use super::error::ApiError;
use super::limit::read_body;
use crate::state::AppState;

/// The call's deadline in milliseconds (else the configured default).
pub const DEADLINE_HEADER: &str = "x-sluice-deadline-ms";
/// Requests carrying the same value share one turn (single-flight, cache).
pub const TURN_HEADER: &str = "x-sluice-turn-id";
/// The request header giving a proxied call's priority: `high`, `normal` or `low`.
pub const PRIORITY_HEADER: &str = "x-sluice-priority";
/// On every proxy response: the call's outcome status.
pub const OUTCOME_HEADER: &str = "x-sluice-outcome";
/// On sluice's 429: why (`throttled`, `shed`, `budget`, `turn_budget`, `quota_exhausted`).
pub const REASON_HEADER: &str = "x-sluice-reason";
/// On sluice's 429: the scope that deferred the call.
pub const SCOPE_HEADER: &str = "x-sluice-scope";

/// The outcome's header as a name, made once: inserting by a `&str`
/// parses and checks the name first, on every request.
const OUTCOME: HeaderName = HeaderName::from_static(OUTCOME_HEADER);

const PREFIX: &str = "/proxy/";
/// Longest accepted turn id.
const MAX_TURN_ID: usize = 256;

pub(crate) async fn forward(State(state): State<AppState>, request: Request) -> Response {
    forward_request(&state, request).await
}

/// The route's handler, for callers that hold the state themselves.
pub(crate) async fn forward_request(state: &AppState, request: Request) -> Response {
    match proxy(state, request).await {
        Ok(response) => response,
        Err(error) => error.into_response(),
    }
}

async fn proxy(state: &AppState, request: Request) -> Result<Response, ApiError> {
    let inner = &state.inner;
    let (parts, body) = request.into_parts();
    // The raw path, as the client encoded it: nothing is decoded before the checks.
    let rest = parts.uri.path().strip_prefix(PREFIX).unwrap_or_default();
    let (credential_raw, path) = match rest.find('/') {
        Some(slash) => rest.split_at(slash),
        None => (rest, "/"),
    };
    // A plain name (most are) is used as it came, without a pass to decode it.
    let credential = if credential_raw.contains('%') {
        percent_decode_str(credential_raw).decode_utf8_lossy()
    } else {
        Cow::Borrowed(credential_raw)
    };
    let Some(upstream) = inner.config.credentials.get(credential.as_ref()) else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("unknown credential {credential:?}"),
        ));
    };
    if forward::climbs(path) {
        return Err(ApiError::bad_request(
            "the path must not contain '..' segments, plain or percent-encoded",
        ));
    }
    let asked = Asked::of(&parts.headers);
    let deadline = deadline(asked.deadline, inner.deadline_cap)?;
    let turn_id = turn_id(asked.turn)?;
    let priority = priority(asked.priority)?;
    // The body is read whole (bounded), so that a retry sends it again.
    let within = deadline.unwrap_or(inner.config.gate.defaults.deadline);
    let body = read_body(body, inner.config.server.max_body, within).await?;
    let target = forward::join(&upstream.base_url, path, parts.uri.query())
        .map_err(|error| ApiError::bad_request(error.to_string()))?;
    let headers = forward::request_headers(&parts.headers, &upstream.auth_header);

    let method = parts.method;
    let read = matches!(method, Method::GET | Method::HEAD);
    // RFC 9110 §9.2.2 idempotent methods, or a write the server deduplicates.
    let idempotent = read
        || matches!(method, Method::PUT | Method::DELETE | Method::OPTIONS)
        || headers.contains_key("idempotency-key");
    // A stream cannot be shared: only a read in a named turn, which others
    // may join or find in the turn's cache, is read whole; everything else
    // (an event stream included) streams to its one client.
    let shared = read && turn_id.is_some() && !event_stream(&headers);
    let route = Route {
        credential: credential.clone().into_owned(),
        read,
        idempotent,
        deadline: None,
    };
    let label = inner.proxy_label(&credential, path);
    let request = HttpRequest {
        method: method.clone(),
        target,
        headers,
        body,
    };
    let outbound = if shared {
        Outbound::Proxy(request)
    } else {
        Outbound::ProxyStream(request)
    };
    let mut call = Call::routed(&label, route, outbound);
    if let Some(deadline) = deadline {
        call = call.deadline(deadline);
    }
    if let Some(priority) = priority {
        call = call.priority(priority);
    }
    // Read only when traces are on: the client's span parents the call's.
    let tracer = inner.tracer.as_ref();
    let parent = tracer.and_then(|_| TraceParent::of_headers(&parts.headers));
    let completion = match turn_id.as_deref() {
        Some(id) => {
            let lease = inner.turn_registry.lease(Some(id), &inner.gate());
            traced(tracer, parent, &label, None, lease.turn.complete(call)).await
        }
        // A turn nothing else can join lives in the call's future, not in
        // an allocation of its own.
        None => traced(tracer, parent, &label, None, inner.gate().complete(call)).await,
    };
    Ok(respond(completion, &method))
}

/// What a request asks of sluice in its own headers: each the first
/// value sent, as a look-up by name would find it.
#[derive(Debug, Default)]
struct Asked<'a> {
    deadline: Option<&'a HeaderValue>,
    turn: Option<&'a HeaderValue>,
    priority: Option<&'a HeaderValue>,
}

impl<'a> Asked<'a> {
    /// One pass over the headers: three look-ups by name would hash each
    /// name three times, on every proxied request.
    fn of(headers: &'a HeaderMap) -> Self {
        let mut asked = Asked::default();
        for (name, value) in headers {
            let name = name.as_str();
            if !name.starts_with("x-sluice-") {
                continue;
            }
            let slot = match name {
                DEADLINE_HEADER => &mut asked.deadline,
                TURN_HEADER => &mut asked.turn,
                PRIORITY_HEADER => &mut asked.priority,
                _ => continue,
            };
            slot.get_or_insert(value);
        }
        asked
    }
}

/// The priority header, if sent: `high`, `normal` or `low`.
fn priority(value: Option<&HeaderValue>) -> Result<Option<Priority>, ApiError> {
    let Some(value) = value else {
        return Ok(None);
    };
    value
        .to_str()
        .ok()
        .and_then(|text| text.parse::<Priority>().ok())
        .map(Some)
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "{PRIORITY_HEADER}: must be \"high\", \"normal\" or \"low\""
            ))
        })
}

/// The deadline header, bounded and capped at `cap`.
fn deadline(value: Option<&HeaderValue>, cap: Duration) -> Result<Option<Duration>, ApiError> {
    let Some(value) = value else {
        return Ok(None);
    };
    let ms = value
        .to_str()
        .ok()
        .and_then(|text| text.trim().parse::<u64>().ok());
    match ms.map(|ms| client_deadline(ms, cap)) {
        Some(Ok(deadline)) => Ok(Some(deadline)),
        Some(Err(Refused::TooLong(max))) => Err(ApiError::bad_request(format!(
            "{DEADLINE_HEADER}: must be at most {max} milliseconds (the longest allowed duration)"
        ))),
        None | Some(Err(Refused::Zero)) => Err(ApiError::bad_request(format!(
            "{DEADLINE_HEADER}: must be a whole number of milliseconds, at least 1"
        ))),
    }
}

fn turn_id(value: Option<&HeaderValue>) -> Result<Option<String>, ApiError> {
    let Some(value) = value else {
        return Ok(None);
    };
    value
        .to_str()
        .ok()
        .filter(|id| !id.is_empty() && id.len() <= MAX_TURN_ID)
        .map(|id| Some(id.to_owned()))
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "{TURN_HEADER}: must be 1 to {MAX_TURN_ID} bytes of visible ASCII"
            ))
        })
}

/// True when the client asks for an event stream (`Accept: text/event-stream`).
fn event_stream(headers: &HeaderMap) -> bool {
    headers.get_all(ACCEPT).iter().any(|value| {
        value
            .as_bytes()
            .windows(17)
            .any(|w| w.eq_ignore_ascii_case(b"text/event-stream"))
    })
}

/// The client's answer: the upstream response as is when there is one to
/// give, else sluice's own 429 (deferred), 504 (deadline) or 502 (no response).
fn respond(completion: Completion, method: &Method) -> Response {
    let outcome = completion.outcome;
    let mut response = match (&outcome, completion.response) {
        (Outcome::Ok { .. } | Outcome::Error { .. }, Some(upstream)) => {
            let stream = completion.stream.as_ref().and_then(StreamSlot::take);
            passthrough(upstream, stream, method)
        }
        (Outcome::RateLimited { reason, scope, .. }, _) => {
            throttled(&outcome, reason.as_str(), scope)
        }
        (Outcome::QuotaExhausted { scope, .. }, _) => throttled(&outcome, "quota_exhausted", scope),
        (Outcome::TimedOut { .. }, _) => {
            (StatusCode::GATEWAY_TIMEOUT, Json(&outcome)).into_response()
        }
        _ => (StatusCode::BAD_GATEWAY, Json(&outcome)).into_response(),
    };
    response
        .headers_mut()
        .insert(OUTCOME, HeaderValue::from_static(outcome.status()));
    response
}

/// The upstream's answer: its body relayed as it arrives when it streams,
/// else the bytes it was read into.
fn passthrough(
    upstream: Arc<http::Response<Bytes>>,
    stream: Option<BodyStream>,
    method: &Method,
) -> Response {
    // An answer nobody else shares is taken apart, not copied.
    let (status, mut headers, bytes) = match Arc::try_unwrap(upstream) {
        Ok(owned) => {
            let (parts, body) = owned.into_parts();
            let mut headers = parts.headers;
            forward::strip_hop_by_hop(&mut headers);
            (parts.status, headers, body)
        }
        Err(shared) => (
            shared.status(),
            forward::response_headers(shared.headers()),
            shared.body().clone(),
        ),
    };
    let mut response = match stream {
        // Relayed unchanged: its own length, or chunks as they come; the
        // call's permit goes back when the body ends or the client leaves.
        Some(stream) => {
            let mut response = Response::new(Body::new(stream));
            response.extensions_mut().insert(Streamed);
            response
        }
        None => {
            // The bytes as received, framed by the server; a HEAD answer
            // keeps the length of the body it did not send.
            if *method != Method::HEAD {
                headers.remove(CONTENT_LENGTH);
            }
            Response::new(Body::from(bytes))
        }
    };
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    response
}

/// 429 with the outcome, `Retry-After` in whole seconds (rounded up, at
/// least 1) and the exact wait in `retry-after-ms`.
fn throttled(outcome: &Outcome, reason: &'static str, scope: &str) -> Response {
    let wait_ms = outcome.retry_after().map_or(1, |wait| {
        u64::try_from(wait.as_millis()).unwrap_or(u64::MAX)
    });
    let seconds = wait_ms.div_ceil(1_000).max(1);
    let mut response = (StatusCode::TOO_MANY_REQUESTS, Json(outcome)).into_response();
    let headers = response.headers_mut();
    headers.insert(RETRY_AFTER, HeaderValue::from(seconds));
    headers.insert(
        HeaderName::from_static("retry-after-ms"),
        HeaderValue::from(wait_ms),
    );
    headers.insert(
        HeaderName::from_static(REASON_HEADER),
        HeaderValue::from_static(reason),
    );
    if let Ok(scope) = HeaderValue::from_str(scope) {
        headers.insert(HeaderName::from_static(SCOPE_HEADER), scope);
    }
    response
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn what_a_request_asks_is_found_as_a_look_up_finds_it() {
        const DEADLINE: HeaderName = HeaderName::from_static(DEADLINE_HEADER);
        const TURN: HeaderName = HeaderName::from_static(TURN_HEADER);
        const PRIORITY: HeaderName = HeaderName::from_static(PRIORITY_HEADER);
        let mut headers = HeaderMap::new();
        headers.append(ACCEPT, HeaderValue::from_static("*/*"));
        headers.append(&TURN, HeaderValue::from_static("t1"));
        headers.append(&TURN, HeaderValue::from_static("t2"));
        headers.append("x-sluice-other", HeaderValue::from_static("1"));
        headers.append(&PRIORITY, HeaderValue::from_static("low"));
        headers.append(&DEADLINE, HeaderValue::from_static("250"));
        headers.append(&PRIORITY, HeaderValue::from_static("high"));
        let asked = Asked::of(&headers);
        for (found, name) in [
            (asked.deadline, &DEADLINE),
            (asked.turn, &TURN),
            (asked.priority, &PRIORITY),
        ] {
            assert_eq!(found, headers.get(name), "{name}");
        }
        assert_eq!(asked.turn.unwrap(), "t1");
        let empty = HeaderMap::new();
        let none = Asked::of(&empty);
        assert!(none.deadline.is_none() && none.turn.is_none() && none.priority.is_none());
    }
}
