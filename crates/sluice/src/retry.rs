//! Retries: which responses may be retried, full-jitter backoff, and the per-credential retry budget.

use std::time::Duration;

use rand::Rng;

use crate::limiter::{Micros, micros};

/// Full jitter: a uniform wait in `[0, min(cap, base * 2^attempt))`, so the
/// retries of calls that failed together do not fire together.
pub fn full_jitter<R: Rng + ?Sized>(
    rng: &mut R,
    base: Duration,
    cap: Duration,
    attempt: u32,
) -> Duration {
    let ceiling = base
        .checked_mul(1u32.checked_shl(attempt.min(31)).unwrap_or(u32::MAX))
        .unwrap_or(cap)
        .min(cap);
    let ceiling = micros(ceiling);
    if ceiling == 0 {
        return Duration::ZERO;
    }
    Duration::from_micros(rng.random_range(0..ceiling))
}

/// What kind of failure an attempt ended in, for the retry decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The server refused for rate or quota (429, or a 503/403 that says so).
    Throttled,
    /// The server is unavailable (503 without a wait): it did not act.
    Unavailable,
    /// Another 5xx: the server may have acted.
    ServerError,
    /// No connection was made: nothing was sent.
    NotSent,
    /// The connection broke after the request may have been sent.
    Transport,
}

impl Failure {
    /// May a call of this kind be retried after this failure? A refusal
    /// means the server did not act, so even writes may go again; anything
    /// that may have reached the server is retried only for reads and
    /// idempotent writes.
    pub fn retryable(self, read_or_idempotent: bool) -> bool {
        match self {
            Failure::Throttled | Failure::Unavailable | Failure::NotSent => true,
            Failure::ServerError | Failure::Transport => read_or_idempotent,
        }
    }
}

/// Counts over a sliding period in ten buckets: cheap at any request rate.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Counter {
    buckets: [u64; 10],
    /// Index of the bucket that `head_start` begins.
    head: usize,
    head_start: Micros,
    bucket_len: Micros,
}

impl Counter {
    fn new(period: Micros) -> Self {
        Counter {
            buckets: [0; 10],
            head: 0,
            head_start: 0,
            bucket_len: (period / 10).max(1),
        }
    }

    fn advance(&mut self, now: Micros) {
        let steps = now.saturating_sub(self.head_start) / self.bucket_len;
        for _ in 0..steps.min(10) {
            self.head = (self.head + 1) % 10;
            self.buckets[self.head] = 0;
        }
        self.head_start += steps * self.bucket_len;
    }

    fn add(&mut self, now: Micros) {
        self.advance(now);
        self.buckets[self.head] += 1;
    }

    fn total(&mut self, now: Micros) -> u64 {
        self.advance(now);
        self.buckets.iter().sum()
    }
}

/// A credential's retry budget: retries over the last window may be at most
/// `ratio` of the requests plus a floor, so retries cannot feed a storm.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryBudget {
    ratio: f64,
    floor: u64,
    requests: Counter,
    retries: Counter,
}

impl RetryBudget {
    /// A budget of `ratio` x requests + `floor` retries per `window`.
    pub fn new(ratio: f64, floor: u32, window: Duration) -> Self {
        let period = micros(window);
        RetryBudget {
            ratio,
            floor: u64::from(floor),
            requests: Counter::new(period),
            retries: Counter::new(period),
        }
    }

    /// Records a first attempt.
    pub fn record_request(&mut self, now: Micros) {
        self.requests.add(now);
    }

    /// Spends one retry if the budget allows it.
    pub fn try_retry(&mut self, now: Micros) -> bool {
        let requests = self.requests.total(now) as f64;
        let allowed = self.floor as f64 + self.ratio * requests;
        if (self.retries.total(now) as f64) < allowed {
            self.retries.add(now);
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;

    #[test]
    fn jitter_stays_under_the_exponential_ceiling_and_the_cap() {
        let mut rng = StdRng::seed_from_u64(7);
        let base = Duration::from_millis(500);
        let cap = Duration::from_secs(20);
        for attempt in 0..40 {
            let ceiling = (base * 2u32.saturating_pow(attempt.min(20))).min(cap);
            for _ in 0..50 {
                assert!(full_jitter(&mut rng, base, cap, attempt) < ceiling);
            }
        }
    }

    #[test]
    fn jitter_spreads_a_wave() {
        let mut rng = StdRng::seed_from_u64(1);
        let waits: Vec<_> = (0..20)
            .map(|_| {
                full_jitter(
                    &mut rng,
                    Duration::from_millis(500),
                    Duration::from_secs(20),
                    2,
                )
            })
            .collect();
        let mut unique = waits.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(
            unique.len(),
            waits.len(),
            "no two retries of one wave fire together"
        );
    }

    #[test]
    fn budget_allows_the_floor_then_a_share_of_requests() {
        let mut budget = RetryBudget::new(0.2, 2, Duration::from_secs(10));
        assert!(budget.try_retry(0));
        assert!(budget.try_retry(0));
        assert!(!budget.try_retry(0));
        for _ in 0..10 {
            budget.record_request(0);
        }
        assert!(budget.try_retry(0));
        assert!(budget.try_retry(0));
        assert!(!budget.try_retry(0));
        // Eleven seconds later the window has forgotten it all; the floor is back.
        assert!(budget.try_retry(11_000_000));
    }

    #[test]
    fn writes_retry_only_when_the_server_did_not_act() {
        assert!(Failure::Throttled.retryable(false));
        assert!(Failure::NotSent.retryable(false));
        assert!(!Failure::ServerError.retryable(false));
        assert!(Failure::ServerError.retryable(true));
        assert!(!Failure::Transport.retryable(false));
    }
}
