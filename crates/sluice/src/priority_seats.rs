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
/// that outranks it took it (or its own call stood up with it).
struct SeatState<S, T> {
    start: S,
    held: Option<T>,
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
            Some(held) if state.start <= now => Stood::Ready(held),
            Some(held) => {
                state.held = Some(held);
                Stood::Later(state.start)
            }
        }
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
            }),
            changed: Notify::new(),
        });
        self.waiting.lock().push(seat.clone());
        Sitting { seats: self, seat }
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
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// A spend by name; giving it back counts.
    struct Spend(&'static str, Arc<AtomicUsize>);

    impl Seated for Spend {
        fn same_spend(&self, other: &Spend) -> bool {
            self.0 == other.0
        }

        /// A longer name spends more: "aa" covers "a".
        fn covers(&self, other: &Spend) -> bool {
            self.0.starts_with(other.0)
        }

        fn give_back(self) {
            self.1.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn start_of(sitting: &Sitting<'_, u64, Spend>) -> Option<u64> {
        sitting.look(|_| ()).map(|(start, ())| start)
    }

    /// A high caller holding 30 takes the earliest start among the calls it
    /// outranks that spend the same (10); they move one start later each
    /// (10 → 20, 20 → 30); a call that spends otherwise keeps its start.
    #[test]
    fn a_swap_moves_the_outranked_calls_of_the_same_spend_one_start_later() {
        let given = Arc::new(AtomicUsize::new(0));
        let spend = |name| Spend(name, given.clone());
        let seats = Seats::default();
        let first = seats.sit(Priority::Low, 10, spend("a"));
        let other = seats.sit(Priority::Normal, 15, spend("b"));
        let second = seats.sit(Priority::Low, 20, spend("a"));
        let mut mine = spend("a");
        assert_eq!(seats.swap(Priority::High, 30, &mut mine), 10);
        assert_eq!(start_of(&first), Some(20));
        assert_eq!(start_of(&second), Some(30));
        assert_eq!(start_of(&other), Some(15));
        // Nothing moves for an equal priority, nor for a start before theirs.
        assert_eq!(seats.swap(Priority::Low, 40, &mut spend("a")), 40);
        assert_eq!(seats.swap(Priority::High, 5, &mut spend("a")), 5);
        assert!(matches!(first.stand(19), Stood::Later(20)));
        assert!(matches!(first.stand(20), Stood::Ready(_)));
        assert_eq!(given.load(Ordering::SeqCst), 0);
        // A seat dropped with its spend still in it gives the spend back;
        // one that stood up with it does not.
        drop(first);
        drop(second);
        assert_eq!(given.load(Ordering::SeqCst), 1);
        seats.outrank(Priority::High, 16);
        assert!(matches!(other.stand(100), Stood::Taken));
        assert_eq!(given.load(Ordering::SeqCst), 2);
    }

    /// A high caller holding 30 for "a" takes what the earliest outranked
    /// call that covers it holds ("aa" at 10, not "b" at 5, nor the normal
    /// call's "aa" at 8, which ranks as high as a normal caller): that call
    /// finds it taken, and the caller has its own spend to give back.
    #[test]
    fn a_covering_take_takes_the_earliest_outranked_spend_that_covers() {
        let given = Arc::new(AtomicUsize::new(0));
        let spend = |name| Spend(name, given.clone());
        let seats = Seats::default();
        let other = seats.sit(Priority::Low, 5, spend("b"));
        let normal = seats.sit(Priority::Normal, 8, spend("aa"));
        let first = seats.sit(Priority::Low, 10, spend("aa"));
        let later = seats.sit(Priority::Low, 20, spend("aaa"));
        let mut mine = spend("a");
        let (start, old) = seats
            .take_covering(Priority::Normal, 30, &mut mine)
            .expect("a covering seat");
        assert_eq!((start, mine.0, old.0), (10, "aa", "a"));
        assert!(matches!(first.stand(100), Stood::Taken));
        assert_eq!(start_of(&later), Some(20));
        assert_eq!(start_of(&normal), Some(8));
        assert_eq!(start_of(&other), Some(5));
        // Nothing earlier than its start covers it: it keeps what it holds.
        let mut mine = spend("a");
        assert!(seats.take_covering(Priority::High, 6, &mut mine).is_none());
        assert_eq!(mine.0, "a");
        // Nothing was given back: the taken spend is the caller's now.
        assert_eq!(given.load(Ordering::SeqCst), 0);
    }
}
