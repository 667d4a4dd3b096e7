//! Step 2: what a scope's state says before anything is reserved — a spent quota, or a server block — and where a quota found spent is marked.

use std::time::Duration;

use super::job::Job;
use crate::engine::{Credential, Engine};
use crate::limiter::{Micros, micros};
use crate::observe::Event;
use crate::outcome::{Outcome, Reason};
use crate::scope::{Scope, ScopeRef};

/// A spent quota answers at once; so does a server block that is longer
/// than the inline threshold or than the call has left at `now`.
pub(super) fn held<P>(
    scopes: &[ScopeRef],
    job: &Job<'_, P>,
    inline_wait: Duration,
    now: Micros,
) -> Option<Outcome> {
    let remaining = Duration::from_micros(job.remaining(now));
    for scope in scopes {
        let (quota, blocked) = scope.holds(now);
        if let Some(until) = quota {
            return Some(quota_exhausted(scope, until, now));
        }
        if let Some(until) = blocked {
            let wait = Duration::from_micros(until - now);
            if wait > inline_wait || wait >= remaining {
                tracing::debug!(scope = %scope.name, wait_ms = wait.as_millis() as u64, "scope blocked by the server");
                return Some(Outcome::rate_limited(
                    &scope.name,
                    Reason::Throttled,
                    wait,
                    None,
                ));
            }
        }
    }
    None
}

/// The first of `scopes` whose quota is spent, as the call's outcome.
pub(super) fn quota_spent(scopes: &[ScopeRef], now: Micros) -> Option<Outcome> {
    scopes.iter().find_map(|scope| quota(scope, now))
}

/// `quota_exhausted` until the reset, if the scope's quota is spent.
fn quota(scope: &Scope, now: Micros) -> Option<Outcome> {
    scope
        .quota_until(now)
        .map(|until| quota_exhausted(scope, until, now))
}

/// `quota_exhausted` on `scope` until `until`.
fn quota_exhausted(scope: &Scope, until: Micros, now: Micros) -> Outcome {
    Outcome::quota_exhausted(&scope.name, Duration::from_micros(until - now))
}

/// Marks a quota spent and tells the operator once; true if it is news.
pub(super) fn note_exhausted<E>(
    engine: &Engine<E>,
    credential: &Credential,
    scope: &Scope,
    resets_in: Duration,
    now: Micros,
) -> bool {
    let fresh = scope.exhaust(now.saturating_add(micros(resets_in)), now);
    if fresh {
        tracing::error!(
            credential = %credential.name,
            scope = %scope.name,
            resets_in_s = resets_in.as_secs(),
            "quota exhausted: calls on this scope return quota_exhausted without sending until it resets"
        );
        engine.observe(Event::QuotaExhausted {
            credential: &credential.name,
            scope: &scope.name,
            resets_in,
        });
    }
    fresh
}
