//! Step 5: one start for a call, on every scope it spends from and on the shared budget.
//!
//! What a reservation takes — the turn's request, a slot on each scope, a
//! grant from the shared budget — is held by a guard ([`Start`] and its
//! parts) that gives it back when dropped, unless the send commits it. So
//! no path refunds by hand, and none can forget to.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::holds;
use super::job::Job;
use super::learn;
use super::shadow::Recorder;
use crate::config::Priority;
use crate::engine::{Engine, TurnState};
use crate::executor::Executor;
use crate::limiter::{Micros, micros};
use crate::observe::{Event, ShadowDecision, WaitKind};
use crate::outcome::{Outcome, Reason};
use crate::scope::{Deferred, GrantHome, Holding, Scope, ScopeRef, Seats, Slots, Ticket};
use crate::seats::{Seated, Stood};
use crate::shared::{
    Decision, Grant, Hold, ReserveRequest, SharedBudget, SharedLimit, SharedWindow,
};

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
    let first = reserve_all(scopes, now, now, max_wait, job)
        .map(|local| {
            let start = local.start().unwrap_or(now);
            (local, start)
        })
        .map_err(|(scope, deferred)| no_slot(scope, deferred, now));
    match first {
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

/// Shadow mode's step 5 (issue 20): the same reservation, decided and
/// never waited for. A slot within the inline wait is charged where
/// enforcing would have started the call, so the cells go on modelling
/// enforcement, and its wait is recorded; no slot in time is a deferral,
/// charging nothing; a spent turn budget is a deferral too. The shared
/// budget is not asked: shadow decisions spend none of it.
pub(super) fn shadow_start<'a, E: Executor>(
    engine: &'a Engine<E>,
    turn: &'a TurnState,
    primary: &Scope,
    scopes: &[ScopeRef],
    job: &Job<'a, E::Payload>,
    recorder: &mut Recorder<'_, '_, E, E::Payload>,
    (at, now): (Instant, Micros),
) -> Result<Start<'a>, Outcome> {
    let request = TurnRequest::spend(turn).unwrap_or_else(|| {
        recorder.refuse(primary, ShadowDecision::Defer, next_slot(engine, primary));
        TurnRequest { turn: None }
    });
    let remaining = job.remaining(now);
    if remaining == 0 {
        return Err(Outcome::timed_out(job.deadline.len(), false));
    }
    let max_wait = micros(engine.defaults.inline_wait).min(remaining - 1);
    let local = match reserve_all(scopes, now, now, max_wait, job) {
        Ok(local) => {
            let start = local.start().unwrap_or(now);
            if start > now {
                // The scope the common start waits for.
                let binding = local
                    .held
                    .iter()
                    .map(|(scope, _)| scope)
                    .find(|scope| scope.blocked_until(now).is_some())
                    .or_else(|| scopes.first());
                if let Some(binding) = binding {
                    recorder.wait(binding, Duration::from_micros(start - now));
                }
            }
            local
        }
        Err((scope, deferred)) => {
            let wait = Duration::from_micros(deferred.until.saturating_sub(now));
            recorder.refuse(scope, ShadowDecision::Defer, wait);
            Local { held: Slots::new() }
        }
    };
    Ok(Start {
        request,
        local,
        shared: None,
        at: (at, now),
    })
}

