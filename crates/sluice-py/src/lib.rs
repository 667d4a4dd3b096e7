//! The Python binding of sluice: `sluice._sluice`, the native half of the
//! `sluice` package in `python/`.
//!
//! # Mental model
//!
//! This crate holds no logic of its own: it adapts the engine ([`sluice`]),
//! the configuration ([`sluice_config::EmbeddedConfig`]), the sidecar's
//! HTTP executor and tracer (`telemetry.rs`), the fake API and the Redis
//! budget to Python. The Python
//! package builds its API (`sluice.Gate`, `Turn`, `Outcome`, the httpx
//! transport, `sluice.testing`) on the few classes exported here.
//!
//! - **Calls run on the caller's thread.** A call is a Rust future that the
//!   awaiting asyncio task polls itself (`bridge/pending.rs`); a call that
//!   does not wait never leaves that thread. One tokio runtime per process,
//!   started on first use (`runtime.rs`), drives timers, sockets, the fake
//!   API's server and the Redis budget's tasks. Cancelling the awaiting
//!   task drops the future, which cancels the call.
//! - **Python work is a task.** A function tool's attempt, or a request
//!   through the transport, is started as an asyncio task when the engine
//!   sends, and cancelled if the engine drops the attempt
//!   (`bridge/task.rs`, `executor.rs`).
//! - **No panic reaches Python.** Every entry point runs under a guard that
//!   turns a panic into `sluice.InternalError` (`errors.rs`).

mod bridge;
mod convert;
mod errors;
mod executor;
mod fake;
mod gate;
mod outcome;
mod runtime;
mod state;
mod telemetry;
mod turn;

use pyo3::prelude::*;

/// The native module.
#[pymodule]
fn _sluice(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<gate::GateCore>()?;
    module.add_class::<turn::TurnCore>()?;
    module.add_class::<turn::Prepared>()?;
    module.add_class::<outcome::PyOutcome>()?;
    module.add_class::<bridge::Pending>()?;
    module.add_class::<bridge::WakeOnDone>()?;
    module.add_class::<fake::FakeCore>()?;
    module.add_function(wrap_pyfunction!(stop_waking, module)?)?;
    module.add_function(wrap_pyfunction!(flush_traces, module)?)?;
    module.add_function(wrap_pyfunction!(panic_for_tests, module)?)?;
    module.add_function(wrap_pyfunction!(panic_for_tests_async, module)?)?;
    Ok(())
}

/// Registered with `atexit` by `sluice._bridge`: from then on no thread of
/// sluice's attaches to the interpreter, which is about to shut down.
#[pyfunction(name = "_stop_waking")]
fn stop_waking(py: Python<'_>) {
    bridge::stop_waking(py);
}

/// Registered with `atexit` by `sluice._gate`: sends the spans every live
/// gate still holds, waiting at most `timeout_s` seconds. False when some
/// did not leave in time.
#[pyfunction(name = "_flush_traces")]
fn flush_traces(py: Python<'_>, timeout_s: f64) -> PyResult<bool> {
    errors::guard(|| telemetry::flush(py, &telemetry::live(), timeout_s))
}

/// Panics inside the guard, so tests can check that a panic reaches Python
/// as `sluice.InternalError` and nothing else.
#[pyfunction(name = "_panic_for_tests")]
fn panic_for_tests(message: &str) -> PyResult<()> {
    errors::guard(|| panic!("{message}"))
}

/// An awaitable whose future panics when polled: the same check for calls.
#[pyfunction(name = "_panic_for_tests_async")]
fn panic_for_tests_async(message: String) -> bridge::Pending {
    let future: bridge::BoxFuture = Box::pin(async move {
        tokio::task::yield_now().await;
        panic!("{message}");
    });
    bridge::Pending::new(future)
}
