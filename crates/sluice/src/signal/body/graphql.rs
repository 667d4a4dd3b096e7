//! GraphQL's throttled answers: `errors[]` with a rate-limit code, often with a 200, and Shopify's cost budget.
//!
//! Sources:
//! - Shopify, "GraphQL Admin API rate limits" (shopify.dev/docs/api/usage/rate-limits):
//!   `errors[].extensions.code: "THROTTLED"`, and the top-level
//!   `extensions.cost` with `requestedQueryCost` and `throttleStatus`
//!   (`maximumAvailable`, `currentlyAvailable`, `restoreRate` points per
//!   second). The wait is (requested - available) / restoreRate. A query
//!   costing more than `maximumAvailable` can never run
//!   (`MAX_COST_EXCEEDED`): not a wait.
//! - GitHub, "Rate limits and node limits for the GraphQL API":
//!   `errors[].type: "RATE_LIMITED"`; the wait is in its `x-ratelimit-*`
//!   headers (`x-ratelimit-resource: graphql`), which the header profiles read.
//! - Linear, "Rate limiting": `errors[].extensions.code: "RATELIMITED"`, the
//!   reset in `X-RateLimit-Requests-Reset` as epoch milliseconds.
//! - monday.com, "Rate limits": `COMPLEXITY_BUDGET_EXHAUSTED` and
//!   `RATE_LIMIT_EXCEEDED` with `extensions.retry_in_seconds`.

use std::time::Duration;

use serde_json::Value;

use super::document::{items, number, str_at};
use super::{Body, BodyProfile};
use crate::signal::{CostWait, MAX_DELAY, ResponseClock, Signal};

pub(super) const PROFILE: BodyProfile = BodyProfile {
    name: "graphql",
    read,
};

/// The unit a GraphQL cost budget is counted in: a credential's unit of
/// this name is the budget the wait describes.
pub const COST_UNIT: &str = "points";

/// Codes that mean "not now", in `extensions.code` or GitHub's `type`.
const THROTTLE_CODES: &[&str] = &[
    "THROTTLED",
    "RATELIMITED",
    "RATE_LIMITED",
    "RATE_LIMIT_EXCEEDED",
    "TOO_MANY_REQUESTS",
    "COMPLEXITY_BUDGET_EXHAUSTED",
];

fn read(body: &Body<'_>, _clock: &ResponseClock, signal: &mut Signal) {
    let Some(json) = body.json() else { return };
    let Some(error) = items(json, "/errors").find(|error| is_throttle(error)) else {
        return;
    };
    signal.reject_by_body(PROFILE.name);
    if let Some(cost) = cost_wait(json) {
        signal.set_body_wait(cost.delay, "graphql extensions.cost");
        signal.cost = Some(cost);
    } else if let Some(delay) = error
        .pointer("/extensions/retry_in_seconds")
        .and_then(number)
        .and_then(seconds)
    {
        signal.set_body_wait(delay, "graphql extensions.retry_in_seconds");
    }
}

fn is_throttle(error: &Value) -> bool {
    [str_at(error, "/extensions/code"), str_at(error, "/type")]
        .into_iter()
        .flatten()
        .any(|code| THROTTLE_CODES.contains(&code))
}

/// Shopify's cost status, at the top level or inside the error.
fn cost_wait(json: &Value) -> Option<CostWait> {
    let cost = json.pointer("/extensions/cost")?;
    let requested = cost.get("requestedQueryCost").and_then(number)?;
    let status = cost.get("throttleStatus")?;
    let available = status.get("currentlyAvailable").and_then(number)?;
    let restore = status
        .get("restoreRate")
        .and_then(number)
        .filter(|r| *r > 0.0)?;
    if let Some(maximum) = status.get("maximumAvailable").and_then(number)
        && requested > maximum
    {
        return None;
    }
    let delay = seconds((requested - available).max(0.0) / restore)?;
    Some(CostWait {
        unit: COST_UNIT,
        requested: requested.ceil() as u64,
        available: available.floor() as u64,
        delay,
    })
}

