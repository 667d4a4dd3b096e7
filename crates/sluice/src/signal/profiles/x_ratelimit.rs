//! The de-facto `X-RateLimit-*` fields (GitHub and many others) and X's `X-Rate-Limit-*`.
//!
//! `-Limit`, `-Remaining`, `-Used` and `-Reset` describe one bucket, which
//! `-Resource` names (GitHub's `core`, `search`, `graphql`…), or Discord's
//! per-route `-Bucket` (Discord "Rate Limits": a bucket is its own limit;
//! `X-RateLimit-Global: true` or `X-RateLimit-Scope: global` on a 429 puts
//! the limit on the whole key); without either, the key as a whole. Counts
//! may come as floats (`0.0`). Resets here are numbers: delta seconds, or epoch seconds
//! when above [`EPOCH_THRESHOLD`] (GitHub and X send epochs). Jira's
//! timestamp form of `X-RateLimit-Reset` is read by the `jira` profile.

use std::time::Duration;

use super::{Profile, values};
use crate::signal::clock::parse_seconds;
use crate::signal::fields::{parse_count, parse_integer};
use crate::signal::{DEFAULT_SCOPE, Fields, ResponseClock, ScopeSignal, Signal};

pub(super) const PROFILE: Profile = Profile {
    name: "x-ratelimit",
    fields: &["x-ratelimit-", "x-rate-limit-"],
    read,
};

/// One spelling's fields.
struct Family {
    /// The spelling, which every field's name begins with.
    name: &'static str,
    global: &'static str,
    scope: &'static str,
    resource: &'static str,
    bucket: &'static str,
    limit: &'static str,
    used: &'static str,
    remaining: &'static str,
    reset_after: &'static str,
    reset: &'static str,
}

/// The spellings, each read on its own; the first one present wins
/// where they overlap.
const FAMILIES: [Family; 3] = [
    Family {
        name: "x-ratelimit",
        global: "x-ratelimit-global",
        scope: "x-ratelimit-scope",
        resource: "x-ratelimit-resource",
        bucket: "x-ratelimit-bucket",
        limit: "x-ratelimit-limit",
        used: "x-ratelimit-used",
        remaining: "x-ratelimit-remaining",
        reset_after: "x-ratelimit-reset-after",
        reset: "x-ratelimit-reset",
    },
    Family {
        name: "x-rate-limit",
        global: "x-rate-limit-global",
        scope: "x-rate-limit-scope",
        resource: "x-rate-limit-resource",
        bucket: "x-rate-limit-bucket",
        limit: "x-rate-limit-limit",
        used: "x-rate-limit-used",
        remaining: "x-rate-limit-remaining",
        reset_after: "x-rate-limit-reset-after",
        reset: "x-rate-limit-reset",
    },
    // Linear, "Rate limiting" (linear.app/developers/rate-limiting): the
    // key's request budget as `X-RateLimit-Requests-{Limit,Remaining,Reset}`,
    // the reset in epoch milliseconds. It names no resource or bucket.
    Family {
        name: "x-ratelimit-requests",
        global: "x-ratelimit-requests-global",
        scope: "x-ratelimit-requests-scope",
        resource: "x-ratelimit-requests-resource",
        bucket: "x-ratelimit-requests-bucket",
        limit: "x-ratelimit-requests-limit",
        used: "x-ratelimit-requests-used",
        remaining: "x-ratelimit-requests-remaining",
        reset_after: "x-ratelimit-requests-reset-after",
        reset: "x-ratelimit-requests-reset",
    },
];

/// A reset above this many seconds is an epoch timestamp, not a delta (about
/// 2001-09-09; no window is 31 years long). The same rule as the IETF profile's.
const EPOCH_THRESHOLD: u64 = 1_000_000_000;

/// A reset above this is an epoch in milliseconds: as seconds it would be
/// past the year 5000, as milliseconds it is after 1973.
const EPOCH_MILLIS_THRESHOLD: u64 = 100_000_000_000;

fn read(fields: &Fields<'_>, clock: &ResponseClock, signal: &mut Signal) {
    for family in &FAMILIES {
        // A spelling with no field present would report nothing.
        if !fields.names().any(|name| name.starts_with(family.name)) {
            continue;
        }
        let global = fields
            .first(family.global)
            .is_some_and(|v| v.eq_ignore_ascii_case("true"))
            || fields
                .first(family.scope)
                .is_some_and(|v| v.eq_ignore_ascii_case("global"));
        let scope = match fields.first(family.resource) {
            Some(resource) => resource,
            None if global => DEFAULT_SCOPE,
            None => fields.first(family.bucket).unwrap_or(DEFAULT_SCOPE),
        };
        let mut report = ScopeSignal::new(scope, family.name);
        // A limit may carry an early-IETF policy after it (`100, 100;w=60`).
        report.limit = values::lowest(fields, family.limit, |v| {
            parse_count(v.split(';').next().unwrap_or(v))
        });
        // GitHub sends `-Used` too; it gives the remaining count when
        // `-Remaining` is missing (and never less than zero).
        report.remaining = values::lowest(fields, family.remaining, parse_count).or_else(|| {
            let used = values::lowest(fields, family.used, parse_count)?;
            Some(report.limit?.saturating_sub(used))
        });
        // Discord's `-Reset-After` is a delta with decimals: immune to clocks,
        // so it is preferred to the reset instant when both are present.
        report.reset = values::latest(fields, family.reset_after, parse_seconds)
            .or_else(|| values::latest(fields, family.reset, |v| reset(clock, v)));
        signal.add_scope(report);
    }
}

