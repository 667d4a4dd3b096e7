//! Admission's state: the permits' cap and count, the queue's bound, and the waiting callers, made on first need.

use std::sync::atomic::{AtomicU32, Ordering};

use once_cell::race::OnceBox;
use parking_lot::MutexGuard;

use super::waiters::{Queue, Waiters};

/// Admission for one scope: `cap` permits, and at most `queue` calls waiting.
///
/// The permits are a count, not a semaphore: a permit is free while fewer
/// than the cap are out. Lowering the cap takes nothing back; permits come
/// back as their calls end, and none is handed out until the count is
/// under the new cap. An uncontended call is one compare-and-swap to take
/// its permit and one subtraction to give it back (issue 18: tokio's
/// semaphore cost a lock on every return, and 40 bytes in every scope).
#[derive(Debug)]
pub(crate) struct Admission {
    /// The concurrency cap in force.
    pub(super) cap: AtomicU32,
    /// Permits out now. Above the cap while a lowered cap waits for
    /// permits to come back.
    pub(super) out: AtomicU32,
    /// The queue's bound; a reload may move it ([`Admission::set_queue`]).
    pub(super) queue: AtomicU32,
    /// Callers in the queue now. This count and `out` stay near 32-bit
    /// settings (the queue's bound, the cap), so 32 bits hold them, and
    /// an idle scope stays small (issue 18).
    pub(super) queued: AtomicU32,
    /// The callers waiting, made on the first that has to: an uncontended
    /// scope never pays for the queue (issue 18).
    pub(super) waiters: OnceBox<Queue>,
}

/// Why a call could not be admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The queue is full, or cannot drain in time: `running` permits are out.
    Shed { running: usize },
    /// The queue has room, but the call could not start within the inline
    /// wait: deferred at once rather than queued past it.
    Later,
    /// No permit came before the deadline.
    TimedOut,
}

impl Admission {
    pub(crate) fn new(cap: u32, queue: u32) -> Self {
        Admission {
            cap: AtomicU32::new(cap),
            out: AtomicU32::new(0),
            queue: AtomicU32::new(queue),
            queued: AtomicU32::new(0),
            waiters: OnceBox::new(),
        }
    }

    /// The queue, made on first need.
    pub(super) fn queue_state(&self) -> &Queue {
        self.waiters.get_or_init(Box::default)
    }

    /// The waiting callers, made on first need.
    pub(super) fn waiters(&self) -> MutexGuard<'_, Waiters> {
        self.queue_state().waiters.lock()
    }

    pub(crate) fn cap(&self) -> u32 {
        self.cap.load(Ordering::SeqCst)
    }

    pub(crate) fn queue(&self) -> u32 {
        self.queue.load(Ordering::Relaxed)
    }

    pub(crate) fn queued(&self) -> usize {
        self.queued.load(Ordering::SeqCst) as usize
    }

    /// Permits out now (calls holding one).
    pub(crate) fn running(&self) -> usize {
        self.out.load(Ordering::SeqCst) as usize
    }

    /// A permit, if fewer than the cap are out; waiters are not asked.
    pub(super) fn take(&self) -> Option<Permit<'_>> {
        self.out
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |out| {
                (out < self.cap.load(Ordering::SeqCst)).then_some(out + 1)
            })
            .ok()
            .map(|_| Permit { admission: self })
    }

    /// A permit comes back: the caller contending for the next one, if
    /// anyone waits, is told. A wake-up that finds nobody waiting is kept
    /// for the next to wait (`Notify::notify_one`), so none is lost
    /// between a contender's failed take and its wait.
    pub(super) fn release(&self) {
        self.out.fetch_sub(1, Ordering::SeqCst);
        self.wake_contender();
    }

    pub(super) fn wake_contender(&self) {
        if self.queued.load(Ordering::SeqCst) > 0
            && let Some(queue) = self.waiters.get()
        {
            queue.freed.notify_one();
        }
    }

    /// Waits until a permit is free, and takes it.
    pub(super) async fn contend(&self) -> Permit<'_> {
        let freed = &self.queue_state().freed;
        loop {
            if let Some(permit) = self.take() {
                return permit;
            }
            freed.notified().await;
        }
    }

    /// Moves the cap. Raising it frees permits for waiting callers at
    /// once; lowering it takes effect as permits come back.
    pub(crate) fn set_cap(&self, cap: u32) {
        let cap = cap.max(1);
        let old = self.cap.swap(cap, Ordering::SeqCst);
        if cap > old {
            self.wake_contender();
        }
    }

    /// Moves the queue's bound (a reload). Only arrivals are measured
    /// against it: calls already waiting past a lowered bound keep their
    /// places, and the queue shrinks to it as they leave.
    pub(crate) fn set_queue(&self, queue: u32) {
        self.queue.store(queue, Ordering::Relaxed);
    }

    /// Gives back a permit that [`Permit::detach`] kept out, as its drop
    /// would have.
    pub(crate) fn release_detached(&self) {
        self.release();
    }

    /// True when no call holds or waits for a permit.
    pub(crate) fn is_idle(&self) -> bool {
        self.running() == 0 && self.queued() == 0
    }

    /// Permits free now (the tests'): the cap less those out.
    #[cfg(test)]
    pub(super) fn available(&self) -> u32 {
        self.cap().saturating_sub(self.out.load(Ordering::SeqCst))
    }
}

/// A permit to have a request in flight. Dropping it returns it (a
/// lowered cap counts it as it comes back).
#[derive(Debug)]
pub(crate) struct Permit<'a> {
    admission: &'a Admission,
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        self.admission.release();
    }
}

impl Permit<'_> {
    /// Keeps the permit out past this borrow, for a call whose body is still
    /// streaming: [`Admission::release_detached`] gives it back later.
    pub(crate) fn detach(self) {
        // Its drop would give the permit back now.
        std::mem::forget(self);
    }
}
