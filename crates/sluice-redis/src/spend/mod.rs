//! Several windows and units of one call, checked and spent in one atomic
//! Lua step on the server's clock (issue 14), and trued up afterwards.
//!
//! A call touches budgets: each request window of its credential and of its
//! group (cost 1), and each window of every unit it spends (cost: its
//! estimate). [`SpendScripts::reserve`] finds the earliest start at which
//! every one of them has room and charges them all, or charges nothing;
//! [`SpendScripts::settle`] rewrites the call's cost in a unit's windows at
//! the call's own start once the answer states the true cost, and
//! [`SpendScripts::refund`] removes an unused start. Every key lives under
//! the credential's hash tag, so each script touches one Cluster slot.

mod reply;
mod scripts;
mod types;

pub use scripts::SpendScripts;
pub(crate) use scripts::record_invocation;
pub use types::{
    Bucket, Budget, Granted, Heartbeat, Lease, Micros, Seen, Spent, Window, further_member,
};
pub(crate) use types::{budgets, is_unit, void};