/// A numeric reset: delta seconds, epoch seconds, or epoch milliseconds,
/// decimals allowed. Anything else (a timestamp, a negative) is `None`.
fn reset(clock: &ResponseClock, text: &str) -> Option<Duration> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || !digits(fraction) {
        return None;
    }
    match parse_integer(whole) {
        Some(millis) if millis > EPOCH_MILLIS_THRESHOLD => {
            clock.until_epoch(Duration::from_millis(millis))
        }
        Some(seconds) if seconds > EPOCH_THRESHOLD => {
            let nanos = fraction
                .bytes()
                .chain(std::iter::repeat(b'0'))
                .take(9)
                .fold(0, |acc, b| acc * 10 + u32::from(b - b'0'));
            clock.until_epoch(Duration::new(seconds, nanos))
        }
        // Delta seconds, bounded by MAX_DELAY.
        _ => parse_seconds(text),
    }
}

#[cfg(test)]
mod tests {
    use crate::signal::testing::{Row, rows};
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    use http::StatusCode;

    use crate::signal::{Signal, read};

    const NOW: u64 = 1_700_000_000;

    fn now() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(NOW)
    }

    fn signal(status: u16, headers: &[(&str, &str)]) -> Signal {
        let map = crate::signal::testing::header_map(headers);
        read(StatusCode::from_u16(status).unwrap(), &map, now())
    }

    /// Discord "Rate Limits" (discord.com/developers/docs/topics/rate-limits):
    /// a per-route bucket, resets with decimals, a global 429.
    #[test]
    fn discord_buckets_are_scopes_and_a_global_limit_is_the_key() {
        let reset = format!("{}.250", NOW + 1);
        let route = signal(
            200,
            &[
                ("x-ratelimit-limit", "5"),
                ("x-ratelimit-remaining", "0"),
                ("x-ratelimit-reset", &reset),
                ("x-ratelimit-reset-after", "1.250"),
                ("x-ratelimit-bucket", "abcd1234"),
            ],
        );
        assert_eq!(
            rows(&route),
            [("abcd1234".to_owned(), Some(5), Some(0), Some(1_250))]
        );
        let global = signal(
            429,
            &[
                ("retry-after", "65"),
                ("x-ratelimit-global", "true"),
                ("x-ratelimit-scope", "global"),
                ("x-ratelimit-bucket", "abcd1234"),
                ("x-ratelimit-remaining", "0.0"),
                ("x-ratelimit-reset-after", "64.57"),
            ],
        );
        assert_eq!(global.scopes[0].name, "api_key");
        assert_eq!(global.scopes[0].remaining, Some(0));
        assert_eq!(global.wait().unwrap().delay, Duration::from_secs(65));
    }

    #[test]
    fn table() {
        let epoch_in_30s = (NOW + 30).to_string();
        let epoch_past = (NOW - 30).to_string();
        let epoch_ms = ((NOW + 2) * 1000).to_string();
        let epoch_fraction = format!("{}.250", NOW + 1);
        type Case<'a> = (&'a [(&'a str, &'a str)], &'a [Row]);
        let cases: &[Case<'_>] = &[
            // GitHub REST: epoch reset, resource names the scope.
            (
                &[
                    ("x-ratelimit-limit", "5000"),
                    ("x-ratelimit-remaining", "4999"),
                    ("x-ratelimit-reset", &epoch_in_30s),
                    ("x-ratelimit-used", "1"),
                    ("x-ratelimit-resource", "core"),
                ],
                &[("core", Some(5000), Some(4999), Some(30_000))],
            ),
            (
                &[
                    ("X-RateLimit-Limit", "30"),
                    ("X-RateLimit-Remaining", "0"),
                    ("X-RateLimit-Reset", &epoch_in_30s),
                    ("X-RateLimit-Resource", "Search"),
                ],
                &[("search", Some(30), Some(0), Some(30_000))],
            ),
            // -Used with -Limit gives remaining; more used than the limit is zero left.
            (
                &[("x-ratelimit-limit", "60"), ("x-ratelimit-used", "15")],
                &[("api_key", Some(60), Some(45), None)],
            ),
            (
                &[("x-ratelimit-limit", "60"), ("x-ratelimit-used", "75")],
                &[("api_key", Some(60), Some(0), None)],
            ),
            // -Remaining wins over -Used.
            (
                &[
                    ("x-ratelimit-limit", "60"),
                    ("x-ratelimit-used", "15"),
                    ("x-ratelimit-remaining", "2"),
                ],
                &[("api_key", Some(60), Some(2), None)],
            ),
            // X (Twitter) spelling, epoch reset.
            (
                &[
                    ("x-rate-limit-limit", "15"),
                    ("x-rate-limit-remaining", "0"),
                    ("x-rate-limit-reset", &epoch_in_30s),
                ],
                &[("api_key", Some(15), Some(0), Some(30_000))],
            ),
            // Delta seconds, decimals, an epoch in the past (now), epoch ms, epoch fractions.
            (
                &[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "60")],
                &[("api_key", None, Some(0), Some(60_000))],
            ),
            (
                &[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "0.5")],
                &[("api_key", None, Some(0), Some(500))],
            ),
            (
                &[
                    ("x-ratelimit-remaining", "0"),
                    ("x-ratelimit-reset", &epoch_past),
                ],
                &[("api_key", None, Some(0), Some(0))],
            ),
            (
                &[
                    ("x-ratelimit-remaining", "0"),
                    ("x-ratelimit-reset", &epoch_ms),
                ],
                &[("api_key", None, Some(0), Some(2_000))],
            ),
            (
                &[("x-ratelimit-reset", &epoch_fraction)],
                &[("api_key", None, None, Some(1_250))],
            ),
            // Discord's delta beats the instant.
            (
                &[
                    ("x-ratelimit-remaining", "0"),
                    ("x-ratelimit-reset", &epoch_in_30s),
                    ("x-ratelimit-reset-after", "1.5"),
                ],
                &[("api_key", None, Some(0), Some(1_500))],
            ),
            // Repeated and listed values: the tightest binds.
            (
                &[
                    ("x-ratelimit-remaining", "10"),
                    ("X-RATELIMIT-REMAINING", "4"),
                    ("x-ratelimit-limit", "100, 100;w=60"),
                ],
                &[("api_key", Some(100), Some(4), None)],
            ),
            // Garbage, negatives, huge numbers, timestamps (Jira's, read elsewhere).
            (
                &[
                    ("x-ratelimit-limit", "-1"),
                    (
                        "x-ratelimit-remaining",
                        "1234567890123456789012345678901234567890",
                    ),
                    ("x-ratelimit-reset", "soon"),
                    ("x-ratelimit-used", "1e3"),
                ],
                &[],
            ),
            (
                &[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "-5")],
                &[("api_key", None, Some(0), None)],
            ),
            (
                &[
                    ("x-ratelimit-reset", "+1700000030"),
                    ("x-ratelimit-limit", "0x10"),
                ],
                &[],
            ),
            (&[("x-ratelimit-reset", "99999999999999999999")], &[]),
            (&[("x-ratelimit-reset", "4000000000")], &[]),
            (&[("x-ratelimit-reset", "3000000")], &[]),
            (&[("x-ratelimit-reset", "12.3.4")], &[]),
            // A hostile resource name folds into the key.
            (
                &[
                    ("x-ratelimit-remaining", "3"),
                    ("x-ratelimit-resource", &"r".repeat(65)),
                ],
                &[("api_key", None, Some(3), None)],
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
    fn both_spellings_merge_into_one_scope() {
        let s = signal(
            200,
            &[
                ("x-rate-limit-remaining", "5"),
                ("x-ratelimit-limit", "10"),
                ("x-rate-limit-limit", "99"),
            ],
        );
        assert_eq!(rows(&s), [("api_key".to_owned(), Some(10), Some(5), None)]);
    }

    #[test]
    fn github_primary_and_secondary_limits_are_rejections() {
        let reset = (NOW + 1800).to_string();
        // Primary: 403, nothing remaining, reset half an hour away.
        let primary = signal(
            403,
            &[
                ("x-ratelimit-limit", "5000"),
                ("x-ratelimit-remaining", "0"),
                ("x-ratelimit-reset", &reset),
                ("x-ratelimit-resource", "core"),
            ],
        );
        assert!(primary.throttled);
        let wait = primary.wait().unwrap();
        assert_eq!(wait.delay, Duration::from_secs(1800));
        assert_eq!(
            (wait.source, wait.scope.as_deref()),
            ("x-ratelimit", Some("core"))
        );
        // Secondary: 403 (or 429) with Retry-After while the primary has room.
        for status in [403, 429] {
            let secondary = signal(
                status,
                &[
                    ("retry-after", "60"),
                    ("x-ratelimit-remaining", "4000"),
                    ("x-ratelimit-reset", &reset),
                    ("x-ratelimit-resource", "core"),
                ],
            );
            assert!(secondary.throttled, "{status}");
            let wait = secondary.wait().unwrap();
            assert_eq!(
                (wait.delay, wait.source, wait.scope.as_deref()),
                (Duration::from_secs(60), "retry-after", Some("core"))
            );
        }
        // A 403 with room left and no Retry-After is a plain refusal.
        assert!(!signal(403, &[("x-ratelimit-remaining", "4000")]).throttled);
    }
}
