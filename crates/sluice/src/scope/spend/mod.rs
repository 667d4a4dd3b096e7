//! What one call spends on a scope, all or nothing: a request in every
//! window, its cost in every window of each unit, and the low-priority
//! share; the start they all allow, the window that sets it, the true-up.

mod ask;
mod budgets;
mod further;

pub(crate) use ask::{Ask, Deferred, Ticket};
pub use ask::{UnitStatus, WindowStatus};
pub(crate) use budgets::Budgets;
