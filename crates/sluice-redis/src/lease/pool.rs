//! One credential's lease pool: the slots reserved ahead, waiting for this process's callers.
//!
//! Pure state with `now` passed in; the scheme is described on the `lease` module.

use std::collections::VecDeque;
use std::time::Duration;

use sluice::shared::SharedLimit;
use tokio::time::Instant;

use crate::store::SlotToken;

/// The least lateness a pooled slot allows, whatever the request's
/// `late_start`: a slot due at once is always a moment past for the caller
/// who takes it, and on a zero margin (or a backend's own benchmark) a
/// lease would otherwise go stale as it lands, a round trip per call.
/// The engine's own waits are late by as much (tokio's 1 ms timer).
pub(crate) const LATE_FLOOR: Duration = Duration::from_millis(3);

/// A leased slot waiting for a caller.
#[derive(Debug, Clone)]
pub(crate) struct Pooled<T = SlotToken> {
    pub(crate) at: Instant,
    pub(crate) token: T,
}

/// What the pooled slots were reserved for: a pooled slot serves only calls
/// whose first scope and limit are the same.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PoolKey {
    pub(crate) scope: String,
    pub(crate) limit: Option<SharedLimit>,
}

/// One credential's lease pool: of one request window's slots, or (`T`
/// a spend's member) of one spend's starts on several windows and units.
#[derive(Debug)]
pub(crate) struct Pool<T = SlotToken> {
    slots: VecDeque<Pooled<T>>,
    key: Option<PoolKey>,
    size: u32,
    /// How late after its time a slot may still start a call: the
    /// `late_start` of the requests it serves ([`Pool::allow_late`]).
    late: Duration,
    /// Lease reservations on their way to Redis (more than one when a
    /// caller stopped waiting for another's and asked itself).
    pub(crate) fetching: u32,
    /// Callers waiting for it.
    pub(crate) waiters: u32,
    /// Bumped when a reservation finishes.
    pub(crate) epoch: u64,
    /// Whether the last one failed.
    pub(crate) last_failed: bool,
    /// Every pooled slot of the last lease went to a caller, none went
    /// stale: demand kept up with the lease.
    drained: bool,
    /// When the last reservation was asked for.
    last_ask: Option<Instant>,
    /// When the last caller came for a slot, and how long after the one
    /// before it.
    last_arrival: Option<Instant>,
    gap: Option<Duration>,
    pub(crate) leased: u64,
    pub(crate) returned: u64,
}

impl<T> Default for Pool<T> {
    fn default() -> Self {
        Pool {
            slots: VecDeque::new(),
            key: None,
            size: 1,
            late: LATE_FLOOR,
            fetching: 0,
            waiters: 0,
            epoch: 0,
            last_failed: false,
            drained: false,
            last_ask: None,
            last_arrival: None,
            gap: None,
            leased: 0,
            returned: 0,
        }
    }
}

/// The most slots one lease may take: this process's fair share of one
/// window (`N / processes`), at least 1 and at most `max_lease`. The pools
/// of every process together then never hold more than one window ahead
/// of their callers. The cap does not bound how far ahead a process with
/// waiting callers books: each caller takes any pooled slot inside its
/// own wait, and the next finds the pool empty and leases again. It sets
/// how many slots one round trip brings: half a share, as it was, cost a
/// saturated key twice the round trips (8 slots a grant at 50/s among
/// three processes).
pub(crate) fn fair_cap(limit: Option<SharedLimit>, processes: u32, max_lease: u32) -> u32 {
    match limit {
        None => 1,
        Some(limit) => share_cap(u64::from(limit.rate.count().get()), processes, max_lease),
    }
}

/// [`fair_cap`] for a budget that admits `calls` a window.
pub(crate) fn share_cap(calls: u64, processes: u32, max_lease: u32) -> u32 {
    let share = calls / u64::from(processes.max(1));
    u32::try_from(share)
        .unwrap_or(u32::MAX)
        .clamp(1, max_lease.max(1))
}

impl<T> Pool<T> {
    /// The current lease size.
    pub(crate) fn size(&self) -> u32 {
        self.size
    }

    /// What the pooled slots were reserved for.
    pub(crate) fn key(&self) -> Option<&PoolKey> {
        self.key.as_ref()
    }

