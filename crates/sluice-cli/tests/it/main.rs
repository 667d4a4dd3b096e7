//! The command line's integration tests: the `sluice` binary served, reloaded, restarted, flooded and inspected, the MCP proxy and the Python package end to end.
//!
//! One test binary for the crate: each module was once a test file of its own,
//! and they share `support` (cargo builds and links one binary, not one per file).
//! Run one module with `cargo test -p sluice-cli --test it <module>::`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

mod bench_scale;
mod config_bounds;
mod demo;
mod e2e_mcp;
mod e2e_python;
mod fake_api;
mod flood;
mod inspect;
mod mcp;
mod mcp_conformance;
mod mcp_reload;
mod mcp_scrub;
mod python_package;
mod reload;
mod restart;
mod security;
mod shadow_serve;
mod shared_serve;
mod soak;
mod tls_upstream;
mod traces;
mod ui_browser;
