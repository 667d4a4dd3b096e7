//! Errors crossing into Python: the package's own exception classes (defined
//! in `sluice/_errors.py`), and the guard that turns a Rust panic into
//! `sluice.InternalError` instead of letting it reach the interpreter.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

static ERRORS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

fn class<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    let module = ERRORS.get_or_try_init(py, || py.import("sluice._errors").map(Bound::unbind))?;
    module.bind(py).getattr(name)
}

/// `sluice.ConfigError(message, field)`.
pub(crate) fn config_error(error: &sluice_config::ConfigError) -> PyErr {
    Python::attach(|py| {
        let field = error.field().map(str::to_owned);
        match class(py, "ConfigError").and_then(|cls| cls.call1((error.to_string(), field))) {
            Ok(value) => PyErr::from_value(value),
            Err(failed) => failed,
        }
    })
}

/// `sluice.InternalError(message)`: a bug in sluice, never the caller's input.
pub(crate) fn internal(message: impl Into<String>) -> PyErr {
    let message = message.into();
    Python::attach(|py| {
        match class(py, "InternalError").and_then(|cls| cls.call1((message.clone(),))) {
            Ok(value) => PyErr::from_value(value),
            Err(_) => PyRuntimeError::new_err(message),
        }
    })
}

/// The message of a panic's payload.
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> String {
    let text = payload
        .downcast_ref::<&str>()
        .map(|text| (*text).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_owned());
    format!("sluice panicked (a bug; please report it): {text}")
}

/// Runs `f`, turning a panic into `sluice.InternalError`.
pub(crate) fn guard<T>(f: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(result) => result,
        Err(payload) => Err(internal(panic_message(&*payload))),
    }
}
