//! sluice-config's integration tests: the budget syntax and the views read from a configuration.
//!
//! One test binary for the crate: each module was once a test file of its own,
//! and they share `support` (cargo builds and links one binary, not one per file).
//! Run one module with `cargo test -p sluice-config --test it <module>::`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod budgets;
mod views;
