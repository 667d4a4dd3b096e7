//! Shadow mode's record per scope: what enforcing would have done to calls that were sent at once.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::Serialize;

use crate::limiter::micros;
use crate::observe::ShadowDecision;

/// The counters behind [`ShadowStatus`], bumped as decisions are made.
#[derive(Debug, Default)]
pub(crate) struct ShadowCounters {
    would_wait: AtomicU64,
    would_wait_us: AtomicU64,
    would_defer: AtomicU64,
    would_shed: AtomicU64,
}

/// What enforcing would have done on a scope, counted since start
/// (`/v1/status` `"shadow"`). All zero for a credential that enforces.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ShadowStatus {
    /// Calls that would have waited inline (for a start slot or a permit).
    pub would_wait: u64,
    /// The sum of those waits, in milliseconds.
    pub would_wait_ms_total: u64,
    /// Calls that would have been deferred (`rate_limited` or
    /// `quota_exhausted` without sending).
    pub would_defer: u64,
    /// Calls that would have been shed (the admission queue was full).
    pub would_shed: u64,
}

impl ShadowCounters {
    pub(crate) fn record(&self, decision: ShadowDecision, wait: Duration) {
        match decision {
            ShadowDecision::Wait => {
                self.would_wait.fetch_add(1, Ordering::Relaxed);
                self.would_wait_us
                    .fetch_add(micros(wait), Ordering::Relaxed);
            }
            ShadowDecision::Defer => {
                self.would_defer.fetch_add(1, Ordering::Relaxed);
            }
            ShadowDecision::Shed => {
                self.would_shed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    pub(crate) fn status(&self) -> ShadowStatus {
        ShadowStatus {
            would_wait: self.would_wait.load(Ordering::Relaxed),
            would_wait_ms_total: self.would_wait_us.load(Ordering::Relaxed).div_ceil(1_000),
            would_defer: self.would_defer.load(Ordering::Relaxed),
            would_shed: self.would_shed.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_each_decision_and_sums_waits() {
        let counters = ShadowCounters::default();
        counters.record(ShadowDecision::Wait, Duration::from_millis(300));
        counters.record(ShadowDecision::Wait, Duration::from_micros(200_500));
        counters.record(ShadowDecision::Defer, Duration::from_secs(4));
        counters.record(ShadowDecision::Shed, Duration::from_secs(1));
        assert_eq!(
            counters.status(),
            ShadowStatus {
                would_wait: 2,
                would_wait_ms_total: 501,
                would_defer: 1,
                would_shed: 1,
            }
        );
    }
}
