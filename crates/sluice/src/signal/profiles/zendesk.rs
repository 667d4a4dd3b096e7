//! Zendesk's account-wide `X-Rate-Limit` and its endpoint limits `zendesk-ratelimit-*: total=100; remaining=99; resets=41`.
//!
//! Zendesk API docs ("Best practices for avoiding rate limiting"): every
//! response carries the account's limit and what remains "for the current
//! minute" as `x-rate-limit` / `x-rate-limit-remaining` and, on list
//! endpoints, `ratelimit-limit/-remaining/-reset`; some endpoints add their
//! own limit as `zendesk-ratelimit-<endpoint>`, whose suffix names the scope
//! (`tickets-index`). `x-rate-limit-remaining` is read by the `x_ratelimit`
//! profile and `ratelimit-*` by the `ietf` profile; this one adds the limit,
//! the one-minute window, and the endpoint scopes.

use std::cmp::Reverse;
use std::time::Duration;

use super::{Profile, values};
use crate::signal::clock::parse_seconds;
use crate::signal::fields::parse_integer;
use crate::signal::{DEFAULT_SCOPE, Fields, ResponseClock, ScopeSignal, Signal};

pub(super) const PROFILE: Profile = Profile {
    name: "zendesk",
    fields: &["zendesk-ratelimit-", "x-rate-limit"],
    read,
};

/// Endpoint limit fields start with this; the rest of the name is the scope.
const ENDPOINT_PREFIX: &str = "zendesk-ratelimit-";

/// The account-wide limit counts requests per minute (Zendesk's docs above).
const ACCOUNT_WINDOW: Duration = Duration::from_secs(60);

/// Endpoint scopes read from one response at most; a response naming more
/// is not describing real endpoints.
const MAX_ENDPOINT_SCOPES: usize = 16;

fn read(fields: &Fields<'_>, _clock: &ResponseClock, signal: &mut Signal) {
    let mut account = ScopeSignal::new(DEFAULT_SCOPE, "x-rate-limit");
    account.limit = values::lowest(fields, "x-rate-limit", parse_integer);
    account.window = account.limit.map(|_| ACCOUNT_WINDOW);
    signal.add_scope(account);

    let endpoints = fields
        .names()
        .filter_map(|name| Some((name, name.strip_prefix(ENDPOINT_PREFIX)?)))
        .filter(|(_, scope)| !scope.is_empty())
        .take(MAX_ENDPOINT_SCOPES);
    for (name, scope) in endpoints {
        // Repeated values: the one with the fewest remaining (then the
        // latest reset) binds.
        let tightest = fields
            .elements(name)
            .map(|element| endpoint(scope, element))
            .filter(ScopeSignal::is_informative)
            .min_by_key(|r| (r.remaining.unwrap_or(u64::MAX), Reverse(r.reset)));
        if let Some(report) = tightest {
            signal.add_scope(report);
        }
    }
}

/// One `total=100; remaining=99; resets=41` value; unknown keys and
/// malformed pairs are ignored. `resets` is delta seconds.
fn endpoint(scope: &str, text: &str) -> ScopeSignal {
    let mut report = ScopeSignal::new(scope, "zendesk-ratelimit");
    for pair in text.split(';') {
        let Some((key, value)) = pair.split_once('=') else {
            continue;
        };
        match key.trim().to_ascii_lowercase().as_str() {
            "total" => report.limit = parse_integer(value),
            "remaining" => report.remaining = parse_integer(value),
            "resets" => report.reset = parse_seconds(value),
            _ => {}
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use crate::signal::testing::signal;
    use std::time::Duration;

    use crate::signal::Signal;

    /// (scope, limit, remaining, reset in s, window in s).
    type Row = (
        &'static str,
        Option<u64>,
        Option<u64>,
        Option<u64>,
        Option<u64>,
    );

    /// A row as read, scope name owned.
    type Got = (String, Option<u64>, Option<u64>, Option<u64>, Option<u64>);

    fn rows(signal: &Signal) -> Vec<Got> {
        signal
            .scopes
            .iter()
            .map(|s| {
                let secs = |d: Option<Duration>| d.map(|d| d.as_secs());
                (
                    s.name.clone(),
                    s.limit,
                    s.remaining,
                    secs(s.reset),
                    secs(s.window),
                )
            })
            .collect()
    }

    #[test]
    fn table() {
        type Case<'a> = (&'a [(&'a str, &'a str)], &'a [Row]);
        let cases: &[Case<'_>] = &[
            // Zendesk's documented List Tickets response.
            (
                &[
                    ("x-rate-limit", "700"),
                    ("ratelimit-limit", "700"),
                    ("x-rate-limit-remaining", "699"),
                    ("ratelimit-remaining", "699"),
                    ("ratelimit-reset", "41"),
                    (
                        "zendesk-ratelimit-tickets-index",
                        "total=100; remaining=99; resets=41",
                    ),
                ],
                &[
                    ("api_key", Some(700), Some(699), Some(41), Some(60)),
                    ("tickets-index", Some(100), Some(99), Some(41), None),
                ],
            ),
            // Any order, odd spacing and case, unknown keys.
            (
                &[(
                    "Zendesk-RateLimit-Search-Export",
                    "Resets=10 ;remaining = 0;total=50; burst=3",
                )],
                &[("search-export", Some(50), Some(0), Some(10), None)],
            ),
            // Repeated: the fewest remaining binds.
            (
                &[
                    (
                        "zendesk-ratelimit-users-index",
                        "total=100; remaining=40; resets=5",
                    ),
                    (
                        "zendesk-ratelimit-users-index",
                        "total=100; remaining=3; resets=9",
                    ),
                ],
                &[("users-index", Some(100), Some(3), Some(9), None)],
            ),
            // Garbage, negatives, 40 digits, an empty scope name.
            (
                &[
                    ("x-rate-limit", "-700"),
                    (
                        "zendesk-ratelimit-tickets-index",
                        "total=-1; remaining=1234567890123456789012345678901234567890; resets=soon",
                    ),
                    ("zendesk-ratelimit-", "total=1; remaining=0; resets=1"),
                    ("zendesk-ratelimit-x", ";;;==;remaining"),
                ],
                &[],
            ),
            (
                &[("zendesk-ratelimit-tickets-index", "resets=99999999999")],
                &[],
            ),
        ];
        for (headers, expected) in cases {
            let got = rows(&signal(200, headers));
            let expected: Vec<_> = expected
                .iter()
                .map(|(n, l, r, t, w)| (n.to_string(), *l, *r, *t, *w))
                .collect();
            assert_eq!(got, expected, "{headers:?}");
        }
    }

    #[test]
    fn an_exhausted_endpoint_takes_the_wait_and_not_the_account() {
        let s = signal(
            429,
            &[
                ("retry-after", "41"),
                ("x-rate-limit", "700"),
                ("x-rate-limit-remaining", "650"),
                (
                    "zendesk-ratelimit-tickets-index",
                    "total=100; remaining=0; resets=41",
                ),
            ],
        );
        assert!(s.throttled);
        assert_eq!(s.blamed_scope(), "tickets-index");
        assert_eq!(s.wait().unwrap().delay, Duration::from_secs(41));
    }

    #[test]
    fn a_flood_of_endpoint_fields_is_bounded() {
        let names: Vec<String> = (0..100)
            .map(|i| format!("zendesk-ratelimit-e{i}"))
            .collect();
        let headers: Vec<(&str, &str)> = names
            .iter()
            .map(|n| (n.as_str(), "total=1; remaining=1; resets=1"))
            .collect();
        assert_eq!(signal(200, &headers).scopes.len(), 16);
    }
}
