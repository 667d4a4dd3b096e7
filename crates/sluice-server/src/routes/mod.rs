//! The HTTP surface: the router and one module per endpoint family.

mod app;
mod auth;
mod error;
mod limit;
mod proxy;
mod status;
// Reachable from `crate::fuzzing`, which fuzzes its parser.
pub(crate) mod turns;

pub use app::app;
pub use proxy::{DEADLINE_HEADER, OUTCOME_HEADER, REASON_HEADER, SCOPE_HEADER, TURN_HEADER};
