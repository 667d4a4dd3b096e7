//! The bounded queue in front of a scope's concurrency permits, with a cap that can move.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use once_cell::race::OnceBox;
use parking_lot::{Mutex, MutexGuard};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::config::Priority;
use crate::deadline::Deadline;

mod permit;
mod waiters;

use permit::QueueSlot;
pub(crate) use permit::{AdmittedNow, Permit, Queued};
use waiters::{Look, Waiters};

/// The most deferred calls' returns a queue keeps count of: past it, a
/// flood's later calls are told no later a time than the last counted, and
/// the list stays bounded however many calls are turned away.
const MAX_PROMISED: usize = 4_096;

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
    cap: AtomicU32,
    /// Permits out now. Above the cap while a lowered cap waits for
    /// permits to come back.
    out: AtomicU32,
    /// The queue's bound; a reload may move it ([`Admission::set_queue`]).
    queue: AtomicU32,
    /// Callers in the queue now. This count and `out` stay near 32-bit
    /// settings (the queue's bound, the cap), so 32 bits hold them, and
    /// an idle scope stays small (issue 18).
    queued: AtomicU32,
    /// The callers waiting, made on the first that has to: an uncontended
    /// scope never pays for the queue (issue 18).
    waiters: OnceBox<Queue>,
}

/// The waiting callers, and the wake-up of the one contending for the
/// next permit.
#[derive(Debug, Default)]
struct Queue {
    waiters: Mutex<Waiters>,
    /// Told when a permit comes back or the cap rises while callers wait.
    freed: Notify,
    /// When each call deferred at once was told to come back, while that
    /// time is still ahead (issue 50): a later deferral counts them ahead of
    /// it, so the waits of a burst grow with position and the re-issues
    /// arrive spread over the drain instead of all together. Only an
    /// estimate: nothing is held for them (docs/outcomes.md says why).
    promised: Mutex<Vec<Instant>>,
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
    fn queue_state(&self) -> &Queue {
        self.waiters.get_or_init(Box::default)
    }

    /// The waiting callers, made on first need.
    fn waiters(&self) -> MutexGuard<'_, Waiters> {
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
    fn take(&self) -> Option<Permit<'_>> {
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

    fn wake_contender(&self) {
        if self.queued.load(Ordering::SeqCst) > 0
            && let Some(queue) = self.waiters.get()
        {
            queue.freed.notify_one();
        }
    }

