//! sluice-redis's integration tests: the shared limiter against private redis-server processes (single node, TLS, cluster), its faults and failovers, and its model.
//!
//! One test binary for the crate: each module was once a test file of its own,
//! and they share `support` (cargo builds and links one binary, not one per file).
//! Run one module with `cargo test -p sluice-redis --test it <module>::`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

mod cluster;
mod exact;
mod failover;
mod faults;
mod local_starts;
mod low_share;
mod model;
mod replan;
mod shared;
mod slow_answer;
mod spend;
mod tls;
mod windows;
mod windows_fallback;
