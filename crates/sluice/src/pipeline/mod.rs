//! The call path of DESIGN.md, one file per part, read top to bottom.
//!
//! - `driver` — the steps in order, nothing else;
//! - `job` — one call's fixed facts (route, credential, deadline), resolved once;
//! - `price` — what a call spends: its priority, its cost in each unit;
//! - `admit` — steps 3 and 4, the concurrency permits and their queue;
//! - `holds` — step 2, a spent quota or a long server block answers at once;
//! - `reserve` — step 5, a start on every scope of the call, the shared
//!   budget and the turn's request budget, held by one guard that owns
//!   every refund;
//! - `learn` — step 7, signals into scope syncs, penalties and quotas;
//! - `classify` — step 8, a response or a failure into the call's outcome;
//! - `shadow` — shadow mode (`enforce = false`): each step's refusals and
//!   waits recorded instead of acted on.

mod admit;
mod classify;
#[cfg(test)]
mod clock_reads;
mod driver;
mod holds;
mod job;
mod learn;
mod price;
mod reserve;
mod shadow;

pub(crate) use driver::{complete, steps_size};
pub(crate) use job::Keep;
