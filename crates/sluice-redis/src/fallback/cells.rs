//! The local limiter cells of one credential, at this process's share of the rate, seeded with its recent shared starts.
//!
//! Pure state with `now` passed in.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use sluice::limiter::{LimiterCell, Micros, NotUntil, Reservation, micros};
use sluice::shared::SharedLimit;
use tokio::time::Instant;

use super::spell::Spell;
use super::spends::SpendCells;

/// How long a fallback grant can still be refunded (as `InMemoryBudget`).
const GRANT_MEMORY: Duration = Duration::from_secs(60);

/// Most shared starts remembered for seeding the cells.
const RECENT: usize = 4_096;

struct Cell {
    cell: LimiterCell,
    limit: Option<SharedLimit>,
}

/// One credential's local cells, by scope key part.
pub(crate) struct Fallback {
    origin: Instant,
    cells: HashMap<String, Cell>,
    grants: HashMap<u64, (String, Reservation, Instant)>,
    next: u64,
    /// This process's shared starts within the last window, to seed the
    /// cells when Redis goes away.
    recent: VecDeque<Instant>,
    /// The last spell of local decisions.
    pub(crate) spell: Spell,
    /// The cells of calls on several windows, groups or units.
    pub(crate) spends: SpendCells,
}

impl Fallback {
    pub(crate) fn new(origin: Instant) -> Self {
        Fallback {
            origin,
            cells: HashMap::new(),
            grants: HashMap::new(),
            next: 0,
            recent: VecDeque::new(),
            spell: Spell::default(),
            spends: SpendCells::new(origin),
        }
    }

    fn at(&self, instant: Instant) -> Micros {
        micros(instant.saturating_duration_since(self.origin))
    }

    fn instant(&self, at: Micros) -> Instant {
        self.origin + Duration::from_micros(at)
    }

    fn cell(&mut self, scope: &str, limit: Option<SharedLimit>) -> &mut LimiterCell {
        let entry = self.cells.entry(scope.to_owned()).or_insert_with(|| Cell {
            cell: LimiterCell::unlimited(),
            limit: None,
        });
        if entry.limit != limit {
            entry
                .cell
                .set_limit(limit.map(|l| l.rate), limit.and_then(|l| l.burst));
            entry.limit = limit;
        }
        &mut entry.cell
    }

    /// Reserves a start in `[not_before, latest]` on `scope` at `limit`
    /// (already scaled to the share). `Ok`: the start and a grant id.
    /// `Err`: the earliest start, nothing charged.
    pub(crate) fn reserve(
        &mut self,
        scope: &str,
        limit: Option<SharedLimit>,
        now: Instant,
        not_before: Instant,
        latest: Instant,
    ) -> Result<(Instant, u64), Instant> {
        let (now_us, from, to) = (self.at(now), self.at(not_before), self.at(latest));
        let result =
            self.cell(scope, limit)
                .reserve(now_us, from.max(now_us), to.saturating_sub(now_us));
        // Deciding here, granted or not, starts a spell: the cell holds the
        // shared starts a Redis back from a restart may have forgotten, so
        // it bounds the shared starts for a window after it too.
        let window = limit.map_or(Duration::ZERO, |l| l.rate.window());
        let start = result
            .as_ref()
            .map_or(now, |reservation| self.instant(reservation.start()));
        self.spell.hold(start, window);
        match result {
            Ok(reservation) => {
                self.next += 1;
                let id = self.next;
                self.grants.retain(|_, (_, _, at)| *at + GRANT_MEMORY > now);
                self.grants.insert(id, (scope.to_owned(), reservation, now));
                Ok((start, id))
            }
            Err(NotUntil(at)) => Err(self.instant(at)),
        }
    }

