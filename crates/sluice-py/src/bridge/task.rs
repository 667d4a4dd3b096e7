//! [`PyTaskFuture`]: a Rust future for work done in Python, one attempt of
//! a function tool or of a request through the httpx transport. Async work
//! runs as its own asyncio task, started when the engine sends (a queued
//! call starts nothing) and cancelled if the engine drops the attempt
//! (deadline, or the caller cancelled); blocking work runs inline.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use parking_lot::Mutex;
use pyo3::prelude::*;

/// `add_done_callback` target: wakes the Rust future waiting on a task.
#[pyclass(module = "sluice._sluice")]
pub(crate) struct WakeOnDone {
    waker: Mutex<Option<Waker>>,
}

impl WakeOnDone {
    pub(crate) fn new(waker: Waker) -> Self {
        WakeOnDone {
            waker: Mutex::new(Some(waker)),
        }
    }
}

#[pymethods]
impl WakeOnDone {
    fn __call__(&self, _future: &Bound<'_, PyAny>) {
        if let Some(waker) = self.waker.lock().take() {
            waker.wake();
        }
    }
}

/// How the work is started.
enum Start {
    /// `start()` returns an asyncio future (a task) on the running loop.
    Task(Py<PyAny>),
    /// `start()` does the work and returns its result.
    Blocking(Py<PyAny>),
}

/// One piece of Python work as a future of its result (or the exception it raised).
pub(crate) struct PyTaskFuture {
    start: Option<Start>,
    task: Option<Py<PyAny>>,
    registered: Option<Waker>,
}

impl PyTaskFuture {
    /// Work that `start()` begins as an asyncio task on the running loop.
    pub(crate) fn task(start: Py<PyAny>) -> Self {
        PyTaskFuture {
            start: Some(Start::Task(start)),
            task: None,
            registered: None,
        }
    }

    /// Work that `start()` does at once, blocking this thread.
    pub(crate) fn blocking(start: Py<PyAny>) -> Self {
        PyTaskFuture {
            start: Some(Start::Blocking(start)),
            task: None,
            registered: None,
        }
    }
}

impl Future for PyTaskFuture {
    type Output = PyResult<Py<PyAny>>;

    fn poll(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        Python::attach(|py| {
            match this.start.take() {
                Some(Start::Blocking(start)) => {
                    return Poll::Ready(start.bind(py).call0().map(Bound::unbind));
                }
                Some(Start::Task(start)) => match start.bind(py).call0() {
                    Ok(task) => this.task = Some(task.unbind()),
                    Err(error) => return Poll::Ready(Err(error)),
                },
                None => {}
            }
            let Some(task) = &this.task else {
                return Poll::Ready(Err(pyo3::exceptions::PyRuntimeError::new_err(
                    "polled after it finished",
                )));
            };
            let task = task.bind(py);
            let done = task
                .call_method0("done")
                .and_then(|done| done.extract::<bool>());
            match done {
                Ok(true) => {
                    let result = task.call_method0("result").map(Bound::unbind);
                    this.task = None;
                    return Poll::Ready(result);
                }
                Ok(false) => {}
                Err(error) => {
                    this.task = None;
                    return Poll::Ready(Err(error));
                }
            }
            let stale = this
                .registered
                .as_ref()
                .is_none_or(|waker| !waker.will_wake(context.waker()));
            if stale {
                let callback = WakeOnDone::new(context.waker().clone());
                if let Err(error) = task.call_method1("add_done_callback", (callback,)) {
                    return Poll::Ready(Err(error));
                }
                this.registered = Some(context.waker().clone());
            }
            Poll::Pending
        })
    }
}

impl Drop for PyTaskFuture {
    fn drop(&mut self) {
        let Some(task) = self.task.take() else {
            return;
        };
        // Dropped before it finished: the engine gave up on the attempt (its
        // deadline), or the caller was cancelled. Cancel the task from its
        // loop's thread, whichever thread drops it.
        Python::attach(|py| {
            let task = task.bind(py);
            let cancelled = task.call_method0("get_loop").and_then(|event_loop| {
                event_loop.call_method1("call_soon_threadsafe", (task.getattr("cancel")?,))
            });
            if cancelled.is_err() {
                // Its loop is closed: nothing runs it any more.
                let _ = task.call_method0("cancel");
            }
        });
    }
}
