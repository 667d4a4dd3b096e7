//! Scripted responses: a queue of rules, each answering one matching request its own way.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};

/// What a scripted rule answers: status, headers, body and latency, exactly as given.
///
/// The fake adds only a `Date` header; no rate-limit headers and no `Retry-After` unless
/// the reply carries them. The latency defaults to zero, not to the configured latency.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
    pub(crate) latency: Duration,
}

impl Reply {
    /// A reply with this status, no headers, an empty body and no latency.
    pub fn new(status: StatusCode) -> Self {
        Reply {
            status,
            headers: HeaderMap::new(),
            body: Bytes::new(),
            latency: Duration::ZERO,
        }
    }

    /// Adds a header (several values of one name are all sent).
    pub fn header(mut self, name: HeaderName, value: HeaderValue) -> Self {
        self.headers.append(name, value);
        self
    }

    /// Sets the body.
    pub fn body(mut self, body: impl Into<Bytes>) -> Self {
        self.body = body.into();
        self
    }

    /// Answers only after this long.
    pub fn latency(mut self, latency: Duration) -> Self {
        self.latency = latency;
        self
    }
}

/// Which request a rule answers.
#[derive(Debug, Clone, PartialEq, Eq)]
enum When {
    /// The request with this sequence number (1 for the first recorded request).
    Nth(u64),
    /// The first request whose path (without the query) starts with this.
    PathPrefix(String),
    /// The next request, whatever it is.
    Next,
}

/// A scripted response: the first request it matches gets its [`Reply`], and the rule is
/// consumed.
///
/// By default a scripted request bypasses the limiter: it is not checked against and not
/// charged to the rate, the in-flight limit or the quota (it is still recorded, and counts
/// as in flight while it is served). With [`limited`](Self::limited) the request must be
/// admitted by the limiter first and is charged like any other; if it is throttled it gets
/// the ordinary 429 and the rule waits for a later match.
///
/// ```
/// use http::{HeaderValue, StatusCode, header::RETRY_AFTER};
/// use sluice_fake::{Reply, Rule};
///
/// let third_is_throttled = Rule::nth(
///     3,
///     Reply::new(StatusCode::TOO_MANY_REQUESTS).header(RETRY_AFTER, HeaderValue::from_static("2")),
/// );
/// let x_is_down = Rule::path_prefix("/x", Reply::new(StatusCode::SERVICE_UNAVAILABLE));
/// # let _ = (third_is_throttled, x_is_down);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    when: When,
    pub(crate) reply: Reply,
    pub(crate) limited: bool,
}

impl Rule {
    /// Answers the request with sequence number `seq` (the first recorded request is 1,
    /// counting again from 1 after a reset).
    pub fn nth(seq: u64, reply: Reply) -> Self {
        Rule::when(When::Nth(seq), reply)
    }

    /// Answers the next request whose path (without the query) starts with `prefix`.
    pub fn path_prefix(prefix: impl Into<String>, reply: Reply) -> Self {
        Rule::when(When::PathPrefix(prefix.into()), reply)
    }

    /// Answers the next request.
    pub fn next(reply: Reply) -> Self {
        Rule::when(When::Next, reply)
    }

    /// Makes the request go through the limiter first (and be charged) instead of bypassing it.
    pub fn limited(mut self) -> Self {
        self.limited = true;
        self
    }

    fn when(when: When, reply: Reply) -> Self {
        Rule {
            when,
            reply,
            limited: false,
        }
    }

    /// Whether this rule answers the request `seq` on `path`.
    pub(crate) fn matches(&self, seq: u64, path: &str) -> bool {
        match &self.when {
            When::Nth(n) => *n == seq,
            When::PathPrefix(prefix) => path.starts_with(prefix.as_str()),
            When::Next => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_match_by_sequence_prefix_or_anything() {
        let reply = Reply::new(StatusCode::SERVICE_UNAVAILABLE);
        assert!(Rule::nth(3, reply.clone()).matches(3, "/a"));
        assert!(!Rule::nth(3, reply.clone()).matches(2, "/a"));
        assert!(Rule::path_prefix("/x", reply.clone()).matches(1, "/x/y"));
        assert!(!Rule::path_prefix("/x", reply.clone()).matches(1, "/a/x"));
        assert!(Rule::next(reply.clone()).matches(9, "/"));
        assert!(!Rule::next(reply.clone()).limited);
        assert!(Rule::next(reply).limited().limited);
    }
}