    /// Slots waiting for callers.
    pub(crate) fn pooled(&self) -> usize {
        self.slots.len()
    }

    /// Nothing pooled, nothing on its way, and no ask for `idle` before `now`.
    pub(crate) fn idle(&self, now: Instant, idle: Duration) -> bool {
        self.slots.is_empty()
            && self.fetching == 0
            && self
                .last_ask
                .is_none_or(|last| now.saturating_duration_since(last) >= idle)
    }

    /// A caller came for a slot at `now`.
    pub(crate) fn arrive(&mut self, now: Instant) {
        if let Some(last) = self.last_arrival {
            self.gap = Some(now.saturating_duration_since(last));
        }
        self.last_arrival = Some(now);
    }

    /// How far apart a lease's extra slots go: the gap between the last
    /// two callers, while it is shorter than the limit's `interval`
    /// (callers outrunning the limit); otherwise zero, at once (slower
    /// callers leave the window room, and a slot placed ahead would only
    /// make them wait), as before two callers came.
    pub(crate) fn spacing(&self, interval: Duration) -> Duration {
        self.gap
            .filter(|&gap| gap < interval)
            .unwrap_or(Duration::ZERO)
    }

    /// Switches the pool to `key`; slots reserved for another key are returned.
    pub(crate) fn rekey(&mut self, key: &PoolKey) -> Vec<T> {
        if self.key.as_ref() == Some(key) {
            return Vec::new();
        }
        self.key = Some(key.clone());
        self.size = 1;
        self.drain_all()
    }

    /// Slots may start calls up to `late` after their time from now on
    /// (at least [`LATE_FLOOR`]): the `late_start` of the request at hand,
    /// half its window margin.
    pub(crate) fn allow_late(&mut self, late: Duration) {
        self.late = late.max(LATE_FLOOR);
    }

    /// The earliest slot not stale at `now` whose call would start in
    /// `[from, to]`. A slot whose time has just passed (by at most the
    /// allowed lateness) starts its call now, so it serves any
    /// caller who may start now: one that began a moment after the slot's
    /// time (a 10-call burst at 10/1s once deferred its last call with its
    /// slot left in the pool), or one that waited for the reservation in
    /// flight and woke after the slots due at once.
    pub(crate) fn take(
        &mut self,
        (from, to): (Instant, Instant),
        now: Instant,
    ) -> Option<Pooled<T>> {
        let late = self.late;
        let index = self.slots.iter().position(|slot| {
            let starts = slot.at.max(now);
            starts >= from && slot.at <= to && slot.at + late >= now
        })?;
        let slot = self.slots.remove(index);
        if self.slots.is_empty() {
            self.drained = true;
        }
        slot
    }

    /// Removes slots whose time passed unused (by more than the allowed
    /// lateness); demand was lower than the lease, so the lease shrinks.
    pub(crate) fn sweep(&mut self, now: Instant) -> Vec<T> {
        let late = self.late;
        let mut stale = Vec::new();
        while self.slots.front().is_some_and(|slot| slot.at + late < now) {
            if let Some(slot) = self.slots.pop_front() {
                stale.push(slot.token);
            }
        }
        if !stale.is_empty() {
            self.drained = false;
            self.size = (self.size / 2).max(1);
            self.returned += stale.len() as u64;
        }
        stale
    }

    /// Removes every slot.
    pub(crate) fn drain_all(&mut self) -> Vec<T> {
        self.slots.drain(..).map(|slot| slot.token).collect()
    }

    /// How many slots the next reservation, asked for at `now`, takes.
    /// Demand outran the lease, and it doubles, when callers queued behind
    /// the last one, when callers used up every pooled slot of the last
    /// one, or when this ask comes less than `pace` (the limit's interval,
    /// `W / N`) after the last: callers asking faster than the limit
    /// admits. (Queued callers alone rarely show it on a fast link: the
    /// answer is back before the next caller comes, so at three times the
    /// limit the lease stayed at one slot, a round trip per call.)
    pub(crate) fn want(&mut self, cap: u32, now: Instant, pace: Duration) -> u32 {
        let fast = self
            .last_ask
            .is_some_and(|last| now.saturating_duration_since(last) < pace);
        if self.waiters > 0 || self.drained || fast {
            self.size = self.size.saturating_mul(2);
        }
        self.drained = false;
        self.last_ask = Some(now);
        self.size = self.size.clamp(1, cap.max(1));
        self.size.max((self.waiters + 1).min(cap.max(1)))
    }

