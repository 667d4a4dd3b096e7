//! Step 5: one start for a call, on every scope it spends from and on the shared budget.
//!
//! What a reservation takes — the turn's request, a slot on each scope, a
//! grant from the shared budget — is held by a guard ([`Start`] and its
//! parts) that gives it back when dropped, unless the send commits it. So
//! no path refunds by hand, and none can forget to.
//!
//! - `guards` — what a reservation holds, each part given back when dropped;
//! - `start` — the rounds of step 5 for one call, from a start at once to a
//!   start slept for;
//! - `slots` — the local slots on every scope of a call, at one start;
//! - `shared` — the shared budget's grant beside them;
//! - `outrank` — a call of higher priority taking the slots of calls it
//!   outranks, and the re-plan that moves waiting calls earlier;
//! - `replan` — on a shared credential, a waiting call's turn in that
//!   re-plan: an earlier start asked for with its own in hand;
//! - `shadow` — the same decisions recorded, not acted on.

mod guards;
mod outrank;
mod replan;
mod shadow;
mod shared;
mod slots;
mod start;

pub(super) use self::guards::Spent;
pub(super) use self::outrank::{replan, replan_shared};
pub(super) use self::shadow::shadow_start;
pub(super) use self::slots::next_slot;
pub(super) use self::start::{AtOnce, start, start_at_once};
