//! Step 5's rounds for one call: a start at once when one is free, else reserved, outranking, seated and slept for.

use std::time::Duration;

use tokio::time::Instant;

use super::guards::{Local, Start, TurnRequest};
use super::outrank::{hand_over, outrank_bucket, outrank_shared, swap, take_back, take_covering};
use super::replan::take_turn;
use super::shared::acquire;
use super::slots::{deferred_until, moved_past, next_slot, no_slot, reserve_all, reserve_local};
use crate::config::Priority;
use crate::engine::{Engine, TurnState};
use crate::executor::Executor;
use crate::limiter::{Micros, micros};
use crate::observe::{Event, WaitKind};
use crate::outcome::{Outcome, Reason};
use crate::pipeline::holds;
use crate::pipeline::job::Job;
use crate::priority_seats::Stood;
use crate::scope::{Scope, ScopeRef};

/// Rounds of re-reserving after penalties voided waiting reservations. The
/// inline budget bounds the time spent; this only guards against spinning.
const MAX_REVOKED: u32 = 256;

/// Step 5 without an await, for the call that needs none: one request
/// from the turn's budget and one start slot on every scope, free now.
/// What needs more — a slot later than now, a shared budget to ask, calls
/// of lower priority to take a slot from — is left to [`start`], with
/// what was taken ([`Later`]). `at` is the caller's reading of the clock;
/// `checked` says that the caller found no scope's quota spent at it
/// (step 2), so it is not looked at again.
pub(in crate::pipeline) fn start_at_once<'a, E: Executor>(
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
pub(in crate::pipeline) enum AtOnce<'a> {
    /// A start free now, held.
    Now(Start<'a>),
    /// More to do, in [`start`].
    Later(Later<'a>),
}

/// What [`start_at_once`] hands to [`start`]: the turn's request, taken,
/// and the first round's reservation, when it made one (not on a shared
/// credential, whose first round asks the shared budget).
pub(in crate::pipeline) struct Later<'a> {
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
pub(in crate::pipeline) async fn start<'a, E: Executor>(
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
                        // Room freed in front of it on a shared budget:
                        // it asks for an earlier start in its turn.
                        Stood::Replan(turn) => {
                            let Some(budget) = budget else {
                                continue;
                            };
                            let asked = take_turn(engine, budget, scopes, job, &sitting, turn);
                            match Box::pin(asked).await {
                                Some(moved) => start = moved,
                                None => return Ok(None),
                            }
                        }
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
        // A shared grant slept for is held by what the budget heard
        // meanwhile (another process's 429) as the local slots are by
        // this process's penalties.
        let held = waited && shared.as_ref().is_some_and(|grant| grant.held(scopes));
        if (!(waited || shared.is_some()) || local.is_current()) && !held {
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
