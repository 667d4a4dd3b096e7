//! What this process really sent on a scope: recent start times, for the rolling-window view.
//!
//! The limiter cell is the model of what may start; in shadow mode, calls
//! it would have deferred are sent anyway, so the requests that really
//! went out are logged apart. The log spans the window plus a minute,
//! enough to say how full the window was at the end of each of the last
//! 60 seconds.

use std::collections::VecDeque;

use crate::limiter::Micros;

/// Seconds of history [`SentLog::history`] gives.
pub(crate) const HISTORY_SECONDS: usize = 60;
/// A second in the engine's microseconds.
pub(super) const SECOND: Micros = 1_000_000;
/// Most starts kept: a bound on memory under any load. Past it the oldest
/// go first, so counts over long windows read low rather than grow memory.
const MAX_LOGGED: usize = 65_536;

/// Start times, sorted ascending.
#[derive(Debug, Default)]
pub(crate) struct SentLog {
    starts: VecDeque<Micros>,
}

impl SentLog {
    /// Logs a start at `at`, forgetting what no window of length `window`
    /// ending in the last minute can see any more.
    pub(crate) fn record(&mut self, at: Micros, window: Micros) {
        // What the new start's history no longer sees goes first, so that
        // a scope called again after a quiet minute reuses its block.
        self.prune(at, window);
        if self.starts.capacity() == 0 {
            // A scope called once holds one start: its first block holds
            // just that one (issue 18, the memory of an idle scope).
            self.starts.reserve_exact(1);
        }
        // Starts are logged as they are sent, nearly in order: most go
        // at the end.
        if self.starts.back().is_none_or(|&last| last <= at) {
            self.starts.push_back(at);
        } else {
            let index = self.starts.partition_point(|&start| start <= at);
            self.starts.insert(index, at);
        }
        while self.starts.len() > MAX_LOGGED {
            self.starts.pop_front();
        }
    }

    fn prune(&mut self, now: Micros, window: Micros) {
        let span = window.saturating_add(HISTORY_SECONDS as Micros * SECOND);
        let Some(horizon) = now.checked_sub(span) else {
            return;
        };
        while self.starts.front().is_some_and(|&start| start <= horizon) {
            self.starts.pop_front();
        }
    }

    /// Starts in the window of length `window` ending at `at`: `(at - window, at]`.
    pub(crate) fn in_window(&self, at: Micros, window: Micros) -> u64 {
        // A window reaching back past the origin holds every start up to `at`.
        let after_from = at.checked_sub(window).map_or(0, |from| {
            self.starts.partition_point(|&start| start <= from)
        });
        let through_at = self.starts.partition_point(|&start| start <= at);
        (through_at - after_from.min(through_at)) as u64
    }

    /// [`SentLog::in_window`] at the end of each of the last 60 seconds,
    /// oldest first; the last is at `now`.
    pub(crate) fn history(&self, now: Micros, window: Micros) -> Vec<u64> {
        (0..HISTORY_SECONDS as Micros)
            .rev()
            .map(|ago| {
                // Seconds before the origin saw nothing.
                now.checked_sub(ago * SECOND)
                    .map_or(0, |at| self.in_window(at, window))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_the_window_ending_at_each_second() {
        let mut log = SentLog::default();
        // Three starts at 0.1 s, 0.2 s and 1.5 s, one window of a second.
        for at in [100_000, 1_500_000, 200_000] {
            log.record(at, SECOND);
        }
        assert_eq!(log.in_window(1_000_000, SECOND), 2);
        assert_eq!(log.in_window(1_500_000, SECOND), 1);
        let history = log.history(2_000_000, SECOND);
        assert_eq!(history.len(), HISTORY_SECONDS);
        assert_eq!(&history[57..], [0, 2, 1]);
        // Starts at the origin count; seconds before it saw nothing.
        let mut log = SentLog::default();
        log.record(0, SECOND);
        assert_eq!(log.in_window(500_000, SECOND), 1);
        assert_eq!(&log.history(500_000, SECOND)[58..], [0, 1]);
    }

    #[test]
    fn forgets_what_no_recent_window_sees() {
        let mut log = SentLog::default();
        log.record(0, SECOND);
        log.record(62 * SECOND, SECOND);
        assert_eq!(log.starts.len(), 1);
        assert_eq!(log.in_window(62 * SECOND, 100 * SECOND), 1);
        // The old start left before the new one came: one block of one.
        assert_eq!(log.starts.capacity(), 1);
    }

    #[test]
    fn memory_is_bounded() {
        let mut log = SentLog::default();
        for at in 0..(MAX_LOGGED as Micros + 10) {
            log.record(at, SECOND);
        }
        assert_eq!(log.starts.len(), MAX_LOGGED);
    }
}
