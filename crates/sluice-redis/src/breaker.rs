//! The circuit breaker: stop asking Redis after consecutive failures, probe again with backoff.
//!
//! Pure state with `now` passed in. Closed, every call asks Redis; after
//! `failures` failures in a row it opens for `open_for`; then one call
//! probes (half-open) while the others wait for its answer (at most until
//! it would be replaced) or, if they cannot wait that long, decide
//! locally. A probe that succeeds closes it; one that fails reopens it for
//! twice as long, up to `max_open_for`.

use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

/// The breaker's state, as status shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BreakerState {
    /// Asking Redis.
    Closed,
    /// Not asking Redis until a probe is due.
    Open,
    /// One probe is asking Redis; the others decide locally.
    HalfOpen,
}

/// Whether a call may ask Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Permit {
    /// Ask.
    Ask,
    /// Ask, as the probe: report the result.
    Probe,
    /// A probe is out: wait for its answer, at most until this instant
    /// (when it is replaced), then ask again.
    AwaitProbe(Instant),
    /// Decide locally.
    Refuse,
}

#[derive(Debug, Clone)]
pub(crate) struct Breaker {
    failures_to_open: u32,
    first_open: Duration,
    max_open: Duration,
    consecutive: u32,
    state: State,
    /// How long the next opening lasts.
    backoff: Duration,
}

#[derive(Debug, Clone, Copy)]
enum State {
    Closed,
    Open { until: Instant },
    HalfOpen { probe_since: Instant },
}

impl Breaker {
    pub(crate) fn new(failures_to_open: u32, first_open: Duration, max_open: Duration) -> Self {
        Breaker {
            failures_to_open: failures_to_open.max(1),
            first_open,
            max_open,
            consecutive: 0,
            state: State::Closed,
            backoff: first_open,
        }
    }

    /// May a call ask Redis at `now`? A probe whose answer never came (it
    /// would have timed out) is replaced after `stale_probe`.
    pub(crate) fn permit(&mut self, now: Instant, stale_probe: Duration) -> Permit {
        match self.state {
            State::Closed => Permit::Ask,
            State::Open { until } if now >= until => {
                self.state = State::HalfOpen { probe_since: now };
                Permit::Probe
            }
            State::Open { .. } => Permit::Refuse,
            State::HalfOpen { probe_since } if now >= probe_since + stale_probe => {
                self.state = State::HalfOpen { probe_since: now };
                Permit::Probe
            }
            State::HalfOpen { probe_since } => Permit::AwaitProbe(probe_since + stale_probe),
        }
    }

    /// While a probe is out, when it would be replaced (see `permit`).
    pub(crate) fn probe_out(&self, stale_probe: Duration) -> Option<Instant> {
        match self.state {
            State::HalfOpen { probe_since } => Some(probe_since + stale_probe),
            _ => None,
        }
    }

    /// Redis answered.
    pub(crate) fn success(&mut self) {
        self.consecutive = 0;
        self.backoff = self.first_open;
        self.state = State::Closed;
    }

    /// Redis failed (a timeout, a dropped connection, an error reply).
    pub(crate) fn failure(&mut self, now: Instant) {
        self.consecutive = self.consecutive.saturating_add(1);
        match self.state {
            State::Closed if self.consecutive >= self.failures_to_open => self.open(now),
            State::Closed | State::Open { .. } => {}
            State::HalfOpen { .. } => {
                self.backoff = (self.backoff * 2).min(self.max_open);
                self.open(now);
            }
        }
    }

    fn open(&mut self, now: Instant) {
        self.state = State::Open {
            until: now + self.backoff,
        };
    }

    pub(crate) fn state(&self) -> BreakerState {
        match self.state {
            State::Closed => BreakerState::Closed,
            State::Open { .. } => BreakerState::Open,
            State::HalfOpen { .. } => BreakerState::HalfOpen,
        }
    }

    pub(crate) fn consecutive_failures(&self) -> u32 {
        self.consecutive
    }

    /// How long until the next probe (zero when closed or due).
    pub(crate) fn retry_in(&self, now: Instant) -> Duration {
        match self.state {
            State::Open { until } => until.saturating_duration_since(now),
            _ => Duration::ZERO,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn opens_after_consecutive_failures_then_probes_with_backoff() {
        let t0 = Instant::now();
        let mut b = Breaker::new(3, 100 * MS, 350 * MS);
        let stale = 50 * MS;
        b.failure(t0);
        b.failure(t0);
        assert_eq!(b.permit(t0, stale), Permit::Ask);
        b.failure(t0);
        assert_eq!(b.state(), BreakerState::Open);
        assert_eq!(b.permit(t0 + 99 * MS, stale), Permit::Refuse);
        assert_eq!(b.permit(t0 + 100 * MS, stale), Permit::Probe);
        // Only one probe at a time: the others wait for it.
        assert_eq!(
            b.permit(t0 + 101 * MS, stale),
            Permit::AwaitProbe(t0 + 150 * MS)
        );
        b.failure(t0 + 110 * MS);
        assert_eq!(b.retry_in(t0 + 110 * MS), 200 * MS);
        assert_eq!(b.permit(t0 + 310 * MS, stale), Permit::Probe);
        b.failure(t0 + 310 * MS);
        // Capped.
        assert_eq!(b.retry_in(t0 + 310 * MS), 350 * MS);
        assert_eq!(b.permit(t0 + 660 * MS, stale), Permit::Probe);
        b.success();
        assert_eq!(b.state(), BreakerState::Closed);
        assert_eq!(b.consecutive_failures(), 0);
        // Backoff restarts after a success.
        for _ in 0..3 {
            b.failure(t0 + 700 * MS);
        }
        assert_eq!(b.retry_in(t0 + 700 * MS), 100 * MS);
    }

    #[test]
    fn a_lost_probe_is_replaced() {
        let t0 = Instant::now();
        let mut b = Breaker::new(1, 10 * MS, 10 * MS);
        b.failure(t0);
        assert_eq!(b.permit(t0 + 10 * MS, 50 * MS), Permit::Probe);
        assert_eq!(
            b.permit(t0 + 59 * MS, 50 * MS),
            Permit::AwaitProbe(t0 + 60 * MS)
        );
        assert_eq!(b.permit(t0 + 60 * MS, 50 * MS), Permit::Probe);
    }

    #[test]
    fn a_success_resets_the_count() {
        let t0 = Instant::now();
        let mut b = Breaker::new(2, 10 * MS, 10 * MS);
        b.failure(t0);
        b.success();
        b.failure(t0);
        assert_eq!(b.state(), BreakerState::Closed);
    }
}
