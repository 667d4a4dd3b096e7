//! A `gate.fetch` request as the engine sends it: a call on its credential
//! whose request goes out through the sidecar's HTTP executor, so that it
//! starts when the engine grants it, to the credential's origin only.

use bytes::Bytes;
use http::header::{CONNECTION, CONTENT_LENGTH, HOST, TE, TRAILER, TRANSFER_ENCODING, UPGRADE};
use http::uri::PathAndQuery;
use http::{HeaderMap, HeaderName, HeaderValue, Method};
use sluice::Route;
use sluice_config::Upstream;
use sluice_server::{HttpRequest, Outbound, Url};

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
pub(crate) fn prepare(
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
