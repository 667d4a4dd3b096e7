//! sluice-fake's integration tests: the fake API in process and over HTTP.
//!
//! One test binary for the crate: each module was once a test file of its own,
//! and they share `support` (cargo builds and links one binary, not one per file).
//! Run one module with `cargo test -p sluice-fake --test it <module>::`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

mod budgets;
mod http;
mod in_process;
