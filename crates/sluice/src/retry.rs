//! Retries: which responses may be retried, full-jitter backoff, and the per-credential retry budget.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
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

/// How many buckets a counter's period is cut into.
const BUCKETS: usize = 10;

/// Counts over a sliding period in ten buckets, without a lock: cheap at
/// any request rate, and one compare-and-swap on one word to count.
///
/// Each bucket's word packs the number of the bucket it counts (the time
/// over the bucket's length, in its high 32 bits, wrapping) and its count
/// (the low 32 bits, saturating). A word whose number is not one of the
/// last ten is stale and counts nothing; counting into it starts it
/// afresh. Bucket numbers wrap after 2³² buckets (136 years of one-second
/// buckets, the default period's): a word untouched for exactly a
/// multiple of that would read as live again, with its old count.
#[derive(Debug)]
struct Counter {
    buckets: [AtomicU64; BUCKETS],
    bucket_len: Micros,
}

impl Counter {
    fn new(period: Micros) -> Self {
        Counter {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            bucket_len: (period / BUCKETS as Micros).max(1),
        }
    }

    /// The number of the bucket `now` falls in, wrapped to 32 bits, and
    /// the word that counts it (placed by the whole number, so that the
    /// ten live buckets always have ten words, across a wrap too).
    fn bucket(&self, now: Micros) -> (u32, &AtomicU64) {
        let whole = now / self.bucket_len;
        // Truncation is the wrap the type documents.
        (
            whole as u32,
            &self.buckets[(whole % BUCKETS as u64) as usize],
        )
    }

    fn add(&self, now: Micros) {
        let (number, bucket) = self.bucket(now);
        let mut word = bucket.load(Ordering::Relaxed);
        loop {
            let (held, count) = unpack(word);
            let next = if count != 0 && (held.wrapping_sub(number) as usize) < 2 * BUCKETS {
                // This bucket's word; or a newer bucket took it while
                // `now` was read, and the start is counted there, a moment
                // late, not lost.
                pack(held, count.saturating_add(1))
            } else {
                // An empty word, or one that counts a bucket at least ten
                // before this one (or so far from it that it must be
                // stale): it starts afresh.
                pack(number, 1)
            };
            match bucket.compare_exchange_weak(word, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return,
                Err(seen) => word = seen,
            }
        }
    }

    /// What the ten buckets ending with `now`'s hold.
    fn total(&self, now: Micros) -> u64 {
        let (number, _) = self.bucket(now);
        self.buckets
            .iter()
            .map(|bucket| unpack(bucket.load(Ordering::Relaxed)))
            .filter(|(held, _)| (number.wrapping_sub(*held) as usize) < BUCKETS)
            .map(|(_, count)| u64::from(count))
            .sum()
    }
}

fn pack(number: u32, count: u32) -> u64 {
    (u64::from(number) << 32) | u64::from(count)
}

fn unpack(word: u64) -> (u32, u32) {
    ((word >> 32) as u32, word as u32)
}

/// A credential's retry budget: retries over the last window may be at most
/// `ratio` of the requests plus a floor, so retries cannot feed a storm.
///
/// Shared by every call on the credential: a first attempt is counted
/// without a lock (every call does it); a retry is decided under one, so
/// that two retries at once cannot both take the budget's last one.
#[derive(Debug)]
pub struct RetryBudget {
    ratio: f64,
    floor: u64,
    requests: Counter,
    retries: Mutex<Counter>,
}

impl RetryBudget {
    /// A budget of `ratio` x requests + `floor` retries per `window`.
    pub fn new(ratio: f64, floor: u32, window: Duration) -> Self {
        let period = micros(window);
        RetryBudget {
            ratio,
            floor: u64::from(floor),
            requests: Counter::new(period),
            retries: Mutex::new(Counter::new(period)),
        }
    }

    /// Records a first attempt.
    pub fn record_request(&self, now: Micros) {
        self.requests.add(now);
    }

