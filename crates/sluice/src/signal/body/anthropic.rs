//! Anthropic's `overloaded_error`: the API is busy (529); back off and retry, it is not a failure.
//!
//! Source: Anthropic API docs, "Errors": HTTP 529 `overloaded_error`, "the
//! API is temporarily overloaded", with the body
//! `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`.
//! No wait is stated, so retries back off with jitter.

use super::document::str_at;
use super::{Body, BodyProfile};
use crate::signal::{ResponseClock, Signal};

pub(super) const PROFILE: BodyProfile = BodyProfile {
    name: "anthropic",
    read,
};

fn read(body: &Body<'_>, _clock: &ResponseClock, signal: &mut Signal) {
    let overloaded = body
        .json()
        .and_then(|json| str_at(json, "/error/type"))
        .is_some_and(|kind| kind == "overloaded_error");
    if overloaded && !body.is_success() {
        signal.reject_by_body(PROFILE.name);
    }
}

#[cfg(test)]
mod tests {
    use crate::signal::testing::body_signal;

    #[test]
    fn table() {
        let overloaded =
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        let cases: &[(u16, &str, bool)] = &[
            (529, overloaded, true),
            (500, overloaded, true),
            (200, overloaded, false),
            (
                529,
                r#"{"type":"error","error":{"type":"api_error","message":"Internal"}}"#,
                false,
            ),
            (
                400,
                r#"{"type":"error","error":{"type":"invalid_request_error"}}"#,
                false,
            ),
        ];
        for (status, body, throttled) in cases {
            let signal = body_signal(*status, &[], body);
            assert_eq!(signal.throttled, *throttled, "{status} {body}");
            assert!(signal.wait().is_none());
        }
    }
}
