//! When a `--listen` session was last used, and how many of its requests
//! are in progress (`[mcp] session_queue`, idle expiry).

use parking_lot::Mutex;
use tokio::time::Instant;

/// When a session was last used, and what it has in progress.
#[derive(Debug)]
pub(super) struct Activity {
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    last: Instant,
    /// Requests of its POSTs not yet answered.
    requests: usize,
}

impl Default for Activity {
    fn default() -> Self {
        Activity {
            state: Mutex::new(State {
                last: Instant::now(),
                requests: 0,
            }),
        }
    }
}

impl Activity {
    /// The client was heard from.
    pub(super) fn touch(&self) {
        self.state.lock().last = Instant::now();
    }

    /// Takes `n` places for requests, unless that would pass `cap`; then
    /// returns the requests in progress.
    pub(super) fn take(&self, n: usize, cap: usize) -> Result<(), usize> {
        let mut state = self.state.lock();
        state.last = Instant::now();
        if state.requests + n > cap {
            return Err(state.requests);
        }
        state.requests += n;
        Ok(())
    }

    /// `n` requests are done (answered, or their POST gone).
    pub(super) fn release(&self, n: usize) {
        if n == 0 {
            return;
        }
        let mut state = self.state.lock();
        state.requests = state.requests.saturating_sub(n);
        state.last = Instant::now();
    }

    /// Since when the session has been idle; `None` while a request is in progress.
    pub(super) fn idle_since(&self) -> Option<Instant> {
        let state = self.state.lock();
        (state.requests == 0).then_some(state.last)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn activity_counts_requests_and_is_idle_only_without_any() {
        let activity = Activity::default();
        assert!(activity.take(2, 3).is_ok());
        assert_eq!(activity.take(2, 3), Err(2));
        assert!(activity.idle_since().is_none());
        tokio::time::advance(Duration::from_secs(5)).await;
        activity.release(2);
        assert_eq!(activity.idle_since(), Some(Instant::now()));
        assert!(activity.take(3, 3).is_ok());
    }
}
