//! Step 5: one start for a call, on every scope it spends from and on the shared budget.
//!
//! What a reservation takes — the turn's request, a slot on each scope, a
//! grant from the shared budget — is held by a guard ([`Start`] and its
//! parts) that gives it back when dropped, unless the send commits it. So
//! no path refunds by hand, and none can forget to.
//!
//! Here, the reservation and its guards; in `outrank`, a call of higher
//! priority taking the slots of calls it outranks; in `shared`, the shared
//! budget's grant; in `shadow`, the same decisions recorded, not acted on.

mod outrank;
mod shadow;
mod shared;

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

pub(super) use self::outrank::replan;
use self::outrank::{hand_over, outrank_bucket, outrank_shared, swap, take_back, take_covering};
pub(super) use self::shadow::shadow_start;
use self::shared::with_shared;
use super::holds;
use super::job::Job;
use crate::config::Priority;
use crate::engine::{Engine, TurnState};
use crate::executor::Executor;
use crate::limiter::{Micros, micros};
use crate::observe::{Event, WaitKind};
use crate::outcome::{Outcome, Reason};
use crate::scope::{Deferred, Scope, ScopeRef, Slots};
use crate::seats::Stood;
use crate::shared::{Grant, SharedBudget};

/// Rounds of re-reserving after penalties voided waiting reservations. The
/// inline budget bounds the time spent; this only guards against spinning.
const MAX_REVOKED: u32 = 256;

/// Everything one attempt holds for its start. Dropped, it gives it all
/// back; [`Start::commit`] keeps it, when the request is sent.
#[must_use = "dropping a start refunds it"]
pub(super) struct Start<'a> {
    request: TurnRequest<'a>,
    local: Local,
    shared: Option<SharedGrant<'a>>,
    /// Now, when the start holds, as an instant and in engine microseconds:
    /// the caller's reading of the clock, or a new one if the reservation
    /// waited.
    at: (Instant, Micros),
}

/// What a sent request spent on the credential's own scope: its start and
/// its cost in each unit, for the true-up after the answer; and the shared
/// budget's grant, which the true-up reaches too.
#[derive(Default)]
pub(super) struct Spent<'a> {
    pub(super) start: Option<Micros>,
    pub(super) costs: Vec<(Arc<str>, u64)>,
    pub(super) shared: Option<(&'a dyn SharedBudget, &'a str, Grant)>,
}

impl<'a> Start<'a> {
    /// When the start holds (the send's time).
    pub(super) fn at(&self) -> (Instant, Micros) {
        self.at
    }

    /// The request is being sent: everything held is spent.
    pub(super) fn commit(mut self) -> Spent<'a> {
        self.request.turn = None;
        let mut spent = match self.local.held.first() {
            Some((scope, ticket)) => Spent {
                start: Some(ticket.start()),
                costs: scope.costs_of(ticket),
                shared: None,
            },
            None => Spent::default(),
        };
        self.local.held.clear();
        if let Some(shared) = &mut self.shared {
            spent.shared = shared
                .grant
                .take()
                .map(|grant| (shared.budget, shared.credential, grant));
        }
        spent
    }
}

/// One request from the turn's budget.
struct TurnRequest<'a> {
    turn: Option<&'a TurnState>,
}

impl<'a> TurnRequest<'a> {
    fn spend(turn: &'a TurnState) -> Option<Self> {
        // Lazily: a guard built for a request that was not spent would
        // refund one when dropped.
        turn.spend_request()
            .then(|| TurnRequest { turn: Some(turn) })
    }
}

impl Drop for TurnRequest<'_> {
    fn drop(&mut self) {
        if let Some(turn) = self.turn {
            turn.refund_request();
        }
    }
}

/// Slots held on each of a call's scopes, all for one start.
struct Local {
    held: Slots,
}

impl Local {
    /// The common start; `None` when there are no scopes.
    fn start(&self) -> Option<Micros> {
        self.held.first().map(|(_, ticket)| ticket.start())
    }

    /// True while no penalty or block has voided any of the slots.
    fn is_current(&self) -> bool {
        self.held
            .iter()
            .all(|(scope, reservation)| scope.is_current(reservation))
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        for (scope, reservation) in &self.held {
            scope.refund(reservation);
        }
    }
}

/// A slot the shared budget granted.
struct SharedGrant<'a> {
    budget: &'a dyn SharedBudget,
    credential: &'a str,
    grant: Option<Grant>,
}

