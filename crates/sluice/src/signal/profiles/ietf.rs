//! IETF RateLimit fields: the current draft's structured `RateLimit` / `RateLimit-Policy`,
//! the older `RateLimit-Limit/-Remaining/-Reset`, and the same with a `Beta-` prefix.
//!
//! Drafts: draft-ietf-httpapi-ratelimit-headers-10 (named policies with
//! `q`, `w`, `r`, `t`), -07 (one `RateLimit: limit=, remaining=, reset=`
//! dictionary) and -00 to -06 (separate `RateLimit-*` fields).

use std::time::Duration;

use super::Profile;
use super::structured::{self, Member};
use crate::signal::fields::parse_integer;
use crate::signal::{DEFAULT_SCOPE, Fields, ResponseClock, ScopeSignal, Signal};

pub(super) const PROFILE: Profile = Profile {
    name: "ietf",
    fields: &["ratelimit", "beta-ratelimit"],
    read,
};

/// A reset above this many seconds is an epoch timestamp, not a delta
/// (about 2001-09-09; no window is 31 years long).
const EPOCH_THRESHOLD: u64 = 1_000_000_000;

/// One spelling's fields: the structured pair, then the early drafts'.
struct Names {
    policy: &'static str,
    state: &'static str,
    limit: &'static str,
    remaining: &'static str,
    reset: &'static str,
}

/// The plain spelling, then the `Beta-` one.
const SPELLINGS: [Names; 2] = [
    Names {
        policy: "ratelimit-policy",
        state: "ratelimit",
        limit: "ratelimit-limit",
        remaining: "ratelimit-remaining",
        reset: "ratelimit-reset",
    },
    Names {
        policy: "beta-ratelimit-policy",
        state: "beta-ratelimit",
        limit: "beta-ratelimit-limit",
        remaining: "beta-ratelimit-remaining",
        reset: "beta-ratelimit-reset",
    },
];

fn read(fields: &Fields<'_>, clock: &ResponseClock, signal: &mut Signal) {
    for names in &SPELLINGS {
        read_spelled(fields, clock, signal, names);
    }
}

fn read_spelled(fields: &Fields<'_>, clock: &ResponseClock, signal: &mut Signal, names: &Names) {
    let policy = fields.joined(names.policy);
    let state = fields.joined(names.state);
    let policies = policy.as_deref().map(structured::list).unwrap_or_default();
    let states = state.as_deref().map(structured::list).unwrap_or_default();

    if is_dictionary(&states) {
        // Draft -07: `RateLimit: limit=10, remaining=0, reset=5`.
        let mut report = ScopeSignal::new(DEFAULT_SCOPE, "ratelimit");
        for member in &states {
            if let Some((key, value)) = member.item.split_once('=') {
                let value = parse_integer(value);
                match key.trim().to_ascii_lowercase().as_str() {
                    "limit" => report.limit = value,
                    "remaining" => report.remaining = value,
                    "reset" => report.reset = value.and_then(|v| reset(clock, v)),
                    _ => {}
                }
            }
        }
        report.window = unnamed_window(&policies, report.limit);
        signal.add_scope(report);
    } else {
        // Draft -08 on: named policies, with state for some of them.
        for member in policies.iter().filter(|m| parse_integer(m.item).is_none()) {
            let mut report = ScopeSignal::new(member.item, "ratelimit-policy");
            report.limit = member.integer("q");
            report.window = member.integer("w").map(Duration::from_secs);
            signal.add_scope(report);
        }
        for member in &states {
            let mut report = ScopeSignal::new(member.item, "ratelimit");
            report.remaining = member.integer("r");
            report.reset = member.integer("t").and_then(|t| reset(clock, t));
            signal.add_scope(report);
        }
    }

    // Drafts -00 to -06: separate fields for the key as a whole.
    let mut report = ScopeSignal::new(DEFAULT_SCOPE, "ratelimit-reset");
    let limit_field = fields.first(names.limit);
    report.limit = limit_field.and_then(leading_integer);
    report.remaining = fields.first(names.remaining).and_then(leading_integer);
    report.reset = fields
        .first(names.reset)
        .and_then(leading_integer)
        .and_then(|v| reset(clock, v));
    // Early drafts carried the policy inside RateLimit-Limit: `10, 10;w=1`.
    let early_policies = limit_field.map(structured::list).unwrap_or_default();
    report.window = unnamed_window(&policies, report.limit)
        .or_else(|| unnamed_window(&early_policies, report.limit));
    signal.add_scope(report);
}

