//! OpenAI's `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`: two scopes, Go-style resets.
//!
//! OpenAI API docs ("Rate limits", headers): the limit and remaining count of
//! requests and of tokens, and the time until each resets as a Go duration
//! (`1s`, `6m0s`, `12ms`). Requests and tokens are separate buckets on the
//! server, so they become the scopes `requests` and `tokens`: running out of
//! tokens defers calls until the token reset, not the request reset.

use super::{Profile, go_duration, values};
use crate::signal::fields::parse_integer;
use crate::signal::{Fields, ResponseClock, ScopeSignal, Signal};

pub(super) const PROFILE: Profile = Profile {
    name: "openai",
    fields: &[
        "x-ratelimit-limit-",
        "x-ratelimit-remaining-",
        "x-ratelimit-reset-",
    ],
    read,
};

/// OpenAI's limits are per minute (requests per minute, tokens per minute),
/// so a stated limit can be learned as a rate.
const WINDOW: std::time::Duration = std::time::Duration::from_secs(60);

/// Each scope with its fields: limit, remaining, and the reset that
/// decides its wait.
const SCOPES: [[&str; 4]; 2] = [
    [
        "requests",
        "x-ratelimit-limit-requests",
        "x-ratelimit-remaining-requests",
        "x-ratelimit-reset-requests",
    ],
    [
        "tokens",
        "x-ratelimit-limit-tokens",
        "x-ratelimit-remaining-tokens",
        "x-ratelimit-reset-tokens",
    ],
];

fn read(fields: &Fields<'_>, _clock: &ResponseClock, signal: &mut Signal) {
    for [scope, limit, remaining, reset] in SCOPES {
        let mut report = ScopeSignal::new(scope, reset);
        report.limit = values::lowest(fields, limit, parse_integer);
        report.remaining = values::lowest(fields, remaining, parse_integer);
        report.reset = values::latest(fields, reset, go_duration::parse);
        report.window = report.limit.map(|_| WINDOW);
        signal.add_scope(report);
    }
}

#[cfg(test)]
mod tests {
    use crate::signal::testing::{Row, rows, signal};
    use std::time::Duration;

    #[test]
    fn table() {
        type Case<'a> = (&'a [(&'a str, &'a str)], &'a [Row]);
        let cases: &[Case<'_>] = &[
            // A real response from the chat completions endpoint.
            (
                &[
                    ("x-ratelimit-limit-requests", "10000"),
                    ("x-ratelimit-limit-tokens", "2000000"),
                    ("x-ratelimit-remaining-requests", "9999"),
                    ("x-ratelimit-remaining-tokens", "1999976"),
                    ("x-ratelimit-reset-requests", "6ms"),
                    ("x-ratelimit-reset-tokens", "0s"),
                ],
                &[
                    ("requests", Some(10000), Some(9999), Some(6)),
                    ("tokens", Some(2_000_000), Some(1_999_976), Some(0)),
                ],
            ),
            // Tokens spent: the token reset decides.
            (
                &[
                    ("X-RateLimit-Remaining-Tokens", "0"),
                    ("X-RateLimit-Reset-Tokens", "6m0s"),
                    ("x-ratelimit-remaining-requests", "59"),
                    ("x-ratelimit-reset-requests", "1h2m3.5s"),
                ],
                &[
                    ("requests", None, Some(59), Some(3_723_500)),
                    ("tokens", None, Some(0), Some(360_000)),
                ],
            ),
            (
                &[
                    ("x-ratelimit-remaining-requests", "0"),
                    ("x-ratelimit-reset-requests", "20ms"),
                ],
                &[("requests", None, Some(0), Some(20))],
            ),
            (
                &[
                    ("x-ratelimit-remaining-requests", "0"),
                    ("x-ratelimit-reset-requests", "1.5s"),
                ],
                &[("requests", None, Some(0), Some(1500))],
            ),
            // Repeated: the tightest binds.
            (
                &[
                    ("x-ratelimit-remaining-requests", "7"),
                    ("x-ratelimit-remaining-requests", "3"),
                    ("x-ratelimit-reset-requests", "1s, 2s"),
                ],
                &[("requests", None, Some(3), Some(2000))],
            ),
            // Garbage, negatives, 40 digits, bare numbers, absurd durations.
            (
                &[
                    ("x-ratelimit-remaining-requests", "-1"),
                    (
                        "x-ratelimit-limit-requests",
                        "1234567890123456789012345678901234567890",
                    ),
                    ("x-ratelimit-reset-requests", "-1s"),
                    ("x-ratelimit-reset-tokens", "5"),
                    ("x-ratelimit-remaining-tokens", "lots"),
                ],
                &[],
            ),
            (
                &[
                    ("x-ratelimit-remaining-tokens", "0"),
                    ("x-ratelimit-reset-tokens", "9999h"),
                ],
                &[("tokens", None, Some(0), None)],
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
    fn a_429_waits_on_the_spent_scope() {
        let s = signal(
            429,
            &[
                ("x-ratelimit-remaining-requests", "0"),
                ("x-ratelimit-reset-requests", "1s"),
                ("x-ratelimit-remaining-tokens", "0"),
                ("x-ratelimit-reset-tokens", "7.66s"),
            ],
        );
        assert!(s.throttled);
        let wait = s.wait().unwrap();
        assert_eq!(wait.delay, Duration::from_millis(7660));
        assert_eq!(
            (wait.source, wait.scope.as_deref()),
            ("x-ratelimit-reset-tokens", Some("tokens"))
        );
        // retry-after-ms, when OpenAI sends it, takes precedence.
        let s = signal(
            429,
            &[
                ("retry-after-ms", "4200"),
                ("x-ratelimit-remaining-requests", "0"),
                ("x-ratelimit-reset-requests", "1s"),
            ],
        );
        let wait = s.wait().unwrap();
        assert_eq!(
            (wait.delay, wait.source, wait.scope.as_deref()),
            (
                Duration::from_millis(4200),
                "retry-after-ms",
                Some("requests")
            )
        );
    }
}
