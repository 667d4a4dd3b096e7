//! One scope's limiter: its algorithm plus what the server said (penalties, remaining).

use std::num::NonZeroU32;

use super::gcra::GcraUndo;
use super::{Gcra, Micros, SlidingWindow};
use crate::Rate;

/// The limit a cell enforces on its own, before anything the server says.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Algorithm {
    /// No client-side rate: only the server's signals gate starts.
    Unlimited,
    Window(SlidingWindow),
    Gcra(Gcra),
}

/// What the server last said about the current window: `remaining` starts
/// until `reset_at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ServerBudget {
    remaining: u64,
    reset_at: Micros,
}

/// A reservation for a start slot.
///
/// Hold it until the request starts; [`LimiterCell::refund`] it if the
/// request is not sent. A penalty or a server block voids reservations whose
/// start had not come yet: [`LimiterCell::is_current`] tells, and the caller
/// reserves again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    start: Micros,
    generation: u64,
    gcra: Option<GcraUndo>,
    server_charged: bool,
}

impl Reservation {
    /// When the request may start.
    pub fn start(&self) -> Micros {
        self.start
    }
}

/// No slot within the acceptable wait: the earliest start, nothing charged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotUntil(pub Micros);

/// A limiter cell: pure state, `now` passed in. See the module docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimiterCell {
    algorithm: Algorithm,
    /// No start before this (a server penalty).
    penalty_until: Micros,
    server: Option<ServerBudget>,
    /// Bumped whenever waiting reservations are voided.
    generation: u64,
}

impl LimiterCell {
    /// An exact sliding window (`burst` unset) or GCRA (`burst` set).
    pub fn new(rate: Rate, burst: Option<NonZeroU32>) -> Self {
        let algorithm = match burst {
            None => Algorithm::Window(SlidingWindow::new(rate)),
            Some(burst) => Algorithm::Gcra(Gcra::new(rate, burst)),
        };
        Self::with(algorithm)
    }

    /// A cell with no rate of its own: it only follows the server's signals.
    pub fn unlimited() -> Self {
        Self::with(Algorithm::Unlimited)
    }

    fn with(algorithm: Algorithm) -> Self {
        LimiterCell {
            algorithm,
            penalty_until: 0,
            server: None,
            generation: 0,
        }
    }

    /// The earliest start at or after `now`, charging nothing.
    pub fn earliest(&mut self, now: Micros) -> Micros {
        self.earliest_after(now, now)
    }

    /// The earliest start at or after `max(now, not_before)`, charging nothing.
    fn earliest_after(&mut self, now: Micros, not_before: Micros) -> Micros {
        self.expire(now);
        let server = match self.server {
            Some(budget) if budget.remaining == 0 => budget.reset_at,
            _ => now,
        };
        // Every limit below only moves a start later, so apply the fixed
        // ones first and let the algorithm place the start after them.
        let floor = not_before.max(server).max(self.penalty_until);
        match &mut self.algorithm {
            Algorithm::Unlimited => floor.max(now),
            Algorithm::Window(window) => window.earliest(now, floor),
            Algorithm::Gcra(gcra) => gcra.earliest(now, floor),
        }
    }

    /// Reserves the earliest start at or after `max(now, not_before)` if it is
    /// at most `max_wait` after `now`; otherwise charges nothing and says when.
    pub fn reserve(
        &mut self,
        now: Micros,
        not_before: Micros,
        max_wait: Micros,
    ) -> Result<Reservation, NotUntil> {
        let start = self.earliest_after(now, not_before);
        if start - now > max_wait {
            return Err(NotUntil(start));
        }
        let gcra = match &mut self.algorithm {
            Algorithm::Unlimited => None,
            Algorithm::Window(window) => {
                window.charge(start);
                None
            }
            Algorithm::Gcra(gcra) => Some(gcra.charge(start)),
        };
        let server_charged = match &mut self.server {
            Some(budget) if start < budget.reset_at => {
                budget.remaining = budget.remaining.saturating_sub(1);
                true
            }
            _ => false,
        };
        Ok(Reservation {
            start,
            generation: self.generation,
            gcra,
            server_charged,
        })
    }

    /// Gives back a reservation that was not used. A voided one is ignored.
    pub fn refund(&mut self, reservation: &Reservation) {
        if reservation.generation != self.generation {
            return;
        }
        match (&mut self.algorithm, reservation.gcra) {
            (Algorithm::Window(window), _) => {
                window.refund(reservation.start);
            }
            (Algorithm::Gcra(gcra), Some(undo)) => gcra.refund(undo),
            _ => {}
        }
        if reservation.server_charged
            && let Some(budget) = &mut self.server
            && reservation.start < budget.reset_at
        {
            budget.remaining += 1;
        }
    }

    /// True while `reservation` still holds: no penalty or block voided it.
    pub fn is_current(&self, reservation: &Reservation) -> bool {
        reservation.generation == self.generation
    }

    /// The server rejected us and asked for a wait: nothing starts before
    /// `until`, and from there the cell refills from empty rather than
    /// allowing a full burst. Waiting reservations are voided.
    pub fn penalize(&mut self, until: Micros, now: Micros) {
        if until <= now {
            return;
        }
        self.void_waiting(now);
        self.penalty_until = self.penalty_until.max(until);
        match &mut self.algorithm {
            Algorithm::Unlimited => {}
            Algorithm::Window(window) => window.restart_empty(until),
            Algorithm::Gcra(gcra) => gcra.restart_empty(until),
        }
    }

