//! The exact sliding window: at most N spent in any window of length W.

use std::collections::VecDeque;

use super::{Micros, micros};
use crate::Rate;

/// A log of recent (and reserved future) starts, each with what it spent.
///
/// A start at `t` occupies every window `(t' - W, t']` with `t' >= t`.
/// [`SlidingWindow::earliest_for`] places a new start anywhere while the
/// whole log has room for it, and otherwise at or after the latest logged
/// one, so the binding window is the one ending at the new start: it may
/// begin only once enough of the oldest spending has left it for its own
/// to fit. [`SlidingWindow::fits_at`] checks a start before reservations
/// already made, in every window it would share with them. A request
/// spends 1; a call in a unit spends its cost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlidingWindow {
    count: u64,
    window: Micros,
    /// Sorted ascending by time; every amount is at least 1.
    starts: VecDeque<(Micros, u64)>,
    /// The sum of the amounts in `starts`, so that a window with room
    /// answers without walking its log.
    logged: u64,
}

impl SlidingWindow {
    /// An empty window for `rate`.
    pub fn new(rate: Rate) -> Self {
        SlidingWindow {
            count: u64::from(rate.count().get()),
            window: micros(rate.window()),
            starts: VecDeque::new(),
            logged: 0,
        }
    }

    /// The most one start may spend: the window's count.
    pub fn capacity(&self) -> u64 {
        self.count
    }

    /// The earliest start at or after `max(now, not_before)` that keeps the promise.
    pub fn earliest(&mut self, now: Micros, not_before: Micros) -> Micros {
        self.earliest_for(now, not_before, 1)
    }

    /// The earliest start spending `amount` (at most the count) at or after
    /// `max(now, not_before)` that keeps the promise.
    ///
    /// While the log and `amount` together fit the count, that is
    /// `max(now, not_before)` itself, in front of reservations already made
    /// or not: no window can hold more than the whole log. Otherwise the
    /// start follows the latest one logged, once enough of the oldest
    /// spending has left the window ending at it. (A start placed ahead in
    /// a window with room, a lease's slot for a caller yet to come, so
    /// holds no one else back.)
    pub fn earliest_for(&mut self, now: Micros, not_before: Micros, amount: u64) -> Micros {
        self.prune(now);
        let asked = now.max(not_before);
        if amount == 0 {
            return asked;
        }
        // The newest start that does not fit with everything newer than it
        // must leave the window first. With room for all that is
        // logged there is none; otherwise it is the start at which the
        // spending counted from the oldest reaches the excess, so the walk
        // covers only what must leave, not the whole log.
        let room = self.count.saturating_sub(amount);
        let Some(excess) = self.logged.checked_sub(room).filter(|&e| e > 0) else {
            return asked;
        };
        let at = self
            .starts
            .back()
            .map_or(asked, |&(last, _)| asked.max(last));
        let mut older: u64 = 0;
        for &(start, spent) in &self.starts {
            older = older.saturating_add(spent);
            if older >= excess {
                return at.max(start.saturating_add(self.window));
            }
        }
        at
    }

    /// True when a start spending `amount` at `at` (not before `now`)
    /// keeps the promise in every window that would hold it, also those
    /// holding starts reserved after `at`. When the log is fuller than its
    /// count allows for a start anywhere, [`SlidingWindow::earliest_for`]
    /// places one only after the latest logged; this finds the room that
    /// reservations further ahead left behind them (a refund, a true-up
    /// below the estimate) without moving any of them.
    pub fn fits_at(&mut self, now: Micros, at: Micros, amount: u64) -> bool {
        self.prune(now);
        if amount > self.count {
            return false;
        }
        let limit = self.count - amount;
        if self.logged <= limit {
            return true;
        }
        // What a window holds only grows at a logged start, so the windows
        // to check are those ending at `at` and at each start after it
        // within one window length. Both ends move forward: one pass.
        let starts = &self.starts;
        let until = at.saturating_add(self.window);
        let ends = std::iter::once(at).chain(
            starts
                .iter()
                .map(|&(start, _)| start)
                .filter(|&start| start > at && start < until),
        );
        let (mut oldest, mut newest, mut held) = (0, 0, 0u64);
        for end in ends {
            while let Some(&(_, spent)) = starts.get(newest).filter(|&&(start, _)| start <= end) {
                held = held.saturating_add(spent);
                newest += 1;
            }
            while let Some(&(_, spent)) = starts
                .get(oldest)
                .filter(|&&(start, _)| oldest < newest && start.saturating_add(self.window) <= end)
            {
                held = held.saturating_sub(spent);
                oldest += 1;
            }
            if held > limit {
                return false;
            }
        }
        true
    }

