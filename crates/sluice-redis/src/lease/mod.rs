//! Leases: slots reserved ahead in one round trip, spent by this process's callers at their exact times.
//!
//! Every slot carries the start time the shared log charged it at, and a
//! caller gets a slot only if that time lies in its own window
//! `[not_before, max_wait]`: it then starts exactly there (or, taken
//! after its time, as late as the request's `late_start`, which the
//! engine's widened window absorbs), so a lease adds no overshoot to the
//! shared promise. A slot whose time passes unused by more than that is
//! stale and goes back. The lease size adapts to demand: it doubles when
//! callers queue behind a reservation and halves when slots go stale, and a
//! fair-share cap (`N / processes`) keeps the pools of all processes
//! together from holding more than one window ahead of their callers.
//!
//! `pool` holds the slots (pure state); `slot` gets a call its slot,
//! from the pool or a reservation in Redis, and holds it until its time;
//! `seated` lets this process's callers of higher priority take the
//! earliest of the slots held.

mod pool;
mod seated;
mod slot;

pub(crate) use pool::{LATE_FLOOR, Pool, PoolKey, Pooled, share_cap};
pub(crate) use seated::{Slot, SlotEnd, Waiting, hold_by_priority};
pub(crate) use slot::{LEAD, Leases, Obtained, hold_until};
