//! Calls sleeping until their start slot, with their priority, so that a
//! call of higher priority that would wait behind them takes their slots
//! (issue 14: the callers waiting on a scope are served highest priority
//! first, first come first served within a priority).
//!
//! A waiting call hands what it holds to its [`Seat`] while it sleeps. A
//! call that outranks it and would wait for a slot behind it:
//! - swaps with it when the two spend exactly the same ([`Seats::swap`]):
//!   the caller takes the earliest of the outranked starts and each of
//!   those calls moves one start later. Nothing goes back into a cell, so
//!   this holds on a `burst` bucket and for a shared grant too;
//! - otherwise, on exact windows only, takes their slots back into the
//!   cells ([`Seats::outrank`]) and reserves again at once, with no await
//!   in between; the outranked calls wake, give their permit back and
//!   queue again, behind the caller, as the admission queue serves by
//!   priority.
//!
//! A call that outranks it and finds every concurrency permit out takes
//! the slots of one ([`Seats::outrank_one`]), on exact windows only.

use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::{Scope, Ticket};
use crate::config::Priority;
use crate::limiter::Micros;
use crate::shared::{Grant, SharedBudget};

/// What a waiting call holds: a slot on each of its scopes, for one start.
pub(crate) type Slots = Vec<(Arc<Scope>, Ticket)>;

/// Where a seated call's shared grant goes back if nobody uses it.
pub(crate) type GrantHome = (Arc<dyn SharedBudget>, Arc<str>);

/// Everything a waiting call holds for its start.
#[derive(Debug, Default)]
pub(crate) struct Holding {
    pub(crate) local: Slots,
    /// The shared budget's grant for the same start, on a shared credential.
    pub(crate) grant: Option<Grant>,
}

impl Holding {
    /// True when `other` spends exactly what this does (the same scopes,
    /// the same charges on each, a grant or none), so the two can change
    /// hands without any cell, or the shared budget, noticing.
    fn same_spend(&self, other: &Holding) -> bool {
        self.grant.is_some() == other.grant.is_some()
            && self.local.len() == other.local.len()
            && self.local.iter().zip(&other.local).all(|(mine, theirs)| {
                Arc::ptr_eq(&mine.0, &theirs.0) && mine.1.same_spend(&theirs.1)
            })
    }
}

/// A seat's start and what it holds for it; `held` is `None` once a call
/// that outranks it took it (or the call stood up with it).
#[derive(Debug)]
struct SeatState {
    start: Micros,
    held: Option<Holding>,
}

/// One call waiting for its start.
pub(crate) struct Seat {
    priority: Priority,
    state: Mutex<SeatState>,
    /// Where the grant goes back when the slots are taken back.
    home: Option<GrantHome>,
    /// Woken when a call that outranks it took its slots or moved it later.
    changed: Notify,
}

impl std::fmt::Debug for Seat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Seat")
            .field("priority", &self.priority)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl Seat {
    /// Resolves once a call that outranks this one took its slots, or
    /// handed it later ones.
    pub(crate) async fn changed(&self) {
        self.changed.notified().await;
    }

    /// The start the seat now holds; `None` once its slots were taken.
    pub(crate) fn start(&self) -> Option<Micros> {
        let state = self.state.lock();
        state.held.as_ref().map(|_| state.start)
    }
}

/// A credential's waiting calls.
#[derive(Debug, Default)]
pub(crate) struct Seats {
    waiting: Mutex<Vec<Arc<Seat>>>,
}

/// A seated call: standing up (dropped) takes the seat away and gives back
/// whatever slots are still in it.
#[derive(Debug)]
pub(crate) struct Sitting<'a> {
    seats: &'a Seats,
    seat: Arc<Seat>,
}

/// What a seated call finds when it stands up.
#[derive(Debug)]
pub(crate) enum Stood {
    /// Its start came: what it holds for it.
    Ready(Holding),
    /// A call that outranks it moved it to this later start.
    Later(Micros),
    /// A call that outranks it took its slots.
    Taken,
}

impl Sitting<'_> {
    pub(crate) fn seat(&self) -> &Seat {
        &self.seat
    }

    /// The call's slots, if its start has come by `now` (read at once, so
    /// that no swap can move the start in between).
    pub(crate) fn stand(&self, now: Micros) -> Stood {
        let mut state = self.seat.state.lock();
        match state.held.take() {
            None => Stood::Taken,
            Some(held) if state.start <= now => Stood::Ready(held),
            Some(held) => {
                state.held = Some(held);
                Stood::Later(state.start)
            }
        }
    }
}

