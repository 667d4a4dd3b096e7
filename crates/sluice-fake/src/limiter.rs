//! Rate-limiter maths (sliding window, fixed window, token bucket) as plain functions of `now`.
//!
//! `now` is the time since the fake started, so fixed windows are aligned to the start and a
//! test can drive a limiter on explicit times. Everything is integer nanoseconds: a limiter
//! never rounds a wait down, so "wait this long" is always enough.

use std::collections::VecDeque;
use std::time::Duration;

use crate::config::Algorithm;

/// What a limiter reports about itself: the numbers rate-limit headers carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    /// Requests (or tokens) allowed per window.
    pub limit: u32,
    /// How many more could be admitted now.
    pub remaining: u32,
    /// Sliding window: until the oldest start in the window leaves it (zero if none);
    /// fixed window: until the current window ends; bucket: until one more token (zero if full).
    pub reset: Duration,
}

/// A rejection: nothing can be admitted before `wait` has passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("not admitted for another {wait:?}")]
pub struct NotYet {
    /// How long until the cost would be admitted, if nothing else is admitted meanwhile.
    pub wait: Duration,
}

/// One limiter: `limit` per `window` under an [`Algorithm`]. Rejections charge nothing.
///
/// ```
/// use std::time::Duration;
/// use sluice_fake::{Algorithm, limiter::Limiter};
///
/// let ms = Duration::from_millis;
/// let mut limiter = Limiter::new(Algorithm::SlidingWindow, 3, ms(200), None);
/// for _ in 0..3 {
///     assert!(limiter.acquire(ms(0), 1).is_ok());
/// }
/// assert_eq!(limiter.acquire(ms(10), 1).map_err(|e| e.wait), Err(ms(190)));
/// assert!(limiter.acquire(ms(200), 1).is_ok());
/// ```
#[derive(Debug, Clone)]
pub struct Limiter {
    limit: u32,
    window: u128,
    state: State,
}

#[derive(Debug, Clone)]
enum State {
    /// Accepted starts still inside the window (start, cost), oldest first.
    Sliding { log: VecDeque<(u128, u32)> },
    /// The index of the window last charged and what it holds.
    Fixed { index: u128, used: u32 },
    /// `level` counts in units where one token is `window` units and the refill is `limit`
    /// units per nanosecond, which keeps `limit / window` exact in integers.
    Bucket {
        capacity: u32,
        level: u128,
        at: u128,
    },
}

impl Limiter {
    /// A limiter admitting `limit` per `window`; `burst` is the bucket's capacity (default
    /// `limit`) and is ignored by the window algorithms.
    ///
    /// A `limit` of 0 is treated as 1 and a zero window as one nanosecond: validated
    /// configuration never contains them, and a limiter must not divide by zero.
    pub fn new(algorithm: Algorithm, limit: u32, window: Duration, burst: Option<u32>) -> Self {
        let limit = limit.max(1);
        let window = window.as_nanos().max(1);
        let state = match algorithm {
            Algorithm::FixedWindow => State::Fixed { index: 0, used: 0 },
            Algorithm::TokenBucket => {
                let capacity = burst.unwrap_or(limit).max(1);
                State::Bucket {
                    capacity,
                    level: u128::from(capacity) * window,
                    at: 0,
                }
            }
            Algorithm::SlidingWindow => State::Sliding {
                log: VecDeque::new(),
            },
        };
        Limiter {
            limit,
            window,
            state,
        }
    }

    /// Whether `cost` would be admitted at `now`, without charging it.
    ///
    /// A cost above the capacity is treated as the whole capacity, so it is admissible
    /// once the limiter is idle rather than never.
    pub fn check(&self, now: Duration, cost: u32) -> Result<(), NotYet> {
        let now = now.as_nanos();
        let cost = cost.min(self.capacity());
        let wait = match &self.state {
            State::Sliding { log } => {
                let live = log.iter().filter(|(start, _)| start + self.window > now);
                let used: u32 = live.clone().map(|(_, cost)| cost).sum();
                let mut excess = used.saturating_add(cost).saturating_sub(self.limit);
                let mut wait = 0;
                // The wait ends when enough of the oldest starts have left the window.
                for (start, freed) in live {
                    if excess == 0 {
                        break;
                    }
                    excess = excess.saturating_sub(*freed);
                    wait = (start + self.window).saturating_sub(now);
                }
                wait
            }
            State::Fixed { index, used } => {
                let used = self.fixed_used(now, *index, *used);
                if used.saturating_add(cost) <= self.limit {
                    0
                } else {
                    self.fixed_end(now) - now
                }
            }
            State::Bucket {
                capacity,
                level,
                at,
            } => {
                let level = self.bucket_level(now, *capacity, *level, *at);
                let needed = u128::from(cost) * self.window;
                needed
                    .saturating_sub(level)
                    .div_ceil(u128::from(self.limit))
            }
        };
        if wait == 0 {
            Ok(())
        } else {
            Err(NotYet { wait: nanos(wait) })
        }
    }

