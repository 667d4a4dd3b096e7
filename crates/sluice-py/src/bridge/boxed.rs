//! The shape of a call as the bridge drives it: a boxed future whose value
//! is turned into a Python object once the GIL is held.

use std::future::Future;
use std::pin::Pin;

use pyo3::prelude::*;

/// Turns a finished future's value into a Python object, with the GIL.
pub(crate) type Answer = Box<dyn FnOnce(Python<'_>) -> PyResult<Py<PyAny>> + Send>;

/// A call's future as the bridge drives it.
pub(crate) type BoxFuture = Pin<Box<dyn Future<Output = Answer> + Send>>;
