//! Step 5 on a shared credential: a grant from the shared budget for the
//! start the local slots hold, and what a denial says mirrored onto this
//! process's scopes.

use std::sync::Arc;
use std::time::Duration;

use super::guards::{Local, SharedGrant};
use super::slots::{no_slot, reserve_all, reserve_local};
use crate::engine::Engine;
use crate::limiter::{Micros, micros};
use crate::outcome::{Outcome, Reason};
use crate::pipeline::holds;
use crate::pipeline::job::Job;
use crate::scope::ScopeRef;
use crate::shared::{
    Decision, Grant, Hold, ReserveRequest, SharedBudget, SharedLimit, SharedWindow,
};

/// Adds the shared budget's grant to the local slots held for `start`;
/// when it grants a later start (later than a slot may start late), the
/// local slots move there.
pub(super) async fn with_shared<'a, E, P>(
    engine: &Engine<E>,
    budget: &'a Arc<dyn SharedBudget>,
    scopes: &[ScopeRef],
    job: &Job<'a, P>,
    local: Local,
    start: Micros,
    latest: Micros,
) -> Result<(Local, Micros, SharedGrant<'a>), Outcome> {
    // Waits its turn behind the calls planned before it (a bucket's
    // credential only), within its deadline, and no longer than the
    // budget answers when it is well: an ask slower than that means the
    // backend is slow or away, and the call asks on its own.
    let _in_order = match &job.credential.asks_in_order {
        Some(order) => {
            let remaining = Duration::from_micros(job.remaining(engine.now()));
            let patience = budget.answer_within().unwrap_or(remaining);
            match tokio::time::timeout(patience.min(remaining), order.lock()).await {
                Ok(held) => Some(held),
                Err(_) if patience < remaining => None,
                Err(_) => {
                    drop(local);
                    return Err(Outcome::timed_out(job.deadline.len(), false));
                }
            }
        }
        None => None,
    };
    let mut local = local;
    let mut start = start;
    let late = scopes
        .first()
        .and_then(|primary| primary.enforced_late())
        .map_or(0, |(_, late)| micros(late));
    // Rounds until the shared budget and the local slots agree on one
    // start: a grant must be charged where the call really starts, or the
    // shared windows would count it early.
    for _ in 0..4 {
        let asked = ask_shared(engine, budget, scopes, job, (start, latest), None).await;
        let (at, grant) = match asked {
            Ok(granted) => granted,
            Err(NoGrant::Deadline) => {
                drop(local);
                return Err(Outcome::timed_out(job.deadline.len(), false));
            }
            Err(NoGrant::Denied(denial)) => {
                // The local slots go back first: mirroring the denial may void
                // them, and a voided slot can no longer be given back.
                drop(local);
                return Err(mirror(engine, scopes, job, denial));
            }
        };
        if at <= start {
            return Ok((local, start, grant));
        }
        // A grant for a future start comes back later than asked, by the
        // time the ask took to reach Redis (its `not_before` counts from
        // the script's now). Within the lateness a local slot allows, the
        // call starts at the grant's time on the slots it holds. Moving
        // them instead would put them behind the slots other calls took
        // meanwhile, and a burst would push itself out of its inline wait.
        // Never past `latest`: the call must still start within its wait.
        if at <= start.saturating_add(late) && at <= latest {
            return Ok((local, at, grant));
        }
        // The shared budget starts later: move the local slots there (the
        // grant goes back if they do not fit).
        drop(local);
        let now = engine.now();
        local = reserve_all(scopes, now, at, latest.saturating_sub(now), job)
            .map_err(|(scope, deferred)| no_slot(scope, deferred, now))?;
        let moved = local.start().unwrap_or(at);
        // A grant whose time has come while we asked starts now (the
        // window margin covers those microseconds, as for one window).
        if moved <= at.max(now) {
            return Ok((local, moved, grant));
        }
        // The local slots start later still: the grant goes back (dropped)
        // and the shared budget is asked for that start.
        start = moved;
    }
    let now = engine.now();
    drop(local);
    let scope = scopes
        .first()
        .map_or(&*job.credential.name, |scope| &*scope.name);
    Err(Outcome::rate_limited(
        scope,
        Reason::Throttled,
        Duration::from_micros(start.saturating_sub(now)).max(Duration::from_millis(1)),
        None,
    ))
}

/// Why the shared budget gave the call no start.
pub(super) enum NoGrant {
    /// It said no.
    Denied(Denial),
    /// The call's deadline came before its answer did. A budget that waits
    /// for a slow backend (the Redis budget waits up to its command timeout,
    /// twice when it must settle a reservation whose answer was lost)
    /// never holds a call past its deadline: the call is `timed_out`,
    /// nothing sent, and dropping the budget's future leaves at most a
    /// grant that charges the shared window for a start that never
    /// happens.
    Deadline,
}

/// The shared budget said no: when the call could start, on which scope, and why.
pub(super) struct Denial {
    wait: Duration,
    scope: String,
    hold: Hold,
    /// When the answer came.
    now: Micros,
}

