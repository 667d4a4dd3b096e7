//! Callers sleeping until their start, with their priority, so that a call
//! of higher priority that would wait behind them is served first (issue
//! 14: the callers waiting on a scope are served highest priority first,
//! first come first served within a priority).
//!
//! A waiting call hands what it holds for its start to a seat while it
//! sleeps. A call that outranks it and would wait behind it either:
//! - swaps with it, when the two spend exactly the same ([`Seats::swap`]):
//!   the caller takes the earliest of the outranked starts and each of
//!   those calls moves one start later, in their order. Nothing is given
//!   back or charged again, so this holds wherever a slot, once charged,
//!   cannot be taken back (a bucket, a shared grant);
//! - or, where slots cannot be taken back, takes what the earliest of them
//!   holds when that covers its own spend ([`Seats::take_covering`]): the
//!   caller starts there, charged what that call reserved, and gives its
//!   own later start back; the outranked call wakes and asks again;
//! - or takes what they hold and gives it back ([`Seats::outrank`],
//!   [`Seats::outrank_one`], [`Seats::take_outranked`]), where giving
//!   back loses nothing (exact windows, a shared log); on a bucket, only
//!   when their starts and the caller's own are the last charged, all
//!   given back at once ([`Seats::outrank_with`]). The outranked calls
//!   wake and ask again.
//!
//! The engine seats the calls that sleep for a local or several-window
//! shared start; a shared backend that holds each grant until its time
//! inside its own answer seats its callers the same way.

use std::fmt;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::config::Priority;

/// What a seated call holds for its start.
pub trait Seated: Send {
    /// True when `other` spends exactly what this does, so that the two can
    /// change hands between calls without anything noticing.
    fn same_spend(&self, other: &Self) -> bool;

    /// True when this spends at least what `other` does in everything
    /// `other` spends from, at the same start: a call holding `other` may
    /// start on this instead, charged the difference as well.
    fn covers(&self, other: &Self) -> bool {
        self.same_spend(other)
    }

    /// Gives it back, unused.
    fn give_back(self);

    /// Gives every one of `all` back, unused, when that is exact for all
    /// of them together (a bucket takes starts back only while they are
    /// its last charges), and returns true; otherwise gives back nothing.
    /// What cannot be taken back exactly never is, by default.
    fn give_back_together(all: &[&Self]) -> bool
    where
        Self: Sized,
    {
        let _ = all;
        false
    }
}

/// A seat's start and what it holds for it; `held` is `None` once a call
/// that outranks it took it (or its own call stood up with it, or lifted
/// it to ask for an earlier start). `turn`: a re-plan's turn, not yet
/// taken ([`Seats::replan`]).
struct SeatState<S, T> {
    start: S,
    held: Option<T>,
    turn: Option<Turn>,
}

/// A waiting call's turn to ask for an earlier start, in a re-plan
/// ([`Seats::replan`]): it comes once every call before it in the order
/// has asked (dropped its turn) or left.
#[derive(Debug)]
pub struct Turn {
    round: Arc<Round>,
    index: usize,
}

/// One re-plan's turns: the first not yet done, and which are.
#[derive(Debug, Default)]
struct Round {
    state: Mutex<(usize, Vec<bool>)>,
    moved: Notify,
}

impl Turn {
    /// Resolves once the calls before this one in the re-plan have asked.
    pub async fn come(&mut self) {
        loop {
            let moved = std::pin::pin!(self.round.moved.notified());
            let mut moved = moved;
            moved.as_mut().enable();
            if self.round.state.lock().0 >= self.index {
                return;
            }
            moved.await;
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut state = self.round.state.lock();
        if let Some(done) = state.1.get_mut(self.index) {
            *done = true;
        }
        while state.1.get(state.0).copied() == Some(true) {
            state.0 += 1;
        }
        drop(state);
        self.round.moved.notify_waiters();
    }
}

struct Seat<S, T> {
    priority: Priority,
    state: Mutex<SeatState<S, T>>,
    /// Woken when a call that outranks it took what it holds or moved it.
    changed: Notify,
}

impl<S: Copy, T> Seat<S, T> {
    /// The start the seat holds; `None` once it was taken.
    fn start(&self) -> Option<S> {
        let state = self.state.lock();
        state.held.as_ref().map(|_| state.start)
    }
}

/// The calls of one credential waiting for their start.
pub struct Seats<S, T> {
    waiting: Mutex<Vec<Arc<Seat<S, T>>>>,
}

impl<S, T> Default for Seats<S, T> {
    fn default() -> Self {
        Seats {
            waiting: Mutex::new(Vec::new()),
        }
    }
}

impl<S, T> fmt::Debug for Seats<S, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Seats")
            .field("waiting", &self.waiting.lock().len())
            .finish()
    }
}

