//! Property tests of the body reader (issue 15): any body with any status
//! and headers gives a sane signal, never a panic; hostile sizes and depths
//! are refused by their bounds.

use std::time::{Duration, Instant, UNIX_EPOCH};

use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use proptest::prelude::*;
use sluice::signal::{self, MAX_DELAY, Signal};

/// Pieces of almost-valid error bodies of every family read.
const ATOMS: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    ":",
    ",",
    "\"",
    "\\",
    " ",
    "\"error\"",
    "\"errors\"",
    "\"details\"",
    "\"@type\"",
    "\"type.googleapis.com/google.rpc.RetryInfo\"",
    "\"type.googleapis.com/google.rpc.QuotaFailure\"",
    "\"violations\"",
    "\"quotaId\"",
    "\"PerDay\"",
    "\"retryDelay\"",
    "\"1.500s\"",
    "\"27s\"",
    "\"-3s\"",
    "\"99999999999s\"",
    "\"status\"",
    "\"RESOURCE_EXHAUSTED\"",
    "\"reason\"",
    "\"rateLimitExceeded\"",
    "\"dailyLimitExceeded\"",
    "\"extensions\"",
    "\"code\"",
    "\"THROTTLED\"",
    "\"type\"",
    "\"RATE_LIMITED\"",
    "\"cost\"",
    "\"requestedQueryCost\"",
    "\"throttleStatus\"",
    "\"currentlyAvailable\"",
    "\"restoreRate\"",
    "\"maximumAvailable\"",
    "\"retry_in_seconds\"",
    "0",
    "1",
    "50.0",
    "-1",
    "1e308",
    "1e-308",
    "NaN",
    "18446744073709551616",
    "null",
    "true",
    "\"overloaded_error\"",
    "\"insufficient_quota\"",
    "\"message\"",
    "\"You have exceeded a secondary rate limit\"",
    "try again in ",
    "retry after ",
    "6.5s",
    "7 seconds",
    "1m30s",
    "99999999999999 hours",
    "too many concurrent requests",
    "rate limit",
    "ms",
    "minutes",
];

fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..512),
        prop::collection::vec(prop::sample::select(ATOMS), 0..64)
            .prop_map(|atoms| atoms.concat().into_bytes()),
    ]
}

fn status() -> impl Strategy<Value = u16> {
    prop::sample::select(vec![
        200u16, 204, 400, 401, 403, 404, 409, 429, 500, 502, 503, 529,
    ])
}

fn headers() -> impl Strategy<Value = Vec<(&'static str, String)>> {
    let names = prop::sample::select(vec![
        "retry-after",
        "x-ratelimit-remaining",
        "x-ratelimit-reset",
        "content-type",
        "date",
    ]);
    let values = prop::sample::select(vec![
        "0",
        "3",
        "1700000030",
        "application/json",
        "text/html",
        "garbage",
        "Tue, 14 Nov 2023 22:13:20 GMT",
    ]);
    prop::collection::vec((names, values.prop_map(str::to_owned)), 0..4)
}

fn read(status: u16, pairs: &[(&'static str, String)], body: &[u8]) -> Signal {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.append(
            HeaderName::from_static(name),
            HeaderValue::from_str(value).unwrap(),
        );
    }
    let received = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    signal::read_with_body(StatusCode::from_u16(status).unwrap(), &map, body, received)
}

fn check(signal: &Signal) {
    if let Some(wait) = signal.wait() {
        assert!(wait.delay <= MAX_DELAY, "{wait:?}");
    }
    if let Some(cost) = &signal.cost {
        assert!(cost.delay <= MAX_DELAY, "{cost:?}");
    }
    // Whatever the body found, it found a rejection.
    if signal.concurrency || signal.quota || signal.body.is_some() {
        assert!(signal.throttled, "{signal:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn any_body_gives_a_sane_signal(status in status(), pairs in headers(), body in body()) {
        let signal = read(status, &pairs, &body);
        check(&signal);
        prop_assert_eq!(&signal, &read(status, &pairs, &body));
        // Headers keep precedence: a body never changes a header's wait.
        let alone = read(status, &pairs, b"");
        if let Some(header_wait) = alone.retry_after {
            prop_assert_eq!(signal.retry_after, Some(header_wait));
        }
        // A 2xx is never a rejection from the body alone unless it is JSON
        // read as GraphQL (the reader is told to read it).
        if (200..300).contains(&status) && !alone.throttled && signal.throttled {
            prop_assert_eq!(signal.body, Some("graphql"));
        }
    }
}

/// The bounds in bytes and depth: a 10 MB body and a 100,000-deep one are
/// refused by their size or depth, not parsed. The time bound only guards
/// against a parser that walks such inputs (it is far above what a read
/// costs, even unoptimized on a loaded machine).
#[test]
fn hostile_sizes_and_depths_are_cheap() {
    let huge = format!(
        "{{\"error\":{{\"status\":\"RESOURCE_EXHAUSTED\",\"pad\":\"{}\"}}}}",
        "x".repeat(10 << 20)
    );
    let deep = "[".repeat(100_000);
    let deep_object = "{\"a\":".repeat(100_000);
    for body in [huge.as_bytes(), deep.as_bytes(), deep_object.as_bytes()] {
        let started = Instant::now();
        let signal = read(429, &[], body);
        assert!(started.elapsed() < Duration::from_secs(1));
        check(&signal);
        assert_eq!(signal.body, None, "nothing parsed");
    }
}
