//! The fallback of calls that spend several windows, groups or units: a
//! local cell per window of every budget, each at this process's share,
//! seeded with the process's recent shared spends.
//!
//! The same share rule as the first request window's ([`share_of`]): a
//! window of `N` per `W` holds `floor(N · share)` per `W` here (or one per
//! `W / (N · share)`), a unit's window as many units. A call is granted
//! only at a start every window it touches allows, and charged in all of
//! them, or in none. Pure state with `now` passed in.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use sluice::limiter::{LimiterCell, Micros, Reservation, micros};
use sluice::shared::{SharedLimit, SharedWindow};
use tokio::time::Instant;

use super::share::share_of;
use super::spell::Spell;
use crate::keys::part;

/// How long a fallback grant can still be refunded or settled.
const GRANT_MEMORY: Duration = Duration::from_secs(600);

/// Most shared spends remembered per window for seeding the cells.
const RECENT: usize = 4_096;

/// Rounds for the windows to agree on one start (each only moves it later).
const ROUNDS: usize = 8;

/// A window's cell key: its budget (scope, unit, the low share) and index.
/// NUL never appears in a configured name, so keys never meet.
fn key(window: &SharedWindow) -> String {
    format!(
        "{}\0{}\0{}\0{}",
        window.scope,
        window.unit.as_deref().unwrap_or(""),
        if window.low { "low" } else { "" },
        window.index
    )
}

/// A window's limit at `share`, as the first window's fallback cell.
fn scaled(window: &SharedWindow, share: f64) -> SharedLimit {
    let limit = SharedLimit {
        rate: window.rate,
        burst: window.burst,
    };
    share_of(limit, share)
}

struct Cell {
    cell: LimiterCell,
    /// The share in force (the cell's limit follows it).
    limit: SharedLimit,
    /// The scope's key part, for the blocks the server sets.
    scope: String,
}

struct Recent {
    /// The full window, as Redis enforces it.
    limit: SharedLimit,
    scope: String,
    spends: VecDeque<(Instant, u64)>,
}

/// A spend granted locally: per window its cell key, unit and charge; and when.
struct LocalGrant {
    charged: Vec<(String, Option<String>, Reservation)>,
    at: Instant,
}

/// What a recovering call holds in its windows' cells: each cell's key and
/// the start charged there.
pub(crate) type HeldSpend = Vec<(String, Reservation)>;

/// One credential's window cells (calls on several windows or units).
pub(crate) struct SpendCells {
    origin: Instant,
    cells: HashMap<String, Cell>,
    grants: HashMap<u64, LocalGrant>,
    next: u64,
    /// This process's spends granted by Redis within each window, by key.
    recent: HashMap<String, Recent>,
    /// The last spell of local spends: it counts for one window (the
    /// longest the call touched) after the last one; Redis's logs do not
    /// hold them.
    pub(crate) spell: Spell,
}

/// No start in time: when, and the window (an index into the call's) that set it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NotBefore {
    pub(crate) at: Instant,
    pub(crate) window: usize,
}

impl SpendCells {
    pub(crate) fn new(origin: Instant) -> Self {
        SpendCells {
            origin,
            cells: HashMap::new(),
            grants: HashMap::new(),
            next: 0,
            recent: HashMap::new(),
            spell: Spell::default(),
        }
    }

    fn at(&self, instant: Instant) -> Micros {
        micros(instant.saturating_duration_since(self.origin))
    }

    fn instant(&self, at: Micros) -> Instant {
        self.origin + Duration::from_micros(at)
    }

    fn cell(&mut self, key: &str, scope: &str, limit: SharedLimit) -> &mut LimiterCell {
        let entry = self.cells.entry(key.to_owned()).or_insert_with(|| Cell {
            cell: LimiterCell::new(limit.rate, limit.burst),
            limit,
            scope: part(scope),
        });
        if entry.limit != limit {
            entry.cell.set_limit(Some(limit.rate), limit.burst);
            entry.limit = limit;
        }
        &mut entry.cell
    }

