//! OpenAI's spent quota: a 429 whose error code is `insufficient_quota` is not a rate limit.
//!
//! Source: OpenAI API docs, "Error codes": 429 "You exceeded your current
//! quota, please check your plan and billing details" has
//! `error.code`/`error.type` `insufficient_quota`; waiting will not help.
//! The rate-limit 429 (`rate_limit_exceeded`) states its wait in words
//! ("Please try again in 20ms"), which the phrase profile reads.

use super::document::str_at;
use super::{Body, BodyProfile};
use crate::signal::{ResponseClock, Signal};

pub(super) const PROFILE: BodyProfile = BodyProfile {
    name: "openai",
    read,
};

fn read(body: &Body<'_>, _clock: &ResponseClock, signal: &mut Signal) {
    let Some(json) = body.json() else { return };
    let spent = ["/error/code", "/error/type"]
        .iter()
        .any(|field| str_at(json, field) == Some("insufficient_quota"));
    if spent && body.status == 429 {
        signal.reject_by_body(PROFILE.name);
        signal.quota = true;
    }
}

#[cfg(test)]
mod tests {
    use crate::signal::testing::body_signal;

    #[test]
    fn table() {
        let spent = r#"{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}"#;
        let limited = r#"{"error":{"message":"Rate limit reached for gpt-4o in organization org-x on requests per min (RPM): Limit 3, Used 3, Requested 1. Please try again in 20s.","type":"requests","param":null,"code":"rate_limit_exceeded"}}"#;
        let cases: &[(u16, &str, bool, Option<u64>)] = &[
            (429, spent, true, None),
            (400, spent, false, None),
            (429, limited, false, Some(20_000)),
        ];
        for (status, body, quota, wait_ms) in cases {
            let signal = body_signal(*status, &[], body);
            assert_eq!(signal.quota, *quota, "{body}");
            assert_eq!(signal.throttled, *status == 429);
            let wait = signal
                .wait()
                .map(|w| u64::try_from(w.delay.as_millis()).unwrap());
            assert_eq!(wait, *wait_ms, "{body}");
        }
    }
}
