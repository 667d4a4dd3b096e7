//! Scopes: one bucket per (credential, scope name), with its limiter cell,
//! concurrency permits, bounded admission queue and statistics.

mod admission;
mod crowding;
mod drain;
mod registry;
mod seats;
mod sent;
mod shadow;
mod spend;
mod state;

pub(crate) use admission::AdmittedNow;
pub(crate) use admission::Permit;
pub use drain::drain_estimate;
pub(crate) use registry::Registry;
pub(crate) use seats::{GrantHome, Holding, Scopes, Seats, Slots};
pub use shadow::ShadowStatus;
pub(crate) use spend::{Ask, Deferred, Ticket};
pub use spend::{UnitStatus, WindowStatus};
pub use state::ScopeStatus;
pub(crate) use state::{Adapted, Held, Scope};
