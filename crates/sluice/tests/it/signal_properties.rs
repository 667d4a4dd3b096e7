//! Property tests of `signal::read`: no header can make it panic, ask for a
//! negative or absurd wait, or name an oversized scope; and with a `Date`
//! header, the local clock cannot change what a response means.

use std::time::{Duration, UNIX_EPOCH};

use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use proptest::prelude::*;
use sluice::signal::{self, MAX_DELAY, Signal};

/// Every header name a profile reads.
const KNOWN: &[&str] = &[
    "date",
    "retry-after",
    "retry-after-ms",
    "x-amz-retry-after",
    "ratelimit",
    "ratelimit-policy",
    "ratelimit-limit",
    "ratelimit-remaining",
    "ratelimit-reset",
    "beta-ratelimit",
    "beta-ratelimit-policy",
    "beta-ratelimit-limit",
    "beta-ratelimit-remaining",
    "beta-ratelimit-reset",
    "x-ratelimit-limit",
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
    "x-ratelimit-reset-after",
    "x-ratelimit-used",
    "x-ratelimit-resource",
    "x-rate-limit",
    "x-rate-limit-limit",
    "x-rate-limit-remaining",
    "x-rate-limit-reset",
    "x-rate-limit-reset-after",
    "x-rate-limit-used",
    "x-rate-limit-resource",
    "x-ratelimit-limit-requests",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-reset-requests",
    "x-ratelimit-limit-tokens",
    "x-ratelimit-remaining-tokens",
    "x-ratelimit-reset-tokens",
    "anthropic-ratelimit-requests-limit",
    "anthropic-ratelimit-requests-remaining",
    "anthropic-ratelimit-requests-reset",
    "anthropic-ratelimit-tokens-limit",
    "anthropic-ratelimit-tokens-remaining",
    "anthropic-ratelimit-tokens-reset",
    "anthropic-ratelimit-input-tokens-limit",
    "anthropic-ratelimit-input-tokens-remaining",
    "anthropic-ratelimit-input-tokens-reset",
    "anthropic-ratelimit-output-tokens-limit",
    "anthropic-ratelimit-output-tokens-remaining",
    "anthropic-ratelimit-output-tokens-reset",
    "x-shopify-shop-api-call-limit",
    "zendesk-ratelimit-tickets-index",
    "x-beta-ratelimit-reset",
    "ratelimit-reason",
    "x-ratelimit-reason",
    "beta-ratelimit-reason",
    "x-beta-ratelimit-reason",
    "x-ratelimit-nearlimit",
    "x-ratelimit-bucket",
    "x-ratelimit-global",
    "x-ratelimit-scope",
    "x-hubspot-ratelimit-interval-milliseconds",
    "x-hubspot-ratelimit-max",
    "x-hubspot-ratelimit-remaining",
    "x-hubspot-ratelimit-secondly",
    "x-hubspot-ratelimit-secondly-remaining",
    "x-hubspot-ratelimit-daily",
    "x-hubspot-ratelimit-daily-remaining",
    "sforce-limit-info",
];

/// Pieces of almost-valid values: numbers of every size, separators,
/// units, parameter keys, timestamps and dates.
const ATOMS: &[&str] = &[
    "0",
    "1",
    "9",
    "00",
    "60",
    "1700000000",
    "1700000000000",
    "4000000000",
    "99999999999999999999",
    "1234567890123456789012345678901234567890",
    ".",
    "-",
    "+",
    "e",
    "E",
    ",",
    ";",
    "\"",
    "=",
    "/",
    " ",
    "\\",
    "h",
    "m",
    "s",
    "ms",
    "us",
    "ns",
    "T",
    "Z",
    ":",
    "r",
    "q",
    "w",
    "t",
    "total",
    "remaining",
    "resets",
    "limit",
    "reset",
    "burst",
    "daily",
    "api-usage",
    "global",
    "true",
    "0.0",
    "NaN",
    "inf",
    "2024-03-05T14:02Z",
    "2024-03-05T14:02:00+01:00",
    "9999-12-31T23:59:59Z",
    "Wed, 21 Oct 2015 07:28:00 GMT",
    "Fri, 31 Dec 9999 23:59:59 GMT",
];

/// Header-name bytes (RFC 9110 tchar), mixed case.
const TOKEN: &str = "[a-zA-Z0-9!#$%&'*+.^_`|~-]{1,24}";

fn mixed_case(name: &str, mask: u64) -> String {
    name.chars()
        .enumerate()
        .map(|(i, c)| {
            if mask >> (i % 64) & 1 == 1 {
                c.to_ascii_uppercase()
            } else {
                c
            }
        })
        .collect()
}

fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => (prop::sample::select(KNOWN), any::<u64>()).prop_map(|(n, mask)| mixed_case(n, mask)),
        2 => (
            prop::sample::select(&["zendesk-ratelimit-", "x-ratelimit-", "anthropic-ratelimit-", "ratelimit-", "x-rate-limit-"][..]),
            TOKEN,
        )
            .prop_map(|(prefix, rest)| format!("{prefix}{rest}")),
        1 => TOKEN.prop_map(String::from),
    ]
}

fn value(received: u64) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        // Visible ASCII and spaces.
        2 => "[ -~]{0,64}".prop_map(String::into_bytes),
        // Near misses.
        4 => prop::collection::vec(prop::sample::select(ATOMS), 0..10).prop_map(|atoms| atoms.concat().into_bytes()),
        // Well-formed values of every family, so that deep paths run too.
        4 => plausible(received).prop_map(String::into_bytes),
        // Any bytes a header value may hold (invalid ones are dropped below).
        1 => prop::collection::vec(any::<u8>(), 0..48),
        // Long values.
        1 => (prop::sample::select(ATOMS), 1usize..600).prop_map(|(atom, n)| atom.repeat(n).into_bytes()),
    ]
}

/// A number as servers write them: small, epoch-sized, or any `u64`, sometimes negative.
fn number() -> impl Strategy<Value = String> {
    (
        prop_oneof![Just(0u64), 0u64..100, 0u64..4_000_000_000, any::<u64>()],
        prop::bool::weighted(0.1),
    )
        .prop_map(|(n, negative)| {
            if negative {
                format!("-{n}")
            } else {
                n.to_string()
            }
        })
}

/// Shapes every profile parses, with times near `received` (past and future).
fn plausible(received: u64) -> impl Strategy<Value = String> {
    let instant = (-7_200i64..3_000_000).prop_map(move |offset| {
        UNIX_EPOCH + Duration::from_secs(received.saturating_add_signed(offset))
    });
    prop_oneof![
        number(),
        (number(), 0u32..1000).prop_map(|(n, f)| format!("{n}.{f}")),
        (0u64..100, 0u64..60, 0u64..60, 0u32..1000)
            .prop_map(|(h, m, s, f)| format!("{h}h{m}m{s}.{f}s")),
        (0u64..100_000).prop_map(|n| format!("{n}ms")),
        instant
            .clone()
            .prop_map(|t| humantime::format_rfc3339(t).to_string()),
        // Jira's minute precision: 2024-03-05T14:02Z.
        instant.clone().prop_map(|t| {
            let full = humantime::format_rfc3339_seconds(t).to_string();
            format!("{}Z", full.get(..16).unwrap_or(&full))
        }),
        instant.clone().prop_map(httpdate::fmt_http_date),
        (instant, any::<bool>()).prop_map(|(t, ms)| {
            let secs = t.duration_since(UNIX_EPOCH).unwrap_or_default();
            if ms {
                secs.as_millis().to_string()
            } else {
                secs.as_secs().to_string()
            }
        }),
        ("[a-z]{1,8}", number(), number())
            .prop_map(|(name, r, t)| format!("\"{name}\";r={r};t={t}")),
        ("[a-z]{1,8}", number(), number())
            .prop_map(|(name, q, w)| format!("\"{name}\";q={q};w={w}")),
        (number(), number(), number())
            .prop_map(|(l, r, t)| format!("limit={l}, remaining={r}, reset={t}")),
        (number(), number(), number())
            .prop_map(|(t, r, s)| format!("total={t}; remaining={r}; resets={s}")),
        (number(), number()).prop_map(|(u, c)| format!("{u}/{c}")),
        "[a-z-]{1,70}",
    ]
}

fn status() -> impl Strategy<Value = u16> {
    prop_oneof![Just(429u16), Just(403), Just(503), Just(200), 100u16..=999,]
}

/// A response's headers; values a `HeaderValue` cannot hold are skipped.
fn headers(pairs: &[(String, Vec<u8>)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    append(&mut map, pairs);
    map
}

fn append(map: &mut HeaderMap, pairs: &[(String, Vec<u8>)]) {
    for (name, value) in pairs {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_bytes(value),
        ) {
            map.append(name, value);
        }
    }
}

fn response() -> impl Strategy<Value = (u16, Vec<(String, Vec<u8>)>, u64)> {
    // Received anywhere from 1970 to 2096, mostly around now.
    prop_oneof![1_600_000_000u64..1_800_000_000, 0u64..4_000_000_000].prop_flat_map(|received| {
        (
            status(),
            prop::collection::vec((name(), value(received)), 0..16),
            Just(received),
        )
    })
}

fn read(status: u16, map: &HeaderMap, received_s: u64) -> Signal {
    let status = StatusCode::from_u16(status).unwrap();
    signal::read(status, map, UNIX_EPOCH + Duration::from_secs(received_s))
}