/// Seconds as a delay, rounded up to the millisecond, at most [`MAX_DELAY`].
fn seconds(value: f64) -> Option<Duration> {
    let delay = Duration::try_from_secs_f64((value * 1_000.0).ceil() / 1_000.0).ok()?;
    (delay <= MAX_DELAY).then_some(delay)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::signal::testing::{Headers, body_signal};

    fn shopify(requested: &str, available: &str, restore: &str) -> String {
        format!(
            r#"{{"errors":[{{"message":"Throttled","extensions":{{"code":"THROTTLED",
            "documentation":"https://shopify.dev/api/usage/rate-limits"}}}}],
            "extensions":{{"cost":{{"requestedQueryCost":{requested},"actualQueryCost":null,
            "throttleStatus":{{"maximumAvailable":1000.0,"currentlyAvailable":{available},"restoreRate":{restore}}}}}}}}}"#
        )
    }

    #[test]
    fn table() {
        const JSON: Headers = &[("content-type", "application/json")];
        let cases: &[(Headers, String, bool, Option<u64>)] = &[
            // (101 - 1) / 50 = 2 s.
            (JSON, shopify("101", "1", "50.0"), true, Some(2_000)),
            (JSON, shopify("752", "2", "100"), true, Some(7_500)),
            // Enough available already: throttled, go now.
            (JSON, shopify("10", "82", "50"), true, Some(0)),
            // Costs more than the bucket holds: a rejection, no wait to give.
            (JSON, shopify("1001", "0", "50"), true, None),
            (JSON, shopify("101", "1", "0"), true, None),
            (
                &[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "1700000030"),
                  ("x-ratelimit-resource", "graphql")],
                r#"{"errors":[{"type":"RATE_LIMITED","message":"API rate limit exceeded for user ID 1."}]}"#.into(),
                true,
                Some(30_000),
            ),
            // Linear (issue 50): a 400 whose error says RATELIMITED, the
            // reset in epoch milliseconds: 12.5 s from the response's time.
            (
                &[("x-ratelimit-requests-limit", "1500"), ("x-ratelimit-requests-remaining", "0"),
                  ("x-ratelimit-requests-reset", "1700000012500")],
                r#"{"errors":[{"message":"Rate limit exceeded","extensions":{"code":"RATELIMITED"}}]}"#.into(),
                true,
                Some(12_500),
            ),
            (
                JSON,
                r#"{"errors":[{"message":"Complexity budget exhausted","extensions":{"code":"COMPLEXITY_BUDGET_EXHAUSTED","retry_in_seconds":27}}]}"#.into(),
                true,
                Some(27_000),
            ),
            (JSON, r#"{"errors":[{"message":"Field 'x' doesn't exist","extensions":{"code":"undefinedField"}}]}"#.into(), false, None),
            (JSON, r#"{"data":{"shop":{"name":"x"}},"extensions":{"cost":{"requestedQueryCost":1}}}"#.into(), false, None),
        ];
        for (headers, body, throttled, wait_ms) in cases {
            let signal = body_signal(200, headers, body);
            assert_eq!(signal.throttled, *throttled, "{body}");
            let wait = signal
                .wait()
                .map(|w| u64::try_from(w.delay.as_millis()).unwrap());
            assert_eq!(wait, *wait_ms, "{body}");
        }
    }

    /// Issue 50: Linear answers a throttle as HTTP 400 with a GraphQL
    /// `RATELIMITED` error and its reset in epoch milliseconds; the wait is
    /// read (the test clock's now is epoch 1,700,000,000 s).
    #[test]
    fn a_linear_400_throttle_reads_its_epoch_millisecond_reset() {
        let headers: Headers = &[
            ("content-type", "application/json; charset=utf-8"),
            ("x-ratelimit-requests-limit", "5000"),
            ("x-ratelimit-requests-remaining", "0"),
            ("x-ratelimit-requests-reset", "1700000042250"),
        ];
        let body = r#"{"errors":[{"message":"Rate limit exceeded","locations":[{"line":1,"column":9}],
            "extensions":{"code":"RATELIMITED","userPresentableMessage":"You have exceeded the rate limit."}}]}"#;
        let signal = body_signal(400, headers, body);
        assert!(signal.throttled);
        let wait = signal.wait().unwrap();
        assert_eq!(wait.delay, Duration::from_millis(42_250));
        // Not a request error: a 400 that says RATELIMITED is a deferral.
        let plain = body_signal(
            400,
            &[],
            r#"{"errors":[{"message":"Argument invalid","extensions":{"code":"INVALID_INPUT"}}]}"#,
        );
        assert!(!plain.throttled);
    }

    #[test]
    fn the_cost_wait_names_its_unit() {
        let signal = body_signal(200, &[], &shopify("101", "1", "50"));
        let cost = signal.cost.clone().unwrap();
        assert_eq!(
            (cost.unit, cost.requested, cost.available),
            ("points", 101, 1)
        );
        assert_eq!(cost.delay, Duration::from_secs(2));
        assert_eq!(signal.wait().unwrap().source, "graphql extensions.cost");
    }
}
