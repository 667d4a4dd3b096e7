//! The HTTP surface: the router and one module per endpoint family.

mod app;
mod auth;
pub(crate) mod direct;
mod error;
mod limit;
mod proxy;
mod reload;
mod status;
mod ui;
// Reachable from `crate::fuzzing`, which fuzzes its parser.
pub(crate) mod turns;

pub use app::app;
pub use proxy::{
    DEADLINE_HEADER, OUTCOME_HEADER, PRIORITY_HEADER, REASON_HEADER, SCOPE_HEADER, TURN_HEADER,
};
