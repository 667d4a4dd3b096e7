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
pub(crate) use registry::{HITS_PER_EXAMINED, Registry};
pub(crate) use seats::{GrantHome, Holding, Seats, Slots};
pub use shadow::ShadowStatus;
pub(crate) use spend::{Ask, Deferred, Ticket};
pub use spend::{UnitStatus, WindowStatus};
pub use state::ScopeStatus;
pub(crate) use state::{Adapted, Held, Scope};

/// A shared handle on a scope. triomphe's `Arc` keeps no weak count:
/// nothing holds a scope weakly, and every scope is 8 bytes smaller for
/// it (issue 18, the memory of an idle scope).
pub(crate) type ScopeRef = triomphe::Arc<Scope>;

/// A call's scopes: the credential's own, and maybe its group's; inline
/// for two.
pub(crate) type Scopes = smallvec::SmallVec<[ScopeRef; 2]>;
