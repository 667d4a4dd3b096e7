//! `sluice inspect` on recorded responses: the explanation and the JSON.

use super::*;
use sluice::signal::parse_head;

#[test]
fn huge_and_binary_inputs_do_not_panic() {
    let mut input = b"HTTP/1.1 429 X\n".to_vec();
    // More distinct names than a header map can hold (http's limit is 32768).
    for i in 0..40_000u32 {
        input.extend_from_slice(format!("x-h{i}: {i}\n").as_bytes());
    }
    input.extend_from_slice(b"retry-after: ");
    input.extend(std::iter::repeat_n(b'9', 200_000));
    let head = parse_head(&input).unwrap();
    assert!(head.skipped > 0, "the map's capacity is bounded");
    let reading = Reading::new(&head, b"", SystemTime::now());
    assert!(reading.report().throttled);
    let binary: Vec<u8> = (0..1_000_000u32)
        .map(|i| u8::try_from(i.wrapping_mul(2_654_435_761) >> 24).unwrap())
        .collect();
    assert!(parse_head(&binary).is_err());
}

#[test]
fn now_is_epoch_seconds_or_rfc3339() {
    let at = |s| UNIX_EPOCH + Duration::from_secs(s);
    assert_eq!(parse_now("1709647200"), Ok(at(1_709_647_200)));
    assert_eq!(
        parse_now("1709647200.5"),
        Ok(at(1_709_647_200) + Duration::from_millis(500))
    );
    assert_eq!(parse_now("2024-03-05T14:00:00Z"), Ok(at(1_709_647_200)));
    assert_eq!(
        parse_now("2024-03-05T15:00:00+01:00"),
        Ok(at(1_709_647_200))
    );
    for bad in [
        "",
        "soon",
        "-5",
        "1e9",
        "2024-03-05T14:00:00",
        "9999999999999999",
    ] {
        assert!(parse_now(bad).is_err(), "{bad}");
    }
}

fn reading_of(input: &[u8], now: u64) -> serde_json::Value {
    let (head, body) = parse_response(input).unwrap();
    let reading = Reading::new(&head, body, UNIX_EPOCH + Duration::from_secs(now));
    serde_json::to_value(reading.report()).unwrap()
}

#[test]
fn the_report_follows_the_deciding_scope_and_the_quota_rule() {
    let json = reading_of(
        b"HTTP/1.1 200 OK\nx-ratelimit-remaining-requests: 5\nx-ratelimit-remaining-tokens: 0\nx-ratelimit-reset-tokens: 10m\n\n",
        0,
    );
    assert_eq!(json["scope"], "tokens");
    assert_eq!(json["wait_ms"], 600_000);
    assert_eq!(json["quota_exhausted"], true);
    assert_eq!(json["quota_scope"], "tokens");
    assert_eq!(json["throttled"], false);

    let json = reading_of(b"HTTP/2 200\ncontent-type: text/html\n\n", 0);
    assert_eq!(json["wait_ms"], serde_json::Value::Null);
    assert_eq!(json["scope"], serde_json::Value::Null);
    assert_eq!(json["scopes"], serde_json::json!([]));

    // A daily policy with nothing left is a quota even with a short reset.
    let json = reading_of(
        b"HTTP/1.1 429 X\nratelimit-policy: \"daily\";q=1000;w=86400\nratelimit: \"daily\";r=0;t=60\n\n",
        0,
    );
    assert_eq!(json["quota_exhausted"], true);
    assert_eq!(json["scopes"][0]["window_ms"], 86_400_000);
}

#[test]
fn the_body_is_read_whatever_the_status() {
    let json = reading_of(
        b"HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\n\r\n{\"error\":{\"status\":\"RESOURCE_EXHAUSTED\",\"details\":[{\"@type\":\"type.googleapis.com/google.rpc.RetryInfo\",\"retryDelay\":\"27s\"}]}}",
        0,
    );
    assert_eq!(json["wait_ms"], 27_000);
    assert_eq!(json["source"], "google.rpc.RetryInfo");
    assert_eq!(json["body"], "google");
    assert_eq!(json["concurrency"], false);

    // A GraphQL throttle in a 200, as a credential marked GraphQL reads it.
    let json = reading_of(
        b"HTTP/2 200\n\n{\"errors\":[{\"extensions\":{\"code\":\"THROTTLED\"}}],\"extensions\":{\"cost\":{\"requestedQueryCost\":101,\"throttleStatus\":{\"maximumAvailable\":1000,\"currentlyAvailable\":1,\"restoreRate\":50}}}}",
        0,
    );
    assert_eq!(json["throttled"], true);
    assert_eq!(json["wait_ms"], 2_000);
    assert_eq!(json["cost"]["unit"], "points");

    let json = reading_of(
        b"HTTP/1.1 429 X\n\n{\"error\":\"Too many concurrent requests for this user\"}",
        0,
    );
    assert_eq!(json["concurrency"], true);
    assert_eq!(json["quota_exhausted"], false);

    let json = reading_of(
        b"HTTP/1.1 403 Forbidden\n\n{\"error\":{\"errors\":[{\"reason\":\"dailyLimitExceeded\"}]}}",
        0,
    );
    assert_eq!(json["quota_exhausted"], true);
    assert_eq!(json["throttled"], true);

    let json = reading_of(b"HTTP/1.1 200 OK\n\n", 0);
    assert_eq!(json["concurrency"], false);
    assert_eq!(json["body"], serde_json::Value::Null);
}

#[test]
fn the_explanation_names_scope_wait_quota_and_clock() {
    let head = parse_head(
        b"HTTP/1.1 429 Too Many Requests\ndate: Tue, 05 Mar 2024 14:00:00 GMT\nretry-after: 3\nx-ratelimit-resource: search\nx-ratelimit-remaining: 0\nx-ratelimit-reset: 1709647230\nbad line\n\n",
    )
    .unwrap();
    let text = Reading::new(&head, b"", SystemTime::now()).explain(false);
    for needle in [
        "HTTP 429 Too Many Requests: the server refused",
        "retry-after: wait 3s",
        "scope \"search\": 0 left, resets in 30s",
        "No call on scope \"search\" starts for 3s (decided by retry-after)",
        "calls on other scopes are not held",
        "Quota not exhausted",
        "against the response's Date header",
        "Skipped 1 malformed header line.",
    ] {
        assert!(text.contains(needle), "{needle:?} not in:\n{text}");
    }
}
