//! The local slots for one start on every scope of a call, and the deferral when none fits.

use std::time::Duration;

use super::guards::Local;
use crate::engine::Engine;
use crate::limiter::Micros;
use crate::outcome::{Outcome, Reason};
use crate::pipeline::job::Job;
use crate::scope::{Deferred, Scope, ScopeRef, Slots};

/// The local slots for one start no earlier than `not_before` and within
/// `max_wait` of `now`, and that start; the deferral when there is none.
pub(super) fn reserve_local<P>(
    scopes: &[ScopeRef],
    job: &Job<'_, P>,
    (now, not_before): (Micros, Micros),
    max_wait: Micros,
) -> Result<(Local, Micros), Outcome> {
    let local = reserve_all(scopes, now, not_before, max_wait, job)
        .map_err(|(scope, deferred)| no_slot(scope, deferred, now))?;
    let start = local.start().unwrap_or(now);
    Ok((local, start))
}

/// When a deferral told to wait `retry_after_ms` ends, rounded up to the
/// next millisecond (the outcome rounds its wait to milliseconds).
pub(super) fn deferred_until(now: Micros, retry_after_ms: u64) -> Micros {
    now.saturating_add(retry_after_ms.saturating_add(1).saturating_mul(1_000))
}

/// A call that a call of higher priority moved to `later`, past the wait
/// it can afford: deferred for priority, with the wait until that start.
pub(super) fn moved_past(primary: &Scope, later: Micros, now: Micros) -> Outcome {
    let wait = Duration::from_micros(later.saturating_sub(now)).max(Duration::from_millis(1));
    tracing::debug!(scope = %primary.name, wait_ms = wait.as_millis() as u64, "moved past the inline wait by a call of higher priority; deferring");
    Outcome::rate_limited(&primary.name, Reason::Priority, wait, None)
}

/// No start slot on `scope` within the wait the call can afford: defer
/// it, naming the window that set the start (and `priority` when the
/// low-priority share did).
pub(super) fn no_slot(scope: &Scope, deferred: Deferred, now: Micros) -> Outcome {
    let wait = Duration::from_micros(deferred.until.saturating_sub(now));
    let reason = if deferred.priority {
        Reason::Priority
    } else {
        Reason::Throttled
    };
    tracing::debug!(scope = %scope.name, wait_ms = wait.as_millis() as u64, window = deferred.window.as_deref().unwrap_or("server"), reason = reason.as_str(), "no start slot within the inline wait; deferring");
    Outcome::rate_limited(&scope.name, reason, wait, None).in_window(deferred.window)
}

/// How long until the scope's next start slot, at least a millisecond.
pub(in crate::pipeline) fn next_slot<E>(engine: &Engine<E>, scope: &Scope) -> Duration {
    let now = engine.now();
    let wait = scope.earliest(now).saturating_sub(now);
    Duration::from_micros(wait).max(Duration::from_millis(1))
}

/// Reserves on every scope at one common start time. Scopes can disagree
/// (one is blocked later than another), so the latest start wins and the
/// others are re-reserved there; a few rounds always settle it.
pub(super) fn reserve_all<'s, P>(
    scopes: &'s [ScopeRef],
    now: Micros,
    not_before: Micros,
    max_wait: Micros,
    job: &Job<'_, P>,
) -> Result<Local, (&'s Scope, Deferred)> {
    let Some(first) = scopes.first() else {
        return Ok(Local { held: Slots::new() });
    };
    let mut latest: &Scope = first;
    let mut not_before = not_before.max(now);
    for _ in 0..4 {
        let mut taken = Local {
            held: Slots::with_capacity(scopes.len()),
        };
        for scope in scopes {
            let ticket = scope
                .reserve(now, not_before, max_wait, &job.ask)
                .map_err(|deferred| (&**scope, deferred))?;
            if ticket.start() > not_before {
                not_before = ticket.start();
                latest = scope;
            }
            taken.held.push((scope.clone(), ticket));
        }
        if taken
            .held
            .iter()
            .all(|(_, ticket)| ticket.start() == not_before)
        {
            return Ok(taken);
        }
    }
    let deferred = Deferred {
        until: not_before,
        window: None,
        priority: false,
    };
    Err((latest, deferred))
}
