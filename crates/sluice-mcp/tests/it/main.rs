//! sluice-mcp's integration tests: the proxy between an agent and an MCP server in memory, over stdio processes and over HTTP, its scrubbing, sessions, signals and shared budgets.
//!
//! One test binary for the crate: each module was once a test file of its own,
//! and they share `support` (cargo builds and links one binary, not one per file).
//! Run one module with `cargo test -p sluice-mcp --test it <module>::`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

mod http;
mod http_sessions;
mod http_traces;
mod process;
mod proxy;
mod rebinding;
mod scrub;
mod shared;
mod signals;
mod traces;
