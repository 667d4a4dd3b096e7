//! One scope of the fake, a key on a resource: its limiters and the requests it is serving.

use std::time::Duration;

use crate::config::{Algorithm, Limits};
use crate::headers::{DAY, Snapshot};
use crate::limiter::{Limiter, NotYet, Status};

/// The limiter state of one key on one resource, driven by an explicit `now` (time since
/// the fake started).
#[derive(Debug, Clone)]
pub(crate) struct Scope {
    window: Duration,
    requests: Limiter,
    /// Further request windows, each with its length.
    windows: Vec<(Limiter, Duration)>,
    tokens: Option<Tokens>,
    daily: Option<Limiter>,
    max_in_flight: Option<u32>,
    /// When each request being served will be answered. The fake knows this at admission,
    /// which is what lets it give an exact Retry-After for the in-flight limit.
    serving: Vec<Duration>,
}

/// The token budget of a scope, what a request costs there by default, and the true-ups
/// waiting for their answers.
#[derive(Debug, Clone)]
struct Tokens {
    limiter: Limiter,
    per_request: u32,
    settling: Vec<Settle>,
}

/// Tokens to give back at `due` (when the answer reporting the true usage is sent), for
/// the request that started at `start`.
#[derive(Debug, Clone, Copy)]
struct Settle {
    due: Duration,
    start: Duration,
    refund: u32,
}