    /// Spends one retry if the budget allows it.
    pub fn try_retry(&self, now: Micros) -> bool {
        let retries = self.retries.lock();
        let requests = self.requests.total(now) as f64;
        let allowed = self.floor as f64 + self.ratio * requests;
        if (retries.total(now) as f64) < allowed {
            retries.add(now);
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
        let budget = RetryBudget::new(0.2, 2, Duration::from_secs(10));
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
    fn a_request_counts_until_its_bucket_is_ten_buckets_old() {
        // A 10 s period: one-second buckets.
        let counter = Counter::new(10_000_000);
        counter.add(2_500_000);
        counter.add(2_999_999);
        assert_eq!(counter.total(2_999_999), 2);
        // Bucket 2 is live while the buckets ending with the clock's are 3..=12.
        assert_eq!(counter.total(11_999_999), 2);
        assert_eq!(counter.total(12_000_000), 0);
        // Counting into its word again ten buckets later starts it afresh.
        counter.add(12_000_000);
        assert_eq!(counter.total(12_000_000), 1);
        assert_eq!(counter.total(21_999_999), 1);
    }

    #[test]
    fn a_start_read_before_a_newer_bucket_took_its_word_is_counted_there() {
        let counter = Counter::new(10_000_000);
        counter.add(12_000_000);
        // A caller that read the clock at 2 s, ten buckets back, counts late.
        counter.add(2_000_000);
        assert_eq!(counter.total(12_000_000), 2);
    }

    #[test]
    fn a_full_bucket_saturates_instead_of_spilling_into_its_number() {
        let counter = Counter::new(10_000_000);
        counter.buckets[3].store(pack(3, u32::MAX - 1), Ordering::Relaxed);
        counter.add(3_000_000);
        counter.add(3_000_000);
        assert_eq!(counter.total(3_000_000), u64::from(u32::MAX));
        assert_eq!(unpack(counter.buckets[3].load(Ordering::Relaxed)).0, 3);
    }

    #[test]
    fn the_ten_live_buckets_keep_ten_words_across_the_numbers_wrap() {
        // One-microsecond buckets, so that the 32-bit numbers wrap within a
        // u64 of microseconds.
        let counter = Counter::new(10);
        let wrap = 1u64 << 32;
        for now in wrap - 5..wrap + 5 {
            counter.add(now);
        }
        assert_eq!(counter.total(wrap + 4), 10);
        assert_eq!(counter.total(wrap + 9), 5);
    }

    #[test]
    fn a_word_stale_for_half_the_numbers_range_starts_afresh() {
        // One-microsecond buckets: the word of bucket 0, untouched while
        // the numbers went three quarters of the way round.
        let counter = Counter::new(10);
        counter.add(0);
        let later = 3_221_225_480;
        assert_eq!(later % 10, 0, "the same word");
        counter.add(later);
        counter.add(later);
        assert_eq!(counter.total(later), 2);
    }

    #[test]
    fn requests_counted_at_once_from_many_threads_are_all_counted() {
        let budget = RetryBudget::new(1.0, 0, Duration::from_secs(10));
        std::thread::scope(|threads| {
            for _ in 0..4 {
                threads.spawn(|| {
                    for _ in 0..10_000 {
                        budget.record_request(5_000_000);
                    }
                });
            }
        });
        assert_eq!(budget.requests.total(5_000_000), 40_000);
    }

    #[test]
    fn retries_at_once_never_take_more_than_the_budget() {
        // Floor 3 plus a tenth of 100 requests: 13 retries in the window.
        let budget = RetryBudget::new(0.1, 3, Duration::from_secs(10));
        for _ in 0..100 {
            budget.record_request(1_000_000);
        }
        let granted = std::sync::atomic::AtomicU64::new(0);
        std::thread::scope(|threads| {
            for _ in 0..4 {
                threads.spawn(|| {
                    for _ in 0..50 {
                        if budget.try_retry(1_000_000) {
                            granted.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        assert_eq!(granted.load(Ordering::Relaxed), 13);
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