    /// The earliest start at or after `from` that every window allows for
    /// its cost, charging nothing; `Err` when it lies after `latest` (or
    /// after now, once `latest` has passed).
    fn common_start(
        &mut self,
        windows: &[SharedWindow],
        share: f64,
        now: Micros,
        from: Micros,
        latest: Micros,
    ) -> Result<Micros, (Micros, usize)> {
        // A call whose wait went by while Redis did not answer may still
        // start now, as on one limit: it pays the command's timeout
        // (docs/shared-limiter.md, "Failure modes").
        let latest = latest.max(now);
        let mut start = from.max(now);
        let mut decided = 0;
        for _ in 0..ROUNDS {
            let mut moved = false;
            for (index, window) in windows.iter().enumerate() {
                let limit = scaled(window, share);
                let cell = self.cell(&key(window), &window.scope, limit);
                if !cell.fits(window.cost) {
                    // Beyond this process's share of the window: nothing
                    // fits while Redis is away; a window from now it may
                    // be back.
                    let wait = micros(window.rate.window());
                    return Err((now.saturating_add(wait), index));
                }
                let (earliest, _) = cell.earliest_for(now, start, window.cost);
                if earliest > start {
                    start = earliest;
                    decided = index;
                    moved = true;
                }
                if start > latest {
                    return Err((start, decided));
                }
            }
            if !moved {
                return Ok(start);
            }
        }
        Err((start, decided))
    }

    /// Reserves one start in `[not_before, latest]` on every window of the
    /// call at `share` of it. `Ok`: the start and a grant id; `Err`: the
    /// earliest start and the window that set it, nothing charged.
    pub(crate) fn reserve(
        &mut self,
        windows: &[SharedWindow],
        share: f64,
        now: Instant,
        not_before: Instant,
        latest: Instant,
    ) -> Result<(Instant, u64), NotBefore> {
        let (now_us, from, to) = (self.at(now), self.at(not_before), self.at(latest));
        // Deciding here, granted or not, starts a spell: the cells hold the
        // shared spends a Redis back from a restart may have forgotten, so
        // they bound the shared starts for a window after it too.
        let longest = windows
            .iter()
            .map(|w| w.rate.window())
            .max()
            .unwrap_or(Duration::ZERO);
        self.hold(now, longest, share);
        let start = self
            .common_start(windows, share, now_us, from, to)
            .map_err(|(at, window)| NotBefore {
                at: self.instant(at),
                window,
            })?;
        let mut charged = Vec::with_capacity(windows.len());
        for window in windows {
            let key = key(window);
            let limit = scaled(window, share);
            let reservation = self
                .cell(&key, &window.scope, limit)
                .charge_at(start, window.cost);
            charged.push((key, window.unit.clone(), reservation));
        }
        let begins = self.instant(start);
        self.hold(begins, longest, share);
        self.next += 1;
        let id = self.next;
        self.grants.retain(|_, held| held.at + GRANT_MEMORY > now);
        self.grants.insert(id, LocalGrant { charged, at: now });
        Ok((begins, id))
    }

    /// A local spend at `at` counts for `window` (the longest the call
    /// touched), at `share`.
    fn hold(&mut self, at: Instant, window: Duration, share: f64) {
        self.spell.hold(at, window);
        self.spell.spent_at(share);
    }

    /// Remembers a spend Redis granted at `at`, forgetting those a window
    /// old at `now`, so that falling back counts it.
    pub(crate) fn remember(&mut self, windows: &[SharedWindow], at: Instant, now: Instant) {
        for window in windows {
            let limit = SharedLimit {
                rate: window.rate,
                burst: window.burst,
            };
            let recent = self.recent.entry(key(window)).or_insert_with(|| Recent {
                limit,
                scope: window.scope.clone(),
                spends: VecDeque::new(),
            });
            recent.limit = limit;
            let length = window.rate.window();
            while recent
                .spends
                .front()
                .is_some_and(|(first, _)| *first + length <= now || recent.spends.len() >= RECENT)
            {
                recent.spends.pop_front();
            }
            recent.spends.push_back((at, window.cost));
        }
    }

    /// Records spends made elsewhere (in Redis) in the cells at `share`,
    /// each at its own time, also beyond the share (as the first window's
    /// seeding does, see `cells.rs`): the next local spend waits until
    /// enough of them have left its window.
    fn seed(&mut self, (key, scope): (&str, &str), limit: SharedLimit, spends: &[(Instant, u64)]) {
        for (start, cost) in spends {
            let at = self.at(*start);
            let cell = self.cell(key, scope, limit);
            let cost = (*cost).min(cell.capacity());
            cell.charge_at(at, cost);
        }
    }

