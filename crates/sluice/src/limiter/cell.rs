//! One scope's limiter: its algorithm plus what the server said (penalties, remaining).

use std::num::{NonZeroU32, NonZeroU64};

use super::algorithm::{Algorithm, window_usage};
use super::gcra::GcraUndo;
use super::reservation::{Reservation, undos_of};
use super::{Micros, SlidingWindow};
use crate::Rate;

/// What the server last said about the current window: `remaining` starts
/// (or units) until `reset_at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ServerBudget {
    remaining: u64,
    /// Never 0: a reset is after some `now`. So `Option<ServerBudget>`
    /// takes 16 bytes, not 24 (issue 18, the memory of an idle scope).
    reset_at: NonZeroU64,
}

impl ServerBudget {
    fn reset_at(&self) -> Micros {
        self.reset_at.get()
    }
}

/// No slot within the acceptable wait: the earliest start, nothing charged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotUntil(pub Micros);

/// What sets a cell's earliest start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Binding {
    /// Nothing: the start is as early as asked.
    Free,
    /// One of the cell's own windows, by index (0: the first rate).
    Window(usize),
    /// The server: a penalty, or nothing remaining until a reset.
    Server,
}

/// One window's state for status: what it allows, what was spent in the
/// window ending now, and what is left of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowUsage {
    /// Spent in the window ending now.
    pub used: u64,
    /// Left of the window's count (the bucket's fill, for a bucket).
    pub remaining: u64,
}

/// A limiter cell: pure state, `now` passed in. See the module docs.
///
/// It holds one or more windows that all hold at once (`rate = ["15/1s",
/// "5000/1h"]`): the first can change at run time (a learned or probed
/// rate), the others stay as configured. A start spends `amount` in each:
/// 1 for a request, a call's cost in a unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimiterCell {
    algorithm: Algorithm,
    /// Further windows and what the server said, made when the cell is
    /// made with further windows or first hears the server: most cells
    /// have neither, and an idle scope should stay small (issue 18).
    /// Never dropped once made, so that a voided reservation stays void.
    extras: Option<Box<Extras>>,
}

/// What few cells have: further windows, and what the server said (a
/// penalty, a budget, a spent quota, and how often waiting reservations
/// were voided).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Extras {
    /// Further windows, as configured: always exact.
    windows: Box<[SlidingWindow]>,
    /// No start before this (a server penalty).
    penalty_until: Micros,
    server: Option<ServerBudget>,
    /// The quota is spent until this instant (0: not exhausted). Kept
    /// apart from the penalty: it ends calls as `quota_exhausted` instead
    /// of holding starts back.
    quota_until: Micros,
    /// Bumped whenever waiting reservations are voided.
    generation: u64,
}

impl Extras {
    /// [`LimiterCell::charge_at`] past the first window, whose bucket undo
    /// (if any) is `gcra`.
    #[inline(never)]
    fn charge(&mut self, start: Micros, amount: u64, gcra: Option<GcraUndo>) -> Reservation {
        for window in &mut self.windows {
            window.charge_n(start, amount);
        }
        let server_charged = match &mut self.server {
            Some(budget) if start < budget.reset_at() => {
                let charged = budget.remaining.min(amount);
                budget.remaining -= charged;
                charged
            }
            _ => 0,
        };
        Reservation {
            start,
            amount,
            generation: self.generation,
            gcra,
            server_charged,
        }
    }
}

/// The calls [`LimiterCell::nth_start`] reserves one by one on a copy of
/// the cell; a deferral is rare, and this bounds what one costs.
const NTH_SIMULATED: usize = 256;

impl LimiterCell {
    /// An exact sliding window (`burst` unset) or GCRA (`burst` set).
    pub fn new(rate: Rate, burst: Option<NonZeroU32>) -> Self {
        Self::with(Algorithm::of(rate, burst))
    }

    /// Several windows at once: the first (GCRA when `burst` is set), then
    /// the rest as exact sliding windows. Unlimited when `rates` is empty.
    pub fn windows(rates: &[Rate], burst: Option<NonZeroU32>) -> Self {
        let Some((first, rest)) = rates.split_first() else {
            return Self::unlimited();
        };
        let mut cell = Self::new(*first, burst);
        if !rest.is_empty() {
            cell.extras = Some(Box::new(Extras {
                windows: rest.iter().map(|rate| SlidingWindow::new(*rate)).collect(),
                ..Extras::default()
            }));
        }
        cell
    }

    /// A cell with no rate of its own: it only follows the server's signals.
    pub fn unlimited() -> Self {
        Self::with(Algorithm::Unlimited)
    }

