//! The local limiter cells of one credential: a cell per window of every
//! budget a call spends, each at this process's share, seeded with the
//! process's recent shared starts.
//!
//! A call on one limit is the one-window case (its first scope's request
//! window at a cost of one, `super::decide::windows`); a call on several
//! windows, groups or units touches each of them. The share rule is
//! [`share_of`]: a window of `N` per `W` holds `floor(N · share)` per `W`
//! here (or one per `W / (N · share)`), a unit's window as many units. A
//! call is granted only at a start every window it touches allows, and
//! charged in all of them, or in none. Pure state with `now` passed in.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use sluice::limiter::{LimiterCell, Micros, Reservation, micros};
use sluice::shared::{SharedLimit, SharedWindow};
use tokio::time::Instant;

use super::share::share_of;
use super::spell::{Others, Spell};
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

/// One credential's local cells, by window.
pub(crate) struct Fallback {
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

impl Fallback {
    pub(crate) fn new(origin: Instant) -> Self {
        Fallback {
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

    /// Records starts made elsewhere (in Redis) in the cells at `share`.
    /// The cells keep the local starts they already hold: a reply granted
    /// by Redis after the switch (sent before it) puts the credential back
    /// in shared mode for a moment, and starting a cell afresh at the next
    /// switch forgot every local start of the first.
    ///
    /// Every start is recorded at its own time, also those beyond the
    /// share: in shared mode a process may well have spent more than its
    /// share, and starts it was granted may still lie ahead (a queued
    /// call's). An exact window then holds more than the share, and the
    /// next local start waits until enough of them have left the window
    /// ending at it: at most one window, and every window holding a local
    /// start holds no more than the share. (Each start beyond the share
    /// was once recorded at the first time the share had room, which put
    /// the next local start up to two windows off; dropping them, before
    /// that, let the cell grant them again.) A bucket moves its arrival
    /// time on by the cost's intervals. A start still ahead is recorded at
    /// its own time too: the starts a window before it still count until
    /// the cell's next decision forgets them, from its own `now`.
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
    /// they allow, charged in every window until [`Fallback::release`]
    /// (calls deciding at once each see the others': a look now and a
    /// charge once Redis has answered let them all through at the same
    /// start); `Err`: the earliest start, later than `latest`, and the
    /// window that set it.
    /// `None`: the spell is over, Redis alone decides.
    pub(crate) fn hold_recovering(
        &mut self,
        windows: &[SharedWindow],
        share: f64,
        (now, not_before, latest): (Instant, Instant, Instant),
        counted: Others,
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

    /// Gives back what [`Fallback::hold_recovering`] held.
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
mod tests;