impl Scope {
    /// A fresh scope under `limits`.
    pub(crate) fn new(limits: &Limits) -> Self {
        let tokens = limits.tokens.as_ref().map(|tokens| Tokens {
            limiter: Limiter::new(
                limits.algorithm,
                tokens.limit,
                limits.window,
                Some(tokens.limit),
            ),
            per_request: tokens.per_request,
            settling: Vec::new(),
        });
        let windows = limits
            .windows
            .iter()
            .map(|extra| {
                let limiter = Limiter::new(limits.algorithm, extra.count, extra.window, None);
                (limiter, extra.window)
            })
            .collect();
        Scope {
            window: limits.window,
            requests: Limiter::new(limits.algorithm, limits.count, limits.window, limits.burst),
            windows,
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

    /// Applies the true-ups whose answers are due by `now`: from then on the token budget
    /// holds the reported usage instead of the charge.
    pub(crate) fn advance(&mut self, now: Duration) {
        let Some(tokens) = &mut self.tokens else {
            return;
        };
        let limiter = &mut tokens.limiter;
        tokens.settling.retain(|settle| {
            if settle.due > now {
                return true;
            }
            limiter.refund(settle.start, settle.refund);
            false
        });
    }

    /// Whether this scope has a token budget.
    pub(crate) fn has_tokens(&self) -> bool {
        self.tokens.is_some()
    }

    /// True when the in-flight limit alone would refuse a request now.
    pub(crate) fn is_full(&self, now: Duration) -> bool {
        self.max_in_flight
            .is_some_and(|max| self.in_flight(now) >= max)
    }

    /// Whether a request would be admitted at `now`, with the default token charge.
    #[cfg(test)]
    pub(crate) fn check(&self, now: Duration) -> Result<(), NotYet> {
        self.check_costing(now, None)
    }

    /// Whether a request charging `tokens` (`None`: the default charge) would be admitted
    /// at `now`; if not, the exact wait until it would be (the longest of the waits for a
    /// serving slot, every request window, the tokens and the quota).
    pub(crate) fn check_costing(&self, now: Duration, tokens: Option<u32>) -> Result<(), NotYet> {
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
        let token_cost = self.token_cost(tokens);
        let limiters = std::iter::once(Some((&self.requests, 1)))
            .chain(self.windows.iter().map(|(limiter, _)| Some((limiter, 1))))
            .chain([
                self.tokens
                    .as_ref()
                    .map(|budget| (&budget.limiter, token_cost)),
                self.daily.as_ref().map(|limiter| (limiter, 1)),
            ]);
        for (limiter, cost) in limiters.flatten() {
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

    /// Charges one request at `now` with the default token charge.
    #[cfg(test)]
    pub(crate) fn charge(&mut self, now: Duration) {
        self.charge_costing(now, None);
    }

    /// Charges one request charging `tokens` (`None`: the default) at `now` to every
    /// limiter, and returns the tokens charged (0 without a token budget); callers
    /// [`check_costing`](Self::check_costing) first.
    pub(crate) fn charge_costing(&mut self, now: Duration, tokens: Option<u32>) -> u32 {
        let token_cost = self.token_cost(tokens);
        self.requests.charge(now, 1);
        for (limiter, _) in &mut self.windows {
            limiter.charge(now, 1);
        }
        if let Some(limiter) = &mut self.daily {
            limiter.charge(now, 1);
        }
        self.tokens
            .as_mut()
            .map_or(0, |budget| budget.limiter.charge(now, token_cost))
    }

    /// Gives back `refund` tokens of the request that started at `start` once its answer
    /// is due at `due`.
    pub(crate) fn settle(&mut self, start: Duration, due: Duration, refund: u32) {
        if refund == 0 {
            return;
        }
        if let Some(tokens) = &mut self.tokens {
            tokens.settling.push(Settle { due, start, refund });
        }
        self.advance(start);
    }

    /// Counts a request as being served from `now` until `end`.
    pub(crate) fn serve(&mut self, now: Duration, end: Duration) {
        self.serving.retain(|done| *done > now);
        self.serving.push(end);
    }

    /// The numbers the header styles show for this scope at `now`.
    pub(crate) fn snapshot<'a>(&self, resource: &'a str, now: Duration) -> Snapshot<'a> {
        let windows: Vec<(Status, Duration)> = self
            .windows
            .iter()
            .map(|(limiter, window)| (limiter.status(now), *window))
            .collect();
        Snapshot {
            resource,
            window: self.window,
            requests: self.requests.status(now),
            windows,
            tokens: self
                .tokens
                .as_ref()
                .map(|budget| budget.limiter.status(now)),
            daily: self.daily.as_ref().map(|limiter| limiter.status(now)),
        }
    }

    fn token_cost(&self, tokens: Option<u32>) -> u32 {
        let default = self.tokens.as_ref().map_or(0, |budget| budget.per_request);
        tokens.unwrap_or(default)
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

    #[test]
    fn every_window_holds_and_the_longest_wait_wins() {
        let limits = Limits::new(3, ms(1000)).with_window(4, ms(10_000));
        let mut scope = Scope::new(&limits);
        for at in [0, 0, 0] {
            assert!(scope.check(ms(at)).is_ok());
            scope.charge(ms(at));
        }
        assert_eq!(scope.check(ms(0)), Err(NotYet { wait: ms(1000) }));
        assert!(scope.check(ms(1000)).is_ok());
        scope.charge(ms(1000));
        // The second window is full until the first three leave it at 10 s.
        assert_eq!(scope.check(ms(2000)), Err(NotYet { wait: ms(8000) }));
        let snapshot = scope.snapshot("default", ms(2000));
        assert_eq!(snapshot.requests.remaining, 3);
        assert_eq!(snapshot.windows[0].0.remaining, 0);
    }

    #[test]
    fn a_settled_charge_keeps_only_the_usage_once_answered() {
        let limits = Limits::new(10, ms(1000)).with_tokens(1, 1000);
        let mut scope = Scope::new(&limits);
        assert_eq!(scope.charge_costing(ms(0), Some(800)), 800);
        scope.settle(ms(0), ms(100), 600);
        assert!(scope.check_costing(ms(50), Some(300)).is_err());
        scope.advance(ms(100));
        assert!(scope.check_costing(ms(100), Some(300)).is_ok());
        let snapshot = scope.snapshot("default", ms(100));
        assert_eq!(snapshot.tokens.map(|tokens| tokens.remaining), Some(800));
    }
}