    fn with(algorithm: Algorithm) -> Self {
        LimiterCell {
            algorithm,
            extras: None,
        }
    }

    /// The earliest start at or after `now`, charging nothing.
    pub fn earliest(&mut self, now: Micros) -> Micros {
        self.earliest_after(now, now, 1).0
    }

    /// The earliest start spending `amount` at or after `max(now,
    /// not_before)`, charging nothing, and what sets it.
    pub fn earliest_for(
        &mut self,
        now: Micros,
        not_before: Micros,
        amount: u64,
    ) -> (Micros, Binding) {
        self.earliest_after(now, not_before, amount)
    }

    /// The starts `n` calls asking one each from `now` would get, in
    /// order, charging nothing (issue 50: the waits deferred calls are
    /// told, exact on windows that let several start at once). Past
    /// `NTH_SIMULATED` calls, the rest are spaced by `interval`.
    pub fn next_starts(&self, now: Micros, n: usize, interval: Micros) -> Vec<Micros> {
        let mut cell = self.clone();
        let mut starts = Vec::with_capacity(n);
        for _ in 0..n.min(NTH_SIMULATED) {
            let start = cell.earliest(now);
            cell.charge_at(start, 1);
            starts.push(start);
        }
        let mut last = starts.last().copied().unwrap_or(now);
        for _ in starts.len()..n {
            last = last.saturating_add(interval);
            starts.push(last);
        }
        starts
    }

    /// True when a start spending `amount` can ever fit every window.
    pub fn fits(&self, amount: u64) -> bool {
        amount <= self.capacity()
    }

    /// The most one start can spend: the smallest window's count (or burst).
    pub fn capacity(&self) -> u64 {
        self.extra()
            .iter()
            .map(SlidingWindow::capacity)
            .fold(self.algorithm.capacity(), u64::min)
    }

    fn extras_mut(&mut self) -> &mut Extras {
        self.extras.get_or_insert_default()
    }

    /// The further windows (none on most cells).
    fn extra(&self) -> &[SlidingWindow] {
        self.extras.as_deref().map_or(&[], |extras| &extras.windows)
    }

    fn extra_mut(&mut self) -> &mut [SlidingWindow] {
        match self.extras.as_deref_mut() {
            Some(extras) => &mut extras.windows,
            None => &mut [],
        }
    }

    fn penalty_until(&self) -> Micros {
        self.extras
            .as_ref()
            .map_or(0, |extras| extras.penalty_until)
    }

    fn server(&self) -> Option<ServerBudget> {
        self.extras.as_ref().and_then(|extras| extras.server)
    }

    fn server_mut(&mut self) -> Option<&mut ServerBudget> {
        self.extras
            .as_mut()
            .and_then(|extras| extras.server.as_mut())
    }

    fn generation(&self) -> u64 {
        self.extras.as_ref().map_or(0, |extras| extras.generation)
    }

    /// Most cells hold one window and nothing the server said: the window
    /// alone places the start, inlined into the caller; the rest go
    /// through [`LimiterCell::earliest_with_further`], kept out of line so
    /// that the common case stays small.
    #[inline]
    fn earliest_after(
        &mut self,
        now: Micros,
        not_before: Micros,
        amount: u64,
    ) -> (Micros, Binding) {
        let asked = not_before.max(now);
        if self.extras.is_some() {
            return self.earliest_with_further(now, asked, amount);
        }
        let at = self.algorithm.earliest(now, asked, amount);
        let binding = if at > asked {
            Binding::Window(0)
        } else {
            Binding::Free
        };
        (at, binding)
    }

    /// [`LimiterCell::earliest_after`] for a cell with further windows or
    /// the server's word, from `asked` (`max(now, not_before)`).
    #[inline(never)]
    fn earliest_with_further(
        &mut self,
        now: Micros,
        asked: Micros,
        amount: u64,
    ) -> (Micros, Binding) {
        self.expire(now);
        let server = match self.server() {
            Some(budget) if budget.remaining < amount.max(1) => budget.reset_at(),
            _ => now,
        };
        // Every limit below only moves a start later, so apply the fixed
        // ones first and let each window place the start after them. Each
        // window's earliest is max(floor, a bound of its own), so one pass
        // over them finds the start they all allow.
        let floor = asked.max(server).max(self.penalty_until());
        let mut binding = if floor > asked {
            Binding::Server
        } else {
            Binding::Free
        };
        let mut at = floor;
        let first = self.algorithm.earliest(now, floor, amount);
        let further = self
            .extra_mut()
            .iter_mut()
            .map(|window| window.earliest_for(now, floor, amount));
        for (index, earliest) in std::iter::once(first).chain(further).enumerate() {
            if earliest > at {
                at = earliest;
                binding = Binding::Window(index);
            }
        }
        (at, binding)
    }

