//! What a cell enforces on its own, before anything the server says: nothing, an exact window, or a bucket.

use std::num::NonZeroU32;

use super::gcra::GcraUndo;
use super::{Gcra, Micros, SlidingWindow};
use crate::Rate;

/// The limit a cell enforces on its own, before anything the server says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Algorithm {
    /// No client-side rate: only the server's signals gate starts.
    Unlimited,
    Window(SlidingWindow),
    Gcra(Gcra),
}

impl Algorithm {
    pub(super) fn of(rate: Rate, burst: Option<NonZeroU32>) -> Self {
        match burst {
            None => Algorithm::Window(SlidingWindow::new(rate)),
            Some(burst) => Algorithm::Gcra(Gcra::new(rate, burst)),
        }
    }

    pub(super) fn earliest(&mut self, now: Micros, floor: Micros, amount: u64) -> Micros {
        match self {
            Algorithm::Unlimited => floor.max(now),
            Algorithm::Window(window) => window.earliest_for(now, floor, amount),
            Algorithm::Gcra(gcra) => gcra.earliest_for(now, floor, amount),
        }
    }

    /// A bucket has no room behind its latest start: only a window can
    /// take a start in front of reservations already made.
    pub(super) fn fits_at(&mut self, now: Micros, at: Micros, amount: u64) -> bool {
        match self {
            Algorithm::Unlimited => true,
            Algorithm::Window(window) => window.fits_at(now, at, amount),
            Algorithm::Gcra(gcra) => gcra.earliest_for(now, at, amount) <= at,
        }
    }

    pub(super) fn charge(&mut self, at: Micros, amount: u64) -> Option<GcraUndo> {
        match self {
            Algorithm::Unlimited => None,
            Algorithm::Window(window) => {
                window.charge_n(at, amount);
                None
            }
            Algorithm::Gcra(gcra) => Some(gcra.charge_n(at, amount)),
        }
    }

    pub(super) fn refund(&mut self, at: Micros, amount: u64, undo: Option<GcraUndo>) {
        match (self, undo) {
            (Algorithm::Window(window), _) => {
                window.refund_n(at, amount);
            }
            (Algorithm::Gcra(gcra), Some(undo)) => gcra.refund(undo),
            _ => {}
        }
    }

    pub(super) fn adjust(&mut self, at: Micros, delta: i64) {
        match self {
            Algorithm::Unlimited => {}
            Algorithm::Window(window) => window.adjust(at, delta),
            Algorithm::Gcra(gcra) => gcra.adjust(at, delta),
        }
    }

    pub(super) fn capacity(&self) -> u64 {
        match self {
            Algorithm::Unlimited => u64::MAX,
            Algorithm::Window(window) => window.capacity(),
            Algorithm::Gcra(gcra) => gcra.capacity(),
        }
    }

    pub(super) fn restart_empty(&mut self, until: Micros) {
        match self {
            Algorithm::Unlimited => {}
            Algorithm::Window(window) => window.restart_empty(until),
            Algorithm::Gcra(gcra) => gcra.restart_empty(until),
        }
    }

    pub(super) fn drop_future(&mut self, now: Micros) {
        if let Algorithm::Window(window) = self {
            window.drop_future(now);
        }
    }

    pub(super) fn is_idle(&self, now: Micros) -> bool {
        match self {
            Algorithm::Unlimited => true,
            Algorithm::Window(window) => window.is_idle(now),
            Algorithm::Gcra(gcra) => gcra.is_idle(now),
        }
    }

    /// Spent in the window ending at `now`, and what is left of it.
    pub(super) fn usage(&self, now: Micros) -> Option<(u64, u64)> {
        match self {
            Algorithm::Unlimited => None,
            Algorithm::Window(window) => Some(window_usage(window, now)),
            Algorithm::Gcra(gcra) => {
                let left = gcra.available(now);
                Some((gcra.capacity().saturating_sub(left), left))
            }
        }
    }
}

/// Spent in an exact window ending at `now`, and what is left of it.
pub(super) fn window_usage(window: &SlidingWindow, now: Micros) -> (u64, u64) {
    let used = window.used(now);
    (used, window.capacity().saturating_sub(used))
}
