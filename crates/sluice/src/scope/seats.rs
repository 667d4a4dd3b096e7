//! Calls sleeping until their start slot, with their priority, so that a
//! call of higher priority that would wait behind them takes their slots
//! (issue 14: the callers waiting on a scope are served highest priority
//! first, first come first served within a priority).
//!
//! A waiting call hands the slots it holds to its [`Seat`] while it
//! sleeps. A call that outranks it and would wait for a slot behind it
//! takes them back into the cells ([`Seats::outrank`]) and reserves again
//! at once, with no await in between; a call that outranks it and finds
//! every concurrency permit out takes the slots of one ([`Seats::outrank_one`]).
//! An outranked call wakes, gives its permit back and queues again: behind
//! the caller, as the admission queue serves by priority.

use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::{Scope, Ticket};
use crate::config::Priority;
use crate::limiter::Micros;

/// What a waiting call holds: a slot on each of its scopes, for one start.
pub(crate) type Slots = Vec<(Arc<Scope>, Ticket)>;

/// One call waiting for its start.
#[derive(Debug)]
pub(crate) struct Seat {
    priority: Priority,
    start: Micros,
    /// The call's slots while it sleeps; `None` once a call that outranks
    /// it took them (or the call took them back).
    slots: Mutex<Option<Slots>>,
    /// Woken when a call that outranks it took its slots.
    taken: Notify,
}

impl Seat {
    /// Resolves once a call that outranks this one took its slots.
    pub(crate) async fn taken(&self) {
        self.taken.notified().await;
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

impl Sitting<'_> {
    pub(crate) fn seat(&self) -> &Seat {
        &self.seat
    }

    /// The call's slots back, when its time came; `None` if a call that
    /// outranks it took them.
    pub(crate) fn stand(self) -> Option<Slots> {
        self.seat.slots.lock().take()
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
    /// Seats a call of `priority` that sleeps until `start` holding `slots`.
    pub(crate) fn sit(&self, priority: Priority, start: Micros, slots: Slots) -> Sitting<'_> {
        let seat = Arc::new(Seat {
            priority,
            start,
            slots: Mutex::new(Some(slots)),
            taken: Notify::new(),
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
            .any(|seat| seat.priority < priority && seat.start < before)
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
                .min_by_key(|(_, seat)| (seat.priority, seat.start))
                .map(|(index, _)| index);
            match chosen {
                Some(index) => waiting.swap_remove(index),
                None => return,
            }
        };
        Self::take(&seat);
    }

    /// Gives `seat`'s slots back to the cells (unless its call already
    /// took them back) and wakes its call.
    fn take(seat: &Seat) {
        if let Some(slots) = seat.slots.lock().take() {
            for (scope, ticket) in &slots {
                scope.refund(ticket);
            }
        }
        // A permit is stored if the call is not awaiting yet.
        seat.taken.notify_one();
    }

    /// Takes the slots of every call of lower priority than `priority`
    /// waiting to start before `before` back into the cells, and wakes
    /// those calls to queue and reserve again.
    pub(crate) fn outrank(&self, priority: Priority, before: Micros) {
        let outranked: Vec<Arc<Seat>> = {
            let mut waiting = self.waiting.lock();
            let (out, stay) = waiting
                .drain(..)
                .partition(|seat| seat.priority < priority && seat.start < before);
            *waiting = stay;
            out
        };
        for seat in &outranked {
            Self::take(seat);
        }
    }
}