    /// Records a start at `at`, which must be `>= earliest(now)` or pass
    /// [`SlidingWindow::fits_at`].
    pub fn charge(&mut self, at: Micros) {
        self.charge_n(at, 1);
    }

    /// Records a start at `at` spending `amount`; nothing for 0.
    pub fn charge_n(&mut self, at: Micros, amount: u64) {
        if amount == 0 {
            return;
        }
        self.logged = self.logged.saturating_add(amount);
        if self.starts.capacity() == 0 {
            // A scope called once holds one start: its first block holds
            // just that one, and a second start grows it to the usual
            // four (issue 18, the memory of an idle scope).
            self.starts.reserve_exact(1);
        }
        // Mostly an append: a full window places starts after the latest.
        // One with room, and virtual starts, may land earlier; keep it sorted.
        if self.starts.back().is_none_or(|&(last, _)| last <= at) {
            self.starts.push_back((at, amount));
        } else {
            let index = self.starts.partition_point(|&(start, _)| start <= at);
            self.starts.insert(index, (at, amount));
        }
    }

    /// Removes one start recorded at `at`; false when there is none.
    pub fn refund(&mut self, at: Micros) -> bool {
        self.refund_n(at, 1)
    }

    /// Removes `amount` spent at `at` (a start of that amount, or part of
    /// a larger one); false when nothing was spent there.
    pub fn refund_n(&mut self, at: Micros, amount: u64) -> bool {
        if amount == 0 {
            return true;
        }
        let exact = self
            .starts
            .iter()
            .rposition(|&(start, spent)| start == at && spent == amount);
        let any = || self.starts.iter().rposition(|&(start, _)| start == at);
        match exact.or_else(any) {
            Some(index) => {
                let spent = &mut self.starts[index].1;
                if *spent <= amount {
                    self.logged = self.logged.saturating_sub(*spent);
                    self.starts.remove(index);
                } else {
                    *spent -= amount;
                    self.logged = self.logged.saturating_sub(amount);
                }
                true
            }
            None => false,
        }
    }

    /// The true-up of a start at `at`: `delta` more spent there (a start
    /// of its own, so that a later refund of the estimate still finds
    /// it), or given back (negative).
    pub fn adjust(&mut self, at: Micros, delta: i64) {
        if delta >= 0 {
            self.charge_n(at, delta.unsigned_abs());
        } else {
            self.refund_n(at, delta.unsigned_abs());
        }
    }

    /// Forgets reserved starts after `now`: their callers were told to re-reserve.
    pub fn drop_future(&mut self, now: Micros) {
        while self.starts.back().is_some_and(|&(start, _)| start > now) {
            if let Some((_, spent)) = self.starts.pop_back() {
                self.logged = self.logged.saturating_sub(spent);
            }
        }
    }

    /// Treats the window as full, draining at the steady rate from `until`:
    /// the window ending at `until` is topped up to N with virtual spending
    /// placed in evenly spaced steps at its end, so that the next starts
    /// come at the steady rate. Real starts already logged stay (the
    /// promise still covers them) and count towards the N. Large counts
    /// (units) are topped up in at most 8,192 steps.
    pub fn restart_empty(&mut self, until: Micros) {
        let from = until.saturating_sub(self.window);
        let logged: u64 = self
            .starts
            .iter()
            .filter(|&&(start, _)| start > from && start <= until)
            .map(|&(_, spent)| spent)
            .sum();
        let missing = self.count.saturating_sub(logged);
        if missing == 0 {
            return;
        }
        let steps = missing.min(MAX_VIRTUAL);
        let interval = self.window / self.count;
        let per_step = missing / steps;
        let extra = missing % steps;
        // Step k holds what leaves the window at `until + k·interval·per_step`.
        let mut offset = logged;
        for k in 0..steps {
            let amount = per_step + u64::from(k < extra);
            self.charge_n(from.saturating_add(offset.saturating_mul(interval)), amount);
            offset += amount;
        }
    }

    /// Changes N and W; starts already logged keep counting.
    pub fn set_rate(&mut self, rate: Rate) {
        self.count = u64::from(rate.count().get());
        self.window = micros(rate.window());
    }

