//! The limiters sluice is compared against in the budget scenarios: a
//! requests-only sliding window, and a "reserve, then reconcile" fixed window
//! over requests and tokens in the manner of LiteLLM's rate limiter.

use std::collections::VecDeque;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

/// At most `count` starts in any rolling `window`, from an exact log of
/// starts: a correct limiter that knows nothing but requests (aiolimiter,
/// pyrate-limiter configured with the API's requests per minute).
#[derive(Debug)]
pub(crate) struct RequestWindow {
    count: usize,
    window: Duration,
    log: Mutex<VecDeque<Instant>>,
}

impl RequestWindow {
    pub(crate) fn new(count: u32, window: Duration) -> Self {
        RequestWindow {
            count: usize::try_from(count).unwrap_or(usize::MAX).max(1),
            window,
            log: Mutex::new(VecDeque::new()),
        }
    }

    /// Takes a start at `now`, or says when to ask again.
    fn try_at(&self, now: Instant) -> Result<(), Instant> {
        let mut log = self.log.lock();
        while log.front().is_some_and(|start| *start + self.window <= now) {
            log.pop_front();
        }
        if log.len() < self.count {
            log.push_back(now);
            return Ok(());
        }
        let oldest = log.front().copied().unwrap_or(now);
        Err(oldest + self.window)
    }

    /// Waits for a start.
    pub(crate) async fn acquire(&self) {
        while let Err(next) = self.try_at(Instant::now()) {
            tokio::time::sleep_until(next).await;
        }
    }
}

/// What a [`ReserveReconcile`] reservation holds until it is reconciled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reservation {
    window: u64,
    tokens: u64,
}

/// LiteLLM's shape: counters per fixed window (aligned to the limiter's
/// creation, as a per-minute key is); before a call it reserves one request
/// and the call's estimated tokens if both fit the current window, else waits
/// for the next; after the answer it reconciles the estimate to the reported
/// usage in the window it reserved in (nothing to do once that has ended).
#[derive(Debug)]
pub(crate) struct ReserveReconcile {
    requests: u32,
    tokens: u64,
    window: Duration,
    origin: Instant,
    state: Mutex<WindowCounters>,
}

#[derive(Debug, Default)]
struct WindowCounters {
    index: u64,
    requests: u32,
    tokens: u64,
}

impl ReserveReconcile {
    pub(crate) fn new(requests: u32, tokens: u64, window: Duration) -> Self {
        ReserveReconcile {
            requests,
            tokens,
            window,
            origin: Instant::now(),
            state: Mutex::new(WindowCounters::default()),
        }
    }

    fn index(&self, now: Instant) -> u64 {
        let elapsed = now.saturating_duration_since(self.origin).as_nanos();
        u64::try_from(elapsed / self.window.as_nanos().max(1)).unwrap_or(u64::MAX)
    }

    fn window_start(&self, index: u64) -> Instant {
        let nanos = u64::try_from(self.window.as_nanos()).unwrap_or(u64::MAX);
        self.origin + Duration::from_nanos(nanos.saturating_mul(index))
    }

    /// Reserves at `now`, or says when the next window opens.
    fn try_at(&self, now: Instant, estimate: u64) -> Result<Reservation, Instant> {
        let index = self.index(now);
        let mut state = self.state.lock();
        if state.index != index {
            *state = WindowCounters {
                index,
                ..WindowCounters::default()
            };
        }
        // A lone estimate above the whole budget is let through in an empty
        // window rather than never (LiteLLM checks the counter before adding).
        let fits = state.requests < self.requests
            && (state.tokens == 0 || state.tokens.saturating_add(estimate) <= self.tokens);
        if !fits {
            return Err(self.window_start(index.saturating_add(1)));
        }
        state.requests += 1;
        state.tokens = state.tokens.saturating_add(estimate);
        Ok(Reservation {
            window: index,
            tokens: estimate,
        })
    }

    /// Waits for a window with room for one request and `estimate` tokens.
    pub(crate) async fn acquire(&self, estimate: u64) -> Reservation {
        loop {
            match self.try_at(Instant::now(), estimate) {
                Ok(reservation) => return reservation,
                Err(next) => tokio::time::sleep_until(next).await,
            }
        }
    }

    /// Replaces the reservation's estimate by the tokens really used (0 for
    /// a refused call), if its window is still the current one.
    pub(crate) fn reconcile(&self, reservation: Reservation, used: u64) {
        let mut state = self.state.lock();
        if state.index == reservation.window {
            state.tokens = state
                .tokens
                .saturating_sub(reservation.tokens)
                .saturating_add(used);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(millis: u64) -> Duration {
        Duration::from_millis(millis)
    }

    #[tokio::test(start_paused = true)]
    async fn the_request_window_rolls() {
        let limiter = RequestWindow::new(2, ms(1000));
        let t0 = Instant::now();
        assert_eq!(limiter.try_at(t0), Ok(()));
        assert_eq!(limiter.try_at(t0 + ms(300)), Ok(()));
        assert_eq!(limiter.try_at(t0 + ms(400)), Err(t0 + ms(1000)));
        limiter.acquire().await;
        assert_eq!(Instant::now() - t0, ms(1000));
        assert_eq!(limiter.try_at(t0 + ms(1100)), Err(t0 + ms(1300)));
    }

    #[tokio::test(start_paused = true)]
    async fn reserve_reconcile_frees_what_the_answer_did_not_use() {
        let limiter = ReserveReconcile::new(10, 1000, ms(1000));
        let t0 = Instant::now();
        let first = limiter.try_at(t0, 800);
        assert!(first.is_ok());
        assert_eq!(limiter.try_at(t0 + ms(10), 300), Err(t0 + ms(1000)));
        if let Ok(first) = first {
            limiter.reconcile(first, 400);
        }
        assert!(limiter.try_at(t0 + ms(20), 600).is_ok());
        assert_eq!(limiter.try_at(t0 + ms(30), 1), Err(t0 + ms(1000)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_fixed_window_lets_twice_the_budget_through_across_a_boundary() {
        let limiter = ReserveReconcile::new(10, 1000, ms(1000));
        let t0 = Instant::now();
        assert!(limiter.try_at(t0 + ms(990), 1000).is_ok());
        // 10 ms later, in the next window: another whole budget.
        let next = limiter.try_at(t0 + ms(1000), 1000);
        assert_eq!(next.map(|r| r.window), Ok(1));
        // A reconcile for the ended window changes nothing in the new one.
        limiter.reconcile(
            Reservation {
                window: 0,
                tokens: 1000,
            },
            0,
        );
        assert!(limiter.try_at(t0 + ms(1001), 1).is_err());
        tokio::time::advance(ms(1001)).await;
        let _ = limiter.acquire(1).await;
        assert_eq!(Instant::now() - t0, ms(2000));
    }
}
