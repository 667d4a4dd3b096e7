//! The bounded queue in front of a scope's concurrency permits, with a cap that can move.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{Semaphore, SemaphorePermit};
use tokio::time::Instant;

/// Admission for one scope: `cap` permits, and at most `queue` calls waiting.
#[derive(Debug)]
pub(crate) struct Admission {
    semaphore: Semaphore,
    /// The concurrency cap in force.
    cap: AtomicU32,
    /// Permits to take out of circulation as they come back, after the cap
    /// was lowered while they were out.
    debt: AtomicU32,
    /// Permits out now.
    out: AtomicUsize,
    queue: u32,
    queued: AtomicUsize,
}

/// Why a call could not be admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The queue is full, or cannot drain in time: `running` permits are out.
    Shed { running: usize },
    /// No permit came before the deadline.
    TimedOut,
    /// The semaphore was closed.
    Closed,
}

/// A permit to have a request in flight. Dropping it returns it, unless the
/// cap was lowered meanwhile: then it leaves circulation.
#[derive(Debug)]
pub(crate) struct Permit<'a> {
    permit: Option<SemaphorePermit<'a>>,
    admission: &'a Admission,
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        self.admission.out.fetch_sub(1, Ordering::SeqCst);
        let owed = self
            .admission
            .debt
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |debt| {
                debt.checked_sub(1)
            })
            .is_ok();
        if owed && let Some(permit) = self.permit.take() {
            permit.forget();
        }
    }
}

impl Admission {
    pub(crate) fn new(cap: u32, queue: u32) -> Self {
        Admission {
            semaphore: Semaphore::new(cap as usize),
            cap: AtomicU32::new(cap),
            debt: AtomicU32::new(0),
            out: AtomicUsize::new(0),
            queue,
            queued: AtomicUsize::new(0),
        }
    }

    pub(crate) fn cap(&self) -> u32 {
        self.cap.load(Ordering::SeqCst)
    }

    pub(crate) fn queue(&self) -> u32 {
        self.queue
    }

    pub(crate) fn queued(&self) -> usize {
        self.queued.load(Ordering::SeqCst)
    }

    /// Permits out now (calls holding one).
    pub(crate) fn running(&self) -> usize {
        self.out.load(Ordering::SeqCst)
    }

    fn granted<'a>(&'a self, permit: SemaphorePermit<'a>) -> Permit<'a> {
        self.out.fetch_add(1, Ordering::SeqCst);
        Permit {
            permit: Some(permit),
            admission: self,
        }
    }

    /// A permit now, or a place in the queue until one comes. `estimate`
    /// says how long the queue ahead needs to drain, given how many are
    /// ahead; a full queue, or one that cannot drain within `remaining`,
    /// sheds at once.
    pub(crate) async fn admit(
        &self,
        deadline: Instant,
        remaining: Duration,
        estimate: impl FnOnce(usize) -> Duration,
    ) -> Result<Permit<'_>, (Refused, Duration)> {
        if let Ok(permit) = self.semaphore.try_acquire() {
            return Ok(self.granted(permit));
        }
        let ahead = self.queued.fetch_add(1, Ordering::SeqCst);
        let _slot = QueueSlot(&self.queued);
        let drain = estimate(ahead);
        if ahead >= self.queue as usize || drain >= remaining {
            return Err((
                Refused::Shed {
                    running: self.running(),
                },
                drain,
            ));
        }
        match tokio::time::timeout_at(deadline, self.semaphore.acquire()).await {
            Ok(Ok(permit)) => Ok(self.granted(permit)),
            Ok(Err(_closed)) => Err((Refused::Closed, drain)),
            Err(_elapsed) => Err((Refused::TimedOut, drain)),
        }
    }

    /// Moves the cap. Raising it pays off any debt first, then adds permits;
    /// lowering it removes idle permits now and the rest as they come back.
    pub(crate) fn set_cap(&self, cap: u32) {
        let cap = cap.max(1);
        let old = self.cap.swap(cap, Ordering::SeqCst);
        if cap > old {
            let mut more = cap - old;
            let _ = self
                .debt
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |debt| {
                    let paid = debt.min(more);
                    more -= paid;
                    Some(debt - paid)
                });
            self.semaphore.add_permits(more as usize);
        } else if cap < old {
            let fewer = old - cap;
            let removed =
                u32::try_from(self.semaphore.forget_permits(fewer as usize)).unwrap_or(fewer);
            self.debt
                .fetch_add(fewer - removed.min(fewer), Ordering::SeqCst);
        }
    }

    /// True when no call holds or waits for a permit.
    pub(crate) fn is_idle(&self) -> bool {
        self.running() == 0 && self.queued() == 0
    }
}

/// A place in the queue, given back when the call leaves it (with a
/// permit, shed, timed out, or cancelled by its caller).
struct QueueSlot<'a>(&'a AtomicUsize);

impl Drop for QueueSlot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn far() -> Instant {
        Instant::now() + Duration::from_secs(60)
    }

    #[tokio::test(start_paused = true)]
    async fn lowering_the_cap_takes_permits_back_as_they_return() {
        let admission = Admission::new(3, 10);
        let a = admission
            .admit(far(), Duration::from_secs(60), |_| Duration::ZERO)
            .await
            .unwrap();
        let b = admission
            .admit(far(), Duration::from_secs(60), |_| Duration::ZERO)
            .await
            .unwrap();
        admission.set_cap(1);
        // One idle permit left at once; two are out, one of which is owed.
        drop(a);
        assert_eq!(admission.semaphore.available_permits(), 0);
        drop(b);
        assert_eq!(admission.semaphore.available_permits(), 1);
        admission.set_cap(4);
        assert_eq!(admission.semaphore.available_permits(), 4);
        assert_eq!(admission.cap(), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn raising_the_cap_pays_the_debt_first() {
        let admission = Admission::new(2, 10);
        let a = admission
            .admit(far(), Duration::from_secs(60), |_| Duration::ZERO)
            .await
            .unwrap();
        let b = admission
            .admit(far(), Duration::from_secs(60), |_| Duration::ZERO)
            .await
            .unwrap();
        admission.set_cap(1);
        admission.set_cap(2);
        drop((a, b));
        assert_eq!(admission.semaphore.available_permits(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_queue_sheds_with_the_estimate() {
        let admission = Admission::new(1, 0);
        let _held = admission
            .admit(far(), Duration::from_secs(60), |_| Duration::ZERO)
            .await
            .unwrap();
        let refused = admission
            .admit(far(), Duration::from_secs(60), |ahead| {
                Duration::from_secs(ahead as u64 + 1)
            })
            .await
            .unwrap_err();
        assert_eq!(
            refused,
            (Refused::Shed { running: 1 }, Duration::from_secs(1))
        );
    }
}
