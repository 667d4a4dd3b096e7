//! Admission's decisions: a permit now, a place in the queue, or a refusal with the wait the call is told.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use super::bounds::{Admission, Permit, Refused};
use super::permit::{QueueSlot, Queued};
use super::waiters::Look;
use crate::config::Priority;
use crate::deadline::Deadline;

/// The most deferred calls' returns a queue keeps count of: past it, a
/// flood's later calls are told no later a time than the last counted, and
/// the list stays bounded however many calls are turned away.
const MAX_PROMISED: usize = 4_096;

impl Admission {
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
        let full = queued >= self.queue() as usize
            && !(below > 0 && self.queue_state().evict_below(priority));
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
        let mut place = self.queue_state().enqueue(priority);
        let wake = place.wake.clone();
        let head = async {
            loop {
                // A wake-up sent before this waits is kept (`notify_one`).
                match self.queue_state().claim(&mut place) {
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
    pub(super) fn promise(
        &self,
        now: Instant,
        estimate: impl FnOnce(usize) -> Duration,
    ) -> Duration {
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
}
