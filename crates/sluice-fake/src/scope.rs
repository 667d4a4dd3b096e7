//! One scope of the fake, a key on a resource: its limiters and the requests it is serving.

use std::time::Duration;

use crate::config::{Algorithm, Limits};
use crate::headers::{DAY, Snapshot};
use crate::limiter::{Limiter, NotYet};

/// The limiter state of one key on one resource, driven by an explicit `now` (time since
/// the fake started).
#[derive(Debug, Clone)]
pub(crate) struct Scope {
    window: Duration,
    requests: Limiter,
    /// The token limiter and what one request costs in it.
    tokens: Option<(Limiter, u32)>,
    daily: Option<Limiter>,
    max_in_flight: Option<u32>,
    /// When each request being served will be answered. The fake knows this at admission,
    /// which is what lets it give an exact Retry-After for the in-flight limit.
    serving: Vec<Duration>,
}

impl Scope {
    /// A fresh scope under `limits`.
    pub(crate) fn new(limits: &Limits) -> Self {
        let tokens = limits.tokens.map(|tokens| {
            let limiter = Limiter::new(
                limits.algorithm,
                tokens.limit,
                limits.window,
                Some(tokens.limit),
            );
            (limiter, tokens.per_request)
        });
        Scope {
            window: limits.window,
            requests: Limiter::new(limits.algorithm, limits.count, limits.window, limits.burst),
            tokens,
            daily: limits
                .daily_quota
                .map(|quota| Limiter::new(Algorithm::FixedWindow, quota, DAY, None)),
            max_in_flight: limits.max_in_flight,
            serving: Vec::new(),
        }
    }

    /// Requests being served at `now`. One whose answer is due exactly at `now` is done,
    /// so back-to-back requests never count as overlapping.
    pub(crate) fn in_flight(&self, now: Duration) -> u32 {
        let serving = self.serving.iter().filter(|end| **end > now).count();
        u32::try_from(serving).unwrap_or(u32::MAX)
    }

    /// Whether a request would be admitted at `now`; if not, the exact wait until it would
    /// be (the longest of the waits for a serving slot, the rate, the tokens and the quota).
    pub(crate) fn check(&self, now: Duration) -> Result<(), NotYet> {
        let mut wait = Duration::ZERO;
        if let Some(max) = self.max_in_flight {
            if self.in_flight(now) >= max {
                let first_done = self
                    .serving
                    .iter()
                    .filter(|end| **end > now)
                    .min()
                    .copied()
                    .unwrap_or(now);
                wait = first_done.saturating_sub(now);
            }
        }
        let limiters = [
            Some((&self.requests, 1)),
            self.tokens.as_ref().map(|(limiter, cost)| (limiter, *cost)),
            self.daily.as_ref().map(|limiter| (limiter, 1)),
        ];
        for (limiter, cost) in limiters.into_iter().flatten() {
            if let Err(rejection) = limiter.check(now, cost) {
                wait = wait.max(rejection.wait);
            }
        }
        if wait.is_zero() {
            Ok(())
        } else {
            Err(NotYet { wait })
        }
    }

    /// Charges one request at `now` to every limiter; callers [`check`](Self::check) first.
    pub(crate) fn charge(&mut self, now: Duration) {
        self.requests.charge(now, 1);
        if let Some((limiter, cost)) = &mut self.tokens {
            limiter.charge(now, *cost);
        }
        if let Some(limiter) = &mut self.daily {
            limiter.charge(now, 1);
        }
    }

    /// Counts a request as being served from `now` until `end`.
    pub(crate) fn serve(&mut self, now: Duration, end: Duration) {
        self.serving.retain(|done| *done > now);
        self.serving.push(end);
    }

    /// The numbers the header styles show for this scope at `now`.
    pub(crate) fn snapshot<'a>(&self, resource: &'a str, now: Duration) -> Snapshot<'a> {
        Snapshot {
            resource,
            window: self.window,
            requests: self.requests.status(now),
            tokens: self.tokens.as_ref().map(|(limiter, _)| limiter.status(now)),
            daily: self.daily.as_ref().map(|limiter| limiter.status(now)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(millis: u64) -> Duration {
        Duration::from_millis(millis)
    }

    #[test]
    fn in_flight_limit_waits_for_the_first_to_finish() {
        let mut scope = Scope::new(&Limits::new(100, ms(1000)).with_max_in_flight(2));
        for end in [ms(300), ms(100)] {
            assert!(scope.check(ms(0)).is_ok());
            scope.charge(ms(0));
            scope.serve(ms(0), end);
        }
        assert_eq!(scope.in_flight(ms(10)), 2);
        assert_eq!(scope.check(ms(10)), Err(NotYet { wait: ms(90) }));
        assert_eq!(scope.in_flight(ms(100)), 1);
        assert!(scope.check(ms(100)).is_ok());
    }

    #[test]
    fn the_longest_wait_wins() {
        let limits = Limits::new(1, ms(1000)).with_daily_quota(1);
        let mut scope = Scope::new(&limits);
        scope.charge(ms(0));
        assert_eq!(
            scope.check(ms(0)),
            Err(NotYet {
                wait: Duration::from_secs(86_400)
            })
        );
        let snapshot = scope.snapshot("default", ms(0));
        assert_eq!(snapshot.daily.map(|daily| daily.remaining), Some(0));
    }

    #[test]
    fn tokens_are_a_second_budget() {
        let limits = Limits::new(10, ms(1000)).with_tokens(400, 1000);
        let mut scope = Scope::new(&limits);
        for _ in 0..2 {
            assert!(scope.check(ms(0)).is_ok());
            scope.charge(ms(0));
        }
        assert_eq!(scope.check(ms(0)), Err(NotYet { wait: ms(1000) }));
        let snapshot = scope.snapshot("default", ms(0));
        assert_eq!(snapshot.requests.remaining, 8);
        assert_eq!(snapshot.tokens.map(|tokens| tokens.remaining), Some(200));
    }
}