    /// Adds this process's own recent starts (made in shared mode) to the
    /// scope's cell, so that falling back does not hand out a fresh burst
    /// on top of what the shared log allowed. The cell keeps the local
    /// starts it already holds: a reply granted by Redis after the switch
    /// (sent before it) puts the credential back in shared mode for a
    /// moment, and starting the cell afresh at the next switch (as this did
    /// before) forgot every local start of the first.
    ///
    /// Every start is recorded at its own time, also those beyond the
    /// share: in shared mode a process may well have spent more than its
    /// share, and slots it was granted may still lie ahead (a queued
    /// call's start). An exact window then holds more than the share, and
    /// the next local start waits until enough of them have left the
    /// window ending at it: at most one window, and every window holding a
    /// local start holds no more than the share. (Each start beyond the
    /// share was recorded at the first time the share had room, as this
    /// did before, which put the next local start up to two windows off:
    /// a busy process was refused for twice its window after one slow
    /// command.) A bucket moves its arrival time on by one interval per
    /// start. Dropping such starts (as this did before that) let the cell
    /// grant them again, a share's worth of extra starts in the windows up
    /// to one window after the last shared start.
    ///
    /// A start still ahead (a granted slot not yet due) is recorded at its
    /// own time too: the starts a window before it still count until the
    /// cell's next decision forgets them, from its own `now`.
    pub(crate) fn seed(&mut self, scope: &str, limit: Option<SharedLimit>, starts: &[Instant]) {
        for start in starts {
            let at = self.at(*start);
            self.cell(scope, limit).charge_at(at, 1);
        }
    }

    /// Remembers a start at `at` granted in shared mode, forgetting those a
    /// window old at `now`.
    pub(crate) fn remember(&mut self, at: Instant, limit: Option<SharedLimit>, now: Instant) {
        let window = limit.map_or(Duration::ZERO, |l| l.rate.window());
        while self
            .recent
            .front()
            .is_some_and(|first| *first + window <= now || self.recent.len() >= RECENT)
        {
            self.recent.pop_front();
        }
        if !window.is_zero() {
            self.recent.push_back(at);
        }
    }

    /// Redis went away: `scope`'s cell, at `limit`, takes in the shared
    /// starts remembered (each counted once: they are forgotten here).
    pub(crate) fn take_over(&mut self, scope: &str, limit: Option<SharedLimit>) {
        let mut recent: Vec<Instant> = self.recent.drain(..).collect();
        recent.sort();
        self.seed(scope, limit, &recent);
    }

    /// Back in shared mode while the last spell binds ([`Spell::binds`]:
    /// `counted` is the processes Redis counts now, and how long past the
    /// spell's window a missing one is waited for), a shared start must
    /// also fit `scope`'s cell: `Ok` holds the earliest start in
    /// `[not_before, latest]` the cell allows, charged until
    /// [`Fallback::release`], so that calls deciding at once each see the
    /// others' (a look now and a charge once Redis has answered let them
    /// all through at the same start); `Err`: the earliest start, later
    /// than `latest`. `None`: the spell is over, Redis alone decides.
    pub(crate) fn hold_recovering(
        &mut self,
        scope: &str,
        limit: Option<SharedLimit>,
        (now, not_before, latest): (Instant, Instant, Instant),
        counted: (u32, Duration),
    ) -> Option<Result<(Instant, Reservation), Instant>> {
        if !self.spell.binds(now, counted) {
            return None;
        }
        let (now_us, from, to) = (self.at(now), self.at(not_before), self.at(latest));
        let held =
            self.cell(scope, limit)
                .reserve(now_us, from.max(now_us), to.saturating_sub(now_us));
        Some(match held {
            Ok(reservation) => Ok((self.instant(reservation.start()), reservation)),
            Err(NotUntil(at)) => Err(self.instant(at)),
        })
    }

    /// Gives back a start [`Fallback::hold_recovering`] held.
    pub(crate) fn release(&mut self, scope: &str, held: &Reservation) {
        if let Some(cell) = self.cells.get_mut(scope) {
            cell.cell.refund(held);
        }
    }

