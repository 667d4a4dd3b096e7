//! The callers waiting for a permit, and each one's place among them.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::config::Priority;

/// The calls waiting for a permit, highest priority first, then in order
/// of arrival. Only the head contends for a permit that comes back, so it
/// goes to the most urgent caller.
#[derive(Debug, Default)]
pub(super) struct Waiters {
    next: u64,
    /// Each waiter's wake-up: only the head is woken when it may go.
    queue: BTreeMap<(Reverse<Priority>, u64), Arc<Notify>>,
    /// A caller left the queue and contends for the next permit: nobody
    /// else may until it has it.
    contender: bool,
    /// Waiters a more urgent arrival pushed out of a full queue: each is
    /// shed when it next looks.
    evicted: BTreeSet<(Reverse<Priority>, u64)>,
}

/// What a waiter finds when it looks at the queue.
pub(super) enum Look {
    /// It is the head: it contends for the next permit.
    Head,
    /// Others are ahead of it.
    Behind,
    /// A more urgent caller took its place in a full queue.
    Evicted,
}

/// The waiting callers, and the wake-up of the one contending for the
/// next permit.
#[derive(Debug, Default)]
pub(super) struct Queue {
    pub(super) waiters: Mutex<Waiters>,
    /// Told when a permit comes back or the cap rises while callers wait.
    pub(super) freed: Notify,
    /// When each call deferred at once was told to come back, while that
    /// time is still ahead (issue 50): a later deferral counts them ahead of
    /// it, so the waits of a burst grow with position and the re-issues
    /// arrive spread over the drain instead of all together. Only an
    /// estimate: nothing is held for them (docs/outcomes.md says why).
    pub(super) promised: Mutex<Vec<Instant>>,
}

impl Queue {
    pub(super) fn enqueue(&self, priority: Priority) -> Place<'_> {
        let mut waiters = self.waiters.lock();
        waiters.next += 1;
        let key = (Reverse(priority), waiters.next);
        let wake = Arc::new(Notify::new());
        waiters.queue.insert(key, wake.clone());
        Place {
            queue: self,
            key,
            wake,
            claimed: false,
        }
    }

    /// Makes `place` the contender for the next permit if it is the head
    /// and nobody contends yet.
    pub(super) fn claim(&self, place: &mut Place<'_>) -> Look {
        let mut waiters = self.waiters.lock();
        if waiters.evicted.remove(&place.key) {
            return Look::Evicted;
        }
        if waiters.contender || waiters.queue.keys().next() != Some(&place.key) {
            return Look::Behind;
        }
        waiters.queue.remove(&place.key);
        waiters.contender = true;
        place.claimed = true;
        Look::Head
    }

    /// Pushes the least urgent, newest waiter below `priority` out of the
    /// queue (it is shed when it next looks); `false` if there is none.
    pub(super) fn evict_below(&self, priority: Priority) -> bool {
        let mut waiters = self.waiters.lock();
        let last = waiters.queue.keys().next_back().copied();
        match last.filter(|(Reverse(theirs), _)| *theirs < priority) {
            Some(key) => {
                // The evicted waiter alone is woken, to find itself shed.
                if let Some(wake) = waiters.queue.remove(&key) {
                    wake.notify_one();
                }
                waiters.evicted.insert(key);
                true
            }
            None => false,
        }
    }
}

/// A caller's place among the waiters; leaving it (with a permit, timed
/// out, or cancelled) lets the next head go.
pub(super) struct Place<'a> {
    pub(super) queue: &'a Queue,
    pub(super) key: (Reverse<Priority>, u64),
    pub(super) wake: Arc<Notify>,
    pub(super) claimed: bool,
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        let mut waiters = self.queue.waiters.lock();
        if self.claimed {
            waiters.contender = false;
        } else {
            waiters.queue.remove(&self.key);
            waiters.evicted.remove(&self.key);
        }
        // The head may go now: wake it alone, not every waiter.
        if !waiters.contender
            && let Some(head) = waiters.queue.values().next()
        {
            head.notify_one();
        }
    }
}

impl Waiters {
    pub(super) fn is_empty(&self) -> bool {
        self.queue.is_empty() && !self.contender
    }

    /// How many wait at a lower priority than `priority`.
    pub(super) fn below(&self, priority: Priority) -> usize {
        self.queue
            .range((Reverse(priority), u64::MAX)..)
            .map(|(key, _)| key)
            .filter(|(Reverse(theirs), _)| *theirs < priority)
            .count()
    }
}