impl Drop for SharedGrant<'_> {
    fn drop(&mut self) {
        if let Some(grant) = self.grant.take() {
            self.budget.refund(self.credential, grant);
        }
    }
}

/// Step 5 without an await, for the call that needs none: one request
/// from the turn's budget and one start slot on every scope, free now.
/// What needs more — a slot later than now, a shared budget to ask, calls
/// of lower priority to take a slot from — is left to [`start`], with
/// what was taken ([`Later`]). `at` is the caller's reading of the clock;
/// `checked` says that the caller found no scope's quota spent at it
/// (step 2), so it is not looked at again.
pub(super) fn start_at_once<'a, E: Executor>(
    engine: &'a Engine<E>,
    turn: &'a TurnState,
    primary: &Scope,
    scopes: &[ScopeRef],
    job: &Job<'a, E::Payload>,
    (at, now): (Instant, Micros),
    checked: bool,
) -> Result<AtOnce<'a>, Outcome> {
    let Some(request) = TurnRequest::spend(turn) else {
        let wait = next_slot(engine, primary);
        return Err(Outcome::rate_limited(
            &primary.name,
            Reason::TurnBudget,
            wait,
            None,
        ));
    };
    if !checked && let Some(outcome) = holds::quota_spent(scopes, now) {
        return Err(outcome);
    }
    let remaining = job.remaining(now);
    if remaining == 0 {
        return Err(Outcome::timed_out(job.deadline.len(), false));
    }
    if engine.shared_for(job.credential).is_some() {
        return Ok(AtOnce::Later(Later {
            request,
            first: None,
        }));
    }
    // `start`'s first round, up to its first await.
    let max_wait = micros(engine.defaults.inline_wait).min(remaining - 1);
    match reserve_local(scopes, job, (now, now), max_wait) {
        Ok((local, start)) if start <= now => Ok(AtOnce::Now(Start {
            request,
            local,
            shared: None,
            at: (at, now),
        })),
        // Only a call that may take a slot from calls it outranks does
        // more with a deferral than return it.
        Err(outcome) if !(job.credential.outranks || job.credential.swaps()) => Err(outcome),
        first => Ok(AtOnce::Later(Later {
            request,
            first: Some(first),
        })),
    }
}

/// What [`start_at_once`] found.
pub(super) enum AtOnce<'a> {
    /// A start free now, held.
    Now(Start<'a>),
    /// More to do, in [`start`].
    Later(Later<'a>),
}

/// What [`start_at_once`] hands to [`start`]: the turn's request, taken,
/// and the first round's reservation, when it made one (not on a shared
/// credential, whose first round asks the shared budget).
pub(super) struct Later<'a> {
    request: TurnRequest<'a>,
    first: Option<Result<(Local, Micros), Outcome>>,
}