fn is_dictionary(members: &[Member<'_>]) -> bool {
    !members.is_empty() && members.iter().all(|m| m.item.contains('='))
}

/// The window of an unnamed policy (`10;w=1`), preferring one whose quota matches `limit`.
fn unnamed_window(policies: &[Member<'_>], limit: Option<u64>) -> Option<Duration> {
    let unnamed = policies
        .iter()
        .filter_map(|m| Some((parse_integer(m.item)?, m.integer("w")?)));
    let mut first = None;
    for (quota, window) in unnamed {
        if Some(quota) == limit {
            return Some(Duration::from_secs(window));
        }
        first = first.or(Some(Duration::from_secs(window)));
    }
    first
}

fn leading_integer(text: &str) -> Option<u64> {
    parse_integer(text.split([',', ';']).next()?)
}

/// Reset values are delta seconds, except that some servers send an epoch.
fn reset(clock: &ResponseClock, value: u64) -> Option<Duration> {
    if value > EPOCH_THRESHOLD {
        clock.until_epoch(Duration::from_secs(value))
    } else {
        let delay = Duration::from_secs(value);
        (delay <= crate::signal::MAX_DELAY).then_some(delay)
    }
}

#[cfg(test)]
mod tests {
    use crate::signal::testing::signal;
    use std::time::Duration;

    use crate::signal::{ScopeSignal, Signal};

    fn scope<'a>(signal: &'a Signal, name: &str) -> &'a ScopeSignal {
        signal.scopes.iter().find(|s| s.name == name).unwrap()
    }

    #[test]
    fn current_draft_named_policies() {
        let s = signal(
            200,
            &[
                (
                    "ratelimit-policy",
                    r#""burst";q=100;w=60,"daily";q=1000;w=86400"#,
                ),
                ("ratelimit", r#""burst";r=0;t=30, "daily";t=3600;r=990"#),
            ],
        );
        let burst = scope(&s, "burst");
        assert_eq!((burst.limit, burst.remaining), (Some(100), Some(0)));
        assert_eq!(burst.window, Some(Duration::from_secs(60)));
        assert_eq!(burst.reset, Some(Duration::from_secs(30)));
        assert_eq!(scope(&s, "daily").remaining, Some(990));
        let wait = s.wait().unwrap();
        assert_eq!(
            (wait.delay, wait.scope.as_deref()),
            (Duration::from_secs(30), Some("burst"))
        );
        assert!(!s.throttled);
    }

    #[test]
    fn retry_after_beats_t() {
        let s = signal(
            429,
            &[("ratelimit", r#""burst";r=0;t=30"#), ("retry-after", "5")],
        );
        let wait = s.wait().unwrap();
        assert_eq!(
            (wait.delay, wait.source),
            (Duration::from_secs(5), "retry-after")
        );
        assert_eq!(wait.scope.as_deref(), Some("burst"));
    }

    #[test]
    fn daily_policy_spent_is_a_quota() {
        let s = signal(
            429,
            &[
                ("ratelimit-policy", r#""daily";q=1000;w=86400"#),
                ("ratelimit", r#""daily";r=0;t=43200"#),
            ],
        );
        assert!(scope(&s, "daily").is_spent_long_window());
    }

    #[test]
    fn older_separate_fields_and_policy() {
        let s = signal(
            200,
            &[
                ("RateLimit-Limit", "10"),
                ("RateLimit-Remaining", "0"),
                ("RateLimit-Reset", "4"),
                ("RateLimit-Policy", "10;w=1"),
            ],
        );
        let key = scope(&s, "api_key");
        assert_eq!((key.limit, key.remaining), (Some(10), Some(0)));
        assert_eq!(key.reset, Some(Duration::from_secs(4)));
        assert_eq!(key.window, Some(Duration::from_secs(1)));
    }

    #[test]
    fn early_draft_policy_inside_limit_and_beta_prefix() {
        let s = signal(
            200,
            &[
                ("Beta-RateLimit-Limit", "100, 100;w=60, 1000;w=3600"),
                ("beta-ratelimit-remaining", "3"),
            ],
        );
        let key = scope(&s, "api_key");
        assert_eq!((key.limit, key.remaining), (Some(100), Some(3)));
        assert_eq!(key.window, Some(Duration::from_secs(60)));
    }

    #[test]
    fn draft_seven_dictionary() {
        let s = signal(200, &[("ratelimit", "limit=10, remaining=2, reset=7")]);
        let key = scope(&s, "api_key");
        assert_eq!(
            (key.limit, key.remaining, key.reset),
            (Some(10), Some(2), Some(Duration::from_secs(7)))
        );
    }

    #[test]
    fn epoch_resets_and_garbage() {
        let s = signal(
            200,
            &[
                ("ratelimit-remaining", "0"),
                ("ratelimit-reset", "1700000010"),
            ],
        );
        assert_eq!(scope(&s, "api_key").reset, Some(Duration::from_secs(10)));
        let s = signal(
            200,
            &[
                ("ratelimit-remaining", "-3"),
                ("ratelimit-reset", "99999999999999999999999"),
            ],
        );
        assert!(s.scopes.is_empty());
        let s = signal(200, &[("ratelimit", r#""x";r=;t=-1, ;;;, "y";r=ff"#)]);
        assert!(s.scopes.is_empty());
    }

    #[test]
    fn forbidden_with_nothing_remaining_is_a_rejection() {
        assert!(
            signal(
                403,
                &[("ratelimit-remaining", "0"), ("ratelimit-reset", "9")]
            )
            .throttled
        );
        assert!(!signal(403, &[("ratelimit-remaining", "5")]).throttled);
        assert!(signal(503, &[("retry-after", "1")]).throttled);
        assert!(!signal(503, &[]).throttled);
    }
}