    /// Adds the extra slots of a lease (the first went to its caller).
    pub(crate) fn fill(&mut self, slots: impl IntoIterator<Item = Pooled<T>>) {
        for slot in slots {
            self.leased += 1;
            let index = self.slots.partition_point(|s| s.at <= slot.at);
            self.slots.insert(index, slot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Undo;

    /// Half the engine's default margin (20 ms), as a request brings it.
    fn pool() -> Pool {
        let mut pool = Pool::default();
        pool.allow_late(Duration::from_millis(10));
        pool
    }

    fn slot(at: Instant, n: u64) -> Pooled {
        Pooled {
            at,
            token: SlotToken {
                scope: "api_key".into(),
                generation: 0,
                undo: Undo::Window(format!("m:{n}")),
            },
        }
    }

    fn limit(count: u32) -> Option<SharedLimit> {
        Some(SharedLimit {
            rate: format!("{count}/1s").parse().unwrap(),
            burst: None,
        })
    }

    #[test]
    fn the_cap_is_a_fair_share() {
        assert_eq!(fair_cap(limit(30), 3, 32), 10);
        assert_eq!(fair_cap(limit(50), 3, 32), 16);
        assert_eq!(fair_cap(limit(2), 3, 32), 1);
        assert_eq!(fair_cap(limit(1000), 1, 32), 32);
        assert_eq!(fair_cap(None, 1, 32), 1);
        assert_eq!(fair_cap(limit(30), 0, 32), 30);
    }

    #[test]
    fn slots_serve_only_callers_whose_window_holds_them() {
        let t0 = Instant::now();
        let ms = Duration::from_millis(1);
        let mut pool = pool();
        pool.fill([slot(t0 + 100 * ms, 2), slot(t0 + 50 * ms, 1)]);
        assert!(pool.take((t0 + 60 * ms, t0 + 90 * ms), t0).is_none());
        // A slot a moment past is still good; one long past is not.
        assert!(pool.take((t0, t0 + 200 * ms), t0 + 200 * ms).is_none());
        assert_eq!(
            pool.take((t0, t0 + 200 * ms), t0 + 52 * ms).unwrap().at,
            t0 + 50 * ms
        );
        assert_eq!(
            pool.take((t0 + 60 * ms, t0 + 200 * ms), t0).unwrap().at,
            t0 + 100 * ms
        );
    }

    #[test]
    fn a_slot_just_past_serves_a_caller_who_may_start_now() {
        let t0 = Instant::now();
        let ms = Duration::from_millis(1);
        let mut pool = pool();
        pool.fill([slot(t0 + 10 * ms, 1)]);
        // Not for one who must wait until later than now.
        assert!(
            pool.take((t0 + 13 * ms, t0 + 60 * ms), t0 + 12 * ms)
                .is_none()
        );
        // The caller began 1 ms after the slot's time and may start now.
        assert_eq!(
            pool.take((t0 + 11 * ms, t0 + 61 * ms), t0 + 12 * ms)
                .unwrap()
                .at,
            t0 + 10 * ms
        );
    }

    #[test]
    fn a_slot_stays_good_for_as_late_as_the_request_allows() {
        let t0 = Instant::now();
        let ms = Duration::from_millis(1);
        let window = (t0, t0 + 100 * ms);
        let mut pool = pool();
        // A caller that waited for the lease wakes 9 ms after its slot: it
        // still takes it under a 100 ms margin (50 ms late), not under none
        // (the floor's 3 ms, which serves one a moment late).
        pool.fill([slot(t0, 1)]);
        pool.allow_late(Duration::ZERO);
        assert!(pool.take(window, t0 + 9 * ms).is_none());
        assert!(pool.sweep(t0 + 2 * ms).is_empty());
        pool.allow_late(50 * ms);
        assert!(pool.sweep(t0 + 9 * ms).is_empty());
        assert_eq!(pool.take(window, t0 + 9 * ms).unwrap().at, t0);
        // Past the bound it is stale, and returned.
        pool.fill([slot(t0, 2)]);
        assert!(pool.take(window, t0 + 51 * ms).is_none());
        assert_eq!(pool.sweep(t0 + 51 * ms).len(), 1);
        assert_eq!(pool.pooled(), 0);
    }

    #[test]
    fn demand_grows_the_lease_and_stale_slots_shrink_it() {
        let t0 = Instant::now();
        let ms = Duration::from_millis(1);
        // Asks a second apart, the limit's pace 20 ms: only queued
        // callers and stale slots move the size.
        let sec = Duration::from_secs(1);
        let pace = 20 * ms;
        let mut pool = pool();
        assert_eq!(pool.want(8, t0, pace), 1);
        pool.waiters = 3;
        assert_eq!(pool.want(8, t0 + sec, pace), 4);
        assert_eq!(pool.size(), 2);
        assert_eq!(pool.want(8, t0 + 2 * sec, pace), 4);
        assert_eq!(pool.want(8, t0 + 3 * sec, pace), 8);
        assert_eq!(pool.want(8, t0 + 4 * sec, pace), 8);
        pool.waiters = 0;
        pool.fill([slot(t0, 1), slot(t0 + 10 * ms, 2)]);
        assert_eq!(pool.sweep(t0 + 8 * ms).len(), 0);
        assert_eq!(pool.sweep(t0 + 12 * ms).len(), 1);
        assert_eq!(pool.size(), 4);
        assert_eq!(pool.want(2, t0 + 5 * sec, pace), 2);
    }

    #[test]
    fn callers_outrunning_the_limit_grow_the_lease() {
        let t0 = Instant::now();
        let ms = Duration::from_millis(1);
        let pace = 20 * ms;
        let mut pool = pool();
        // Slower than the limit's pace: leases of one, a round trip a call.
        assert_eq!(pool.want(8, t0, pace), 1);
        assert_eq!(pool.want(8, t0 + 30 * ms, pace), 1);
        // Faster: each ask doubles it, up to the cap.
        assert_eq!(pool.want(8, t0 + 35 * ms, pace), 2);
        assert_eq!(pool.want(8, t0 + 40 * ms, pace), 4);
        // Every pooled slot taken, none stale: it grows even after a pause.
        pool.fill([slot(t0 + 60 * ms, 1), slot(t0 + 80 * ms, 2)]);
        assert!(pool.take((t0, t0 + sec(1)), t0 + 60 * ms).is_some());
        assert!(pool.take((t0, t0 + sec(1)), t0 + 80 * ms).is_some());
        assert_eq!(pool.want(16, t0 + sec(1), pace), 8);
        // A stale slot halves it, and the pause leaves it there.
        pool.fill([slot(t0 + sec(1) + 30 * ms, 3)]);
        assert_eq!(pool.sweep(t0 + sec(2)).len(), 1);
        assert_eq!(pool.want(16, t0 + sec(3), pace), 4);
    }

    fn sec(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn slots_are_spaced_as_the_last_two_callers_came_while_they_outrun_the_limit() {
        let t0 = Instant::now();
        let ms = Duration::from_millis(1);
        let mut pool = pool();
        assert_eq!(pool.spacing(20 * ms), Duration::ZERO);
        pool.arrive(t0);
        assert_eq!(pool.spacing(20 * ms), Duration::ZERO);
        pool.arrive(t0 + 7 * ms);
        assert_eq!(pool.spacing(20 * ms), 7 * ms);
        // Slower than the limit's interval: at once.
        assert_eq!(pool.spacing(5 * ms), Duration::ZERO);
        pool.arrive(t0 + 8 * ms);
        assert_eq!(pool.spacing(20 * ms), ms);
    }

    #[test]
    fn a_new_key_returns_the_old_slots() {
        let t0 = Instant::now();
        let mut pool = pool();
        pool.fill([slot(t0, 1), slot(t0, 2)]);
        let key = PoolKey {
            scope: "api_key".into(),
            limit: limit(5),
        };
        assert_eq!(pool.rekey(&key).len(), 2);
        assert!(pool.rekey(&key).is_empty());
        assert_eq!(pool.pooled(), 0);
    }
}
