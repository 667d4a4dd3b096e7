//! [`Pending`]: a Rust future as an awaitable, polled on the thread of the
//! asyncio loop that awaits it. A call that does not have to wait never
//! leaves that thread; one that waits is woken through [`LoopWaker`].
//! Cancelling the awaiting task drops the future, which cancels the call.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use parking_lot::Mutex;
use pyo3::exceptions::{PyRuntimeError, PyStopIteration};
use pyo3::prelude::*;
use pyo3::types::PyType;

use super::BoxFuture;
use super::wake::LoopWaker;
use crate::errors::{guard, internal, panic_message};
use crate::runtime;

/// An awaitable sluice call (or batch of calls). Await it once.
#[pyclass(module = "sluice._sluice")]
pub(crate) struct Pending {
    future: Mutex<Option<BoxFuture>>,
    waker: Mutex<Option<Arc<LoopWaker>>>,
}

impl Pending {
    pub(crate) fn new(future: BoxFuture) -> Self {
        Pending {
            future: Mutex::new(Some(future)),
            waker: Mutex::new(None),
        }
    }

    fn waker(&self, py: Python<'_>) -> PyResult<Arc<LoopWaker>> {
        let mut slot = self.waker.lock();
        if let Some(waker) = &*slot {
            return Ok(waker.clone());
        }
        let event_loop = py
            .import("asyncio")?
            .call_method0("get_running_loop")?
            .unbind();
        let waker = Arc::new(LoopWaker::new(event_loop));
        *slot = Some(waker.clone());
        Ok(waker)
    }

    fn step(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let Some(mut slot) = self.future.try_lock() else {
            return Err(PyRuntimeError::new_err(
                "this sluice call is already being awaited",
            ));
        };
        let Some(future) = slot.as_mut() else {
            return Err(PyRuntimeError::new_err(
                "cannot reuse an already awaited sluice call",
            ));
        };
        let loop_waker = self.waker(py)?;
        loop_waker.begin();
        let _runtime = runtime::enter()?;
        let waker = Waker::from(loop_waker.clone());
        let mut context = Context::from_waker(&waker);
        let polled = catch_unwind(AssertUnwindSafe(|| future.as_mut().poll(&mut context)));
        match polled {
            Err(payload) => {
                *slot = None;
                Err(internal(panic_message(&*payload)))
            }
            Ok(Poll::Ready(answer)) => {
                *slot = None;
                drop(slot);
                let value = answer(py)?;
                Err(PyStopIteration::new_err((value,)))
            }
            Ok(Poll::Pending) => {
                drop(slot);
                loop_waker.suspend(py)
            }
        }
    }

    /// Drops the future: the call is cancelled (a queued call sends
    /// nothing, an attempt in flight is dropped).
    fn cancel(&self) {
        let future = self.future.lock().take();
        drop(future);
    }
}

#[pymethods]
impl Pending {
    fn __await__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        guard(|| self.step(py))
    }

    /// Part of the coroutine protocol; the value sent is ignored.
    fn send(&self, py: Python<'_>, _value: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        guard(|| self.step(py))
    }

    /// The awaiting task was cancelled (or an exception thrown in): the
    /// call is dropped and the exception raised.
    #[pyo3(signature = (kind, value=None, _traceback=None))]
    fn throw(
        &self,
        kind: &Bound<'_, PyAny>,
        value: Option<&Bound<'_, PyAny>>,
        _traceback: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        guard(|| {
            self.cancel();
            let exception = match (kind.cast::<PyType>(), value) {
                (Ok(class), Some(value)) if value.is_instance(class)? => value.clone(),
                (Ok(class), Some(value)) => class.call1((value,))?,
                (Ok(class), None) => class.call0()?,
                (Err(_), _) => kind.clone(),
            };
            Err(PyErr::from_value(exception))
        })
    }

    /// Drops the call.
    fn close(&self) -> PyResult<()> {
        guard(|| {
            self.cancel();
            Ok(())
        })
    }
}
