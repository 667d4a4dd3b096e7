//! What a call carries to the executor: a configured tool's rendered request,
//! or a request that arrived at the proxy, each already pointed at its
//! credential's base URL.

use bytes::Bytes;
use http::Method;
use http::header::{ACCEPT, HeaderMap, RANGE};
use http::uri::PathAndQuery;
use sluice::Payload;

/// One HTTP request, as the executor sends it (the secret is added there).
#[derive(Debug, Clone)]
pub struct HttpRequest {
    /// The method.
    pub method: Method,
    /// The origin-form target, a path and query below the credential's
    /// base URL: the executor sends it to the credential's origin, the
    /// only one a request can reach.
    pub target: PathAndQuery,
    /// End-to-end headers (never an `Authorization` from the client).
    pub headers: HeaderMap,
    /// The body.
    pub body: Bytes,
}

/// A call's payload.
#[derive(Debug, Clone)]
pub enum Outbound {
    /// A configured tool: its JSON arguments (the call's identity) and the
    /// request they rendered to.
    Tool {
        /// The arguments as the caller sent them.
        args: serde_json::Value,
        /// The rendered request.
        request: HttpRequest,
    },
    /// A request that arrived at `/proxy/{credential}/...` and whose answer
    /// other requests in its turn may share (a read in a named turn): its
    /// body is read whole, so that every caller gets all of it.
    Proxy(HttpRequest),
    /// A request that arrived at the proxy and is answered to one client
    /// only: a 2xx body streams through as it arrives. It never coalesces
    /// (a stream cannot be shared).
    ProxyStream(HttpRequest),
}

impl Outbound {
    /// The request to send.
    pub fn request(&self) -> &HttpRequest {
        match self {
            Outbound::Tool { request, .. }
            | Outbound::Proxy(request)
            | Outbound::ProxyStream(request) => request,
        }
    }
}

impl Payload for Outbound {
    /// A tool call is identified by its arguments' canonical JSON; a proxied
    /// GET or HEAD by method, path and query, plus the headers that choose a
    /// different representation (`Accept`, `Range`). Other proxied methods
    /// never coalesce, and neither does a streamed answer.
    fn coalesce_key(&self) -> Option<String> {
        match self {
            Outbound::Tool { args, .. } => args.coalesce_key(),
            Outbound::ProxyStream(_) => None,
            Outbound::Proxy(request) => {
                if !matches!(request.method, Method::GET | Method::HEAD) {
                    return None;
                }
                let header = |name| {
                    request
                        .headers
                        .get(name)
                        .map_or(&b""[..], |value: &http::HeaderValue| value.as_bytes())
                };
                Some(format!(
                    "{} {}?{}\naccept={}\nrange={}",
                    request.method,
                    request.target.path(),
                    request.target.query().unwrap_or(""),
                    String::from_utf8_lossy(header(ACCEPT)),
                    String::from_utf8_lossy(header(RANGE)),
                ))
            }
        }
    }

    /// A configured tool's argument, for a cost taken from it; a proxied
    /// request has none.
    fn argument(&self, name: &str) -> Option<&serde_json::Value> {
        match self {
            Outbound::Tool { args, .. } => args.get(name),
            Outbound::Proxy(_) | Outbound::ProxyStream(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;
    use serde_json::json;

    use super::*;

    fn proxied(method: Method, target: &'static str, accept: Option<&'static str>) -> Outbound {
        let mut headers = HeaderMap::new();
        if let Some(accept) = accept {
            headers.insert(ACCEPT, HeaderValue::from_static(accept));
        }
        Outbound::Proxy(HttpRequest {
            method,
            target: PathAndQuery::from_static(target),
            headers,
            body: Bytes::new(),
        })
    }

    #[test]
    fn identities() {
        let request = HttpRequest {
            method: Method::GET,
            target: PathAndQuery::from_static("/x"),
            headers: HeaderMap::new(),
            body: Bytes::new(),
        };
        let a = Outbound::Tool {
            args: json!({"a": 1, "b": 2}),
            request: request.clone(),
        };
        let b = Outbound::Tool {
            args: json!({"b": 2, "a": 1}),
            request,
        };
        assert_eq!(a.coalesce_key(), b.coalesce_key());

        let get = proxied(Method::GET, "/x?q=1", None);
        assert_eq!(
            get.coalesce_key(),
            proxied(Method::GET, "/x?q=1", None).coalesce_key()
        );
        assert_ne!(
            get.coalesce_key(),
            proxied(Method::GET, "/x?q=2", None).coalesce_key()
        );
        assert_ne!(
            get.coalesce_key(),
            proxied(Method::HEAD, "/x?q=1", None).coalesce_key()
        );
        assert_ne!(
            get.coalesce_key(),
            proxied(Method::GET, "/x?q=1", Some("text/csv")).coalesce_key()
        );
        assert_eq!(proxied(Method::POST, "/x", None).coalesce_key(), None);
        let Outbound::Proxy(request) = get else {
            unreachable!()
        };
        assert_eq!(Outbound::ProxyStream(request).coalesce_key(), None);
    }
}
