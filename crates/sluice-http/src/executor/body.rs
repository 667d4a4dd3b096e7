//! When a proxied answer's body streams rather than being read whole.

use http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use http::{HeaderMap, StatusCode};
use sluice::signal::BodySignals;

/// A proxied answer that is not a stream by its type is read whole up to
/// this many bytes first (so that a body cut short is still retried, or
/// answered 502, and its length is exact); a longer one streams from there.
pub(crate) const STREAM_PAST: usize = 1 << 20;

/// Media types that are streams: each event or line is worth delivering
/// as it comes (an LLM's or an MCP server's events, NDJSON progress).
const STREAM_TYPES: [&str; 6] = [
    "text/event-stream",
    "application/x-ndjson",
    "application/ndjson",
    "application/jsonl",
    "application/x-jsonlines",
    "multipart/x-mixed-replace",
];

/// True when the engine's signal reader needs an answer's body, so it is
/// read whole (bounded) and never streamed: any non-2xx answer (an error's
/// body may state a wait, and the outcome quotes it), and a JSON 2xx on a
/// credential with `body_signals = "graphql"` (a GraphQL `THROTTLED`).
pub(crate) fn body_matters(status: StatusCode, headers: &HeaderMap, mode: BodySignals) -> bool {
    sluice::signal::wants_body(status, headers, mode)
}

/// True when an answer streams from its first byte: a stream by its media
/// type, or a declared length past [`STREAM_PAST`].
pub(crate) fn streams_at_once(headers: &HeaderMap) -> bool {
    // The media type is compared as bytes: this runs on every answer, and
    // splitting and trimming it as text showed in the proxy's profile
    // (docs/PERFORMANCE.md).
    let stream_type = headers.get(CONTENT_TYPE).is_some_and(|value| {
        let value = value.as_bytes();
        let end = value.iter().position(|&b| b == b';').unwrap_or(value.len());
        let media = value[..end].trim_ascii();
        STREAM_TYPES
            .iter()
            .any(|stream| media.eq_ignore_ascii_case(stream.as_bytes()))
    });
    let long = headers
        .get(CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<u64>().ok())
        .is_some_and(|length| length > STREAM_PAST as u64);
    stream_type || long
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_static(value));
        }
        map
    }

    #[test]
    fn streams_are_known_by_type_or_length() {
        assert!(streams_at_once(&headers(&[(
            "content-type",
            "text/event-stream; charset=utf-8"
        )])));
        assert!(streams_at_once(&headers(&[(
            "content-type",
            "Application/X-NDJSON"
        )])));
        assert!(streams_at_once(&headers(&[(
            "content-type",
            " text/event-stream ;charset=utf-8"
        )])));
        assert!(!streams_at_once(&headers(&[(
            "content-type",
            "text/event-streams"
        )])));
        assert!(!streams_at_once(&headers(&[(
            "content-type",
            "application/json; profile=text/event-stream"
        )])));
        assert!(streams_at_once(&headers(&[("content-length", "1048577")])));
        assert!(!streams_at_once(&headers(&[("content-length", "1048576")])));
        assert!(!streams_at_once(&headers(&[(
            "content-type",
            "application/json"
        )])));
        assert!(!streams_at_once(&HeaderMap::new()));
        assert!(body_matters(
            StatusCode::TOO_MANY_REQUESTS,
            &HeaderMap::new(),
            BodySignals::Errors
        ));
        assert!(body_matters(
            StatusCode::FOUND,
            &HeaderMap::new(),
            BodySignals::Errors
        ));
        assert!(!body_matters(
            StatusCode::OK,
            &HeaderMap::new(),
            BodySignals::Errors
        ));
        let json = headers(&[("content-type", "application/json")]);
        assert!(!body_matters(StatusCode::OK, &json, BodySignals::Errors));
        assert!(body_matters(StatusCode::OK, &json, BodySignals::Graphql));
    }
}