    /// True when a start spending `amount` at `at` (not before `now`) is
    /// allowed by the server's word and keeps every window's promise,
    /// in front of reservations already made if there is room there.
    pub fn fits_at(&mut self, now: Micros, at: Micros, amount: u64) -> bool {
        self.expire(now);
        let server_allows = match self.server() {
            Some(budget) => budget.remaining >= amount.max(1) || at >= budget.reset_at(),
            None => true,
        };
        server_allows
            && at >= self.penalty_until()
            && self.algorithm.fits_at(now, at, amount)
            && self
                .extra_mut()
                .iter_mut()
                .all(|window| window.fits_at(now, at, amount))
    }

    /// Reserves the earliest start at or after `max(now, not_before)` if it is
    /// at most `max_wait` after `now`; otherwise charges nothing and says when.
    pub fn reserve(
        &mut self,
        now: Micros,
        not_before: Micros,
        max_wait: Micros,
    ) -> Result<Reservation, NotUntil> {
        self.reserve_n(now, not_before, max_wait, 1)
    }

    /// [`LimiterCell::reserve`] for a start spending `amount` in every window.
    pub fn reserve_n(
        &mut self,
        now: Micros,
        not_before: Micros,
        max_wait: Micros,
        amount: u64,
    ) -> Result<Reservation, NotUntil> {
        let (start, _) = self.earliest_after(now, not_before, amount);
        if start - now > max_wait {
            return Err(NotUntil(start));
        }
        Ok(self.charge_at(start, amount))
    }

    /// Charges a start spending `amount` at `start`, which an
    /// [`LimiterCell::earliest_for`] of at most `start` allowed.
    #[inline]
    pub fn charge_at(&mut self, start: Micros, amount: u64) -> Reservation {
        let gcra = self.algorithm.charge(start, amount);
        match self.extras.as_deref_mut() {
            // One window, nothing the server said, never voided.
            None => Reservation {
                start,
                amount,
                generation: 0,
                gcra,
                server_charged: 0,
            },
            Some(extras) => extras.charge(start, amount, gcra),
        }
    }

    /// Gives back a reservation that was not used. A voided one is ignored.
    pub fn refund(&mut self, reservation: &Reservation) {
        if reservation.generation != self.generation() {
            return;
        }
        self.algorithm
            .refund(reservation.start, reservation.amount, reservation.gcra);
        for window in self.extra_mut() {
            window.refund_n(reservation.start, reservation.amount);
        }
        if reservation.server_charged > 0
            && let Some(budget) = self.server_mut()
            && reservation.start < budget.reset_at()
        {
            budget.remaining += reservation.server_charged;
        }
    }

    /// True when giving back every one of `reservations` is exact: none
    /// was voided, and in a bucket window they are the last charges made
    /// (an exact window takes any start back).
    pub fn gives_back_exactly(&self, reservations: &[&Reservation]) -> bool {
        let generation = self.generation();
        if reservations.iter().any(|r| r.generation != generation) {
            return false;
        }
        match &self.algorithm {
            Algorithm::Gcra(gcra) => gcra.are_latest(&undos_of(reservations)),
            _ => true,
        }
    }

    /// Gives back every one of `reservations`, each bucket window's latest
    /// charge first (exact when [`LimiterCell::gives_back_exactly`] holds).
    pub fn refund_all(&mut self, reservations: &[&Reservation]) {
        let generation = self.generation();
        let current: Vec<&Reservation> = reservations
            .iter()
            .copied()
            .filter(|r| r.generation == generation)
            .collect();
        match &mut self.algorithm {
            Algorithm::Gcra(gcra) => gcra.refund_latest_first(&undos_of(&current)),
            window => {
                for reservation in &current {
                    window.refund(reservation.start, reservation.amount, None);
                }
            }
        }
        for window in self.extra_mut() {
            for reservation in &current {
                window.refund_n(reservation.start, reservation.amount);
            }
        }
        if let Some(budget) = self.server_mut() {
            for reservation in &current {
                if reservation.start < budget.reset_at() {
                    budget.remaining += reservation.server_charged;
                }
            }
        }
    }

