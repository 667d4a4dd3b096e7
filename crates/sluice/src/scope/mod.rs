//! Scopes: one bucket per (credential, scope name), with its limiter cell,
//! concurrency semaphore, bounded admission queue and statistics.

mod admission;
mod drain;
mod registry;
mod state;

pub use drain::drain_estimate;
pub(crate) use registry::Registry;
pub use state::ScopeStatus;
pub(crate) use state::{Adapted, Scope};
