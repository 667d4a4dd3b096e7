//! HubSpot's `X-HubSpot-RateLimit-*`: a rolling interval in milliseconds with its max and remaining, a per-second budget, and a daily one.
//!
//! Source: HubSpot developer docs, "API usage guidelines and limits":
//! `X-HubSpot-RateLimit-Interval-Milliseconds` (the rolling window, e.g.
//! 10000), `-Max` and `-Remaining` (requests allowed and left in it),
//! `-Secondly` and `-Secondly-Remaining`, `-Daily` and `-Daily-Remaining`.
//! No reset is sent: the interval rolls, so an exhausted one is assumed to
//! free up a whole interval later (never early). The daily budget resets at
//! midnight in the account's time zone, which the headers do not say: the
//! latest midnight on Earth (UTC-12) is assumed.

use std::time::Duration;

use super::Profile;
use crate::signal::fields::parse_count;
use crate::signal::{DEFAULT_SCOPE, Fields, MAX_DELAY, ResponseClock, ScopeSignal, Signal};

pub(super) const PROFILE: Profile = Profile {
    name: "hubspot",
    fields: &["x-hubspot-ratelimit-"],
    read,
};

const PREFIX: &str = "x-hubspot-ratelimit";

/// The last time zone to reach midnight.
const LATEST_MIDNIGHT_OFFSET_S: i64 = -12 * 3_600;

fn read(fields: &Fields<'_>, clock: &ResponseClock, signal: &mut Signal) {
    let count = |name: &str| fields.first(name).and_then(parse_count);
    // An interval past MAX_DELAY is absurd: ignored, as every wait is.
    let interval = count("x-hubspot-ratelimit-interval-milliseconds")
        .filter(|ms| *ms > 0)
        .map(Duration::from_millis)
        .filter(|interval| *interval <= MAX_DELAY);
    let windows = [
        (
            DEFAULT_SCOPE,
            "x-hubspot-ratelimit-max",
            "x-hubspot-ratelimit-remaining",
            interval,
        ),
        (
            "secondly",
            "x-hubspot-ratelimit-secondly",
            "x-hubspot-ratelimit-secondly-remaining",
            Some(Duration::from_secs(1)),
        ),
    ];
    for (scope, limit, remaining, window) in windows {
        let mut report = ScopeSignal::new(scope, PREFIX);
        report.limit = count(limit);
        report.remaining = count(remaining);
        if report.limit.is_none() && report.remaining.is_none() {
            continue;
        }
        report.window = window;
        report.reset = window.filter(|_| report.remaining == Some(0));
        signal.add_scope(report);
    }
    let mut daily = ScopeSignal::new("daily", PREFIX);
    daily.limit = count("x-hubspot-ratelimit-daily");
    daily.remaining = count("x-hubspot-ratelimit-daily-remaining");
    if daily.remaining.is_some() {
        daily.window = Some(Duration::from_secs(86_400));
    }
    if daily.remaining == Some(0) {
        daily.reset = clock.until_next_midnight(LATEST_MIDNIGHT_OFFSET_S);
    }
    signal.add_scope(daily);
}

#[cfg(test)]
mod tests {
    use crate::signal::testing::{Row, rows, signal};

    #[test]
    fn table() {
        type Case<'a> = (&'a [(&'a str, &'a str)], &'a [Row]);
        // NOW is 22:13:20Z; midnight at UTC-12 is 12:00Z: 13 h 46 m 40 s on.
        let to_midnight = (13 * 3_600 + 46 * 60 + 40) * 1_000;
        let cases: &[Case<'_>] = &[
            (
                &[
                    ("x-hubspot-ratelimit-interval-milliseconds", "10000"),
                    ("x-hubspot-ratelimit-max", "100"),
                    ("x-hubspot-ratelimit-remaining", "99"),
                    ("x-hubspot-ratelimit-secondly", "10"),
                    ("x-hubspot-ratelimit-secondly-remaining", "9"),
                    ("x-hubspot-ratelimit-daily", "250000"),
                    ("x-hubspot-ratelimit-daily-remaining", "249900"),
                ],
                &[
                    ("api_key", Some(100), Some(99), None),
                    ("secondly", Some(10), Some(9), None),
                    ("daily", Some(250_000), Some(249_900), None),
                ],
            ),
            (
                &[
                    ("x-hubspot-ratelimit-interval-milliseconds", "10000"),
                    ("x-hubspot-ratelimit-max", "100"),
                    ("x-hubspot-ratelimit-remaining", "0"),
                ],
                &[("api_key", Some(100), Some(0), Some(10_000))],
            ),
            (
                &[
                    ("x-hubspot-ratelimit-daily", "250000"),
                    ("x-hubspot-ratelimit-daily-remaining", "0"),
                ],
                &[("daily", Some(250_000), Some(0), Some(to_midnight))],
            ),
            (&[("x-hubspot-ratelimit-max", "lots")], &[]),
            // An interval of 56 years (the property test's find): no reset.
            (
                &[
                    ("x-hubspot-ratelimit-interval-milliseconds", "1763516750000"),
                    ("x-hubspot-ratelimit-remaining", "0"),
                ],
                &[("api_key", None, Some(0), None)],
            ),
        ];
        for (headers, expected) in cases {
            let got = rows(&signal(200, headers));
            let expected: Vec<_> = expected
                .iter()
                .map(|(n, l, r, t)| ((*n).to_owned(), *l, *r, *t))
                .collect();
            assert_eq!(got, expected, "{headers:?}");
        }
        // A spent daily budget is a quota.
        let spent = signal(
            429,
            &[
                ("x-hubspot-ratelimit-daily", "1"),
                ("x-hubspot-ratelimit-daily-remaining", "0"),
            ],
        );
        assert!(spent.scopes[0].is_spent_long_window());
    }
}
