//! Google APIs' error objects: `google.rpc.RetryInfo` waits and the older `errors[].reason` codes.
//!
//! Sources: Google's AIP-193 and "Errors" design guide
//! (cloud.google.com/apis/design/errors): `error.status` is the canonical
//! code, `error.details[]` holds typed messages, among them
//! `google.rpc.RetryInfo` whose `retryDelay` is a protobuf `Duration` in JSON
//! (`"27s"`, `"1.500s"`) and `google.rpc.QuotaFailure` whose violations name
//! the quota (Gemini: `GenerateRequestsPerDayPerProjectPerModel-FreeTier`).
//! The older JSON format (Drive, YouTube, Calendar: "Resolve errors")
//! carries `error.errors[].reason`: `rateLimitExceeded` and
//! `userRateLimitExceeded` mean slow down, `quotaExceeded` and
//! `dailyLimitExceeded` mean the quota is spent. Both formats come with
//! 429 or 403. Daily quotas reset at midnight Pacific time (YouTube Data API
//! "Quota usage"; Cloud "Capping API usage").

use std::time::Duration;

use serde_json::Value;

use super::document::{items, str_at};
use super::{Body, BodyProfile};
use crate::signal::clock::parse_seconds;
use crate::signal::{ResponseClock, Signal};

pub(super) const PROFILE: BodyProfile = BodyProfile {
    name: "google",
    read,
};

/// UTC-8: midnight Pacific standard time. During daylight time the quota
/// resets an hour earlier than this, so the wait is never too short.
const PACIFIC_OFFSET_S: i64 = -8 * 3_600;

#[derive(Default)]
struct Read {
    throttled: bool,
    quota: bool,
    daily: bool,
    retry_delay: Option<Duration>,
}

fn read(body: &Body<'_>, clock: &ResponseClock, signal: &mut Signal) {
    if body.is_success() {
        return;
    }
    let Some(error) = body.json().and_then(|json| json.get("error")) else {
        return;
    };
    let mut found = Read {
        throttled: str_at(error, "/status") == Some("RESOURCE_EXHAUSTED"),
        ..Read::default()
    };
    for detail in items(error, "/details") {
        detail_into(detail, &mut found);
    }
    for item in items(error, "/errors") {
        match str_at(item, "/reason") {
            Some("rateLimitExceeded" | "userRateLimitExceeded") => found.throttled = true,
            Some("quotaExceeded" | "dailyLimitExceeded") => {
                found.quota = true;
                found.daily = true;
            }
            _ => {}
        }
    }
    if !(found.throttled || found.quota) {
        return;
    }
    signal.reject_by_body(PROFILE.name);
    signal.quota |= found.quota;
    if let Some(delay) = found.retry_delay {
        signal.set_body_wait(delay, "google.rpc.RetryInfo");
    } else if found.daily
        && let Some(delay) = clock.until_next_midnight(PACIFIC_OFFSET_S)
    {
        signal.set_body_wait(delay, "google daily quota");
    }
}

fn detail_into(detail: &Value, found: &mut Read) {
    let kind = str_at(detail, "/@type").unwrap_or("");
    if kind.ends_with("google.rpc.RetryInfo") {
        found.retry_delay = str_at(detail, "/retryDelay").and_then(proto_duration);
    } else if kind.ends_with("google.rpc.QuotaFailure") {
        found.throttled = true;
        let daily = items(detail, "/violations").any(|violation| {
            ["/quotaId", "/quotaMetric", "/subject"]
                .iter()
                .filter_map(|field| str_at(violation, field))
                .any(|text| text.contains("PerDay") || text.contains("per day"))
        });
        if daily {
            found.quota = true;
            found.daily = true;
        }
    } else if kind.ends_with("google.rpc.ErrorInfo")
        && matches!(
            str_at(detail, "/reason"),
            Some("RATE_LIMIT_EXCEEDED" | "RESOURCE_EXHAUSTED")
        )
    {
        found.throttled = true;
    }
}

/// A protobuf `Duration` in JSON: decimal seconds with an `s` suffix.
fn proto_duration(text: &str) -> Option<Duration> {
    parse_seconds(text.trim().strip_suffix('s')?)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::signal::testing::{NOW, body_signal};

    #[test]
    fn table() {
        let retry_info = |delay: &str| {
            format!(
                r#"{{"error":{{"code":429,"message":"Resource has been exhausted","status":"RESOURCE_EXHAUSTED",
                "details":[{{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"{delay}"}}]}}}}"#
            )
        };
        // Seconds to the next midnight at UTC-8 from NOW (22:13:20Z = 14:13:20 PST).
        let midnight = 9 * 3_600 + 46 * 60 + 40;
        let cases: &[(u16, String, bool, bool, Option<u64>)] = &[
            (429, retry_info("27s"), true, false, Some(27_000)),
            (429, retry_info("1.500s"), true, false, Some(1_500)),
            (429, retry_info("soon"), true, false, None),
            // Gemini's free tier: a daily quota, with the server's own wait.
            (
                429,
                r#"{"error":{"status":"RESOURCE_EXHAUSTED","details":[
                  {"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[
                    {"quotaMetric":"generativelanguage.googleapis.com/generate_content_free_tier_requests",
                     "quotaId":"GenerateRequestsPerDayPerProjectPerModel-FreeTier"}]},
                  {"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"40s"}]}}"#
                    .into(),
                true,
                true,
                Some(40_000),
            ),
            (
                403,
                r#"{"error":{"errors":[{"domain":"usageLimits","reason":"userRateLimitExceeded"}],"code":403}}"#.into(),
                true,
                false,
                None,
            ),
            (
                403,
                r#"{"error":{"errors":[{"domain":"youtube.quota","reason":"quotaExceeded"}],"code":403}}"#.into(),
                true,
                true,
                Some(midnight * 1_000),
            ),
            (
                403,
                r#"{"error":{"errors":[{"reason":"forbidden"}],"code":403,"status":"PERMISSION_DENIED"}}"#.into(),
                false,
                false,
                None,
            ),
            (429, r#"{"error":"RESOURCE_EXHAUSTED"}"#.into(), false, false, None),
        ];
        for (status, body, throttled, quota, wait_ms) in cases {
            let signal = body_signal(*status, &[], body);
            assert_eq!(signal.quota, *quota, "{body}");
            let by_body = signal.body == Some("google");
            assert_eq!(by_body, *throttled, "{body}");
            let wait = signal
                .wait()
                .map(|w| u64::try_from(w.delay.as_millis()).unwrap());
            assert_eq!(wait, *wait_ms, "{body}");
        }
        assert_eq!(NOW % 86_400, 22 * 3_600 + 13 * 60 + 20);
    }

    #[test]
    fn a_header_wait_takes_precedence() {
        let body = r#"{"error":{"status":"RESOURCE_EXHAUSTED","details":[
            {"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"27s"}]}}"#;
        let signal = body_signal(429, &[("retry-after", "3")], body);
        let wait = signal.wait().unwrap();
        assert_eq!(
            (wait.delay, wait.source),
            (Duration::from_secs(3), "retry-after")
        );
    }
}