/// A seated call. Dropped, it takes the seat away and gives back whatever
/// is still in it.
pub struct Sitting<'a, S: Copy + Ord, T: Seated> {
    seats: &'a Seats<S, T>,
    seat: Arc<Seat<S, T>>,
}

impl<S: Copy + Ord, T: Seated> fmt::Debug for Sitting<'_, S, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sitting")
            .field("priority", &self.seat.priority)
            .finish_non_exhaustive()
    }
}

/// What a seated call finds when it looks.
#[derive(Debug)]
pub enum Stood<S, T> {
    /// Its start came: what it holds for it.
    Ready(T),
    /// A call that outranks it moved it to this later start.
    Later(S),
    /// A call that outranks it took what it held.
    Taken,
    /// Room freed in front of it (a true-up below the estimate): its turn
    /// to ask for an earlier start. It still holds its start.
    Replan(Turn),
}

impl<S: Copy + Ord, T: Seated> Sitting<'_, S, T> {
    /// Resolves once a call that outranks this one took what it holds, or
    /// moved it later.
    pub async fn changed(&self) {
        self.seat.changed.notified().await;
    }

    /// The start the call holds now and what `f` reads of what it holds
    /// for it; `None` once a call that outranks it took it.
    pub fn look<R>(&self, f: impl FnOnce(&T) -> R) -> Option<(S, R)> {
        let state = self.seat.state.lock();
        state.held.as_ref().map(|held| (state.start, f(held)))
    }

    /// What the call holds, if its start has come by `now`: looked at
    /// under the seat's lock, so no swap can move the start in between.
    pub fn stand(&self, now: S) -> Stood<S, T> {
        let mut state = self.seat.state.lock();
        match state.held.take() {
            None => Stood::Taken,
            Some(held) if state.start <= now => {
                state.turn = None;
                Stood::Ready(held)
            }
            Some(held) => {
                state.held = Some(held);
                match state.turn.take() {
                    Some(turn) => Stood::Replan(turn),
                    None => Stood::Later(state.start),
                }
            }
        }
    }

    /// Takes what the call holds out of its seat, to ask for an earlier
    /// start with it: while it is out, no call that outranks this one
    /// takes or moves it. `None` when one took it already.
    pub fn lift(&self) -> Option<(S, T)> {
        let mut state = self.seat.state.lock();
        let held = state.held.take()?;
        Some((state.start, held))
    }

    /// Puts what the call holds for `start` back into its seat, after
    /// [`Sitting::lift`].
    pub fn reseat(&self, start: S, held: T) {
        let mut state = self.seat.state.lock();
        state.start = start;
        state.held = Some(held);
    }
}

impl<S: Copy + Ord, T: Seated> Drop for Sitting<'_, S, T> {
    fn drop(&mut self) {
        let mut waiting = self.seats.waiting.lock();
        waiting.retain(|seat| !Arc::ptr_eq(seat, &self.seat));
        let mut state = self.seat.state.lock();
        let (start, held) = (state.start, state.held.take());
        drop(state);
        // A call that stood up with its start, or whose start was taken,
        // gives nothing back.
        let Some(held) = held else {
            return;
        };
        // A call that leaves before its start (cancelled, or deferred past
        // its wait) frees that start. The calls waiting for later starts
        // give theirs back with it, when that is exact for all of them
        // together, and ask again (issue 50), so that the freed start goes
        // to them; otherwise only its own goes back, as far as it can.
        let later = waiting
            .iter()
            .filter(|seat| seat.start().is_some_and(|theirs| theirs > start))
            .cloned()
            .collect::<Vec<_>>();
        let replanned = !later.is_empty() && {
            let mut states: Vec<_> = later.iter().map(|seat| seat.state.lock()).collect();
            let all: Vec<&T> = std::iter::once(&held)
                .chain(states.iter().filter_map(|state| state.held.as_ref()))
                .collect();
            let exact = T::give_back_together(&all);
            if exact {
                for state in &mut states {
                    // Given back already: dropped, not given back again.
                    state.held = None;
                }
            }
            exact
        };
        if replanned {
            waiting.retain(|seat| !later.iter().any(|l| Arc::ptr_eq(l, seat)));
            drop(waiting);
            // Given back with theirs: dropped, not given back again.
            drop(held);
            for seat in &later {
                seat.changed.notify_one();
            }
        } else {
            drop(waiting);
            held.give_back();
        }
    }
}

