//! A `gate.fetch` request as the engine sends it: a call on its credential
//! whose request goes out through the sidecar's HTTP executor, so that it
//! starts when the engine grants it, to the credential's origin only.

use std::sync::Arc;

use crate::{HttpRequest, Outbound, Url};
use bytes::Bytes;
use http::header::{CONNECTION, CONTENT_LENGTH, HOST, TE, TRAILER, TRANSFER_ENCODING, UPGRADE};
use http::uri::PathAndQuery;
use http::{HeaderMap, HeaderName, HeaderValue, Method};
use napi::bindgen_prelude::Buffer;
use napi::{Error, Status};
use napi_derive::napi;
use sluice::{Call, Completion, Outcome, Route};
use sluice_config::Upstream;

use crate::executor::{Payload, outcome_of};
use crate::state::GateState;
use crate::turn::{deadline, outcome_json, with_deadline};

/// Hop-by-hop headers (RFC 9110 §7.6.1) and the ones the executor sets
/// itself: never forwarded from the caller.
const NOT_FORWARDED: [HeaderName; 7] = [
    CONNECTION,
    CONTENT_LENGTH,
    HOST,
    TE,
    TRAILER,
    TRANSFER_ENCODING,
    UPGRADE,
];

/// The request to send for `method url` on `upstream`, and its route; a
/// request the executor could not send is refused with the reason.
fn prepare(
    credential: &str,
    upstream: &Upstream,
    method: &str,
    url: &str,
    headers: &[String],
    body: Bytes,
) -> Result<(Route, Outbound), String> {
    let method = Method::from_bytes(method.as_bytes())
        .map_err(|_| format!("invalid HTTP method {method:?}"))?;
    let url = Url::parse(url).map_err(|error| format!("invalid URL {url:?}: {error}"))?;
    // The executor reaches the credential's origin and no other.
    if url.origin() != upstream.base_url.origin() {
        return Err(format!(
            "{url} is not on the origin of credential {credential:?} ({})",
            upstream.base_url.origin().ascii_serialization()
        ));
    }
    let target = match url.query() {
        Some(query) => format!("{}?{query}", url.path()),
        None => url.path().to_owned(),
    };
    let target = PathAndQuery::try_from(target)
        .map_err(|error| format!("invalid request target: {error}"))?;
    let mut map = HeaderMap::new();
    for pair in headers.chunks_exact(2) {
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(pair[0].as_bytes()),
            HeaderValue::from_str(&pair[1]),
        ) else {
            return Err(format!("invalid header {:?}", pair[0]));
        };
        if NOT_FORWARDED.contains(&name) || name.as_str().starts_with("proxy-") {
            continue;
        }
        map.append(name, value);
    }
    let read = matches!(method, Method::GET | Method::HEAD);
    // RFC 9110 §9.2.2: these methods are idempotent.
    let idempotent = read || matches!(method, Method::PUT | Method::DELETE | Method::OPTIONS);
    let route = Route {
        credential: credential.to_owned(),
        read,
        idempotent,
        deadline: None,
    };
    let request = HttpRequest {
        method,
        target,
        headers: map,
        body,
    };
    Ok((route, Outbound::Proxy(request)))
}

/// What a `gate.fetch` request ended with: the response, when the call
/// ended on one (an `ok` or an upstream `error`), else the outcome sluice
/// answered instead.
#[napi(object)]
pub struct FetchAnswer {
    /// The outcome as the sidecar's JSON text, when no response is handed
    /// back (an `ok` one is never serialized: its body would be copied).
    pub outcome: Option<String>,
    /// The response's status.
    pub status: Option<u32>,
    /// The response's headers, flat: name, value, name, value, ….
    pub headers: Option<Vec<String>>,
    /// The response's body.
    pub body: Option<Buffer>,
}

/// A `gate.fetch` request's call: sent from Rust, to the credential's
/// origin, in a turn of its own. `headers` is flat (name, value, …). A
/// request that cannot be sent there is `InvalidArg` with the reason.
pub(crate) fn fetch_call(
    state: &GateState,
    request: FetchRequest,
) -> napi::Result<impl Future<Output = Completion> + Send + 'static> {
    let label = format!("http:{}", request.credential);
    let ready = match deadline(&label, request.deadline_ms) {
        Err(outcome) => Err(outcome),
        Ok(deadline) => {
            let Some(upstream) = state.upstreams.get(&request.credential) else {
                return Err(Error::new(
                    Status::InvalidArg,
                    format!(
                        "credential {:?} has no base_url: gate.fetch sends only to a credential's origin",
                        request.credential
                    ),
                ));
            };
            let body = request
                .body
                .map_or_else(Bytes::new, |body| Bytes::copy_from_slice(&body));
            let (route, outbound) = prepare(
                &request.credential,
                upstream,
                &request.method,
                &request.url,
                &request.headers,
                body,
            )
            .map_err(|message| Error::new(Status::InvalidArg, message))?;
            let call = Call::routed(&label, route, Payload::Http(Arc::new(outbound)));
            Ok(with_deadline(call, deadline))
        }
    };
    let turn = state.gate.turn();
    Ok(async move {
        match ready {
            Ok(call) => turn.complete(call).await,
            Err(outcome) => Completion::from(outcome),
        }
    })
}

/// One `gate.fetch` request, as JavaScript read it.
#[napi(object)]
pub struct FetchRequest {
    /// The credential it spends.
    pub credential: String,
    /// The method.
    pub method: String,
    /// The absolute URL.
    pub url: String,
    /// The headers, flat: name, value, name, value, ….
    pub headers: Vec<String>,
    /// The body, if any.
    pub body: Option<Buffer>,
    /// The call's deadline.
    pub deadline_ms: Option<f64>,
}

/// The [`FetchAnswer`] of a completed `gate.fetch` call.
pub(crate) fn fetch_answer(completion: &Completion) -> napi::Result<FetchAnswer> {
    let outcome = outcome_of(completion);
    let response = match (&completion.response, &outcome) {
        (Some(response), Outcome::Ok { .. } | Outcome::Error { .. }) => response,
        _ => {
            return Ok(FetchAnswer {
                outcome: Some(outcome_json(completion)?),
                status: None,
                headers: None,
                body: None,
            });
        }
    };
    let mut headers = Vec::with_capacity(response.headers().len() * 2);
    for (name, value) in response.headers() {
        headers.push(name.as_str().to_owned());
        headers.push(String::from_utf8_lossy(value.as_bytes()).into_owned());
    }
    Ok(FetchAnswer {
        outcome: None,
        status: Some(u32::from(response.status().as_u16())),
        headers: Some(headers),
        body: Some(Buffer::from(response.body().to_vec())),
    })
}