    /// The true-up of a start at `start`: `delta` more was spent there
    /// (negative: less), in every window and in the server's budget.
    pub fn adjust(&mut self, start: Micros, delta: i64) {
        if delta == 0 {
            return;
        }
        self.algorithm.adjust(start, delta);
        for window in self.extra_mut() {
            window.adjust(start, delta);
        }
        if let Some(budget) = self.server_mut()
            && start < budget.reset_at()
        {
            budget.remaining = if delta > 0 {
                budget.remaining.saturating_sub(delta.unsigned_abs())
            } else {
                budget.remaining.saturating_add(delta.unsigned_abs())
            };
        }
    }

    /// True while `reservation` still holds: no penalty or block voided it.
    pub fn is_current(&self, reservation: &Reservation) -> bool {
        reservation.generation == self.generation()
    }

    /// The server rejected us and asked for a wait: nothing starts before
    /// `until`, and from there the cell refills from empty rather than
    /// allowing a full burst. Waiting reservations are voided.
    pub fn penalize(&mut self, until: Micros, now: Micros) {
        if until <= now {
            return;
        }
        self.void_waiting(now);
        let extras = self.extras_mut();
        extras.penalty_until = extras.penalty_until.max(until);
        // Only the first window (the rate in force) restarts empty: the
        // longer ones keep what they counted, which still binds.
        self.algorithm.restart_empty(until);
    }

    /// The server said `remaining` starts are left until `reset_at`. The newest
    /// report replaces the older one; zero remaining blocks the cell until the
    /// reset (and voids waiting reservations).
    pub fn sync(&mut self, remaining: u64, reset_at: Micros, now: Micros) {
        let Some(reset_at) = NonZeroU64::new(reset_at).filter(|at| at.get() > now) else {
            return;
        };
        if remaining == 0 {
            self.void_waiting(now);
        }
        self.extras_mut().server = Some(ServerBudget {
            remaining,
            reset_at,
        });
    }

    fn void_waiting(&mut self, now: Micros) {
        self.extras_mut().generation += 1;
        self.algorithm.drop_future(now);
        for window in self.extra_mut() {
            window.drop_future(now);
        }
    }

    /// Changes the cell's first limit at run time (`None`: follow the
    /// server and the further windows only).
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
            (_, Some(rate), burst) => Algorithm::of(rate, burst),
        };
    }

    /// The server said the quota is spent until `until`: true if it was
    /// not already at `now`.
    pub fn exhaust(&mut self, until: Micros, now: Micros) -> bool {
        let fresh = self.quota_until(now).is_none();
        let extras = self.extras_mut();
        extras.quota_until = extras.quota_until.max(until);
        fresh
    }

    /// When the spent quota resets, if it is spent at `now`.
    pub fn quota_until(&self, now: Micros) -> Option<Micros> {
        self.extras
            .as_ref()
            .map(|extras| extras.quota_until)
            .filter(|&until| until > now)
    }

    /// The instant the server blocked this cell until, if still ahead of `now`.
    pub fn blocked_until(&self, now: Micros) -> Option<Micros> {
        let server = self
            .server()
            .filter(|budget| budget.remaining == 0)
            .map_or(0, |budget| budget.reset_at());
        let until = self.penalty_until().max(server);
        (until > now).then_some(until)
    }

    /// What the server last reported as remaining, while its window lasts.
    pub fn server_remaining(&self, now: Micros) -> Option<(u64, Micros)> {
        self.server()
            .filter(|budget| budget.reset_at() > now)
            .map(|budget| (budget.remaining, budget.reset_at()))
    }

    /// Each window's use at `now`, first window first (`None`: no rate of its own).
    pub fn usage(&self, now: Micros) -> Vec<Option<WindowUsage>> {
        let further = self
            .extra()
            .iter()
            .map(|window| Some(window_usage(window, now)));
        let first = self.algorithm.usage(now);
        std::iter::once(first)
            .chain(further)
            .map(|usage| usage.map(|(used, remaining)| WindowUsage { used, remaining }))
            .collect()
    }

    /// True when the cell is indistinguishable from a fresh one from `now` on.
    pub fn is_idle(&self, now: Micros) -> bool {
        let own = self.algorithm.is_idle(now) && self.extra().iter().all(|w| w.is_idle(now));
        own && self.penalty_until() <= now
            && self.server().is_none_or(|b| b.reset_at() <= now)
            && self.quota_until(now).is_none()
    }

    fn expire(&mut self, now: Micros) {
        if let Some(extras) = &mut self.extras
            && extras.server.is_some_and(|budget| budget.reset_at() <= now)
        {
            extras.server = None;
        }
    }
}

#[cfg(test)]
mod tests;
