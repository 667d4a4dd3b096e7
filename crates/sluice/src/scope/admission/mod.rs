//! The bounded queue in front of a scope's concurrency permits, with a cap that can move.
//!
//! - `bounds` — the cap, the permits out, and the queue's bound;
//! - `admit` — the decisions: a permit now, a place in the queue, or a
//!   refusal with the wait the call is told;
//! - `permit` — shadow mode's at-once decision and a held place in the queue;
//! - `waiters` — the waiting callers, by priority then arrival, and the
//!   deferred calls' promised returns.

mod admit;
mod bounds;
mod permit;
#[cfg(test)]
mod tests;
mod waiters;

pub(crate) use bounds::{Admission, Permit, Refused};
pub(crate) use permit::AdmittedNow;
