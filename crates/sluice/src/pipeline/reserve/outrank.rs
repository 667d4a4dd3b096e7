//! Step 5 for a call of higher priority: the start slots of waiting calls
//! it outranks, taken back into the cells, swapped with its own, or given
//! back on the shared budget so that it can ask for an earlier start.

use std::sync::Arc;

use super::guards::{Local, SharedGrant};
use super::shared::acquire_from;
use crate::config::Priority;
use crate::engine::{Credential, Engine};
use crate::limiter::Micros;
use crate::pipeline::job::Job;
use crate::priority_seats::Seated as _;
use crate::scope::{GrantHome, Holding, Scope, ScopeRef, Seats, Ticket};
use crate::shared::{Grant, SharedBudget};

/// Room a true-up frees goes first to the calls already waiting on starts
/// (issue 50): they give their starts back and ask again, in priority and
/// arrival order, as slow start's re-plan has them do, so the room moves
/// their starts earlier instead of waiting for a call that arrives later.
/// Their starts go back before `true_up` is applied, while they are still
/// the last charges, so that a bucket takes them back exactly as a window
/// does; when it cannot (other charges came after them), nothing moves.
/// A shared credential's waiting calls move by [`replan_shared`] instead:
/// giving their grants back and asking again, as here, met windows whose
/// true-up had not landed yet (it was sent in the background) and a
/// denial the Redis budget remembered meanwhile, and moved them later.
pub(in crate::pipeline) fn replan(credential: &Credential, true_up: impl FnOnce()) {
    let mut true_up = Some(true_up);
    if credential.swaps() && !credential.limits.shared {
        credential
            .seats
            .outrank_with(Priority::High, Micros::MAX, |theirs: &[&Holding]| {
                let exact = Holding::give_back_together(theirs);
                if let Some(true_up) = true_up.take() {
                    true_up();
                }
                exact
            });
    }
    // No call waits (or nothing could move): the true-up alone.
    if let Some(true_up) = true_up.take() {
        true_up();
    }
}

/// On a shared credential, room a true-up frees reaches the waiting calls
/// once the shared budget has it: the true-up of each unit is awaited
/// ([`SharedBudget::settle_now`]), then each waiting call, in priority and
/// arrival order and one after another, asks for a start before its own
/// with its own in hand ([`Seats::replan`]; the call's side is
/// `replan::take_turn`), so that none ever moves later.
pub(in crate::pipeline) async fn replan_shared(
    seats: &Seats,
    (budget, credential, grant): (&dyn SharedBudget, &str, &Grant),
    settled: Vec<(&str, u64, u64)>,
) {
    let landing = settled.into_iter().map(|(unit, estimate, actual)| {
        budget.settle_now(credential, grant, unit, estimate, actual)
    });
    futures_util::future::join_all(landing).await;
    seats.replan();
}

/// Gives back the starts of every waiting call of lower priority than
/// `priority` before `start` together with the caller's own (`local`),
/// when that is exact in every bucket ([`Scope::give_back_exactly`]); the
/// earliest of their starts, to reserve again from, or `None` with
/// nothing changed. The outranked calls are woken to ask again.
pub(super) fn outrank_bucket(
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
pub(super) async fn outrank_shared<'a, E, P>(
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
pub(super) fn swap(
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
pub(super) fn take_covering(
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
pub(super) fn hand_over(
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
pub(super) fn take_back(holding: Holding, local: &mut Local, shared: &mut Option<SharedGrant<'_>>) {
    local.held = holding.local;
    if let Some(shared) = shared {
        shared.grant = holding.grant.map(|(grant, _)| grant);
    }
}
