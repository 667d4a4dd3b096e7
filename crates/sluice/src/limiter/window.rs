//! The exact sliding window: at most N starts in any window of length W.

use std::collections::VecDeque;

use super::{Micros, micros};
use crate::Rate;

/// A log of recent (and reserved future) start times.
///
/// A start at `t` occupies every window `(t' - W, t']` with `t' >= t`. A new
/// start is only ever appended at or after the latest logged one, so the
/// binding window is the one ending at the new start: it may begin only once
/// the N-th most recent start has left it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlidingWindow {
    count: usize,
    window: Micros,
    /// Sorted ascending.
    starts: VecDeque<Micros>,
}

impl SlidingWindow {
    /// An empty window for `rate`.
    pub fn new(rate: Rate) -> Self {
        SlidingWindow {
            count: rate.count().get() as usize,
            window: micros(rate.window()),
            starts: VecDeque::new(),
        }
    }

    /// The earliest start at or after `max(now, not_before)` that keeps the promise.
    pub fn earliest(&mut self, now: Micros, not_before: Micros) -> Micros {
        self.prune(now);
        let mut at = now.max(not_before);
        if let Some(&last) = self.starts.back() {
            at = at.max(last);
        }
        if self.starts.len() >= self.count {
            let nth_latest = self.starts[self.starts.len() - self.count];
            at = at.max(nth_latest.saturating_add(self.window));
        }
        at
    }

    /// Records a start at `at`, which must be `>= earliest(now)`.
    pub fn charge(&mut self, at: Micros) {
        // Callers charge at an `earliest` result, never before the latest
        // start: an append. Virtual starts may land earlier; keep it sorted.
        if self.starts.back().is_none_or(|&last| last <= at) {
            self.starts.push_back(at);
        } else {
            let index = self.starts.partition_point(|&start| start <= at);
            self.starts.insert(index, at);
        }
    }

    /// Removes one start recorded at `at`; false when there is none.
    pub fn refund(&mut self, at: Micros) -> bool {
        match self.starts.iter().rposition(|&start| start == at) {
            Some(index) => {
                self.starts.remove(index);
                true
            }
            None => false,
        }
    }

    /// Forgets reserved starts after `now`: their callers were told to re-reserve.
    pub fn drop_future(&mut self, now: Micros) {
        while self.starts.back().is_some_and(|&start| start > now) {
            self.starts.pop_back();
        }
    }

    /// Treats the window as full, draining at the steady rate from `until`:
    /// the window ending at `until` is topped up to N starts with virtual
    /// ones, placed one interval apart at its end, so the next starts come
    /// one interval apart. Real starts already logged stay (the promise
    /// still covers them) and count towards the N.
    pub fn restart_empty(&mut self, until: Micros) {
        let interval = self.window / self.count as Micros;
        let from = until.saturating_sub(self.window);
        let logged = self
            .starts
            .iter()
            .filter(|&&start| start > from && start <= until)
            .count();
        // The k-th virtual start leaves the window at `until + k·interval`.
        for k in logged..self.count {
            self.charge(from.saturating_add(k as Micros * interval));
        }
    }

    /// Changes N and W; starts already logged keep counting.
    pub fn set_rate(&mut self, rate: Rate) {
        self.count = rate.count().get() as usize;
        self.window = micros(rate.window());
    }

    /// True when no logged start can affect a start at or after `now`.
    pub fn is_idle(&self, now: Micros) -> bool {
        self.starts
            .back()
            .is_none_or(|&last| last.saturating_add(self.window) <= now)
    }

    /// Starts logged in the window ending at `now` (for status).
    pub fn used(&self, now: Micros) -> usize {
        let from = now.saturating_sub(self.window);
        self.starts
            .iter()
            .filter(|&&start| start > from && start <= now)
            .count()
    }

    fn prune(&mut self, now: Micros) {
        while self
            .starts
            .front()
            .is_some_and(|&start| start.saturating_add(self.window) <= now)
        {
            self.starts.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(text: &str) -> SlidingWindow {
        SlidingWindow::new(text.parse().unwrap())
    }

    #[test]
    fn n_start_at_once_then_the_window_must_slide() {
        let mut w = window("3/200ms");
        for _ in 0..3 {
            let at = w.earliest(0, 0);
            assert_eq!(at, 0);
            w.charge(at);
        }
        assert_eq!(w.earliest(10_000, 0), 200_000);
    }

    #[test]
    fn restart_empty_paces_at_the_steady_rate() {
        let mut w = window("4/1s");
        w.restart_empty(2_000_000);
        let mut starts = vec![];
        for _ in 0..4 {
            let at = w.earliest(1_500_000, 0);
            w.charge(at);
            starts.push(at);
        }
        assert_eq!(starts, [2_000_000, 2_250_000, 2_500_000, 2_750_000]);
    }

    #[test]
    fn restart_empty_tops_up_and_does_not_double_count() {
        let mut w = window("4/1s");
        // Two real starts in the window ending at 2 s: two virtual ones fill it.
        w.charge(1_200_000);
        w.charge(1_300_000);
        w.restart_empty(2_000_000);
        let at = w.earliest(2_000_000, 0);
        w.charge(at);
        assert_eq!(
            at, 2_200_000,
            "the oldest real start leaves the window first"
        );
        assert_eq!(w.earliest(2_000_000, 0), 2_300_000);
    }

    #[test]
    fn drop_future_keeps_the_past() {
        let mut w = window("5/1s");
        w.charge(10);
        w.charge(500);
        w.drop_future(100);
        assert_eq!(w.used(100), 1);
    }
}