    /// Redis went away: every window's cell, at `share`, takes in the
    /// shared spends remembered (each counted once: they are forgotten).
    pub(crate) fn take_over(&mut self, share: f64) {
        let recent: Vec<(String, Recent)> = self.recent.drain().collect();
        for (key, mut recent) in recent {
            let mut spends: Vec<(Instant, u64)> = recent.spends.drain(..).collect();
            spends.sort();
            let limit = share_of(recent.limit, share);
            self.seed((&key, &recent.scope), limit, &spends);
        }
    }

    /// Back in shared mode while the last spell binds ([`Spell::binds`],
    /// with `counted` as there), a shared start must also fit the call's
    /// local cells: `Ok` holds the earliest start in `[not_before, latest]`
    /// they allow, charged in every window until [`SpendCells::release`]
    /// (as `Fallback::hold_recovering` does for one window); `Err`: the
    /// earliest start, later than `latest`, and the window that set it.
    /// `None`: the spell is over, Redis alone decides.
    pub(crate) fn hold_recovering(
        &mut self,
        windows: &[SharedWindow],
        share: f64,
        (now, not_before, latest): (Instant, Instant, Instant),
        counted: (u32, Duration),
    ) -> Option<Result<(Instant, HeldSpend), NotBefore>> {
        if !self.spell.binds(now, counted) {
            return None;
        }
        let (now_us, from, to) = (self.at(now), self.at(not_before), self.at(latest));
        let start = match self.common_start(windows, share, now_us, from, to) {
            Ok(start) => start,
            Err((at, window)) => {
                return Some(Err(NotBefore {
                    at: self.instant(at),
                    window,
                }));
            }
        };
        let held = windows
            .iter()
            .map(|window| {
                let key = key(window);
                let limit = scaled(window, share);
                let reservation = self
                    .cell(&key, &window.scope, limit)
                    .charge_at(start, window.cost);
                (key, reservation)
            })
            .collect();
        Some(Ok((self.instant(start), held)))
    }

    /// Gives back what [`SpendCells::hold_recovering`] held.
    pub(crate) fn release(&mut self, held: &HeldSpend) {
        for (key, reservation) in held {
            self.refund_in(key, reservation);
        }
    }

    fn refund_in(&mut self, key: &str, reservation: &Reservation) {
        if let Some(cell) = self.cells.get_mut(key) {
            cell.cell.refund(reservation);
        }
    }

    /// Records a shared spend at `at` made while recovering, so that the
    /// process's local and shared spends together keep its share.
    pub(crate) fn count_shared(&mut self, windows: &[SharedWindow], share: f64, at: Instant) {
        for window in windows {
            let limit = scaled(window, share);
            let key = key(window);
            self.seed((&key, &window.scope), limit, &[(at, window.cost)]);
        }
    }

    /// Gives back grant `id`, unused, in every window. False: not ours.
    pub(crate) fn refund(&mut self, id: u64) -> bool {
        let Some(held) = self.grants.remove(&id) else {
            return false;
        };
        for (key, _, reservation) in &held.charged {
            self.refund_in(key, reservation);
        }
        true
    }

    /// The true-up of grant `id` in `unit`: `estimate` was charged,
    /// `actual` was spent, at the grant's start, in every window of the unit.
    pub(crate) fn settle(&mut self, id: u64, unit: &str, estimate: u64, actual: u64) {
        let Some(held) = self.grants.get(&id) else {
            return;
        };
        let delta = i64::try_from(actual)
            .unwrap_or(i64::MAX)
            .saturating_sub(i64::try_from(estimate).unwrap_or(i64::MAX));
        for (key, charged_unit, reservation) in &held.charged {
            if charged_unit.as_deref() == Some(unit)
                && reservation.amount() == estimate
                && let Some(cell) = self.cells.get_mut(key)
            {
                cell.cell.adjust(reservation.start(), delta);
            }
        }
    }