    /// Waits until a permit is free, and takes it.
    async fn contend(&self) -> Permit<'_> {
        let freed = &self.queue_state().freed;
        loop {
            if let Some(permit) = self.take() {
                return permit;
            }
            freed.notified().await;
        }
    }

    /// A permit now, or a place in the queue until one comes. `estimate`
    /// says how long the queue ahead needs to drain, given how many are
    /// ahead; a full queue, or one that cannot drain within what is left of
    /// `deadline` at `now`, sheds at once.
    #[cfg(test)]
    pub(crate) async fn admit(
        &self,
        deadline: &Deadline,
        now: Instant,
        estimate: impl Fn(usize) -> Duration,
    ) -> Result<Permit<'_>, (Refused, Duration)> {
        self.admit_as(Priority::Normal, deadline, (now, Duration::MAX), estimate)
            .await
    }

    /// A free permit at once, unless others wait for one: the start of
    /// [`Admission::admit_as`], which never waits.
    pub(crate) fn try_admit(&self) -> Option<Permit<'_>> {
        // The queue is looked at only while someone is counted in it.
        if self.queued.load(Ordering::SeqCst) > 0
            && self
                .waiters
                .get()
                .is_some_and(|queue| !queue.waiters.lock().is_empty())
        {
            return None;
        }
        self.take()
    }

    /// [`Admission::admit`] for a call of `priority`: waiting callers are
    /// served highest priority first, first come first served within one.
    /// A call whose wait in the queue would pass `inline` (the inline wait)
    /// is deferred at once too (issue 50): it could not start within the
    /// wait the model does not see, so the model is told now.
    pub(crate) async fn admit_as(
        &self,
        priority: Priority,
        deadline: &Deadline,
        (now, inline): (Instant, Duration),
        estimate: impl Fn(usize) -> Duration,
    ) -> Result<Permit<'_>, (Refused, Duration)> {
        if let Some(permit) = self.try_admit() {
            return Ok(permit);
        }
        let queued = self.queued.fetch_add(1, Ordering::SeqCst) as usize;
        let _slot = QueueSlot(&self.queued);
        // Less urgent waiters are not ahead of this call: they neither delay
        // it nor keep it out of a full queue, where the least urgent,
        // newest of them gives up its place instead.
        let below = self.waiters().below(priority);
        let ahead = queued.saturating_sub(below);
        let drain = estimate(ahead);
        let full = queued >= self.queue() as usize && !(below > 0 && self.evict_below(priority));
        let refused = if full || drain >= deadline.remaining(now) {
            Some(Refused::Shed {
                running: self.running(),
            })
        } else {
            (drain > inline).then_some(Refused::Later)
        };
        if let Some(refused) = refused {
            let wait = self.promise(now, |promised| estimate(ahead + promised));
            return Err((refused, wait));
        }
        let mut place = self.enqueue(priority);
        let wake = place.wake.clone();
        let head = async {
            loop {
                // A wake-up sent before this waits is kept (`notify_one`).
                match self.claim(&mut place) {
                    Look::Head => return true,
                    Look::Evicted => return false,
                    Look::Behind => {}
                }
                wake.notified().await;
            }
        };
        match tokio::time::timeout_at(deadline.at(), head).await {
            Err(_elapsed) => return Err((Refused::TimedOut, drain)),
            Ok(false) => {
                let running = self.running();
                return Err((Refused::Shed { running }, drain));
            }
            Ok(true) => {}
        }
        let acquired = tokio::time::timeout_at(deadline.at(), self.contend()).await;
        drop(place);
        match acquired {
            Ok(permit) => Ok(permit),
            Err(_elapsed) => Err((Refused::TimedOut, drain)),
        }
    }

    /// The wait a call deferred at `now` is told (issue 50): `estimate` of
    /// the queue ahead of it and of the calls deferred before it that are
    /// not yet due back; its own return is then counted for the next.
    fn promise(&self, now: Instant, estimate: impl FnOnce(usize) -> Duration) -> Duration {
        let mut promised = self.queue_state().promised.lock();
        promised.retain(|due| *due > now);
        let wait = estimate(promised.len());
        if promised.len() < MAX_PROMISED {
            promised.push(now + wait);
        }
        wait
    }

    /// Shadow mode (issue 20): [`Admission::admit`]'s decision, made at
    /// once. `Ok(Ok(permit))` when one is free; `Ok(Err((queued, drain)))`
    /// when the call would have waited in the queue (it holds a place
    /// there while it runs without a permit, so later calls see it ahead
    /// of them); `Err(drain)` when it would have been shed.
    #[allow(clippy::type_complexity)]
    pub(crate) fn admit_now(
        &self,
        deadline: &Deadline,
        now: Instant,
        estimate: impl FnOnce(usize) -> Duration,
    ) -> Result<Result<Permit<'_>, (Queued<'_>, Duration)>, Duration> {
        if let Some(permit) = self.take() {
            return Ok(Ok(permit));
        }
        let ahead = self.queued.fetch_add(1, Ordering::SeqCst) as usize;
        let slot = QueueSlot(&self.queued);
        let drain = estimate(ahead);
        if ahead >= self.queue() as usize || drain >= deadline.remaining(now) {
            return Err(drain);
        }
        Ok(Err((Queued { _slot: slot }, drain)))
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
    fn available(&self) -> u32 {
        self.cap().saturating_sub(self.out.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn far() -> Deadline {
        Deadline::new(Instant::now(), Duration::from_secs(60)).unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn lowering_the_cap_takes_permits_back_as_they_return() {
        let admission = Admission::new(3, 10);
        let a = admission
            .admit(&far(), Instant::now(), |_| Duration::ZERO)
            .await
            .unwrap();
        let b = admission
            .admit(&far(), Instant::now(), |_| Duration::ZERO)
            .await
            .unwrap();
        admission.set_cap(1);
        // One idle permit left at once; two are out, one of which is owed.
        drop(a);
        assert_eq!(admission.available(), 0);
        drop(b);
        assert_eq!(admission.available(), 1);
        admission.set_cap(4);
        assert_eq!(admission.available(), 4);
        assert_eq!(admission.cap(), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn raising_the_cap_pays_the_debt_first() {
        let admission = Admission::new(2, 10);
        let a = admission
            .admit(&far(), Instant::now(), |_| Duration::ZERO)
            .await
            .unwrap();
        let b = admission
            .admit(&far(), Instant::now(), |_| Duration::ZERO)
            .await
            .unwrap();
        admission.set_cap(1);
        admission.set_cap(2);
        drop((a, b));
        assert_eq!(admission.available(), 2);
    }

    /// Issue 14: waiting callers are served highest priority first, in
    /// order of arrival within a priority.
    #[tokio::test(start_paused = true)]
    async fn waiters_are_served_by_priority_then_arrival() {
        let admission = std::sync::Arc::new(Admission::new(1, 10));
        let held = admission
            .admit(&far(), Instant::now(), |_| Duration::ZERO)
            .await
            .unwrap();
        let order = std::sync::Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for (name, priority) in [
            ("low1", Priority::Low),
            ("normal1", Priority::Normal),
            ("low2", Priority::Low),
            ("high1", Priority::High),
            ("normal2", Priority::Normal),
        ] {
            let (admission, order) = (admission.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                let permit = admission
                    .admit_as(priority, &far(), (Instant::now(), Duration::MAX), |_| {
                        Duration::ZERO
                    })
                    .await
                    .unwrap();
                order.lock().push(name);
                tokio::time::sleep(Duration::from_millis(10)).await;
                drop(permit);
            }));
            // Each arrives after the previous one queued.
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        drop(held);
        for task in tasks {
            task.await.unwrap();
        }
        // low1 arrived first and was already the head when the others came.
        assert_eq!(
            *order.lock(),
            ["low1", "high1", "normal1", "normal2", "low2"]
        );
    }

    /// Issue 18: an uncontended scope never makes its queue; the first
    /// call that has to wait does, and it is served as before.
    #[tokio::test(start_paused = true)]
    async fn the_queue_is_made_by_the_first_call_that_waits() {
        let admission = std::sync::Arc::new(Admission::new(1, 1));
        let held = admission.try_admit().unwrap();
        assert!(admission.waiters.get().is_none());
        let waiting = {
            let admission = admission.clone();
            tokio::spawn(async move {
                admission
                    .admit(&far(), Instant::now(), |_| Duration::ZERO)
                    .await
                    .is_ok()
            })
        };
        tokio::task::yield_now().await;
        assert!(admission.waiters.get().is_some());
        assert_eq!(admission.queued(), 1);
        drop(held);
        assert!(waiting.await.unwrap());
        assert!(admission.is_idle());
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_queue_sheds_with_the_estimate() {
        let admission = Admission::new(1, 0);
        let _held = admission
            .admit(&far(), Instant::now(), |_| Duration::ZERO)
            .await
            .unwrap();
        let refused = admission
            .admit(&far(), Instant::now(), |ahead| {
                Duration::from_secs(ahead as u64 + 1)
            })
            .await
            .unwrap_err();
        assert_eq!(
            refused,
            (Refused::Shed { running: 1 }, Duration::from_secs(1))
        );
    }

    /// Issue 14: a full queue of low-priority waiters does not shed a high
    /// one; the newest low waiter is shed in its place, and the high call
    /// is served first.
    #[tokio::test(start_paused = true)]
    async fn a_full_queue_sheds_its_least_urgent_waiter_for_a_more_urgent_call() {
        let admission = std::sync::Arc::new(Admission::new(1, 3));
        let held = admission
            .admit(&far(), Instant::now(), |_| Duration::ZERO)
            .await
            .unwrap();
        let order = std::sync::Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for (name, priority) in [
            ("low1", Priority::Low),
            ("low2", Priority::Low),
            ("low3", Priority::Low),
            ("high", Priority::High),
        ] {
            let (admission, order) = (admission.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                let result = admission
                    .admit_as(priority, &far(), (Instant::now(), Duration::MAX), |ahead| {
                        Duration::from_secs(ahead as u64)
                    })
                    .await;
                let verdict = match &result {
                    Ok(_) => "served".to_owned(),
                    Err((refused, drain)) => format!("{refused:?} {drain:?}"),
                };
                order.lock().push(format!("{name} {verdict}"));
                drop(result);
            }));
            tokio::task::yield_now().await;
        }
        tokio::task::yield_now().await;
        // The queue (3) was full of lows: the newest low is shed, and the high waits
        // behind only low1, which already contends for the next permit.
        assert_eq!(order.lock().clone(), ["low3 Shed { running: 1 } 2s"]);
        drop(held);
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(
            order.lock().clone(),
            [
                "low3 Shed { running: 1 } 2s",
                "low1 served",
                "high served",
                "low2 served"
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_equal_priority_arrival_is_still_shed_by_a_full_queue() {
        let admission = std::sync::Arc::new(Admission::new(1, 1));
        let _held = admission
            .admit(&far(), Instant::now(), |_| Duration::ZERO)
            .await
            .unwrap();
        let waiting = {
            let admission = admission.clone();
            tokio::spawn(async move {
                admission
                    .admit_as(
                        Priority::Low,
                        &far(),
                        (Instant::now(), Duration::MAX),
                        |_| Duration::ZERO,
                    )
                    .await
                    .is_ok()
            })
        };
        tokio::task::yield_now().await;
        let refused = admission
            .admit_as(
                Priority::Low,
                &far(),
                (Instant::now(), Duration::MAX),
                |_| Duration::ZERO,
            )
            .await
            .map(|_| ())
            .unwrap_err();
        assert_eq!(refused.0, Refused::Shed { running: 1 });
        waiting.abort();
    }
}
