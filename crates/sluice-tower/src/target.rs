//! Where a request goes in the gate: the credential it spends, under which label, read or write.

use std::time::Duration;

use http::{HeaderMap, Method};
use sluice::{Call, Route};

use crate::call::HttpCall;

/// What a request is to sluice, as the caller's classifying function says.
///
/// ```
/// use http::{HeaderMap, Method};
/// use sluice_tower::Target;
///
/// // A configured tool (its credential, read flag and deadline come from the GateConfig).
/// let search = Target::tool("search_tickets");
/// // Any request on a credential, read/idempotent from its method (as the sidecar's proxy does).
/// let plain = Target::http("github", &Method::GET, "/repos/a/b", &HeaderMap::new())
///     .deadline(std::time::Duration::from_secs(5));
/// assert_eq!(plain.label(), "github:/repos");
/// ```
#[derive(Debug, Clone)]
pub struct Target {
    label: String,
    route: Option<Route>,
    deadline: Option<std::time::Duration>,
}

/// Distinct first path segments per credential get their own labels up to
/// this length; the label names the tool in metrics and binds the scopes a
/// server reports (GitHub's `search`) to the requests that met them.
const MAX_SEGMENT: usize = 64;

impl Target {
    /// A tool configured in the gate's [`sluice::GateConfig`].
    pub fn tool(name: impl Into<String>) -> Self {
        Target {
            label: name.into(),
            route: None,
            deadline: None,
        }
    }

    /// A call on `route.credential`, named `label` in outcomes, logs and metrics.
    pub fn routed(label: impl Into<String>, route: Route) -> Self {
        Target {
            label: label.into(),
            route: Some(route),
            deadline: None,
        }
    }

    /// A plain HTTP request on `credential`: labelled `credential:/first-segment`;
    /// a read (coalesced within a turn) for GET and HEAD; safe to repeat after
    /// a server error for the idempotent methods of RFC 9110 §9.2.2 and for
    /// any request carrying an `Idempotency-Key`.
    pub fn http(credential: &str, method: &Method, path: &str, headers: &HeaderMap) -> Self {
        let read = matches!(*method, Method::GET | Method::HEAD);
        let idempotent = read
            || matches!(*method, Method::PUT | Method::DELETE | Method::OPTIONS)
            || headers.contains_key("idempotency-key");
        let segment = path.trim_start_matches('/').split('/').next().unwrap_or("");
        let plain = !segment.is_empty()
            && segment.len() <= MAX_SEGMENT
            && segment
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
        let label = if plain {
            format!("{credential}:/{segment}")
        } else {
            credential.to_owned()
        };
        Target::routed(
            label,
            Route {
                credential: credential.to_owned(),
                read,
                idempotent,
                deadline: None,
            },
        )
    }

    /// This call's deadline, overriding its tool's and the gate's default.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// The name the call goes by.
    pub fn label(&self) -> &str {
        &self.label
    }

    pub(crate) fn into_call(self, payload: HttpCall) -> Call<HttpCall> {
        let call = match self.route {
            Some(route) => Call::routed(&self.label, route, payload),
            None => Call::with_payload(&self.label, payload),
        };
        match self.deadline {
            Some(deadline) => call.deadline(deadline),
            None => call,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_http_follows_the_method() {
        let none = HeaderMap::new();
        let get = Target::http("gh", &Method::GET, "/search/issues", &none);
        assert_eq!(get.label(), "gh:/search");
        let route = get.route.unwrap();
        assert!(route.read && route.idempotent);
        let post = Target::http("gh", &Method::POST, "/", &none).route.unwrap();
        assert!(!post.read && !post.idempotent);
        let put = Target::http("gh", &Method::PUT, "/x", &none).route.unwrap();
        assert!(!put.read && put.idempotent);
        let mut keyed = HeaderMap::new();
        keyed.insert("idempotency-key", "k".parse().unwrap());
        assert!(
            Target::http("gh", &Method::POST, "/x", &keyed)
                .route
                .unwrap()
                .idempotent
        );
        assert_eq!(
            Target::http("gh", &Method::GET, "/%2e%2e", &none).label(),
            "gh"
        );
    }
}