    /// Records a shared start made while [`Fallback::hold_recovering`], so
    /// that the process's local and shared starts together keep its share.
    pub(crate) fn count_shared(&mut self, scope: &str, limit: Option<SharedLimit>, at: Instant) {
        self.seed(scope, limit, &[at]);
    }

    /// Gives back a grant that was not used.
    pub(crate) fn refund(&mut self, id: u64) {
        if let Some((scope, reservation, _)) = self.grants.remove(&id)
            && let Some(cell) = self.cells.get_mut(&scope)
        {
            cell.cell.refund(&reservation);
        }
    }

    /// The server blocked `scope` until `until`: the local cell restarts empty there.
    pub(crate) fn penalize(&mut self, scope: &str, until: Instant, now: Instant) {
        self.spends.penalize(scope, until, now);
        let (until, now) = (self.at(until), self.at(now));
        if let Some(cell) = self.cells.get_mut(scope) {
            cell.cell.penalize(until, now);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;

    use super::*;

    fn limit(text: &str, burst: Option<u32>) -> SharedLimit {
        SharedLimit {
            rate: text.parse().unwrap(),
            burst: burst.and_then(NonZeroU32::new),
        }
    }

    #[test]
    fn local_cells_limit_refund_and_penalize() {
        let t0 = Instant::now();
        let mut f = Fallback::new(t0);
        let l = Some(limit("2/1s", None));
        let far = t0 + Duration::from_secs(5);
        let (a, _) = f.reserve("api_key", l, t0, t0, far).unwrap();
        let (b, id) = f.reserve("api_key", l, t0, t0, far).unwrap();
        assert_eq!((a, b), (t0, t0));
        assert_eq!(
            f.reserve("api_key", l, t0, t0, t0),
            Err(t0 + Duration::from_secs(1))
        );
        f.refund(id);
        assert!(f.reserve("api_key", l, t0, t0, t0).is_ok());
        f.penalize("api_key", t0 + Duration::from_secs(3), t0);
        let (c, _) = f.reserve("api_key", l, t0, t0, far).unwrap();
        assert_eq!(c, t0 + Duration::from_secs(3));
    }

    #[test]
    fn taking_over_counts_the_starts_of_the_last_window_only() {
        let t0 = Instant::now();
        let ms = Duration::from_millis(1);
        let mut f = Fallback::new(t0);
        let l = Some(limit("2/1s", None));
        f.remember(t0, l, t0);
        f.remember(t0 + 900 * ms, l, t0 + 900 * ms);
        // A window after the first start, only the second still counts.
        f.remember(t0 + 1_000 * ms, l, t0 + 1_000 * ms);
        f.take_over("api_key", l);
        let now = t0 + 1_000 * ms;
        assert_eq!(f.reserve("api_key", l, now, now, now), Err(t0 + 1_900 * ms));
    }

    #[test]
    fn a_start_still_ahead_does_not_make_the_cell_forget_the_window() {
        let t0 = Instant::now();
        let ms = Duration::from_millis(1);
        let mut f = Fallback::new(t0);
        let l = Some(limit("2/1s", None));
        // A start a moment ago, and a granted slot 1.5 s ahead: the share
        // is spent until that slot (seen from the slot's own time, the
        // first start would be forgotten, and one more would fit now).
        let now = t0 + 100 * ms;
        f.seed("api_key", l, &[t0, t0 + 1_500 * ms]);
        assert_eq!(f.reserve("api_key", l, now, now, now), Err(t0 + 1_500 * ms));
    }

    #[test]
    fn seeding_counts_the_recent_shared_starts() {
        let t0 = Instant::now();
        let ms = Duration::from_millis(1);
        let mut f = Fallback::new(t0);
        let l = Some(limit("2/1s", None));
        f.seed("api_key", l, &[t0, t0 + 100 * ms, t0 + 200 * ms]);
        // Three starts against a share of two: the next local start waits
        // until two of them have left the window ending at it (t0 + 1.1 s),
        // which then holds the third real start and one local one.
        let now = t0 + 300 * ms;
        assert_eq!(f.reserve("api_key", l, now, now, now), Err(t0 + 1_100 * ms));
    }

    #[test]
    fn a_busy_process_waits_at_most_a_window_for_its_share() {
        // Six starts in half a second against a share of two a second: the
        // next local start comes once five of them have left its window,
        // a second after the fifth (each start beyond the share recorded
        // at the first time the share had room put it at t0 + 3 s).
        let t0 = Instant::now();
        let ms = Duration::from_millis(1);
        let mut f = Fallback::new(t0);
        let l = Some(limit("2/1s", None));
        let shared: Vec<Instant> = (0..6).map(|i| t0 + i * 100 * ms).collect();
        f.seed("api_key", l, &shared);
        let now = t0 + 600 * ms;
        assert_eq!(f.reserve("api_key", l, now, now, now), Err(t0 + 1_400 * ms));
        let later = t0 + 1_400 * ms;
        assert!(f.reserve("api_key", l, later, later, later).is_ok());
        // The window ending there holds the sixth real start and it.
        assert_eq!(
            f.reserve("api_key", l, later, later, later),
            Err(t0 + 1_500 * ms)
        );
    }

    #[test]
    fn back_in_shared_mode_the_local_starts_count_for_a_window() {
        let t0 = Instant::now();
        let ms = Duration::from_millis(1);
        let mut f = Fallback::new(t0);
        let l = Some(limit("2/1s", None));
        assert_eq!(earliest(&mut f, l, t0, ALL_BACK), None);
        f.take_over("api_key", l);
        f.reserve("api_key", l, t0, t0, t0).unwrap();
        f.reserve("api_key", l, t0, t0, t0).unwrap();
        // Redis is back 100 ms later: no shared start before the local
        // ones leave the window.
        let back = t0 + 100 * ms;
        assert_eq!(earliest(&mut f, l, back, ALL_BACK), Some(t0 + 1_000 * ms));
        f.count_shared("api_key", l, t0 + 1_000 * ms);
        // A window after the last local start, Redis alone decides.
        assert_eq!(earliest(&mut f, l, t0 + 1_000 * ms, ALL_BACK), None);
    }

    /// Redis counts as many processes as the spell began with.
    const ALL_BACK: (u32, Duration) = (0, Duration::from_secs(5));

    /// The earliest start a recovering call may take at `now`, nothing
    /// held; `None`: Redis alone decides.
    fn earliest(
        f: &mut Fallback,
        l: Option<SharedLimit>,
        now: Instant,
        counted: (u32, Duration),
    ) -> Option<Instant> {
        let far = now + Duration::from_secs(3_600);
        match f.hold_recovering("api_key", l, (now, now, far), counted)? {
            Ok((at, held)) => {
                f.release("api_key", &held);
                Some(at)
            }
            Err(at) => Some(at),
        }
    }

    #[test]
    fn recovering_calls_hold_their_starts_until_redis_answers() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut f = Fallback::new(t0);
        let l = Some(limit("2/1s", None));
        f.reserve("api_key", l, t0, t0, t0).unwrap();
        // Back a moment later, three calls at once: the share has room for
        // one more, and the first to look holds it.
        let back = t0 + Duration::from_millis(100);
        let hold = |f: &mut Fallback| f.hold_recovering("api_key", l, (back, back, back), ALL_BACK);
        let Some(Ok((at, held))) = hold(&mut f) else {
            panic!("the share had room");
        };
        assert_eq!(at, back);
        assert_eq!(hold(&mut f), Some(Err(t0 + s)));
        // Its answer came (Redis said no): the start is free again.
        f.release("api_key", &held);
        assert!(matches!(hold(&mut f), Some(Ok((at, _))) if at == back));
    }

    #[test]
    fn back_before_the_others_the_share_holds_until_redis_counts_them() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut f = Fallback::new(t0);
        let l = Some(limit("2/1s", None));
        // Three processes when Redis went away.
        f.spell.begin(3);
        f.take_over("api_key", l);
        f.reserve("api_key", l, t0, t0, t0).unwrap();
        f.reserve("api_key", l, t0, t0, t0).unwrap();
        let alone = (1, 5 * s);
        // Back from an empty restart, two windows on, and the first
        // process Redis has seen: the others may still decide locally, so
        // the share still binds.
        let back = t0 + 2 * s;
        assert_eq!(earliest(&mut f, l, back, alone), Some(back));
        f.count_shared("api_key", l, back);
        f.count_shared("api_key", l, back);
        assert_eq!(earliest(&mut f, l, back, alone), Some(back + s));
        // Once Redis counts all three, a window more (their last local
        // starts reach Redis as they come back), then Redis alone decides.
        let all = back + s / 2;
        assert_eq!(earliest(&mut f, l, all, (3, 5 * s)), Some(back + s));
        assert_eq!(earliest(&mut f, l, all + s, (3, 5 * s)), None);
        // A process that never comes back holds the share for `missing`
        // after the window, no longer.
        let back = all + s;
        f.spell.begin(3);
        f.reserve("api_key", l, back + s, back + s, back + s)
            .unwrap();
        let gone = back + 2 * s + 5 * s;
        assert!(earliest(&mut f, l, gone - s, alone).is_some());
        assert_eq!(earliest(&mut f, l, gone, alone), None);
    }

