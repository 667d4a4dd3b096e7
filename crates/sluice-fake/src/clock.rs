//! The fake's one clock: tokio's (pausable) instant, and the wall time derived from it.

use std::time::{Duration, SystemTime};

use tokio::time::Instant;

/// The moment the fake started, on tokio's clock and on the wall clock together.
///
/// Wall time is never read again: it is `wall_origin + (tokio now - origin)`, so on a paused
/// tokio clock the `Date` header and epoch resets advance with virtual time.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    origin: Instant,
    wall_origin: SystemTime,
}

impl Clock {
    /// Starts the clock now.
    pub(crate) fn start() -> Self {
        Clock {
            origin: Instant::now(),
            wall_origin: SystemTime::now(),
        }
    }

    /// The tokio instant the fake started at.
    pub(crate) fn origin(&self) -> Instant {
        self.origin
    }

    /// Time since the start at tokio instant `now`.
    pub(crate) fn elapsed(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.origin)
    }

    /// The tokio instant `elapsed` after the start.
    pub(crate) fn instant(&self, elapsed: Duration) -> Instant {
        self.origin + elapsed
    }

    /// The wall time `elapsed` after the start.
    pub(crate) fn wall(&self, elapsed: Duration) -> SystemTime {
        self.wall_origin
            .checked_add(elapsed)
            .unwrap_or(self.wall_origin)
    }
}