    /// The server said `remaining` starts are left until `reset_at`. The newest
    /// report replaces the older one; zero remaining blocks the cell until the
    /// reset (and voids waiting reservations).
    pub fn sync(&mut self, remaining: u64, reset_at: Micros, now: Micros) {
        if reset_at <= now {
            return;
        }
        if remaining == 0 {
            self.void_waiting(now);
        }
        self.server = Some(ServerBudget {
            remaining,
            reset_at,
        });
    }

    fn void_waiting(&mut self, now: Micros) {
        self.generation += 1;
        if let Algorithm::Window(window) = &mut self.algorithm {
            window.drop_future(now);
        }
    }

    /// Changes the cell's own limit at run time (`None`: follow the server only).
    pub fn set_limit(&mut self, rate: Option<Rate>, burst: Option<NonZeroU32>) {
        self.algorithm = match (&mut self.algorithm, rate, burst) {
            (_, None, _) => Algorithm::Unlimited,
            (Algorithm::Window(window), Some(rate), None) => {
                window.set_rate(rate);
                return;
            }
            (Algorithm::Gcra(gcra), Some(rate), Some(burst)) => {
                gcra.set_rate(rate, burst);
                return;
            }
            (_, Some(rate), None) => Algorithm::Window(SlidingWindow::new(rate)),
            (_, Some(rate), Some(burst)) => Algorithm::Gcra(Gcra::new(rate, burst)),
        };
    }

    /// The instant the server blocked this cell until, if still ahead of `now`.
    pub fn blocked_until(&self, now: Micros) -> Option<Micros> {
        let server = self
            .server
            .filter(|budget| budget.remaining == 0)
            .map_or(0, |budget| budget.reset_at);
        let until = self.penalty_until.max(server);
        (until > now).then_some(until)
    }

    /// What the server last reported as remaining, while its window lasts.
    pub fn server_remaining(&self, now: Micros) -> Option<(u64, Micros)> {
        self.server
            .filter(|budget| budget.reset_at > now)
            .map(|budget| (budget.remaining, budget.reset_at))
    }

    /// True when the cell is indistinguishable from a fresh one from `now` on.
    pub fn is_idle(&self, now: Micros) -> bool {
        let own = match &self.algorithm {
            Algorithm::Unlimited => true,
            Algorithm::Window(window) => window.is_idle(now),
            Algorithm::Gcra(gcra) => gcra.is_idle(now),
        };
        own && self.penalty_until <= now && self.server.is_none_or(|b| b.reset_at <= now)
    }

    fn expire(&mut self, now: Micros) {
        if self.server.is_some_and(|budget| budget.reset_at <= now) {
            self.server = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Micros = 1_000;

    fn cell(rate: &str) -> LimiterCell {
        LimiterCell::new(rate.parse().unwrap(), None)
    }

    #[test]
    fn reserve_returns_the_wait_or_the_earliest_time() {
        let mut c = cell("2/1s");
        assert_eq!(c.reserve(0, 0, 0).unwrap().start(), 0);
        assert_eq!(c.reserve(0, 0, 0).unwrap().start(), 0);
        assert_eq!(c.reserve(0, 0, 500 * MS), Err(NotUntil(1_000 * MS)));
        // The rejected reservation charged nothing.
        assert_eq!(c.reserve(0, 0, 1_000 * MS).unwrap().start(), 1_000 * MS);
    }

    #[test]
    fn not_before_is_respected_and_charged_there() {
        let mut c = cell("1/1s");
        let r = c.reserve(0, 300 * MS, 1_000 * MS).unwrap();
        assert_eq!(r.start(), 300 * MS);
        assert_eq!(c.earliest(0), 1_300 * MS);
    }

    #[test]
    fn penalty_blocks_voids_and_restarts_empty() {
        let mut c = cell("10/1s");
        let waiting = c.reserve(0, 50 * MS, 100 * MS).unwrap();
        c.penalize(2_000 * MS, 10 * MS);
        assert!(!c.is_current(&waiting));
        assert_eq!(c.blocked_until(10 * MS), Some(2_000 * MS));
        let first = c.reserve(10 * MS, 0, 5_000 * MS).unwrap();
        let second = c.reserve(10 * MS, 0, 5_000 * MS).unwrap();
        assert_eq!(first.start(), 2_000 * MS);
        assert_eq!(second.start(), 2_100 * MS);
        // Refunding a voided reservation changes nothing.
        let before = c.clone();
        c.refund(&waiting);
        assert_eq!(c, before);
    }

    #[test]
    fn sync_counts_down_and_zero_blocks_until_reset() {
        let mut c = LimiterCell::unlimited();
        c.sync(2, 1_000 * MS, 0);
        assert!(c.reserve(0, 0, 0).is_ok());
        assert!(c.reserve(0, 0, 0).is_ok());
        assert_eq!(c.reserve(0, 0, 0), Err(NotUntil(1_000 * MS)));
        assert_eq!(c.reserve(1_000 * MS, 0, 0).unwrap().start(), 1_000 * MS);
        c.sync(0, 3_000 * MS, 1_000 * MS);
        assert_eq!(c.blocked_until(1_000 * MS), Some(3_000 * MS));
        assert!(c.is_idle(3_000 * MS));
    }

    #[test]
    fn refund_restores_the_server_budget() {
        let mut c = LimiterCell::unlimited();
        c.sync(1, 1_000 * MS, 0);
        let r = c.reserve(0, 0, 0).unwrap();
        c.refund(&r);
        assert!(c.reserve(0, 0, 0).is_ok());
    }

    #[test]
    fn set_limit_switches_algorithms() {
        let mut c = cell("1/1s");
        c.reserve(0, 0, 0).unwrap();
        c.set_limit(Some("3/1s".parse().unwrap()), None);
        assert_eq!(c.reserve(0, 0, 0).unwrap().start(), 0);
        c.set_limit(None, None);
        assert!(c.is_idle(0));
    }
}
