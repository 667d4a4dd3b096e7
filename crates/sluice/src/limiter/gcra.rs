//! GCRA (the virtual-scheduling token bucket): sustained `N/W`, `burst` at once.

use std::num::NonZeroU32;

use super::{Micros, micros};
use crate::Rate;

/// Generic cell rate algorithm state: one theoretical arrival time.
///
/// A start at `t` is allowed when `t >= tat - tau`, and moves `tat` to
/// `max(tat, t) + T`, where `T = W / N` is the emission interval and
/// `tau = (burst - 1) * T` the tolerance. A full bucket is any `tat <= now`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gcra {
    /// `W / N`, rounded up so that rounding can only make us slower.
    interval: Micros,
    tau: Micros,
    tat: Micros,
}

/// What a charge changed, so that an immediate refund restores it exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GcraUndo {
    before: Micros,
    after: Micros,
}

impl Gcra {
    /// A full bucket for `rate` with `burst` starts allowed at once.
    pub fn new(rate: Rate, burst: NonZeroU32) -> Self {
        let (interval, tau) = Self::shape(rate, burst);
        Gcra {
            interval,
            tau,
            tat: 0,
        }
    }

    fn shape(rate: Rate, burst: NonZeroU32) -> (Micros, Micros) {
        let window = micros(rate.window());
        let count = Micros::from(rate.count().get());
        let interval = window.div_ceil(count).max(1);
        let tau = interval.saturating_mul(Micros::from(burst.get() - 1));
        (interval, tau)
    }

    /// The earliest start at or after `max(now, not_before)`.
    pub fn earliest(&self, now: Micros, not_before: Micros) -> Micros {
        self.earliest_for(now, not_before, 1)
    }

    /// The earliest start spending `amount` (at most the burst): the
    /// bucket must hold all of it at once.
    pub fn earliest_for(&self, now: Micros, not_before: Micros, amount: u64) -> Micros {
        let extra = self.interval.saturating_mul(amount.saturating_sub(1));
        now.max(not_before)
            .max(self.tat.saturating_add(extra).saturating_sub(self.tau))
    }

    /// The most one start may spend: the burst.
    pub fn capacity(&self) -> u64 {
        self.tau / self.interval + 1
    }

    /// Records a start at `at`.
    pub fn charge(&mut self, at: Micros) -> GcraUndo {
        self.charge_n(at, 1)
    }

    /// Records a start at `at` spending `amount`.
    pub fn charge_n(&mut self, at: Micros, amount: u64) -> GcraUndo {
        let before = self.tat;
        if amount > 0 {
            self.tat = self
                .tat
                .max(at)
                .saturating_add(self.interval.saturating_mul(amount));
        }
        GcraUndo {
            before,
            after: self.tat,
        }
    }

    /// The true-up of a start at `at`: `more` spent (positive) or given
    /// back (negative). A refund never moves the bucket back before `at`.
    pub fn adjust(&mut self, at: Micros, delta: i64) {
        let shift = self.interval.saturating_mul(delta.unsigned_abs());
        self.tat = if delta >= 0 {
            self.tat.max(at).saturating_add(shift)
        } else {
            self.tat.saturating_sub(shift).max(at)
        };
    }

    /// Gives a start back, exactly, when nothing was charged since. A slot
    /// with later ones scheduled after it cannot be given back: moving the
    /// arrival time back would land the next start on top of a scheduled
    /// one, so that slot is forgone instead.
    pub fn refund(&mut self, undo: GcraUndo) {
        if self.tat == undo.after {
            self.tat = undo.before;
        }
    }

    /// True when `undos` are the last charges made, in some order, so
    /// that [`Gcra::refund_latest_first`] gives every one back exactly.
    pub fn are_latest(&self, undos: &[GcraUndo]) -> bool {
        let mut tat = self.tat;
        for undo in latest_first(undos) {
            if tat != undo.after {
                return false;
            }
            tat = undo.before;
        }
        true
    }

    /// Gives `undos` back, the latest charge first: all exactly when
    /// [`Gcra::are_latest`] holds; otherwise as [`Gcra::refund`] would
    /// each, in that order.
    pub fn refund_latest_first(&mut self, undos: &[GcraUndo]) {
        for undo in latest_first(undos) {
            self.refund(undo);
        }
    }

