//! Reading the server: one function turns a response's status, headers and body into a [`Signal`].
//!
//! Each header family is a small profile in [`profiles`], tried in order of
//! precedence, and each body family one in [`body`], read after them (a
//! header that states a wait wins); the pipeline only ever sees the merged
//! [`Signal`].

pub mod body;
pub(crate) mod clock;
pub(crate) mod fields;
mod head;
mod model;
pub mod profiles;
mod read;
#[cfg(test)]
mod testing;

pub use body::{BodySignals, wants_body};
pub use clock::ResponseClock;
pub use fields::Fields;
pub use head::{Head, HeadError, parse_head, parse_response};
pub use model::{CostWait, DEFAULT_SCOPE, MAX_DELAY, ScopeSignal, Signal, Wait};
pub(crate) use read::read_with_body_at;
pub use read::{read, read_with_body};