/// The invariants every signal keeps, whatever it was made from.
fn check(signal: &Signal, status: u16) {
    if let Some(wait) = &signal.retry_after {
        assert!(wait.delay <= MAX_DELAY, "retry-after {wait:?}");
    }
    for scope in &signal.scopes {
        assert!(
            !scope.name.is_empty() && scope.name.len() <= 64,
            "{scope:?}"
        );
        assert!(scope.reset.is_none_or(|r| r <= MAX_DELAY), "{scope:?}");
        assert!(scope.wait().is_none_or(|w| w <= MAX_DELAY), "{scope:?}");
    }
    if let Some(name) = &signal.reason_scope {
        assert!(!name.is_empty() && name.len() <= 64, "{name:?}");
    }
    // Duration cannot be negative; what remains to check is the clamp.
    if let Some(wait) = signal.wait() {
        assert!(wait.delay <= MAX_DELAY, "{wait:?}");
        let scope = wait.scope.as_deref().unwrap_or("");
        assert!(scope.len() <= 64, "{wait:?}");
    }
    if !matches!(status, 403 | 429 | 503) {
        assert!(!signal.throttled, "{signal:?}");
    }
    assert_eq!(signal.http_status, status);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn any_headers_give_a_sane_signal((status, pairs, received) in response()) {
        let map = headers(&pairs);
        let signal = read(status, &map, received);
        check(&signal, status);
        // Reading is a pure function of its inputs.
        prop_assert_eq!(&signal, &read(status, &map, received));
    }

    #[test]
    fn with_a_date_header_the_local_clock_changes_nothing(
        (status, pairs, date) in response(),
        skew in -86_400i64 * 365..86_400 * 365,
    ) {
        let mut map = HeaderMap::new();
        let date_value = httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(date));
        map.insert("date", HeaderValue::from_str(&date_value).unwrap());
        append(&mut map, &pairs);
        let at_date = read(status, &map, date);
        let skewed = read(status, &map, date.saturating_add_signed(skew));
        check(&at_date, status);
        prop_assert_eq!(at_date, skewed);
    }
}

/// A response whose one absolute reset is `headers`, read with the local clock
/// `skew_s` seconds off the server's `Date`.
fn wait_with_skew(status: u16, headers: &[(&str, &str)], skew_s: i64) -> Option<Duration> {
    const DATE: u64 = 1_709_647_200; // Tue, 05 Mar 2024 14:00:00 GMT
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        map.append(
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
    }
    read(status, &map, DATE.saturating_add_signed(skew_s))
        .wait()
        .map(|w| w.delay)
}

#[test]
fn a_local_clock_three_hours_off_changes_no_wait() {
    const DATE: (&str, &str) = ("date", "Tue, 05 Mar 2024 14:00:00 GMT");
    let secs = Duration::from_secs;
    /// What the reset is, the status, the headers, the wait expected.
    type Case<'a> = (&'a str, u16, &'a [(&'a str, &'a str)], Duration);
    let cases: &[Case<'_>] = &[
        (
            "epoch seconds (GitHub)",
            403,
            &[
                DATE,
                ("x-ratelimit-remaining", "0"),
                ("x-ratelimit-reset", "1709647230"),
            ],
            secs(30),
        ),
        (
            "HTTP-date (Retry-After)",
            503,
            &[DATE, ("retry-after", "Tue, 05 Mar 2024 14:00:20 GMT")],
            secs(20),
        ),
        (
            "RFC 3339 (Anthropic)",
            429,
            &[
                DATE,
                ("anthropic-ratelimit-requests-remaining", "0"),
                ("anthropic-ratelimit-requests-reset", "2024-03-05T14:00:40Z"),
            ],
            secs(40),
        ),
        (
            "ISO minutes (Jira)",
            429,
            &[
                DATE,
                ("x-ratelimit-reset", "2024-03-05T14:01Z"),
                ("ratelimit-reason", "jira-burst-based"),
            ],
            secs(60),
        ),
        (
            "IETF epoch reset",
            200,
            &[
                DATE,
                ("ratelimit-remaining", "0"),
                ("ratelimit-reset", "1709647250"),
            ],
            secs(50),
        ),
    ];
    let three_hours = 3 * 3600;
    for (what, status, headers, expected) in cases {
        for skew in [-three_hours, 0, three_hours] {
            assert_eq!(
                wait_with_skew(*status, headers, skew),
                Some(*expected),
                "{what}, local clock off by {skew} s"
            );
        }
    }
    // Without a Date header the local clock is all there is: three hours
    // fast makes the epoch reset look past (go now), never negative.
    let no_date = [
        ("x-ratelimit-remaining", "0"),
        ("x-ratelimit-reset", "1709647230"),
    ];
    assert_eq!(wait_with_skew(403, &no_date, 0), Some(secs(30)));
    assert_eq!(
        wait_with_skew(403, &no_date, three_hours),
        Some(Duration::ZERO)
    );
}