/// Step 5 for a call [`start_at_once`] did not start: reserves one start
/// slot on every scope, at one common start (and from the shared budget,
/// for a shared credential); sleeps until it when the wait is inline and
/// fits the deadline. The error is the call's outcome, with everything
/// given back; `None` means a call of higher priority took the slot while
/// this one slept: its permits go back and it queues again. `at` is the
/// caller's reading of the clock, at which [`start_at_once`] looked; the
/// clock is read again only after a wait.
pub(super) async fn start<'a, E: Executor>(
    engine: &'a Engine<E>,
    primary: &Scope,
    scopes: &[ScopeRef],
    job: &Job<'a, E::Payload>,
    (at, now): (Instant, Micros),
    later: Later<'a>,
) -> Result<Option<Start<'a>>, Outcome> {
    let Later { request, mut first } = later;
    // Every wait below counts against one inline budget: a call whose
    // reservations penalties keep voiding re-reserves, and stays below
    // the model's view, until it has waited `inline_wait` in all.
    let began = now;
    // One clock read per round where nothing awaited in between.
    let (mut at, mut now) = (at, now);
    for round in 0..MAX_REVOKED {
        if round > 0
            && let Some(outcome) = holds::quota_spent(scopes, now)
        {
            return Err(outcome);
        }
        let remaining = job.remaining(now);
        if remaining == 0 {
            return Err(Outcome::timed_out(job.deadline.len(), false));
        }
        // Never start a wait the deadline cannot pay for: the start must
        // come strictly before the deadline.
        let inline_left =
            micros(engine.defaults.inline_wait).saturating_sub(now.saturating_sub(began));
        let max_wait = inline_left.min(remaining - 1);
        let latest = now.saturating_add(max_wait);
        let budget = engine.shared_for(job.credential);
        let seats = &job.credential.seats;
        let priority = job.ask.priority;
        let outranks = job.credential.outranks && budget.is_none();
        let swaps = job.credential.swaps();
        // Where a seated or swapped grant goes back if nobody uses it.
        let home = || budget.map(|budget| (budget.clone(), job.credential.name.clone()));
        let acquired = match first.take() {
            Some(first) => first.map(|(local, start)| (local, start, None)),
            None => acquire(engine, budget, scopes, job, now, max_wait).await,
        };
        let (mut local, mut start, mut shared, beyond) = match acquired {
            Ok((local, start, shared)) => (local, start, shared, None),
            // No slot within the wait, but calls it outranks sleep on
            // earlier ones: on exact windows it takes their slots back into
            // the cells (they queue again behind it) and reserves again.
            Err(Outcome::RateLimited { retry_after_ms, .. })
                if outranks && seats.outranks(priority, deferred_until(now, retry_after_ms)) =>
            {
                seats.outrank(priority, deferred_until(now, retry_after_ms));
                let (local, start, shared) =
                    acquire(engine, budget, scopes, job, now, max_wait).await?;
                (local, start, shared, None)
            }
            // A bucket or a shared grant cannot be taken back: when calls it
            // outranks hold starts within its wait, it reserves the next
            // free start, past its own wait, for the call that the swap
            // below moves last (which gives it back if it cannot wait).
            Err(deferred @ Outcome::RateLimited { .. })
                if swaps && !outranks && seats.outranks(priority, latest.saturating_add(1)) =>
            {
                match acquire(engine, budget, scopes, job, now, remaining - 1).await {
                    Ok((local, start, shared)) => (local, start, shared, Some(deferred)),
                    Err(_) => return Err(deferred),
                }
            }
            Err(outcome) => return Err(outcome),
        };
        // Only the shared budget awaits above.
        if shared.is_some() {
            (at, now) = engine.clock();
        }
        // Where slots cannot be taken back (a bucket, a shared grant), a
        // call that would wait behind waiting calls it outranks and that
        // spend exactly what it does takes the earliest of their starts;
        // they move one start later each. Failing that, it takes what the
        // earliest of them whose spend covers its own holds (the low
        // share, a group or a higher cost besides), and that call asks
        // again behind it.
        if swaps && !outranks && start > now {
            start = swap(seats, priority, start, (&mut local, &mut shared), home());
            if start > now {
                start = take_covering(seats, priority, start, (&mut local, &mut shared), home());
            }
        }
        // On a bucket, a call that still waits behind waiting calls it
        // outranks (costing more than any of them) gives their starts and
        // its own back together when that is exact (they are the bucket's
        // last charges), and reserves again from the earliest of theirs.
        if swaps
            && !outranks
            && budget.is_none()
            && start > now
            && seats.outranks(priority, start)
            && let Some(from) = outrank_bucket(seats, priority, start, &mut local)
        {
            local = match reserve_all(scopes, now, from, max_wait, job) {
                Ok(local) => local,
                Err((scope, deferred)) => {
                    return Err(beyond.unwrap_or_else(|| no_slot(scope, deferred, now)));
                }
            };
            start = local.start().unwrap_or(now);
        }
        // On a shared credential of exact windows, a call that still waits
        // behind waiting calls it outranks (costing more than any of them)
        // gives their grants back and asks for an earlier start; it keeps
        // its own if none comes.
        if job.credential.outranks_shared
            && start > now
            && seats.outranks(priority, start)
            && let Some(budget) = budget
            && let Some((earlier, at_earlier, granted)) =
                Box::pin(outrank_shared(engine, budget, scopes, job, start, latest)).await
        {
            // Its own later start goes back (dropped).
            (local, start, shared) = (earlier, at_earlier, granted);
            (at, now) = engine.clock();
        }
        if let Some(deferred) = beyond
            && start > latest
        {
            return Err(deferred);
        }
        // On exact windows, a call that would still wait behind waiting
        // calls it outranks takes their slots: its own goes back first (the
        // latest), then theirs, and it reserves again at once, with no
        // await in between.
        if outranks && start > now && seats.outranks(priority, start) {
            drop(local);
            seats.outrank(priority, start);
            local = reserve_all(scopes, now, now, max_wait, job)
                .map_err(|(scope, deferred)| no_slot(scope, deferred, now))?;
            start = local.start().unwrap_or(now);
        }
        // Whether `at` went stale below.
        let mut waited = false;
        if start > now {
            let wait = Duration::from_micros(start - now);
            engine.observe(Event::Wait {
                credential: &job.credential.name,
                scope: &primary.name,
                wait,
                kind: WaitKind::Rate,
            });
            tracing::debug!(
                wait_ms = wait.as_millis() as u64,
                "waiting inline for a start slot"
            );
            if swaps && priority < Priority::High {
                // Seated while it sleeps, so that a call it ranks below can
                // take its start.
                let holding = hand_over(&mut local, &mut shared, home());
                let sitting = seats.sit(priority, start, holding);
                let holding = loop {
                    {
                        let slept = std::pin::pin!(tokio::time::sleep_until(engine.instant(start)));
                        let changed = std::pin::pin!(sitting.changed());
                        futures_util::future::select(slept, changed).await;
                    }
                    match sitting.stand(engine.now()) {
                        Stood::Ready(holding) => break holding,
                        // Outranked: the caller gives its permit back and
                        // queues again.
                        Stood::Taken => return Ok(None),
                        // Moved later by a call it ranks below: it waits on
                        // if it can (dropping the seat gives the start back).
                        Stood::Later(later) if later > latest => {
                            return Err(moved_past(primary, later, engine.now()));
                        }
                        Stood::Later(later) => start = later,
                    }
                };
                take_back(holding, &mut local, &mut shared);
            } else {
                tokio::time::sleep_until(engine.instant(start)).await;
            }
            waited = true;
        }
        // Only an await lets a penalty void the slots: a start taken at
        // once goes as it is (a penalty now is one a microsecond later).
        if !(waited || shared.is_some()) || local.is_current() {
            if waited {
                (at, now) = engine.clock();
            }
            return Ok(Some(Start {
                request,
                local,
                shared,
                at: (at, now),
            }));
        }
        // A penalty arrived while we waited: give back what still holds
        // and ask again (the penalty may now defer the call).
        drop(local);
        drop(shared);
        (at, now) = engine.clock();
    }
    let wait = next_slot(engine, primary);
    Err(Outcome::rate_limited(
        &primary.name,
        Reason::Throttled,
        wait,
        None,
    ))
}