impl Drop for Sitting<'_> {
    fn drop(&mut self) {
        self.seats
            .waiting
            .lock()
            .retain(|seat| !Arc::ptr_eq(seat, &self.seat));
        // A call dropped while it slept: its slots go back (the wake-up
        // goes to nobody).
        Seats::take(&self.seat);
    }
}

impl Seats {
    /// Seats a call of `priority` that sleeps until `start` holding `held`;
    /// its grant, if any, goes back to `home` if the slots are taken back.
    pub(crate) fn sit(
        &self,
        priority: Priority,
        start: Micros,
        held: Holding,
        home: Option<GrantHome>,
    ) -> Sitting<'_> {
        let seat = Arc::new(Seat {
            priority,
            state: Mutex::new(SeatState {
                start,
                held: Some(held),
            }),
            home,
            changed: Notify::new(),
        });
        self.waiting.lock().push(seat.clone());
        Sitting { seats: self, seat }
    }

    /// True when a call of lower priority than `priority` waits to start
    /// before `before`.
    pub(crate) fn outranks(&self, priority: Priority, before: Micros) -> bool {
        self.waiting
            .lock()
            .iter()
            .any(|seat| seat.priority < priority && seat.start().is_some_and(|s| s < before))
    }

    /// A call of `priority` holding `held` for `start` takes the earliest
    /// start among the waiting calls it outranks that spend exactly what it
    /// does, and they move one start later each, in their order: the one
    /// that held the earliest takes the next, and the last takes the
    /// caller's. Nothing is given back or charged again, so this works on
    /// every cell (a bucket included) and for shared grants. The moved
    /// calls are woken to check the later start against their wait.
    /// Returns the start the caller now holds.
    pub(crate) fn swap(&self, priority: Priority, start: Micros, held: &mut Holding) -> Micros {
        let waiting = self.waiting.lock();
        let mut moved: Vec<(Micros, &Arc<Seat>)> = waiting
            .iter()
            .filter(|seat| seat.priority < priority)
            .filter_map(|seat| {
                let state = seat.state.lock();
                let theirs = state.held.as_ref()?;
                (state.start < start && theirs.same_spend(held)).then_some((state.start, seat))
            })
            .collect();
        // Stable: equal starts keep their seats' order.
        moved.sort_by_key(|(start, _)| *start);
        let mut start = start;
        for (_, seat) in moved.iter().rev() {
            let mut state = seat.state.lock();
            let SeatState {
                start: theirs,
                held: Some(their_held),
            } = &mut *state
            else {
                continue;
            };
            std::mem::swap(theirs, &mut start);
            std::mem::swap(their_held, held);
            drop(state);
            seat.changed.notify_one();
        }
        start
    }

    /// Takes the slots of the one call a caller of `priority` waiting for
    /// a concurrency permit outranks most: the lowest priority, the
    /// earliest start (the slot the caller would take first, so that the
    /// calls it displaces queue again in their order). That call gives its
    /// permit back and queues again, behind the caller.
    pub(crate) fn outrank_one(&self, priority: Priority) {
        let seat = {
            let mut waiting = self.waiting.lock();
            let chosen = waiting
                .iter()
                .enumerate()
                .filter(|(_, seat)| seat.priority < priority)
                .filter_map(|(index, seat)| Some((index, seat.priority, seat.start()?)))
                .min_by_key(|&(_, priority, start)| (priority, start))
                .map(|(index, _, _)| index);
            match chosen {
                Some(index) => waiting.swap_remove(index),
                None => return,
            }
        };
        Self::take(&seat);
    }

    /// Gives `seat`'s slots back to the cells and its grant to the shared
    /// budget (unless its call already took them back) and wakes its call.
    fn take(seat: &Seat) {
        let held = seat.state.lock().held.take();
        if let Some(held) = held {
            for (scope, ticket) in &held.local {
                scope.refund(ticket);
            }
            if let (Some(grant), Some((budget, credential))) = (held.grant, &seat.home) {
                budget.refund(credential, grant);
            }
        }
        // A permit is stored if the call is not awaiting yet.
        seat.changed.notify_one();
    }

    /// Takes the slots of every call of lower priority than `priority`
    /// waiting to start before `before` back into the cells, and wakes
    /// those calls to queue and reserve again.
    pub(crate) fn outrank(&self, priority: Priority, before: Micros) {
        let outranked: Vec<Arc<Seat>> = {
            let mut waiting = self.waiting.lock();
            let (out, stay) = waiting.drain(..).partition(|seat| {
                seat.priority < priority && seat.start().is_some_and(|s| s < before)
            });
            *waiting = stay;
            out
        };
        for seat in &outranked {
            Self::take(seat);
        }
    }
}
