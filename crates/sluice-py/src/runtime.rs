//! The process's one tokio runtime, started on first use: its threads drive
//! timers, sockets and the shared budget's tasks, while calls themselves are
//! polled on the Python thread that awaits them.

use std::sync::OnceLock;

use pyo3::PyResult;
use tokio::runtime::{EnterGuard, Runtime};

use crate::errors::internal;

static RUNTIME: OnceLock<Result<Runtime, String>> = OnceLock::new();

/// The runtime, started the first time anything needs it.
pub(crate) fn runtime() -> PyResult<&'static Runtime> {
    let started = RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            // Two drive timers, sockets and the fake API's server; calls do
            // not run here, so more would only compete with Python.
            .worker_threads(2)
            .thread_name("sluice")
            .enable_all()
            .build()
            .map_err(|error| format!("cannot start the tokio runtime: {error}"))
    });
    started
        .as_ref()
        .map_err(|message| internal(message.clone()))
}

/// Enters the runtime's context on this thread, so that engine code polled
/// here reads tokio's clock and registers timers and sockets with it.
pub(crate) fn enter() -> PyResult<EnterGuard<'static>> {
    Ok(runtime()?.enter())
}