    /// The server blocked `scope` (a key part) until `until`: its cells
    /// restart empty there.
    pub(crate) fn penalize(&mut self, scope: &str, until: Instant, now: Instant) {
        let (until, now) = (self.at(until), self.at(now));
        for cell in self.cells.values_mut() {
            if cell.scope == scope {
                cell.cell.penalize(until, now);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Redis counts as many processes as the spell began with.
    const ALL_BACK: (u32, Duration) = (0, Duration::from_secs(5));

    /// The earliest start a recovering call at half the rate may take at
    /// `now`, nothing held; `None`: Redis alone decides.
    fn earliest(f: &mut SpendCells, windows: &[SharedWindow], now: Instant) -> Option<Instant> {
        let far = now + Duration::from_secs(3_600);
        match f.hold_recovering(windows, 0.5, (now, now, far), ALL_BACK)? {
            Ok((at, held)) => {
                f.release(&held);
                Some(at)
            }
            Err(late) => Some(late.at),
        }
    }

    #[test]
    fn recovering_calls_hold_their_start_in_every_window() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut f = SpendCells::new(t0);
        let call = [window("api_key", None, 0, "2/1s", 1)];
        f.reserve(&call, 1.0, t0, t0, t0).unwrap();
        // Back a moment later, calls at once: the first holds the room left.
        let back = t0 + s / 10;
        let hold = |f: &mut SpendCells| f.hold_recovering(&call, 1.0, (back, back, back), ALL_BACK);
        let Some(Ok((at, held))) = hold(&mut f) else {
            panic!("the window had room");
        };
        assert_eq!(at, back);
        assert_eq!(
            hold(&mut f).and_then(Result::err).map(|late| late.at),
            Some(t0 + s)
        );
        // Redis answered: the start is free again.
        f.release(&held);
        assert!(matches!(hold(&mut f), Some(Ok((at, _))) if at == back));
    }

    fn window(
        scope: &str,
        unit: Option<&str>,
        index: usize,
        rate: &str,
        cost: u64,
    ) -> SharedWindow {
        SharedWindow {
            scope: scope.into(),
            unit: unit.map(str::to_owned),
            index,
            rate: rate.parse().unwrap(),
            cost,
            low: false,
            burst: None,
        }
    }

    /// `rate = ["5/1s", "20/10s"]`, a group at 4/1s and tokens at 40/1s.
    fn call(tokens: u64) -> Vec<SharedWindow> {
        vec![
            window("api_key", None, 0, "5/1s", 1),
            window("api_key", None, 1, "20/10s", 1),
            window("search", None, 0, "4/1s", 1),
            window("api_key", Some("tokens"), 0, "40/1s", tokens),
        ]
    }

    #[test]
    fn every_window_is_held_at_the_share() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut f = SpendCells::new(t0);
        let far = t0 + 60 * s;
        let mut starts = Vec::new();
        for _ in 0..12 {
            let (at, _) = f.reserve(&call(5), 0.5, t0, t0, far).unwrap();
            starts.push(at);
        }
        // Half of each: the group's 2/1s sets the pace, then the 10/10s of
        // the second window stops the eleventh until ten seconds in.
        for pair in starts[..10].chunks(2) {
            assert_eq!(pair[0], pair[1]);
        }
        assert_eq!(starts[2], t0 + s);
        assert_eq!(starts[8], t0 + 4 * s);
        assert_eq!(starts[10], t0 + 10 * s);
        // The unit's share (20 tokens a second) binds a costly call.
        let mut g = SpendCells::new(t0);
        g.reserve(&call(15), 0.5, t0, t0, far).unwrap();
        let denied = g.reserve(&call(15), 0.5, t0, t0, t0 + s / 2).unwrap_err();
        assert_eq!(
            denied,
            NotBefore {
                at: t0 + s,
                window: 3
            }
        );
    }

    #[test]
    fn a_bucket_is_cut_to_the_share_with_its_burst() {
        // 10/1s with a burst of 4 beside 20/10s, at half: 5/1s holding 2.
        let t0 = Instant::now();
        let ms = Duration::from_millis(1);
        let mut bucket = window("api_key", None, 0, "10/1s", 1);
        bucket.burst = std::num::NonZeroU32::new(4);
        let call = [bucket, window("api_key", None, 1, "20/10s", 1)];
        let mut f = SpendCells::new(t0);
        let far = t0 + Duration::from_secs(60);
        let starts: Vec<Instant> = (0..3)
            .map(|_| f.reserve(&call, 0.5, t0, t0, far).unwrap().0)
            .collect();
        assert_eq!(starts, [t0, t0, t0 + 200 * ms]);
    }

    #[test]
    fn a_refund_gives_back_every_window_and_a_settle_the_unit() {
        let t0 = Instant::now();
        let mut f = SpendCells::new(t0);
        let (_, id) = f.reserve(&call(20), 0.5, t0, t0, t0).unwrap();
        // The unit's share of 20 a second is spent; trued up to 10, half is back.
        assert!(f.reserve(&call(1), 0.5, t0, t0, t0).is_err());
        f.settle(id, "tokens", 20, 10);
        let (_, id) = f.reserve(&call(10), 0.5, t0, t0, t0).unwrap();
        // The group's share (2/1s) is spent now; a refund gives one back.
        assert!(f.reserve(&call(1), 0.5, t0, t0, t0).is_err());
        assert!(f.refund(id));
        assert!(!f.refund(id));
        assert!(f.reserve(&call(10), 0.5, t0, t0, t0).is_ok());
    }

    #[test]
    fn a_spend_still_ahead_does_not_make_a_cell_forget_the_window() {
        let t0 = Instant::now();
        let ms = Duration::from_millis(1);
        let mut f = SpendCells::new(t0);
        let call = [window("api_key", None, 0, "2/1s", 1)];
        // A spend a moment ago, and a granted one 1.5 s ahead: the window
        // is spent until then (seen from that spend's own time, the first
        // would be forgotten, and one more would fit now).
        let now = t0 + 100 * ms;
        f.remember(&call, t0, now);
        f.remember(&call, t0 + 1_500 * ms, now);
        f.take_over(1.0);
        let denied = f.reserve(&call, 1.0, now, now, now).unwrap_err();
        assert_eq!(denied.at, t0 + 1_500 * ms);
    }

    #[test]
    fn taking_over_counts_the_recent_shared_spends_in_every_window() {
        let t0 = Instant::now();
        let ms = Duration::from_millis(1);
        let mut f = SpendCells::new(t0);
        // Two shared spends in the last second: the group's share of two
        // is used up, the second window's share of ten has eight left.
        f.remember(&call(5), t0, t0);
        f.remember(&call(5), t0 + 100 * ms, t0 + 100 * ms);
        f.take_over(0.5);
        let now = t0 + 200 * ms;
        let denied = f.reserve(&call(5), 0.5, now, now, now).unwrap_err();
        assert_eq!(denied.window, 0);
        assert_eq!(denied.at, t0 + 1_000 * ms);
        let far = t0 + Duration::from_secs(60);
        let granted: Vec<Instant> = (0..9)
            .map(|_| f.reserve(&call(5), 0.5, now, now, far).unwrap().0)
            .collect();
        // Eight more in the first ten seconds, the ninth at ten.
        assert!(granted[7] < t0 + Duration::from_secs(10));
        assert_eq!(granted[8], t0 + Duration::from_secs(10));
    }

    #[test]
    fn back_in_shared_mode_the_local_spends_count_for_the_longest_window() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut f = SpendCells::new(t0);
        assert_eq!(earliest(&mut f, &call(5), t0), None);
        f.reserve(&call(5), 0.5, t0, t0, t0).unwrap();
        f.reserve(&call(5), 0.5, t0, t0, t0).unwrap();
        // Redis back empty counts one process for a while: the spell's half holds.
        assert_eq!(f.spell.share_in_force(1.0), 0.5);
        let back = t0 + s / 10;
        assert_eq!(earliest(&mut f, &call(5), back), Some(t0 + s));
        f.count_shared(&call(5), 0.5, t0 + s);
        // Ten seconds after the last local start (the longest window), Redis alone decides.
        assert!(earliest(&mut f, &call(5), t0 + 5 * s).is_some());
        assert_eq!(earliest(&mut f, &call(5), t0 + 10 * s), None);
        assert_eq!(f.spell.share_in_force(1.0), 1.0);
    }

    /// A spell whose every local decision was a denial (the cells full of
    /// the shared spends they took in) still bounds the shared starts for
    /// a window after it: a Redis back from a restart has forgotten those
    /// spends, and without this it let a whole window more through.
    #[test]
    fn a_spell_of_denials_still_bounds_the_shared_starts_after_it() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut f = SpendCells::new(t0);
        // Shared spends filling the share of the 10 s window (10 of 20 at half).
        for i in 0..10 {
            f.remember(&call(1), t0 + i * s / 10, t0);
        }
        f.take_over(0.5);
        let denied = f.reserve(&call(1), 0.5, t0 + s, t0 + s, t0 + 2 * s);
        assert!(denied.is_err(), "{denied:?}");
        // Back in shared mode at 3 s: the cells still hold the call back.
        let late = earliest(&mut f, &call(1), t0 + 3 * s).unwrap();
        assert!(late >= t0 + 10 * s, "{late:?}");
    }
}