/// The local slots and, on a shared credential, the shared grant for one
/// start within `max_wait` of `now`.
async fn acquire<'a, E, P>(
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
async fn acquire_from<'a, E, P>(
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
            // state (pipeline/future_size.rs).
            let (local, start, grant) = Box::pin(with_shared(
                engine, budget, scopes, job, local, start, latest,
            ))
            .await?;
            Ok((local, start, Some(grant)))
        }
    }
}

/// The local slots for one start no earlier than `not_before` and within
/// `max_wait` of `now`, and that start; the deferral when there is none.
fn reserve_local<P>(
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
fn deferred_until(now: Micros, retry_after_ms: u64) -> Micros {
    now.saturating_add(retry_after_ms.saturating_add(1).saturating_mul(1_000))
}

/// A call that a call of higher priority moved to `later`, past the wait
/// it can afford: deferred for priority, with the wait until that start.
fn moved_past(primary: &Scope, later: Micros, now: Micros) -> Outcome {
    let wait = Duration::from_micros(later.saturating_sub(now)).max(Duration::from_millis(1));
    tracing::debug!(scope = %primary.name, wait_ms = wait.as_millis() as u64, "moved past the inline wait by a call of higher priority; deferring");
    Outcome::rate_limited(&primary.name, Reason::Priority, wait, None)
}

/// No start slot on `scope` within the wait the call can afford: defer
/// it, naming the window that set the start (and `priority` when the
/// low-priority share did).
fn no_slot(scope: &Scope, deferred: Deferred, now: Micros) -> Outcome {
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
pub(super) fn next_slot<E>(engine: &Engine<E>, scope: &Scope) -> Duration {
    let now = engine.now();
    let wait = scope.earliest(now).saturating_sub(now);
    Duration::from_micros(wait).max(Duration::from_millis(1))
}

/// Reserves on every scope at one common start time. Scopes can disagree
/// (one is blocked later than another), so the latest start wins and the
/// others are re-reserved there; a few rounds always settle it.
fn reserve_all<'s, P>(
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