    /// Nothing starts before `until`; from there the bucket refills from empty.
    pub fn restart_empty(&mut self, until: Micros) {
        self.tat = self.tat.max(until.saturating_add(self.tau));
    }

    /// Changes the rate and burst, keeping the bucket's fill level in time.
    pub fn set_rate(&mut self, rate: Rate, burst: NonZeroU32) {
        let (interval, tau) = Self::shape(rate, burst);
        self.interval = interval;
        self.tau = tau;
    }

    /// True when the bucket is full at `now`.
    pub fn is_idle(&self, now: Micros) -> bool {
        self.tat <= now
    }

    /// Starts the bucket could take at once at `now` (for status).
    pub fn available(&self, now: Micros) -> u64 {
        let horizon = now.saturating_add(self.tau);
        let spare = horizon.saturating_sub(self.tat.max(now));
        spare / self.interval + u64::from(self.tat <= horizon)
    }
}

/// `undos` by their charge, the latest first (a charge of nothing, made
/// after one of something, ends where it began: it comes first).
fn latest_first(undos: &[GcraUndo]) -> Vec<GcraUndo> {
    let mut undos = undos.to_vec();
    undos.sort_by_key(|undo| std::cmp::Reverse((undo.after, undo.before)));
    undos
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nz(n: u32) -> NonZeroU32 {
        NonZeroU32::new(n).unwrap()
    }

    #[test]
    fn burst_then_steady_interval() {
        let mut g = Gcra::new("10/1s".parse().unwrap(), nz(3));
        let starts: Vec<Micros> = (0..5)
            .map(|_| {
                let at = g.earliest(0, 0);
                g.charge(at);
                at
            })
            .collect();
        assert_eq!(starts, [0, 0, 0, 100_000, 200_000]);
    }

    #[test]
    fn restart_empty_allows_one_at_until_then_paces() {
        let mut g = Gcra::new("10/1s".parse().unwrap(), nz(5));
        g.restart_empty(1_000_000);
        let first = g.earliest(0, 0);
        g.charge(first);
        assert_eq!(first, 1_000_000);
        assert_eq!(g.earliest(0, 0), 1_100_000);
    }

    #[test]
    fn immediate_refund_is_exact() {
        let mut g = Gcra::new("10/1s".parse().unwrap(), nz(2));
        g.charge(0);
        let before = g.clone();
        let undo = g.charge(50_000);
        g.refund(undo);
        assert_eq!(g, before);
    }

    #[test]
    fn an_out_of_order_refund_is_forgone() {
        let mut g = Gcra::new("10/1s".parse().unwrap(), nz(1));
        let first = g.charge(0);
        g.charge(100_000);
        g.refund(first);
        // Refunding the first must not let a third start at 100 ms.
        assert_eq!(g.earliest(0, 0), 200_000);
    }

    #[test]
    fn costs_need_the_bucket_to_hold_them() {
        let mut g = Gcra::new("10/1s".parse().unwrap(), nz(5));
        assert_eq!(g.capacity(), 5);
        g.charge_n(0, 4);
        // One left now; three more need two intervals.
        assert_eq!(g.earliest_for(0, 0, 1), 0);
        assert_eq!(g.earliest_for(0, 0, 3), 200_000);
        g.adjust(0, -2);
        assert_eq!(g.earliest_for(0, 0, 3), 0);
    }

    #[test]
    fn available_counts_the_burst() {
        let mut g = Gcra::new("10/1s".parse().unwrap(), nz(4));
        assert_eq!(g.available(0), 4);
        g.charge(0);
        assert_eq!(g.available(0), 3);
        assert_eq!(g.available(100_000), 4);
    }

    /// The last charges come back exactly in any order given; a set with
    /// a later charge left out of it does not.
    #[test]
    fn the_latest_charges_come_back_exactly_in_any_order() {
        let mut g = Gcra::new("10/1s".parse().unwrap(), nz(1));
        let first = g.charge_n(0, 2);
        let second = g.charge_n(0, 1);
        let nothing = g.charge_n(0, 0);
        let third = g.charge_n(0, 3);
        let tat = g.tat;
        assert!(!g.are_latest(&[second, first]));
        assert!(g.are_latest(&[second, third, nothing]));
        g.refund_latest_first(&[second, nothing, third]);
        assert_eq!(g.tat, tat - 4 * g.interval);
        assert!(g.are_latest(&[first]));
        g.refund_latest_first(&[first]);
        assert_eq!(g.tat, 0);
    }
}
