//! Rejections in the body shapes real APIs use, for testing body signals (issue 15).
//!
//! The limiter decides as always; a [`BodyStyle`] only changes how its
//! rejection reads: the status, the body, and whether any wait is in a
//! header. Each style imitates one API's documented answer (see the
//! variants), stating the limiter's exact wait where the format can.

use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderValue, Response, StatusCode};

/// How a throttled request's answer is shaped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum BodyStyle {
    /// A 429 with `{"error":"rate limited"}` and the header style's fields.
    #[default]
    Plain,
    /// Google's 429 `RESOURCE_EXHAUSTED` with the wait only in
    /// `error.details[]`' `google.rpc.RetryInfo.retryDelay`, no `Retry-After`.
    GoogleRetryInfo,
    /// Shopify's GraphQL throttle: a 200 whose `errors[].extensions.code`
    /// is `THROTTLED`, the wait implied by `extensions.cost` (1000 points
    /// restored a second, so the requested cost is the wait in ms).
    GraphqlThrottled,
    /// GitHub's secondary limit: a 403 whose message names it, with no
    /// header (GitHub then says to wait at least a minute).
    GithubSecondary,
    /// A 429 "Too many concurrent requests" when the in-flight limit
    /// refused the request (no `Retry-After`); other rejections are plain.
    Concurrency,
}

/// Points the GraphQL style restores a second: one per millisecond.
const RESTORE_RATE: u64 = 1_000;

/// Reshapes the limiter's `rejection` (which waits `wait`); `crowded` when
/// the in-flight limit refused it.
pub(crate) fn reshape(
    style: BodyStyle,
    mut rejection: Response<Bytes>,
    wait: Duration,
    crowded: bool,
) -> Response<Bytes> {
    let (status, body) = match style {
        BodyStyle::Plain => return rejection,
        BodyStyle::Concurrency if !crowded => return rejection,
        BodyStyle::GoogleRetryInfo => (
            StatusCode::TOO_MANY_REQUESTS,
            serde_json::json!({"error": {
                "code": 429,
                "message": "Resource has been exhausted (e.g. check quota).",
                "status": "RESOURCE_EXHAUSTED",
                "details": [{
                    "@type": "type.googleapis.com/google.rpc.RetryInfo",
                    "retryDelay": format!("{}.{:03}s", wait.as_secs(), wait.subsec_millis()),
                }],
            }}),
        ),
        BodyStyle::GraphqlThrottled => {
            let requested = u64::try_from(wait.as_millis().max(1)).unwrap_or(u64::MAX);
            (
                StatusCode::OK,
                serde_json::json!({
                    "errors": [{"message": "Throttled", "extensions": {"code": "THROTTLED"}}],
                    "extensions": {"cost": {
                        "requestedQueryCost": requested,
                        "actualQueryCost": null,
                        "throttleStatus": {
                            "maximumAvailable": requested.max(RESTORE_RATE),
                            "currentlyAvailable": 0,
                            "restoreRate": RESTORE_RATE,
                        },
                    }},
                }),
            )
        }
        BodyStyle::GithubSecondary => (
            StatusCode::FORBIDDEN,
            serde_json::json!({
                "message": "You have exceeded a secondary rate limit. Please wait a few minutes before you try again.",
                "documentation_url": "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits",
            }),
        ),
        BodyStyle::Concurrency => (
            StatusCode::TOO_MANY_REQUESTS,
            serde_json::json!({"error": "Too many concurrent requests for this key"}),
        ),
    };
    *rejection.status_mut() = status;
    let headers = rejection.headers_mut();
    headers.remove(RETRY_AFTER);
    headers.remove("retry-after-ms");
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    *rejection.body_mut() = Bytes::from(body.to_string());
    rejection
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain() -> Response<Bytes> {
        let mut response = Response::new(Bytes::from_static(b"{\"error\":\"rate limited\"}"));
        *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
        response
            .headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from_static("2"));
        response
    }

    #[test]
    fn each_style_states_the_wait_its_way() {
        let wait = Duration::from_millis(1_500);
        let google = reshape(BodyStyle::GoogleRetryInfo, plain(), wait, false);
        assert_eq!(google.status(), 429);
        assert!(google.headers().get(RETRY_AFTER).is_none());
        assert!(String::from_utf8_lossy(google.body()).contains("\"retryDelay\":\"1.500s\""));

        let graphql = reshape(BodyStyle::GraphqlThrottled, plain(), wait, false);
        assert_eq!(graphql.status(), 200);
        assert!(String::from_utf8_lossy(graphql.body()).contains("\"requestedQueryCost\":1500"));

        let github = reshape(BodyStyle::GithubSecondary, plain(), wait, false);
        assert_eq!(github.status(), 403);
        assert!(String::from_utf8_lossy(github.body()).contains("secondary rate limit"));

        let crowded = reshape(BodyStyle::Concurrency, plain(), wait, true);
        assert!(String::from_utf8_lossy(crowded.body()).contains("concurrent"));
        assert!(crowded.headers().get(RETRY_AFTER).is_none());
        let rated = reshape(BodyStyle::Concurrency, plain(), wait, false);
        assert_eq!(rated.headers()[RETRY_AFTER], "2");
    }
}
