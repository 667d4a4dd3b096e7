//! Jira Cloud's timestamp `X-RateLimit-Reset` (`2024-03-05T14:02Z`) and `RateLimit-Reason`.
//!
//! Atlassian's "Rate limiting" docs for Jira Cloud: a 429 carries
//! `Retry-After` (read by the `retry_after` profile), `X-RateLimit-Reset` as
//! an ISO 8601 timestamp of minute precision (`yyyy-MM-ddTHH:mmZ`, "the request
//! timestamp plus the Retry-After period"), and `RateLimit-Reason` naming the
//! limit that refused: `jira-burst-based` (per endpoint, per second),
//! `jira-quota-tenant-based` (hourly points), `jira-per-issue-on-write`…
//! Jira has also been seen sending the same fields with an `X-Beta-` prefix.
//!
//! `X-RateLimit-Limit` and `-Remaining` are numbers and read by the
//! `x_ratelimit` profile, as is a numeric `X-RateLimit-Reset`; this profile
//! reads only the timestamp form, so the two never disagree about one value.
//! `X-RateLimit-NearLimit: true` carries no number and changes nothing:
//! sluice's own pacing and `-Remaining` already say how close the key is.

use std::time::Duration;

use super::{Profile, values};
use crate::signal::{DEFAULT_SCOPE, Fields, ResponseClock, ScopeSignal, Signal};

pub(super) const PROFILE: Profile = Profile {
    name: "jira",
    fields: &[
        "ratelimit-reason",
        "beta-ratelimit-reason",
        "x-ratelimit-reset",
        "x-ratelimit-reason",
        "x-ratelimit-resource",
        "x-beta-ratelimit-",
    ],
    read,
};

/// The reset fields, plain first.
const RESETS: [&str; 2] = ["x-ratelimit-reset", "x-beta-ratelimit-reset"];

/// The reason fields: the documented name first, then the spellings seen in the wild.
const REASONS: [&str; 4] = [
    "ratelimit-reason",
    "x-ratelimit-reason",
    "beta-ratelimit-reason",
    "x-beta-ratelimit-reason",
];

/// Jira answers every rate or quota refusal with 429 ("When any limit is
/// exceeded, Jira returns an HTTP 429"); a reason on anything else names no refusal.
const REJECTION: u16 = 429;

fn read(fields: &Fields<'_>, clock: &ResponseClock, signal: &mut Signal) {
    let reset = RESETS
        .iter()
        .find_map(|name| values::latest(fields, name, |v| timestamp(clock, v)));
    let reason = (signal.http_status == REJECTION)
        .then(|| REASONS.iter().find_map(|name| fields.first(name)))
        .flatten()
        .map(|reason| ScopeSignal::new(reason, "ratelimit-reason"))
        .filter(|report| report.name != DEFAULT_SCOPE);
    match reason {
        Some(mut report) => {
            // The reset is that of the limit that refused, which has nothing
            // left until then; the scope is named for the reason.
            signal
                .reason_scope
                .get_or_insert_with(|| report.name.clone());
            report.remaining = Some(0);
            report.reset = reset;
            signal.add_scope(report);
        }
        // No refusal and no timestamp: nothing to report.
        None if reset.is_none() => {}
        None => {
            // No refusal: the reset belongs with X-RateLimit-Limit/-Remaining.
            let scope = fields
                .first("x-ratelimit-resource")
                .unwrap_or(DEFAULT_SCOPE);
            let mut report = ScopeSignal::new(scope, "x-ratelimit-reset");
            report.reset = reset;
            signal.add_scope(report);
        }
    }
}

/// An ISO 8601 / RFC 3339 timestamp with an offset, seconds optional. Plain
/// numbers are left to the `x_ratelimit` profile (delta or epoch seconds).
fn timestamp(clock: &ResponseClock, text: &str) -> Option<Duration> {
    if text
        .bytes()
        .all(|b| b.is_ascii_digit() || b == b'.' || b == b'-')
    {
        return None;
    }
    clock.until_rfc3339(text)
}

#[cfg(test)]
mod tests {
    use crate::signal::testing::{Row, rows, signal_at};
    use std::time::{Duration, UNIX_EPOCH};

    use crate::signal::Signal;

    /// 2024-03-05T14:00:00Z.
    const NOW: u64 = 1_709_647_200;

    fn signal(status: u16, headers: &[(&str, &str)]) -> Signal {
        signal_at(status, headers, UNIX_EPOCH + Duration::from_secs(NOW))
    }

