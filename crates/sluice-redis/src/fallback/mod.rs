//! Deciding without Redis: local limiter cells at this process's share of the rate, never unlimited.
//!
//! The share is `fallback_share` from the config, or one over the processes
//! the heartbeat last counted. A share of `N/W` is `floor(N · share)` starts
//! per `W`, so the processes together never exceed `N` when the share is one
//! over their number and `N` is at least that number; when `N · share` is
//! below one the process gets one start per `W / (N · share)`, which keeps
//! the average rate (see docs/shared-limiter.md for the bound). A call on
//! several windows, groups or units is held the same way in every window
//! it touches; a call on one limit is the one-window case (`cells`).

mod cells;
mod decide;
mod share;
mod spell;

pub(crate) use cells::{Fallback, HeldSpend};
pub(crate) use decide::{decide, scope_index, windows};
pub(crate) use share::{share, share_of};
pub(crate) use spell::Others;
