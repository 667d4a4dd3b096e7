//! Request headers the sidecar sets itself: neither a client nor a
//! credential's `auth_header` may choose them.

use http::header::{self, HeaderName};

/// Headers that belong to one connection, not to the message (RFC 9110 §7.6.1),
/// plus the legacy ones proxies also drop.
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// The prefix of sluice's own request headers (`x-sluice-deadline-ms`, ...):
/// they are for the sidecar and never forwarded.
pub const SLUICE_HEADER_PREFIX: &str = "x-sluice-";

/// True for a header that belongs to one connection (`Connection`,
/// `Transfer-Encoding`, ...), which a proxy never forwards.
pub fn is_hop_by_hop(name: &HeaderName) -> bool {
    HOP_BY_HOP.contains(&name.as_str())
}

/// True for a header the sidecar sets itself on the way upstream: the
/// hop-by-hop ones, `Host`, `Content-Length`, `Expect` and `x-sluice-*`.
///
/// ```
/// use http::HeaderName;
/// use sluice_config::is_reserved_request_header;
/// assert!(is_reserved_request_header(&HeaderName::from_static("host")));
/// assert!(is_reserved_request_header(&HeaderName::from_static("x-sluice-turn-id")));
/// assert!(!is_reserved_request_header(&HeaderName::from_static("x-api-key")));
/// ```
pub fn is_reserved_request_header(name: &HeaderName) -> bool {
    is_hop_by_hop(name)
        || name == header::HOST
        || name == header::CONTENT_LENGTH
        || name == header::EXPECT
        || name.as_str().starts_with(SLUICE_HEADER_PREFIX)
}