    #[test]
    fn table() {
        type Case<'a> = (u16, &'a [(&'a str, &'a str)], &'a [Row], Option<&'a str>);
        let cases: &[Case<'_>] = &[
            // A burst refusal: the reason names the scope, the reset is its.
            (
                429,
                &[
                    ("retry-after", "120"),
                    ("x-ratelimit-limit", "350"),
                    ("x-ratelimit-remaining", "349"),
                    ("x-ratelimit-reset", "2024-03-05T14:02Z"),
                    ("x-ratelimit-nearlimit", "true"),
                    ("ratelimit-reason", "jira-burst-based"),
                ],
                &[
                    ("api_key", Some(350), Some(349), None),
                    ("jira-burst-based", None, Some(0), Some(120_000)),
                ],
                Some("jira-burst-based"),
            ),
            // The beta spellings, an offset, mixed case.
            (
                429,
                &[
                    ("X-Beta-RateLimit-Reason", "Jira-Quota-Tenant-Based"),
                    ("X-Beta-RateLimit-Reset", "2024-03-05T15:30+01:00"),
                ],
                &[("jira-quota-tenant-based", None, Some(0), Some(1_800_000))],
                Some("jira-quota-tenant-based"),
            ),
            (
                429,
                &[("RateLimit-Reason", "jira-per-issue-on-write")],
                &[("jira-per-issue-on-write", None, Some(0), None)],
                Some("jira-per-issue-on-write"),
            ),
            // Not a refusal: the reset joins X-RateLimit-Remaining on the key.
            (
                200,
                &[
                    ("x-ratelimit-limit", "100"),
                    ("x-ratelimit-remaining", "0"),
                    ("x-ratelimit-reset", "2024-03-05T14:01Z"),
                    ("ratelimit-reason", "jira-burst-based"),
                ],
                &[("api_key", Some(100), Some(0), Some(60_000))],
                None,
            ),
            // Seconds allowed; a minute already past is now.
            (
                200,
                &[
                    ("x-ratelimit-remaining", "0"),
                    ("x-ratelimit-reset", "2024-03-05T14:00:30Z"),
                ],
                &[("api_key", None, Some(0), Some(30_000))],
                None,
            ),
            (
                200,
                &[
                    ("x-ratelimit-remaining", "0"),
                    ("x-ratelimit-reset", "2024-03-05T13:59Z"),
                ],
                &[("api_key", None, Some(0), Some(0))],
                None,
            ),
            // Numbers are x_ratelimit's; garbage, no offset, far future, hostile reasons ignored.
            (
                200,
                &[("x-ratelimit-reset", "60")],
                &[("api_key", None, None, Some(60_000))],
                None,
            ),
            (
                429,
                &[
                    ("x-ratelimit-reset", "2024-03-05T14:02"),
                    ("ratelimit-reason", "has spaces"),
                ],
                &[],
                None,
            ),
            (
                200,
                &[("x-ratelimit-reset", "9999-12-31T23:59Z")],
                &[],
                None,
            ),
            (200, &[("x-ratelimit-reset", "-2024-03-05")], &[], None),
            (429, &[("ratelimit-reason", &"x".repeat(80))], &[], None),
        ];
        for (status, headers, expected, reason) in cases {
            let s = signal(*status, headers);
            let expected: Vec<_> = expected
                .iter()
                .map(|(n, l, r, t)| (n.to_string(), *l, *r, *t))
                .collect();
            assert_eq!(rows(&s), expected, "{headers:?}");
            assert_eq!(s.reason_scope.as_deref(), *reason, "{headers:?}");
        }
    }

    #[test]
    fn the_reason_scope_takes_the_wait() {
        let s = signal(
            429,
            &[
                ("retry-after", "90"),
                ("x-ratelimit-remaining", "0"),
                ("x-ratelimit-reset", "2024-03-05T14:05Z"),
                ("ratelimit-reason", "jira-quota-tenant-based"),
            ],
        );
        assert!(s.throttled);
        let wait = s.wait().unwrap();
        assert_eq!(
            (wait.delay, wait.source, wait.scope.as_deref()),
            (
                Duration::from_secs(90),
                "retry-after",
                Some("jira-quota-tenant-based")
            )
        );
        // Without Retry-After the timestamp decides.
        let s = signal(
            429,
            &[
                ("x-ratelimit-reset", "2024-03-05T14:01Z"),
                ("ratelimit-reason", "jira-burst-based"),
            ],
        );
        let wait = s.wait().unwrap();
        assert_eq!(
            (wait.delay, wait.source, wait.scope.as_deref()),
            (
                Duration::from_secs(60),
                "ratelimit-reason",
                Some("jira-burst-based")
            )
        );
    }
}
