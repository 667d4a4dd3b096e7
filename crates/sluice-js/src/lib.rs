//! The JavaScript binding of sluice: `sluice.node`, the native half of the
//! `sluice` package in `js/`.
//!
//! # Mental model
//!
//! This crate holds no logic of its own: it adapts the engine ([`sluice`]),
//! the configuration ([`sluice_config::EmbeddedConfig`]), the sidecar's
//! HTTP executor, the fake API and the Redis budget to Node-API. The
//! package builds its API (`Gate`, `Turn`, `Outcome`, `gate.fetch`,
//! `FakeApi`, `sluice/ai`) in JavaScript on the few classes exported here.
//!
//! - **Calls run on napi-rs' tokio runtime.** Each call is a Rust future
//!   run there; JavaScript gets a promise of its outcome, as the sidecar's
//!   JSON text. A turn's calls are first polled in the order they were made
//!   (`order.rs`), so the first call made is the first to get a slot. An `AbortSignal` reaches the future through a
//!   [`cancel::Canceller`], which drops it: the call is cancelled.
//! - **HTTP is sent from Rust.** A configured tool's request and a request
//!   through `gate.fetch` go through the sidecar's HTTP executor, so their
//!   start times are the engine's own.
//! - **JavaScript work is a promise.** A function tool's attempt calls back
//!   into JavaScript through a thread-safe function and awaits the promise
//!   it returns (`executor.rs`).
//! - **No panic reaches Node.** Synchronous entry points catch unwinding
//!   (`catch_unwind`); a call's future is spawned, and a panic in it
//!   rejects its promise.

// The HTTP side every front end shares: the executor, its request types,
// the one tool-call preparation, and the Redis settings.
use sluice_http::{HttpExecutor, HttpRequest, Outbound, ToolCall, Url, redis_config, tool_call};

mod cancel;
mod executor;
mod fake;
mod fetch;
mod gate;
mod order;
mod state;
mod turn;

// What JavaScript sees (`js/sluice.node`), named here so the Rust side of
// the boundary reads in one place.
pub use cancel::Canceller;
pub use fake::{FakeCore, FakeOptions};
pub use fetch::{FetchAnswer, FetchRequest};
pub use gate::{ConfigProblem, GateCore, open_gate};
pub use turn::{Prepared, TurnCore};