    /// Admits `cost` at `now` if [`check`](Self::check) allows it, charging it; else charges nothing.
    pub fn acquire(&mut self, now: Duration, cost: u32) -> Result<(), NotYet> {
        self.check(now, cost)?;
        self.charge(now, cost);
        Ok(())
    }

    /// Gives back `amount` of what was charged at `start` (a true-up after the answer),
    /// so later requests see only the true spend. A start that has left the window, or a
    /// fixed window that has ended, has nothing left to give back.
    pub fn refund(&mut self, start: Duration, amount: u32) {
        let start = start.as_nanos();
        let window = self.window;
        match &mut self.state {
            State::Sliding { log } => {
                if let Some(entry) = log
                    .iter_mut()
                    .find(|(at, cost)| *at == start && *cost >= amount)
                {
                    entry.1 -= amount;
                }
            }
            State::Fixed { index, used } => {
                if start / window == *index {
                    *used = used.saturating_sub(amount);
                }
            }
            State::Bucket {
                capacity, level, ..
            } => {
                let refunded = u128::from(amount) * window;
                *level = level
                    .saturating_add(refunded)
                    .min(u128::from(*capacity) * window);
            }
        }
    }

    /// Charges `cost` at `now` unconditionally and returns what was charged (the cost,
    /// capped at the capacity); callers check first.
    pub(crate) fn charge(&mut self, now: Duration, cost: u32) -> u32 {
        let now = now.as_nanos();
        let cost = cost.min(self.capacity());
        let window = self.window;
        let limit = self.limit;
        match &mut self.state {
            State::Sliding { log } => {
                while log.front().is_some_and(|(start, _)| start + window <= now) {
                    log.pop_front();
                }
                // Starts arrive in order in practice; keep the log sorted if they do not.
                let position = log
                    .iter()
                    .rposition(|(start, _)| *start <= now)
                    .map_or(0, |found| found + 1);
                log.insert(position, (now, cost));
            }
            State::Fixed { index, used } => {
                let current = now / window;
                if current > *index {
                    *index = current;
                    *used = 0;
                }
                *used = used.saturating_add(cost);
            }
            State::Bucket {
                capacity,
                level,
                at,
            } => {
                let refilled = bucket_level(limit, window, now, *capacity, *level, *at);
                *level = refilled.saturating_sub(u128::from(cost) * window);
                *at = (*at).max(now);
            }
        }
        cost
    }

    /// The numbers headers report at `now`.
    pub fn status(&self, now: Duration) -> Status {
        let now = now.as_nanos();
        let (remaining, reset) = match &self.state {
            State::Sliding { log } => {
                let live = log.iter().filter(|(start, _)| start + self.window > now);
                let oldest = live.clone().next();
                let used: u32 = live.map(|(_, cost)| cost).sum();
                let reset =
                    oldest.map_or(0, |(start, _)| (start + self.window).saturating_sub(now));
                (self.limit.saturating_sub(used), reset)
            }
            State::Fixed { index, used } => {
                let used = self.fixed_used(now, *index, *used);
                (self.limit.saturating_sub(used), self.fixed_end(now) - now)
            }
            State::Bucket {
                capacity,
                level,
                at,
            } => {
                let level = self.bucket_level(now, *capacity, *level, *at);
                let whole = level / self.window;
                let full = u128::from(*capacity) * self.window;
                let reset = if level >= full {
                    0
                } else {
                    ((whole + 1) * self.window - level).div_ceil(u128::from(self.limit))
                };
                (u32::try_from(whole).unwrap_or(u32::MAX), reset)
            }
        };
        Status {
            limit: self.limit,
            remaining,
            reset: nanos(reset),
        }
    }

    /// The most that can be admitted at once.
    pub fn capacity(&self) -> u32 {
        match self.state {
            State::Bucket { capacity, .. } => capacity,
            _ => self.limit,
        }
    }

