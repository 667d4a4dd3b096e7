//! Anthropic's `anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset}`.
//!
//! Anthropic API docs ("Rate limits", response headers): each limit the
//! request is subject to, what remains of it, and when it is fully
//! replenished as an RFC 3339 timestamp. Each is a separate bucket on the
//! server and becomes its own scope. The timestamps are measured against the
//! response's `Date` header (see `ResponseClock`), never the local clock alone.

use super::{Profile, values};
use crate::signal::fields::parse_integer;
use crate::signal::{Fields, ResponseClock, ScopeSignal, Signal};

pub(super) const PROFILE: Profile = Profile {
    name: "anthropic",
    fields: &["anthropic-ratelimit-"],
    read,
};

/// Each scope with its fields: limit, remaining, and the reset that
/// decides its wait.
const SCOPES: [[&str; 4]; 4] = [
    [
        "requests",
        "anthropic-ratelimit-requests-limit",
        "anthropic-ratelimit-requests-remaining",
        "anthropic-ratelimit-requests-reset",
    ],
    [
        "tokens",
        "anthropic-ratelimit-tokens-limit",
        "anthropic-ratelimit-tokens-remaining",
        "anthropic-ratelimit-tokens-reset",
    ],
    [
        "input-tokens",
        "anthropic-ratelimit-input-tokens-limit",
        "anthropic-ratelimit-input-tokens-remaining",
        "anthropic-ratelimit-input-tokens-reset",
    ],
    [
        "output-tokens",
        "anthropic-ratelimit-output-tokens-limit",
        "anthropic-ratelimit-output-tokens-remaining",
        "anthropic-ratelimit-output-tokens-reset",
    ],
];

fn read(fields: &Fields<'_>, clock: &ResponseClock, signal: &mut Signal) {
    for [scope, limit, remaining, reset] in SCOPES {
        let mut report = ScopeSignal::new(scope, reset);
        report.limit = values::lowest(fields, limit, parse_integer);
        report.remaining = values::lowest(fields, remaining, parse_integer);
        report.reset = values::latest(fields, reset, |v| clock.until_rfc3339(v));
        signal.add_scope(report);
    }
}

#[cfg(test)]
mod tests {
    use crate::signal::testing::{Row, rows, signal_at};
    use std::time::{Duration, UNIX_EPOCH};

    use crate::signal::Signal;

    /// 2024-10-15T18:02:07Z.
    const NOW: u64 = 1_729_015_327;

    fn signal(status: u16, headers: &[(&str, &str)]) -> Signal {
        signal_at(status, headers, UNIX_EPOCH + Duration::from_secs(NOW))
    }

    #[test]
    fn table() {
        type Case<'a> = (&'a [(&'a str, &'a str)], &'a [Row]);
        let cases: &[Case<'_>] = &[
            // A real Messages API response: four scopes.
            (
                &[
                    ("anthropic-ratelimit-requests-limit", "50"),
                    ("anthropic-ratelimit-requests-remaining", "49"),
                    ("anthropic-ratelimit-requests-reset", "2024-10-15T18:02:08Z"),
                    ("anthropic-ratelimit-tokens-limit", "50000"),
                    ("anthropic-ratelimit-tokens-remaining", "49000"),
                    ("anthropic-ratelimit-tokens-reset", "2024-10-15T18:02:09Z"),
                    ("anthropic-ratelimit-input-tokens-limit", "40000"),
                    ("anthropic-ratelimit-input-tokens-remaining", "39500"),
                    (
                        "anthropic-ratelimit-input-tokens-reset",
                        "2024-10-15T18:02:08.500Z",
                    ),
                    ("anthropic-ratelimit-output-tokens-limit", "8000"),
                    ("anthropic-ratelimit-output-tokens-remaining", "7500"),
                    (
                        "anthropic-ratelimit-output-tokens-reset",
                        "2024-10-15T18:02:10Z",
                    ),
                ],
                &[
                    ("requests", Some(50), Some(49), Some(1000)),
                    ("tokens", Some(50000), Some(49000), Some(2000)),
                    ("input-tokens", Some(40000), Some(39500), Some(1500)),
                    ("output-tokens", Some(8000), Some(7500), Some(3000)),
                ],
            ),
            // Offsets, mixed case names, a reset in the past (now, never negative).
            (
                &[
                    ("Anthropic-RateLimit-Requests-Remaining", "0"),
                    (
                        "ANTHROPIC-RATELIMIT-REQUESTS-RESET",
                        "2024-10-15T20:02:37+02:00",
                    ),
                ],
                &[("requests", None, Some(0), Some(30_000))],
            ),
            (
                &[
                    ("anthropic-ratelimit-tokens-remaining", "0"),
                    ("anthropic-ratelimit-tokens-reset", "2024-10-15T18:00:00Z"),
                ],
                &[("tokens", None, Some(0), Some(0))],
            ),
            // Repeated: the tightest binds.
            (
                &[
                    ("anthropic-ratelimit-requests-remaining", "5, 2"),
                    (
                        "anthropic-ratelimit-requests-reset",
                        "2024-10-15T18:02:08Z, 2024-10-15T18:02:12Z",
                    ),
                ],
                &[("requests", None, Some(2), Some(5000))],
            ),
            // Garbage, negatives, 40 digits, epochs and HTTP-dates (not this family's form), far futures.
            (
                &[
                    ("anthropic-ratelimit-requests-remaining", "-1"),
                    (
                        "anthropic-ratelimit-requests-limit",
                        "1234567890123456789012345678901234567890",
                    ),
                    ("anthropic-ratelimit-requests-reset", "1729015330"),
                    (
                        "anthropic-ratelimit-tokens-reset",
                        "Tue, 15 Oct 2024 18:02:37 GMT",
                    ),
                    (
                        "anthropic-ratelimit-input-tokens-reset",
                        "2024-13-45T99:99:99Z",
                    ),
                    (
                        "anthropic-ratelimit-output-tokens-reset",
                        "9999-12-31T23:59:59Z",
                    ),
                ],
                &[],
            ),
            (
                &[("anthropic-ratelimit-requests-reset", "2024-10-15T18:02:37")],
                &[],
            ),
        ];
        for (headers, expected) in cases {
            let got = rows(&signal(200, headers));
            let expected: Vec<_> = expected
                .iter()
                .map(|(n, l, r, t)| (n.to_string(), *l, *r, *t))
                .collect();
            assert_eq!(got, expected, "{headers:?}");
        }
    }

    #[test]
    fn resets_are_measured_against_the_date_header() {
        let headers = [
            ("date", "Tue, 15 Oct 2024 18:02:07 GMT"),
            ("anthropic-ratelimit-output-tokens-remaining", "0"),
            (
                "anthropic-ratelimit-output-tokens-reset",
                "2024-10-15T18:02:12Z",
            ),
            ("retry-after", "5"),
        ];
        for skew in [0_i64, 3 * 3600, -3 * 3600] {
            let received = UNIX_EPOCH + Duration::from_secs(NOW.saturating_add_signed(skew));
            let s = signal_at(429, &headers, received);
            assert!(s.throttled);
            assert_eq!(
                s.scopes[0].reset,
                Some(Duration::from_secs(5)),
                "skew {skew}"
            );
            assert_eq!(s.wait().unwrap().scope.as_deref(), Some("output-tokens"));
        }
    }
}
