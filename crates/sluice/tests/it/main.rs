//! The engine's integration tests: the gate's invariants, budgets, signals, reload and shared budgets, most on tokio's paused clock.
//!
//! One test binary for the crate: each module was once a test file of its own,
//! and they share `support` (cargo builds and links one binary, not one per file).
//! Run one module with `cargo test -p sluice --test it <module>::`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

mod adaptive;
mod body_properties;
mod body_signals;
mod body_signals_e2e;
mod budgets;
mod contract;
mod deadline;
mod http_fake;
mod invariants;
mod limiter_properties;
mod no_retry;
mod refunds;
mod reload;
mod scopes_e2e;
mod shadow;
mod shared_budget;
mod signal_properties;
mod streaming;
mod stress;