    fn fixed_used(&self, now: u128, index: u128, used: u32) -> u32 {
        // A `now` before the charged window (a caller's clock stepping back) counts there.
        if now / self.window > index { 0 } else { used }
    }

    fn fixed_end(&self, now: u128) -> u128 {
        (now / self.window + 1) * self.window
    }

    fn bucket_level(&self, now: u128, capacity: u32, level: u128, at: u128) -> u128 {
        bucket_level(self.limit, self.window, now, capacity, level, at)
    }
}

fn bucket_level(limit: u32, window: u128, now: u128, capacity: u32, level: u128, at: u128) -> u128 {
    let refill = now.saturating_sub(at).saturating_mul(u128::from(limit));
    level
        .saturating_add(refill)
        .min(u128::from(capacity) * window)
}

fn nanos(nanos: u128) -> Duration {
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(millis: u64) -> Duration {
        Duration::from_millis(millis)
    }

    fn wait(limiter: &mut Limiter, now: Duration) -> Option<Duration> {
        limiter
            .acquire(now, 1)
            .err()
            .map(|rejection| rejection.wait)
    }

    #[test]
    fn sliding_window_admits_n_per_rolling_window() {
        let mut limiter = Limiter::new(Algorithm::SlidingWindow, 3, ms(200), None);
        assert_eq!(wait(&mut limiter, ms(0)), None);
        assert_eq!(wait(&mut limiter, ms(0)), None);
        assert_eq!(wait(&mut limiter, ms(5)), None);
        assert_eq!(wait(&mut limiter, ms(10)), Some(ms(190)));
        // Still rejected just before the first start leaves; rejections charged nothing.
        assert_eq!(wait(&mut limiter, ms(199)), Some(ms(1)));
        assert_eq!(wait(&mut limiter, ms(200)), None);
        // The second start (t=0) leaves at 200 too: one more; the third leaves at 205.
        assert_eq!(wait(&mut limiter, ms(200)), None);
        assert_eq!(wait(&mut limiter, ms(200)), Some(ms(5)));
        assert_eq!(wait(&mut limiter, ms(205)), None);
    }

    #[test]
    fn sliding_window_status_counts_the_last_window() {
        let mut limiter = Limiter::new(Algorithm::SlidingWindow, 3, ms(200), None);
        let idle = limiter.status(ms(0));
        assert_eq!((idle.limit, idle.remaining, idle.reset), (3, 3, ms(0)));
        assert!(limiter.acquire(ms(0), 1).is_ok());
        assert!(limiter.acquire(ms(50), 1).is_ok());
        let status = limiter.status(ms(120));
        assert_eq!((status.remaining, status.reset), (1, ms(80)));
        let status = limiter.status(ms(200));
        assert_eq!((status.remaining, status.reset), (2, ms(50)));
        assert_eq!(limiter.status(ms(250)).remaining, 3);
    }

    #[test]
    fn sliding_window_weighs_costs() {
        let mut limiter = Limiter::new(Algorithm::SlidingWindow, 10, ms(1000), None);
        assert!(limiter.acquire(ms(0), 4).is_ok());
        assert!(limiter.acquire(ms(100), 4).is_ok());
        // 8 used: 4 more need the first start (4 tokens) gone, at 1000.
        assert_eq!(limiter.check(ms(300), 4), Err(NotYet { wait: ms(700) }));
        assert_eq!(limiter.check(ms(300), 2), Ok(()));
    }

    #[test]
    fn fixed_window_resets_at_aligned_boundaries() {
        let mut limiter = Limiter::new(Algorithm::FixedWindow, 2, ms(100), None);
        assert_eq!(wait(&mut limiter, ms(90)), None);
        assert_eq!(wait(&mut limiter, ms(95)), None);
        assert_eq!(wait(&mut limiter, ms(99)), Some(ms(1)));
        // A new window at 100: two more at once, four within 10 ms across the boundary.
        assert_eq!(wait(&mut limiter, ms(100)), None);
        assert_eq!(wait(&mut limiter, ms(100)), None);
        assert_eq!(wait(&mut limiter, ms(130)), Some(ms(70)));
        let status = limiter.status(ms(130));
        assert_eq!(
            (status.limit, status.remaining, status.reset),
            (2, 0, ms(70))
        );
        let later = limiter.status(ms(450));
        assert_eq!((later.remaining, later.reset), (2, ms(50)));
    }

    #[test]
    fn token_bucket_bursts_then_refills_continuously() {
        // 2 per 100 ms: one token every 50 ms, capacity 4.
        let mut limiter = Limiter::new(Algorithm::TokenBucket, 2, ms(100), Some(4));
        for _ in 0..4 {
            assert_eq!(wait(&mut limiter, ms(0)), None);
        }
        assert_eq!(wait(&mut limiter, ms(0)), Some(ms(50)));
        assert_eq!(wait(&mut limiter, ms(20)), Some(ms(30)));
        let status = limiter.status(ms(20));
        assert_eq!(
            (status.limit, status.remaining, status.reset),
            (2, 0, ms(30))
        );
        assert_eq!(wait(&mut limiter, ms(50)), None);
        assert_eq!(wait(&mut limiter, ms(50)), Some(ms(50)));
        // After a long idle time the bucket holds its capacity, no more.
        assert_eq!(limiter.status(ms(10_000)).remaining, 4);
        assert_eq!(limiter.status(ms(10_000)).reset, ms(0));
        let status = limiter.status(ms(125));
        assert_eq!((status.remaining, status.reset), (1, ms(25)));
    }

    #[test]
    fn token_bucket_with_uneven_interval_never_admits_early() {
        // 3 per second: a token every 333.33 ms; the wait is rounded up, not down.
        let mut limiter = Limiter::new(Algorithm::TokenBucket, 3, ms(1000), Some(1));
        assert!(limiter.acquire(ms(0), 1).is_ok());
        let rejection = limiter.acquire(ms(0), 1);
        assert_eq!(
            rejection,
            Err(NotYet {
                wait: Duration::from_nanos(333_333_334)
            })
        );
        assert!(
            limiter
                .acquire(Duration::from_nanos(333_333_333), 1)
                .is_err()
        );
        assert!(
            limiter
                .acquire(Duration::from_nanos(333_333_334), 1)
                .is_ok()
        );
    }

    #[test]
    fn a_clock_stepping_back_does_not_panic() {
        for algorithm in [
            Algorithm::SlidingWindow,
            Algorithm::FixedWindow,
            Algorithm::TokenBucket,
        ] {
            let mut limiter = Limiter::new(algorithm, 2, ms(100), None);
            assert!(limiter.acquire(ms(500), 1).is_ok());
            assert!(limiter.acquire(ms(400), 1).is_ok());
            assert!(limiter.acquire(ms(450), 1).is_err(), "{algorithm}");
            let _ = limiter.status(ms(0));
        }
    }

    #[test]
    fn a_cost_above_capacity_is_clamped() {
        let mut limiter = Limiter::new(Algorithm::SlidingWindow, 2, ms(100), None);
        assert!(limiter.acquire(ms(0), 5).is_ok());
        assert_eq!(limiter.status(ms(0)).remaining, 0);
    }

    #[test]
    fn a_refund_trues_up_the_charge_at_its_start() {
        for algorithm in [
            Algorithm::SlidingWindow,
            Algorithm::FixedWindow,
            Algorithm::TokenBucket,
        ] {
            let mut limiter = Limiter::new(algorithm, 10, ms(1000), None);
            assert!(limiter.acquire(ms(0), 8).is_ok());
            assert!(limiter.check(ms(10), 5).is_err(), "{algorithm}");
            limiter.refund(ms(0), 6);
            assert_eq!(limiter.status(ms(10)).remaining, 8, "{algorithm}");
            assert!(limiter.check(ms(10), 5).is_ok(), "{algorithm}");
        }
    }

    #[test]
    fn a_refund_after_the_window_gives_nothing_back() {
        let mut fixed = Limiter::new(Algorithm::FixedWindow, 10, ms(100), None);
        assert!(fixed.acquire(ms(50), 10).is_ok());
        assert!(fixed.acquire(ms(150), 4).is_ok());
        // The start at 50 belongs to the window that ended at 100: the current one keeps 4.
        fixed.refund(ms(50), 9);
        assert_eq!(fixed.status(ms(150)).remaining, 6);
        let mut sliding = Limiter::new(Algorithm::SlidingWindow, 10, ms(100), None);
        assert!(sliding.acquire(ms(0), 3).is_ok());
        sliding.refund(ms(5), 3);
        assert_eq!(sliding.status(ms(10)).remaining, 7);
    }
}
