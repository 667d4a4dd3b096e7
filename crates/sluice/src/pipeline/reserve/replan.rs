//! Step 5 for a seated call on a shared credential whose turn came in a
//! re-plan (issue 50): a true-up below the estimate freed room in front
//! of it, and it asks for that room with the start it holds in hand, so
//! that it never ends up later than it was.

use std::sync::Arc;

use super::guards::{Local, SharedGrant};
use super::outrank::{hand_over, take_back};
use super::shared::ask_shared;
use super::slots::reserve_all;
use crate::engine::Engine;
use crate::limiter::Micros;
use crate::pipeline::job::Job;
use crate::priority_seats::{Sitting, Turn};
use crate::scope::{Holding, Scope, ScopeRef, Ticket};
use crate::shared::SharedBudget;

/// A seated call's turn in a re-plan: once the calls before it have
/// asked (or its own start comes first), it lifts what it holds out of
/// its seat, asks for a start strictly before its own, and sits again
/// with the earlier start or, failing that, its own. The start it holds
/// then; `None` when a call that outranks it took its start first.
pub(super) async fn take_turn<'a, E, P>(
    engine: &Engine<E>,
    budget: &'a Arc<dyn SharedBudget>,
    scopes: &[ScopeRef],
    job: &Job<'a, P>,
    sitting: &Sitting<'_, Micros, Holding>,
    mut turn: Turn,
) -> Option<Micros> {
    let (start, ()) = sitting.look(|_| ())?;
    {
        let come = std::pin::pin!(turn.come());
        let slept = std::pin::pin!(tokio::time::sleep_until(engine.instant(start)));
        futures_util::future::select(come, slept).await;
    }
    let (start, holding) = sitting.lift()?;
    let home = Some((budget.clone(), job.credential.name.clone()));
    let mut local = Local { held: Vec::new() };
    let mut shared = Some(SharedGrant {
        budget: &**budget,
        credential: &job.credential.name,
        grant: None,
    });
    take_back(holding, &mut local, &mut shared);
    if let Some(shared) = &mut shared {
        // Never past its own start: asking takes round trips, and a start
        // that comes meanwhile is kept. An ask cut short charges nothing
        // here (its local slots go back, dropped); one Redis already
        // answered stays charged there until its windows pass, as does an
        // old grant whose refund was cut short: spending less, never more.
        let guards = (&mut local, shared);
        let moving = std::pin::pin!(move_earlier(engine, budget, scopes, job, guards, start));
        let due = std::pin::pin!(tokio::time::sleep_until(engine.instant(start)));
        futures_util::future::select(moving, due).await;
    }
    // Its own local slots went back while it looked for earlier ones: a
    // look cut short leaves them to take again.
    if local.held.is_empty() {
        local = slots_at(engine, scopes, job, start);
    }
    let moved = local.start().unwrap_or(start).min(start);
    sitting.reseat(moved, hand_over(&mut local, &mut shared, home));
    // Its turn passes on once it holds one start again, its old grant
    // given back: the next call sees the room.
    drop(turn);
    Some(moved)
}

/// Moves what a call holds for `start` to an earlier start, if one is
/// free; what it holds then is never for a later start than `start`.
/// Its local slots are taken again earlier (or kept, or taken again at
/// `start`); the shared budget is asked for a start from that one to just
/// before `start`, instead of the grant held, which stays charged until
/// the new one is granted and only then goes back (awaited, so that the
/// calls after it see the room).
async fn move_earlier<'a, E, P>(
    engine: &Engine<E>,
    budget: &'a Arc<dyn SharedBudget>,
    scopes: &[ScopeRef],
    job: &Job<'a, P>,
    (local, shared): (&mut Local, &mut SharedGrant<'a>),
    start: Micros,
) {
    let now = engine.now();
    let (Some(held), Some(before)) = (
        shared.grant.clone(),
        start.checked_sub(1).filter(|before| *before > now),
    ) else {
        return;
    };
    // Its own local slots go back first where that is exact (a window; a
    // bucket's last charges), so that they are not in the way of their
    // own move; elsewhere they stay held while it looks, as a bucket that
    // charged something after them cannot take them back.
    let given_back = {
        let held: Vec<(&Scope, &Ticket)> = local.held.iter().map(|(s, t)| (&**s, t)).collect();
        Scope::give_back_exactly(&held)
    };
    if given_back {
        // Given back already: cleared, not given back again.
        local.held.clear();
    }
    let keep = |local: &mut Local| {
        if given_back {
            *local = slots_at(engine, scopes, job, start);
        }
    };
    let earlier = reserve_all(scopes, now, now, before - now, job)
        .ok()
        .map(|slots| {
            let from = slots.start().unwrap_or(now);
            (slots, from)
        })
        .filter(|(_, from)| *from < start);
    let Some((slots, from)) = earlier else {
        keep(local);
        return;
    };
    let asked = ask_shared(engine, budget, scopes, job, (from, before), Some(&held)).await;
    let (at, mut granted) = match asked {
        Ok((at, granted)) if at < start => (at, granted),
        // Denied (or, against the ask, no earlier: that grant goes back).
        _ => {
            drop(slots);
            keep(local);
            return;
        }
    };
    // A grant later than the local slots moves them there; where they do
    // not fit, the new grant goes back and the call keeps its own start.
    let slots = if at <= from {
        Some(slots)
    } else {
        drop(slots);
        let now = engine.now();
        reserve_all(scopes, now, at, at.saturating_sub(now), job).ok()
    };
    let Some(slots) = slots else {
        drop(granted);
        keep(local);
        return;
    };
    let moved = slots.start().unwrap_or(at).max(at);
    // The old slots, if still held, go back (dropped): forgone on a bucket.
    *local = slots;
    let old = std::mem::replace(&mut shared.grant, granted.grant.take());
    if let Some(old) = old {
        budget.refund_now(&job.credential.name, vec![old]).await;
    }
    tracing::debug!(
        moved_ms = start.saturating_sub(moved) / 1_000,
        "a settle's room moved a waiting call earlier"
    );
}

/// The call's local slots at `start` again, which it gave back a moment
/// ago to look for earlier ones. None where another call took them in the
/// meantime: the call keeps its shared grant and start, and this process's
/// cells count it one call short (the shared budget, which decides, does
/// not).
fn slots_at<E, P>(
    engine: &Engine<E>,
    scopes: &[ScopeRef],
    job: &Job<'_, P>,
    start: Micros,
) -> Local {
    let now = engine.now();
    reserve_all(scopes, now, start, start.saturating_sub(now), job).unwrap_or_else(|(scope, _)| {
        tracing::debug!(scope = %scope.name, "a waiting call's local slots could not be taken again at its start");
        Local { held: Vec::new() }
    })
}