/// Adds the shared budget's grant to the local slots held for `start`;
/// when it grants a later start, the local slots move there.
async fn with_shared<'a, E, P>(
    engine: &Engine<E>,
    budget: &'a Arc<dyn SharedBudget>,
    scopes: &[ScopeRef],
    job: &Job<'a, P>,
    local: Local,
    start: Micros,
    latest: Micros,
) -> Result<(Local, Micros, SharedGrant<'a>), Outcome> {
    let mut local = local;
    let mut start = start;
    // Rounds until the shared budget and the local slots agree on one
    // start: a grant must be charged where the call really starts, or the
    // shared windows would count it early.
    for _ in 0..4 {
        let (at, grant) = match ask_shared(engine, budget, scopes, job, start, latest).await {
            Ok(granted) => granted,
            Err(denial) => {
                // The local slots go back first: mirroring the denial may void
                // them, and a voided slot can no longer be given back.
                drop(local);
                return Err(mirror(engine, scopes, job, denial));
            }
        };
        if at <= start {
            return Ok((local, start, grant));
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
    let local = reserve_all(scopes, now, not_before, max_wait, job)
        .map_err(|(scope, deferred)| no_slot(scope, deferred, now))?;
    let start = local.start().unwrap_or(now);
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

/// Gives back the starts of every waiting call of lower priority than
/// `priority` before `start` together with the caller's own (`local`),
/// when that is exact in every bucket ([`Scope::give_back_exactly`]); the
/// earliest of their starts, to reserve again from, or `None` with
/// nothing changed. The outranked calls are woken to ask again.
fn outrank_bucket(
    seats: &Seats,
    priority: Priority,
    start: Micros,
    local: &mut Local,
) -> Option<Micros> {
    let from = seats.outrank_with(priority, start, |theirs: &[&Holding]| {
        let held: Vec<(&Scope, &Ticket)> = local
            .held
            .iter()
            .chain(theirs.iter().flat_map(|holding| holding.local.iter()))
            .map(|(scope, ticket)| (&**scope, ticket))
            .collect();
        Scope::give_back_exactly(&held)
    })?;
    // Its own went back with theirs.
    local.held.clear();
    Some(from)
}

/// Gives back what every waiting call of lower priority than the job's
/// holds for a start before `start` — the local slots at once, the grants
/// awaited, so that the shared budget has the room back — and asks for a
/// start before `start`, within `latest`. The start it gets, or `None`
/// (the caller keeps its own). The outranked calls are woken, to ask
/// again behind it, once it has asked.
async fn outrank_shared<'a, E, P>(
    engine: &Engine<E>,
    budget: &'a Arc<dyn SharedBudget>,
    scopes: &[ScopeRef],
    job: &Job<'a, P>,
    start: Micros,
    latest: Micros,
) -> Option<(Local, Micros, Option<SharedGrant<'a>>)> {
    let mut outranked = job.credential.seats.take_outranked(job.ask.priority, start);
    let from = outranked.earliest()?;
    let mut grants = Vec::new();
    for holding in outranked.held.drain(..) {
        grants.extend(holding.give_back_local().map(|(grant, _)| grant));
    }
    budget.refund_now(&job.credential.name, grants).await;
    let now = engine.now();
    let wait = start.saturating_sub(1).min(latest).checked_sub(now)?;
    // From the earliest start given back, where the call fits as asked.
    let earlier = acquire_from(engine, Some(budget), scopes, job, (now, from), wait).await;
    drop(outranked);
    earlier.ok()
}

/// Swaps what the call holds for `start` with the earliest start among the
/// waiting calls it outranks that spend the same ([`Seats::swap`]); the
/// start it now holds.
fn swap(
    seats: &Seats,
    priority: Priority,
    start: Micros,
    guards: (&mut Local, &mut Option<SharedGrant<'_>>),
    home: Option<GrantHome>,
) -> Micros {
    with_holding(guards, home, |holding| seats.swap(priority, start, holding))
}

/// Takes what the earliest waiting call it outranks whose spend covers
/// its own holds ([`Seats::take_covering`]), giving back what it held; the
/// start it now holds.
fn take_covering(
    seats: &Seats,
    priority: Priority,
    start: Micros,
    guards: (&mut Local, &mut Option<SharedGrant<'_>>),
    home: Option<GrantHome>,
) -> Micros {
    let taken = with_holding(guards, home, |holding| {
        seats.take_covering(priority, start, holding)
    });
    match taken {
        Some((taken, own)) => {
            // Its own later start: exact on a window, forgone on a bucket
            // that charged something after it.
            own.give_back();
            taken
        }
        None => start,
    }
}

/// Runs `f` on what the guards hold, taken out of them, and puts what it
/// leaves back into them.
fn with_holding<R>(
    (local, shared): (&mut Local, &mut Option<SharedGrant<'_>>),
    home: Option<GrantHome>,
    f: impl FnOnce(&mut Holding) -> R,
) -> R {
    let mut holding = hand_over(local, shared, home);
    let result = f(&mut holding);
    take_back(holding, local, shared);
    result
}

/// What the guards hold, taken out of them (to seat or swap it).
fn hand_over(
    local: &mut Local,
    shared: &mut Option<SharedGrant<'_>>,
    home: Option<GrantHome>,
) -> Holding {
    let grant = shared.as_mut().and_then(|shared| shared.grant.take());
    Holding {
        local: std::mem::take(&mut local.held),
        grant: grant.zip(home),
    }
}

/// Puts `holding` back into the guards, which give it back if dropped.
fn take_back(holding: Holding, local: &mut Local, shared: &mut Option<SharedGrant<'_>>) {
    local.held = holding.local;
    if let Some(shared) = shared {
        shared.grant = holding.grant.map(|(grant, _)| grant);
    }
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

/// The shared budget said no: when the call could start, on which scope, and why.
struct Denial {
    wait: Duration,
    scope: String,
    hold: Hold,
    /// When the answer came.
    now: Micros,
}

/// Asks the shared budget for a start no earlier than `start` and no
/// later than `latest`.
async fn ask_shared<'a, E, P>(
    engine: &Engine<E>,
    budget: &'a Arc<dyn SharedBudget>,
    scopes: &[ScopeRef],
    job: &Job<'a, P>,
    start: Micros,
    latest: Micros,
) -> Result<(Micros, SharedGrant<'a>), Denial> {
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
    let decision = budget.reserve(request).await;
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
        Decision::Denied { wait, scope, hold } => Err(Denial {
            wait,
            scope,
            hold,
            now,
        }),
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
            learn::note_exhausted(engine, job.credential, held, wait, now);
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
