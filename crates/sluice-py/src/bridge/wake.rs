//! Waking an asyncio loop from any thread without taking the GIL there.
//!
//! A waker may be called by a tokio thread that holds one of the engine's
//! locks (a timer firing, the shared budget's worker answering), while the
//! loop's thread holds the GIL and waits for that lock. So a waker never
//! takes the GIL itself: on the loop's own thread (where the GIL is already
//! held) it resolves the loop's future directly; elsewhere it hands the
//! future to one thread of ours that holds no lock but the GIL.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, OnceLock};
use std::task::Wake;
use std::thread::{self, ThreadId};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use pyo3::prelude::*;

use super::helpers::helper;

/// What a waker resolves: an asyncio future of the loop, so the task
/// awaiting the call runs again.
struct Resolve {
    event_loop: Arc<Py<PyAny>>,
    future: Py<PyAny>,
}

static WAKES: OnceLock<Option<Mutex<Sender<Resolve>>>> = OnceLock::new();

/// Set when the interpreter is about to shut down: the wake thread must not
/// attach to it any more (a thread that waits for the GIL while the
/// interpreter finalizes is ended by CPython, which aborts a Rust thread).
static STOPPING: AtomicBool = AtomicBool::new(false);
/// Wakes being handed to a loop right now, with the GIL or waiting for it.
static HANDING: AtomicUsize = AtomicUsize::new(0);

/// How long shutdown waits for a wake being handed over.
const STOP_WAIT: Duration = Duration::from_secs(2);

fn hand_over(resolve: Resolve) {
    HANDING.fetch_add(1, Ordering::SeqCst);
    if !STOPPING.load(Ordering::SeqCst) {
        Python::try_attach(|py| {
            let future = resolve.future.bind(py);
            let pending = future
                .call_method0("done")
                .and_then(|done| done.extract::<bool>())
                .is_ok_and(|done| !done);
            if pending {
                let scheduled = helper(py, "resolve").and_then(|resolve_fn| {
                    resolve
                        .event_loop
                        .bind(py)
                        .call_method1("call_soon_threadsafe", (resolve_fn, future))
                });
                // A closed loop has no one left to wake.
                drop(scheduled);
            }
        });
    }
    HANDING.fetch_sub(1, Ordering::SeqCst);
}

/// Called at interpreter exit (`atexit`): no wake attaches from now on, and
/// one being handed over is waited for, without the GIL.
pub(crate) fn stop(py: Python<'_>) {
    STOPPING.store(true, Ordering::SeqCst);
    py.detach(|| {
        let began = Instant::now();
        while HANDING.load(Ordering::SeqCst) > 0 && began.elapsed() < STOP_WAIT {
            thread::sleep(Duration::from_millis(1));
        }
    });
}

fn send(resolve: Resolve) {
    let sender = WAKES.get_or_init(|| {
        let (sender, receiver) = channel::<Resolve>();
        let spawned = thread::Builder::new()
            .name("sluice-wake".to_owned())
            .spawn(move || {
                while let Ok(resolve) = receiver.recv() {
                    hand_over(resolve);
                }
            });
        spawned.ok().map(|_| Mutex::new(sender))
    });
    if let Some(sender) = sender {
        // The thread lives as long as the process; a send cannot fail
        // before it exits.
        let _ = sender.lock().send(resolve);
    }
}

#[derive(Default)]
struct State {
    /// Woken since the last poll began.
    woken: bool,
    /// The future the awaiting task waits on, once it has been handed one.
    future: Option<Py<PyAny>>,
}

/// The waker of one awaited call on one asyncio loop.
pub(super) struct LoopWaker {
    thread: ThreadId,
    event_loop: Arc<Py<PyAny>>,
    state: Mutex<State>,
}

impl LoopWaker {
    /// A waker for calls awaited on `event_loop`, running on this thread.
    pub(super) fn new(event_loop: Py<PyAny>) -> Self {
        LoopWaker {
            thread: thread::current().id(),
            event_loop: Arc::new(event_loop),
            state: Mutex::new(State::default()),
        }
    }

    /// A poll begins: forget earlier wakes and the future they resolved.
    pub(super) fn begin(&self) {
        let mut state = self.state.lock();
        state.woken = false;
        state.future = None;
    }

    /// The poll returned pending: what the awaiting task should wait on.
    /// `None` (run again at once) when woken during the poll, else a fresh
    /// asyncio future that the next wake resolves.
    pub(super) fn suspend(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let mut state = self.state.lock();
        if state.woken {
            return Ok(py.None());
        }
        let future = self.event_loop.bind(py).call_method0("create_future")?;
        // What `await future` sets: the task's signal that it was handed a
        // future to wait on rather than a bare yield.
        future.setattr("_asyncio_future_blocking", true)?;
        state.future = Some(future.clone().unbind());
        Ok(future.unbind())
    }
}

impl Wake for LoopWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let future = {
            let mut state = self.state.lock();
            state.woken = true;
            state.future.take()
        };
        let Some(future) = future else {
            return;
        };
        if thread::current().id() == self.thread {
            // The loop's thread wakes only while running Python (a poll, a
            // done callback): it holds the GIL already.
            Python::attach(|py| {
                let future = future.bind(py);
                let done = future
                    .call_method0("done")
                    .and_then(|done| done.extract::<bool>())
                    .unwrap_or(true);
                if !done {
                    let _ = future.call_method1("set_result", (py.None(),));
                }
            });
        } else {
            send(Resolve {
                event_loop: self.event_loop.clone(),
                future,
            });
        }
    }
}