    /// True when no logged start can affect a start at or after `now`.
    pub fn is_idle(&self, now: Micros) -> bool {
        self.starts
            .back()
            .is_none_or(|&(last, _)| last.saturating_add(self.window) <= now)
    }

    /// Spent in the window ending at `now` (for status).
    pub fn used(&self, now: Micros) -> u64 {
        self.starts
            .iter()
            .filter(|&&(start, _)| start.saturating_add(self.window) > now && start <= now)
            .map(|&(_, spent)| spent)
            .sum()
    }

    fn prune(&mut self, now: Micros) {
        while self
            .starts
            .front()
            .is_some_and(|&(start, _)| start.saturating_add(self.window) <= now)
        {
            if let Some((_, spent)) = self.starts.pop_front() {
                self.logged = self.logged.saturating_sub(spent);
            }
        }
    }
}

/// The most virtual starts one restart adds: request windows up to this
/// count are paced one start apart, as before; a larger count (90,000
/// tokens) is topped up in this many steps rather than 90,000 entries.
const MAX_VIRTUAL: u64 = 8_192;

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator for the randomized tests.
    fn xorshift(mut seed: u64) -> impl FnMut() -> u64 {
        move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        }
    }

    fn window(text: &str) -> SlidingWindow {
        SlidingWindow::new(text.parse().unwrap())
    }

    #[test]
    fn a_window_charged_once_holds_one_slot_and_grows_from_there() {
        let mut w = window("10/1s");
        assert_eq!(w.starts.capacity(), 0);
        w.charge(5);
        assert_eq!(w.starts.capacity(), 1);
        for at in [6, 7, 3] {
            w.charge(at);
        }
        assert!(w.starts.capacity() >= 4);
        let logged: Vec<Micros> = w.starts.iter().map(|&(at, _)| at).collect();
        assert_eq!(logged, [3, 5, 6, 7]);
        assert_eq!(w.used(7), 4);
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

    /// A start goes in front of a reservation ahead while the whole log
    /// has room for it, and after the latest once it has not.
    #[test]
    fn a_window_with_room_places_a_start_in_front_of_reservations_ahead() {
        let mut w = window("3/1s");
        w.charge(500_000);
        assert_eq!(w.earliest(0, 0), 0);
        w.charge(0);
        assert_eq!(w.earliest(10_000, 0), 10_000);
        w.charge(10_000);
        // Full: after the latest (500 ms), once the oldest (0) has left.
        assert_eq!(w.earliest(20_000, 0), 1_000_000);
        assert!(holds_everywhere(&w));
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

    #[test]
    fn costs_wait_until_enough_has_left_the_window() {
        let mut w = window("100/1s");
        w.charge_n(0, 60);
        w.charge_n(100_000, 30);
        // 10 fit now; 40 need the 60 spent at 0 to leave.
        assert_eq!(w.earliest_for(200_000, 0, 10), 200_000);
        assert_eq!(w.earliest_for(200_000, 0, 40), 1_000_000);
        // 80 need both to leave.
        assert_eq!(w.earliest_for(200_000, 0, 80), 1_100_000);
        assert_eq!(w.used(200_000), 90);
    }

    #[test]
    fn a_true_up_refunds_or_charges_at_the_start() {
        let mut w = window("100/1s");
        w.charge_n(0, 50);
        assert!(w.refund_n(0, 30));
        assert_eq!(w.used(0), 20);
        w.adjust(0, 70);
        assert_eq!(w.used(0), 90);
        assert_eq!(w.earliest_for(10, 0, 20), 1_000_000);
    }

    #[test]
    fn room_left_in_front_of_a_reservation_is_found_without_moving_it() {
        let mut w = window("100/1s");
        // 60 spent at 0 and 40 reserved at 500 ms: full until 1 s.
        w.charge_n(0, 60);
        w.charge_n(500_000, 40);
        // The one at 0 settles at 20: 40 free in every window holding it.
        assert!(w.refund_n(0, 40));
        // The whole log has room for 40 more: they start at once, in front
        // of the reservation. 41 would follow it, once the 20 have left.
        assert_eq!(w.earliest_for(100_000, 0, 40), 100_000);
        assert_eq!(w.earliest_for(100_000, 0, 41), 1_000_000);
        assert!(w.fits_at(100_000, 100_000, 40));
        // 41 would break the window ending at 500 ms.
        assert!(!w.fits_at(100_000, 100_000, 41));
        w.charge_n(100_000, 40);
        assert_eq!(w.used(500_000), 100);
        // The reservation kept its place; nothing else fits before 1 s.
        assert!(!w.fits_at(100_000, 300_000, 1));
        assert_eq!(w.earliest_for(100_000, 0, 20), 1_000_000);
    }

    /// Every window ending at a logged start holds at most the count.
    fn holds_everywhere(w: &SlidingWindow) -> bool {
        w.starts.iter().all(|&(end, _)| {
            let held: u64 = w
                .starts
                .iter()
                .filter(|&&(start, _)| start <= end && start + w.window > end)
                .map(|&(_, spent)| spent)
                .sum();
            held <= w.count
        })
    }

    #[test]
    fn starts_placed_in_the_room_found_keep_every_window() {
        let mut w = window("20/1s");
        let mut next = xorshift(0x51);
        let mut now: Micros = 0;
        let mut charged: Vec<(Micros, u64)> = vec![];
        let mut found = 0;
        for _ in 0..10_000 {
            now += next() % 60_000;
            let amount = 1 + next() % 6;
            match next() % 5 {
                0 | 1 => {
                    // Reservations up to a second ahead, as a wait allows.
                    let at = w.earliest_for(now, 0, amount);
                    if at <= now + 1_000_000 {
                        w.charge_n(at, amount);
                        charged.push((at, amount));
                    }
                }
                2 => {
                    let at = now + next() % 400_000;
                    let fits = w.fits_at(now, at, amount);
                    // The check agrees with trying it.
                    let mut tried = w.clone();
                    tried.charge_n(at, amount);
                    assert_eq!(fits, holds_everywhere(&tried), "{amount} at {at}");
                    if fits {
                        found += 1;
                        w = tried;
                        charged.push((at, amount));
                    }
                }
                3 if !charged.is_empty() => {
                    let (at, amount) =
                        charged.swap_remove((next() % charged.len() as u64) as usize);
                    w.refund_n(at, amount);
                }
                _ => {}
            }
            assert!(holds_everywhere(&w));
        }
        assert!(found > 100, "{found}");
    }

    #[test]
    fn restart_empty_of_a_large_unit_stays_small() {
        let mut w = window("90000/1m");
        w.restart_empty(60_000_000);
        assert!(w.starts.len() <= MAX_VIRTUAL as usize);
        assert_eq!(
            w.starts.iter().map(|&(_, spent)| spent).sum::<u64>(),
            90_000
        );
        assert_eq!(
            w.earliest_for(60_000_000, 0, 90_000),
            89_990 * 666 + 60_000_000
        );
    }

    /// The walk from the newest start, as the log was read before it kept
    /// a total: the reference the faster answer must agree with.
    fn earliest_by_walking(
        w: &SlidingWindow,
        now: Micros,
        not_before: Micros,
        amount: u64,
    ) -> Micros {
        let mut pruned = w.clone();
        pruned.prune(now);
        let mut at = now.max(not_before);
        let room = pruned.count.saturating_sub(amount);
        if pruned.starts.iter().map(|&(_, spent)| spent).sum::<u64>() <= room {
            return at;
        }
        if let Some(&(last, _)) = pruned.starts.back() {
            at = at.max(last);
        }
        let mut newer = 0u64;
        for &(start, spent) in pruned.starts.iter().rev() {
            newer += spent;
            if newer > room {
                return at.max(start + pruned.window);
            }
        }
        at
    }

    #[test]
    fn the_running_total_agrees_with_walking_the_log() {
        let mut w = window("20/1s");
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
        let mut now: Micros = 0;
        let mut charged = vec![];
        for _ in 0..20_000 {
            now += next() % 40_000;
            let amount = 1 + next() % 5;
            match next() % 4 {
                0 | 1 => {
                    let at = w.earliest_for(now, 0, amount);
                    assert_eq!(at, earliest_by_walking(&w, now, 0, amount));
                    w.charge_n(at, amount);
                    charged.push((at, amount));
                }
                2 => {
                    if let Some((at, amount)) = charged.pop() {
                        w.refund_n(at, amount);
                    }
                }
                _ => w.drop_future(now),
            }
            assert_eq!(
                w.logged,
                w.starts.iter().map(|&(_, spent)| spent).sum::<u64>()
            );
        }
    }
}