/// Gives back what `seat` holds (unless its call already stood up with
/// it) and wakes its call.
fn take<S, T: Seated>(seat: &Seat<S, T>) {
    let held = seat.state.lock().held.take();
    if let Some(held) = held {
        held.give_back();
    }
    // A permit is stored if the call is not awaiting yet.
    seat.changed.notify_one();
}

impl<S: Copy + Ord, T: Seated> Seats<S, T> {
    /// Seats a call of `priority` that sleeps until `start` holding `held`.
    pub fn sit(&self, priority: Priority, start: S, held: T) -> Sitting<'_, S, T> {
        let seat = Arc::new(Seat {
            priority,
            state: Mutex::new(SeatState {
                start,
                held: Some(held),
                turn: None,
            }),
            changed: Notify::new(),
        });
        self.waiting.lock().push(seat.clone());
        Sitting { seats: self, seat }
    }

    /// Room was freed in front of the waiting calls (issue 50): each is
    /// woken in its turn to ask for an earlier start, highest priority
    /// first and in arrival order within a priority, one after another,
    /// each once the one before has asked. A call that asks nothing (its
    /// start came, or it left) passes its turn on; one asking already
    /// (from an earlier re-plan) takes its turn once it sits again.
    pub fn replan(&self) {
        let waiting = self.waiting.lock();
        // Those asking now included: their ask may have missed this room,
        // and they take their new turn once they sit again.
        let mut order: Vec<&Arc<Seat<S, T>>> = waiting.iter().collect();
        // Stable: arrival order within a priority.
        order.sort_by_key(|seat| std::cmp::Reverse(seat.priority));
        let round = Arc::new(Round {
            state: Mutex::new((0, vec![false; order.len()])),
            moved: Notify::new(),
        });
        for (index, seat) in order.into_iter().enumerate() {
            let turn = Turn {
                round: round.clone(),
                index,
            };
            // A turn it had not taken yet passes on, dropped.
            let before = seat.state.lock().turn.replace(turn);
            drop(before);
            seat.changed.notify_one();
        }
    }

    /// True when no call waits (none is seated, nor asking from its seat).
    pub fn is_empty(&self) -> bool {
        self.waiting.lock().is_empty()
    }

    /// True when a call of lower priority than `priority` waits to start
    /// before `before`.
    pub fn outranks(&self, priority: Priority, before: S) -> bool {
        self.waiting
            .lock()
            .iter()
            .any(|seat| seat.priority < priority && seat.start().is_some_and(|s| s < before))
    }

    /// A call of `priority` holding `held` for `start` takes the earliest
    /// start among the waiting calls it outranks that spend exactly what
    /// it does, and they move one start later each, in their order: the
    /// one that held the earliest takes the next, and the last takes the
    /// caller's. The moved calls are woken to check the later start
    /// against their wait. Returns the start the caller now holds.
    pub fn swap(&self, priority: Priority, start: S, held: &mut T) -> S {
        let waiting = self.waiting.lock();
        let mut moved: Vec<(S, &Arc<Seat<S, T>>)> = waiting
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
                ..
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

    /// A call of `priority` holding `held` for `start`, which no swap moved
    /// earlier, takes what the waiting call it outranks with the earliest
    /// start before `start` holds, when that covers `held`
    /// ([`Seated::covers`]): `held` becomes theirs, and their call wakes
    /// to find it taken and asks again. Returns the start the caller now
    /// holds and what it held before, to give back; `None` when no such
    /// call waits.
    pub fn take_covering(&self, priority: Priority, start: S, held: &mut T) -> Option<(S, T)> {
        let seat = {
            let waiting = self.waiting.lock();
            waiting
                .iter()
                .filter(|seat| seat.priority < priority)
                .filter_map(|seat| {
                    let state = seat.state.lock();
                    let theirs = state.held.as_ref()?;
                    (state.start < start && theirs.covers(held)).then_some((state.start, seat))
                })
                // The first of equal starts: the one seated first.
                .min_by_key(|(start, _)| *start)
                .map(|(_, seat)| seat.clone())?
        };
        let mut state = seat.state.lock();
        // Still there: nothing took it between the two locks.
        let theirs = state.held.take()?;
        let taken = state.start;
        drop(state);
        seat.changed.notify_one();
        Some((taken, std::mem::replace(held, theirs)))
    }

    /// Takes what the one call a caller of `priority` waiting for a
    /// concurrency permit outranks most holds: the lowest priority, the
    /// earliest start (the slot the caller would take first, so that the
    /// calls it displaces ask again in their order), and gives it back.
    pub fn outrank_one(&self, priority: Priority) {
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
        take(&seat);
    }

    /// Takes what every call of lower priority than `priority` waiting to
    /// start before `before` holds, gives it back, and wakes those calls
    /// to ask again.
    pub fn outrank(&self, priority: Priority, before: S) {
        let mut outranked = self.take_outranked(priority, before);
        for held in outranked.held.drain(..) {
            held.give_back();
        }
    }

    /// Offers what every call of lower priority than `priority` waiting to
    /// start before `before` holds to `give_back`, all at once, while no
    /// call can stand up with it. When `give_back` gave it all back (true),
    /// those calls leave their seats, woken to find it taken, and the
    /// earliest of their starts is returned; `None`, with nothing changed,
    /// when it did not or no such call waits.
    pub fn outrank_with(
        &self,
        priority: Priority,
        before: S,
        give_back: impl FnOnce(&[&T]) -> bool,
    ) -> Option<S> {
        let mut waiting = self.waiting.lock();
        let lower: Vec<Arc<Seat<S, T>>> = waiting
            .iter()
            .filter(|seat| seat.priority < priority)
            .cloned()
            .collect();
        let mut states: Vec<_> = lower
            .iter()
            .map(|seat| (seat, seat.state.lock()))
            .filter(|(_, state)| state.held.is_some() && state.start < before)
            .collect();
        let earliest = states.iter().map(|(_, state)| state.start).min()?;
        let held: Vec<&T> = states
            .iter()
            .filter_map(|(_, state)| state.held.as_ref())
            .collect();
        if !give_back(&held) {
            return None;
        }
        let mut taken = Vec::with_capacity(states.len());
        for (seat, state) in &mut states {
            // Given back already: dropped, not given back again.
            state.held = None;
            taken.push(Arc::clone(seat));
        }
        drop(states);
        waiting.retain(|seat| !taken.iter().any(|t| Arc::ptr_eq(t, seat)));
        drop(waiting);
        for seat in &taken {
            seat.changed.notify_one();
        }
        Some(earliest)
    }

    /// Takes what every call of lower priority than `priority` waiting to
    /// start before `before` holds, for the caller to give back as it
    /// must; those calls are woken to ask again when it drops the answer.
    pub fn take_outranked(&self, priority: Priority, before: S) -> Outranked<S, T> {
        let seats: Vec<Arc<Seat<S, T>>> = {
            let mut waiting = self.waiting.lock();
            let (out, stay) = waiting.drain(..).partition(|seat| {
                seat.priority < priority && seat.start().is_some_and(|s| s < before)
            });
            *waiting = stay;
            out
        };
        let mut earliest = None;
        let held = seats
            .iter()
            .filter_map(|seat| {
                let mut state = seat.state.lock();
                let held = state.held.take()?;
                earliest = Some(earliest.map_or(state.start, |e: S| e.min(state.start)));
                Some(held)
            })
            .collect();
        Outranked {
            seats,
            held,
            earliest,
        }
    }
}

/// What the calls a caller outranked held ([`Seats::take_outranked`]);
/// dropped, it wakes them to find it taken.
pub struct Outranked<S, T> {
    seats: Vec<Arc<Seat<S, T>>>,
    /// What they held, in no particular order.
    pub held: Vec<T>,
    earliest: Option<S>,
}

impl<S: Copy, T> Outranked<S, T> {
    /// The earliest start they held; `None` when no call was outranked.
    pub fn earliest(&self) -> Option<S> {
        self.earliest
    }
}

impl<S, T> fmt::Debug for Outranked<S, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Outranked")
            .field("calls", &self.seats.len())
            .finish_non_exhaustive()
    }
}

impl<S, T> Drop for Outranked<S, T> {
    fn drop(&mut self) {
        for seat in &self.seats {
            // A permit is stored if the call is not awaiting yet.
            seat.changed.notify_one();
        }
    }
}

#[cfg(test)]
mod tests;
