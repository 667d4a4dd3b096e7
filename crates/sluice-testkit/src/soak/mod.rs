//! A soak of the sidecar: many requests at once for a bounded time, with random
//! upstream faults, a shared budget in Redis that is killed and restarted in
//! the middle, every call's answer checked and the sidecar's memory and file
//! descriptors sampled. Used by `sluice-cli`'s `soak` example and test.
//!
//! Each call's path is `/fault/{kind}/{n}`: the misbehaving [`Upstream`](crate::Upstream)
//! acts out `kind`, and counts the requests for call `n`.
//!
//! The parts, in the order a soak uses them: [`SoakOptions`] (what to
//! run), `mix` (the seeded choice of faults), `redis` (one node, TLS or a
//! Cluster, and its fault), `sidecar` (its config and
//! `/v1/status`), `driver` (starting everything and the load),
//! `requests` (one request to the sidecar, checked), `tally` (the
//! counts the workers share), and [`SoakReport`] with its table.

mod driver;
mod mix;
mod options;
mod redis;
mod report;
mod requests;
mod sidecar;
mod table;
mod tally;

pub use driver::run;
pub use options::{FALLBACK_OVERSHOOT, FAULTS, MAX_ATTEMPTS, SECRET, SoakOptions};
pub use redis::RedisFault;
pub use report::{MemoryTrend, Sample, SoakReport};
