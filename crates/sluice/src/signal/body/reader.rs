//! Which bodies are read, and the table of body profiles in order.

use http::{HeaderMap, StatusCode, header::CONTENT_TYPE};
use serde::{Deserialize, Serialize};

use super::{Body, anthropic, github, google, graphql, openai, words};
use crate::signal::{ResponseClock, Signal};

/// When a credential's response bodies are read for signals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum BodySignals {
    /// Only bodies of responses that are not a 2xx (the default): a
    /// success is never a rejection.
    #[default]
    Errors,
    /// Also JSON 2xx bodies: GraphQL APIs answer a throttled query with a
    /// 200 whose `errors[]` says so.
    Graphql,
}

/// One body family's parser.
#[derive(Debug, Clone, Copy)]
pub struct BodyProfile {
    /// A short name for docs and `sluice inspect`.
    pub name: &'static str,
    /// Reads what the family states into the signal; ignores the rest.
    pub read: fn(&Body<'_>, &ResponseClock, &mut Signal),
}

/// Every body profile. They run after the header profiles, so a wait a
/// header states is never overridden ([`Signal::set_body_wait`]); among
/// themselves, structured formats come before phrases in prose.
pub const ALL: &[BodyProfile] = &[
    google::PROFILE,
    graphql::PROFILE,
    github::PROFILE,
    anthropic::PROFILE,
    openai::PROFILE,
    words::PROFILE,
];

/// Whether a response's body can matter: it is not a 2xx, or it is a JSON
/// 2xx on a credential that reads GraphQL bodies. Everything else keeps the
/// fast path (and a streamed body is never held back for it).
pub fn wants_body(status: StatusCode, headers: &HeaderMap, mode: BodySignals) -> bool {
    if !status.is_success() {
        return true;
    }
    mode == BodySignals::Graphql
        && headers
            .get(CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .is_some_and(is_json)
}

/// `application/json`, `application/graphql-response+json`, any `+json`.
fn is_json(content_type: &str) -> bool {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json" || essence.ends_with("+json")
}

/// Runs every body profile over `body`.
pub(crate) fn read(body: &[u8], status: StatusCode, clock: &ResponseClock, signal: &mut Signal) {
    if body.is_empty() {
        return;
    }
    let body = Body::new(status.as_u16(), body);
    for profile in ALL {
        (profile.read)(&body, clock, signal);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_bodies_that_can_matter_are_read() {
        let mut json = HeaderMap::new();
        json.insert(
            CONTENT_TYPE,
            "application/json; charset=utf-8".parse().unwrap(),
        );
        let mut html = HeaderMap::new();
        html.insert(CONTENT_TYPE, "text/html".parse().unwrap());
        let none = HeaderMap::new();
        let ok = StatusCode::OK;
        assert!(!wants_body(ok, &json, BodySignals::Errors));
        assert!(wants_body(ok, &json, BodySignals::Graphql));
        assert!(!wants_body(ok, &html, BodySignals::Graphql));
        assert!(!wants_body(ok, &none, BodySignals::Graphql));
        for status in [400, 403, 429, 500, 503, 529] {
            let status = StatusCode::from_u16(status).unwrap();
            assert!(wants_body(status, &none, BodySignals::Errors));
        }
        assert!(is_json("application/graphql-response+json"));
        assert!(!is_json("application/jsonp"));
    }
}
