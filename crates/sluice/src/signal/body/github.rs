//! GitHub's secondary rate limit: a 403 (or 429) whose message says so, often with no header.
//!
//! Source: GitHub REST docs, "Rate limits for the REST API", "Exceeding the
//! rate limit": a secondary limit answers 403 or 429 with a message naming
//! it; if `retry-after` is present wait that long, if `x-ratelimit-remaining`
//! is 0 wait until `x-ratelimit-reset`, "otherwise, wait for at least one
//! minute before retrying". The headers are read first and take precedence.
//! Older responses say "abuse detection mechanism" for the same limit.

use std::time::Duration;

use super::{Body, BodyProfile};
use crate::signal::{ResponseClock, Signal};

pub(super) const PROFILE: BodyProfile = BodyProfile {
    name: "github",
    read,
};

/// GitHub's "wait for at least one minute".
const SECONDARY_WAIT: Duration = Duration::from_secs(60);

fn read(body: &Body<'_>, _clock: &ResponseClock, signal: &mut Signal) {
    if !matches!(body.status, 403 | 429) {
        return;
    }
    let text = body.text();
    if text.contains("secondary rate limit") || text.contains("abuse detection") {
        signal.reject_by_body(PROFILE.name);
        signal.set_body_wait(SECONDARY_WAIT, "github secondary rate limit");
    }
}

#[cfg(test)]
mod tests {
    use crate::signal::testing::{Headers, body_signal};

    #[test]
    fn table() {
        let secondary = r#"{"message":"You have exceeded a secondary rate limit. Please wait a few minutes before you try again.","documentation_url":"https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits","status":"403"}"#;
        let cases: &[(u16, Headers, &str, bool, Option<u64>)] = &[
            (403, &[], secondary, true, Some(60_000)),
            (429, &[], secondary, true, Some(60_000)),
            (403, &[("retry-after", "30")], secondary, true, Some(30_000)),
            (
                403,
                &[
                    ("x-ratelimit-remaining", "0"),
                    ("x-ratelimit-reset", "1700000005"),
                ],
                secondary,
                true,
                Some(5_000),
            ),
            (
                403,
                &[],
                r#"{"message":"You have triggered an abuse detection mechanism."}"#,
                true,
                Some(60_000),
            ),
            (
                403,
                &[],
                r#"{"message":"Resource not accessible by integration"}"#,
                false,
                None,
            ),
            // Only a rejection status counts.
            (404, &[], secondary, false, None),
        ];
        for (status, headers, body, throttled, wait_ms) in cases {
            let signal = body_signal(*status, headers, body);
            assert_eq!(signal.throttled, *throttled, "{status} {body}");
            let wait = signal
                .wait()
                .map(|w| u64::try_from(w.delay.as_millis()).unwrap());
            assert_eq!(wait, *wait_ms, "{status} {headers:?}");
        }
    }
}