/// Asks the shared budget for a start no earlier than `start` and no
/// later than `latest`; `instead` of the grant the call holds, if any
/// ([`SharedBudget::reserve_instead`]).
pub(super) async fn ask_shared<'a, E, P>(
    engine: &Engine<E>,
    budget: &'a Arc<dyn SharedBudget>,
    scopes: &[ScopeRef],
    job: &Job<'a, P>,
    (start, latest): (Micros, Micros),
    instead: Option<&Grant>,
) -> Result<(Micros, SharedGrant<'a>), NoGrant> {
    let names: Vec<&str> = scopes.iter().map(|scope| &*scope.name).collect();
    let limits = &job.credential.limits;
    let enforced = scopes.first().and_then(|primary| primary.enforced_late());
    // A credential with several windows, groups, units or a low share:
    // the backend charges every window of every call at once, in one set
    // of logs. Only a credential with one request window and nothing else
    // stays on `limit` (and the backend's leases): deciding by call would
    // put the calls without a cost or a group in another log of the same
    // window than those with, and each log would allow the whole window.
    let plain = limits.windows.is_empty()
        && limits.groups.is_empty()
        && limits.units.is_empty()
        && limits.low_share.is_none();
    let windows: Vec<SharedWindow> = if plain {
        Vec::new()
    } else {
        scopes
            .iter()
            .flat_map(|scope| scope.shared_windows(&job.ask))
            .collect()
    };
    let now = engine.now();
    let request = ReserveRequest {
        credential: &job.credential.name,
        scopes: &names,
        limit: enforced.map(|(rate, _)| SharedLimit {
            rate,
            burst: limits.burst,
        }),
        windows: &windows,
        not_before: Duration::from_micros(start.saturating_sub(now)),
        max_wait: Duration::from_micros(latest.saturating_sub(now)),
        late_start: enforced.map_or(Duration::ZERO, |(_, late)| late),
        priority: job.ask.priority,
    };
    let asked = match instead {
        Some(held) => budget.reserve_instead(request, held),
        None => budget.reserve(request),
    };
    let deadline = Duration::from_micros(job.remaining(now));
    let Ok(decision) = tokio::time::timeout(deadline, asked).await else {
        return Err(NoGrant::Deadline);
    };
    let now = engine.now();
    match decision {
        Decision::Granted { wait, grant } => Ok((
            now.saturating_add(micros(wait)),
            SharedGrant {
                budget: &**budget,
                credential: &job.credential.name,
                grant: Some(grant),
            },
        )),
        Decision::Denied { wait, scope, hold } => Err(NoGrant::Denied(Denial {
            wait,
            scope,
            hold,
            now,
        })),
    }
}

/// Mirrors what the other processes learned onto this one's scope, and
/// defers the call.
fn mirror<E, P>(
    engine: &Engine<E>,
    scopes: &[ScopeRef],
    job: &Job<'_, P>,
    denial: Denial,
) -> Outcome {
    let Denial {
        wait,
        scope,
        hold,
        now,
    } = denial;
    tracing::debug!(%scope, wait_ms = wait.as_millis() as u64, ?hold, "the shared budget deferred the call");
    let held = scopes.iter().find(|s| *s.name == *scope);
    match (hold, held) {
        (Hold::Quota, Some(held)) => {
            holds::note_exhausted(engine, job.credential, held, wait, now);
            Outcome::quota_exhausted(&held.name, wait)
        }
        (Hold::Quota, None) => Outcome::quota_exhausted(&scope, wait),
        (Hold::Blocked, Some(held)) => {
            held.block(now.saturating_add(micros(wait)), now);
            Outcome::rate_limited(&held.name, Reason::Throttled, wait, None)
        }
        (Hold::Outranked, _) => Outcome::rate_limited(&scope, Reason::Priority, wait, None),
        _ => Outcome::rate_limited(&scope, Reason::Throttled, wait, None),
    }
}

/// The local slots and, on a shared credential, the shared grant for one
/// start within `max_wait` of `now`.
pub(super) async fn acquire<'a, E, P>(
    engine: &Engine<E>,
    budget: Option<&'a Arc<dyn SharedBudget>>,
    scopes: &[ScopeRef],
    job: &Job<'a, P>,
    now: Micros,
    max_wait: Micros,
) -> Result<(Local, Micros, Option<SharedGrant<'a>>), Outcome> {
    acquire_from(engine, budget, scopes, job, (now, now), max_wait).await
}

/// [`acquire`], for a start no earlier than `not_before`.
pub(super) async fn acquire_from<'a, E, P>(
    engine: &Engine<E>,
    budget: Option<&'a Arc<dyn SharedBudget>>,
    scopes: &[ScopeRef],
    job: &Job<'a, P>,
    (now, not_before): (Micros, Micros),
    max_wait: Micros,
) -> Result<(Local, Micros, Option<SharedGrant<'a>>), Outcome> {
    let (local, start) = reserve_local(scopes, job, (now, not_before), max_wait)?;
    match budget {
        None => Ok((local, start, None)),
        Some(budget) => {
            let latest = now.saturating_add(max_wait);
            // Boxed: only a shared credential's call holds the round trip's
            // state (sluice-bench's `future_size` bench).
            let (local, start, grant) = Box::pin(with_shared(
                engine, budget, scopes, job, local, start, latest,
            ))
            .await?;
            Ok((local, start, Some(grant)))
        }
    }
}
