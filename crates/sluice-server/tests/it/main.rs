//! The sidecar's integration tests: proxy and turns through its router and over real sockets, faults, hostile input, observability, shutdown.
//!
//! One test binary for the crate: each module was once a test file of its own,
//! and they share `support` (cargo builds and links one binary, not one per file).
//! Run one module with `cargo test -p sluice-server --test it <module>::`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

mod body_signals;
mod budgets;
mod config;
mod faults;
mod fuzz_regressions;
mod grafana;
mod hostile_input;
mod listener;
mod logs;
mod observe;
mod proxy;
mod scrub;
mod security;
mod shadow;
mod shutdown;
mod streaming;
mod traces;
mod turns;
mod ui;
