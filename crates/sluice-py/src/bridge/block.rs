//! [`block_on`]: a Rust future driven to its end from synchronous Python
//! code, polled with the GIL and parked without it.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};
use std::time::Duration;

use pyo3::prelude::*;

use super::BoxFuture;
use crate::errors::{internal, panic_message};
use crate::runtime;

/// How often a blocked call looks for a signal (Ctrl-C) to raise.
const SIGNAL_CHECK: Duration = Duration::from_millis(100);

struct ThreadWaker {
    thread: Thread,
    woken: AtomicBool,
}

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.thread.unpark();
    }
}

/// Drives `future` on this thread until it ends. A signal handler that
/// raises (Ctrl-C) drops the future, cancelling the call.
pub(crate) fn block_on(py: Python<'_>, mut future: BoxFuture) -> PyResult<Py<PyAny>> {
    let _runtime = runtime::enter()?;
    let parker = Arc::new(ThreadWaker {
        thread: thread::current(),
        woken: AtomicBool::new(false),
    });
    let waker = Waker::from(parker.clone());
    let mut context = Context::from_waker(&waker);
    loop {
        let polled = catch_unwind(AssertUnwindSafe(|| future.as_mut().poll(&mut context)));
        match polled {
            Err(payload) => return Err(internal(panic_message(&*payload))),
            Ok(Poll::Ready(answer)) => return answer(py),
            Ok(Poll::Pending) => {}
        }
        py.detach(|| {
            while !parker.woken.swap(false, Ordering::AcqRel) {
                thread::park_timeout(SIGNAL_CHECK);
                if !parker.woken.load(Ordering::Acquire) {
                    break;
                }
            }
        });
        py.check_signals()?;
    }
}