    #[test]
    fn a_second_switch_keeps_the_local_starts_of_the_first() {
        // Fallback, a late shared reply (shared mode for a moment), fallback
        // again: the cell still counts the local starts of the first spell.
        let t0 = Instant::now();
        let ms = Duration::from_millis(1);
        let mut f = Fallback::new(t0);
        let l = Some(limit("2/1s", None));
        f.take_over("api_key", l);
        f.reserve("api_key", l, t0, t0, t0).unwrap();
        f.reserve("api_key", l, t0, t0, t0).unwrap();
        let late = t0 + 10 * ms;
        f.remember(late, l, late);
        f.take_over("api_key", l);
        let now = t0 + 20 * ms;
        assert_eq!(f.reserve("api_key", l, now, now, now), Err(t0 + 1_000 * ms));
        // The shared start was taken in once: a third switch adds nothing.
        f.take_over("api_key", l);
        let later = t0 + 1_000 * ms;
        assert!(f.reserve("api_key", l, later, later, later).is_ok());
    }

    #[test]
    fn every_shared_start_is_counted_even_beyond_the_share() {
        // A process that spent more than its share in shared mode (here 6
        // starts, some still ahead, against a share of 3 per second) gets
        // no local start until its real starts leave room: in every window
        // holding a local start, its real and local starts together stay
        // within the share.
        let t0 = Instant::now();
        let ms = Duration::from_millis(1);
        let mut f = Fallback::new(t0);
        let l = Some(limit("3/1s", None));
        let shared: Vec<Instant> = (0..6).map(|i| t0 + i * 100 * ms).collect();
        f.seed("api_key", l, &shared);
        let now = t0 + 50 * ms;
        let far = t0 + Duration::from_secs(10);
        let mut local = Vec::new();
        for _ in 0..6 {
            local.push(f.reserve("api_key", l, now, now, far).unwrap().0);
        }
        let all: Vec<Instant> = shared.iter().chain(&local).copied().collect();
        for end in &local {
            let in_window = all
                .iter()
                .filter(|t| **t <= *end && **t + Duration::from_secs(1) > *end)
                .count();
            assert!(
                in_window <= 3,
                "{in_window} starts in the window ending at {end:?}"
            );
        }
    }
}
