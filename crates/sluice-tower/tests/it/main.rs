//! sluice-tower's integration tests: the tower layer and the reqwest middleware.
//!
//! One test binary for the crate: each module was once a test file of its own,
//! and they share `support` (cargo builds and links one binary, not one per file).
//! Run one module with `cargo test -p sluice-tower --test it <module>::`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod reqwest;
mod tower;
