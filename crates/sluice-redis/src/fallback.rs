//! Deciding without Redis: local limiter cells at this process's share of the rate, never unlimited.
//!
//! The share is `fallback_share` from the config, or one over the processes
//! the heartbeat last counted. A share of `N/W` is `floor(N · share)` starts
//! per `W`, so the processes together never exceed `N` when the share is one
//! over their number and `N` is at least that number; when `N · share` is
//! below one the process gets one start per `W / (N · share)`, which keeps
//! the average rate (see docs/shared-limiter.md for the bound).

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::time::Duration;

use sluice::Rate;
use sluice::limiter::{LimiterCell, Micros, NotUntil, Reservation, micros};
use sluice::shared::SharedLimit;
use tokio::time::Instant;

/// The longest window [`Rate`] accepts (a week).
const MAX_WINDOW: Duration = Duration::from_secs(7 * 24 * 3600);

/// How long a fallback grant can still be refunded (as `InMemoryBudget`).
const GRANT_MEMORY: Duration = Duration::from_secs(60);

/// `limit` scaled to `share` of it: the rate and burst one process may use alone.
pub(crate) fn share_of(limit: SharedLimit, share: f64) -> SharedLimit {
    let share = if share.is_finite() {
        share.clamp(f64::MIN_POSITIVE, 1.0)
    } else {
        1.0
    };
    let count = f64::from(limit.rate.count().get()) * share;
    let rate = if count >= 1.0 {
        // In range: 1 <= count <= u32::MAX.
        let whole = NonZeroU32::new(count.floor() as u32).unwrap_or(NonZeroU32::MIN);
        Rate::new(whole, limit.rate.window()).unwrap_or(limit.rate)
    } else {
        let window = limit.rate.window().mul_f64(1.0 / count).min(MAX_WINDOW);
        Rate::new(NonZeroU32::MIN, window).unwrap_or(limit.rate)
    };
    let burst = limit.burst.map(|burst| {
        let scaled = (f64::from(burst.get()) * share).floor();
        NonZeroU32::new(scaled as u32).unwrap_or(NonZeroU32::MIN)
    });
    SharedLimit { rate, burst }
}

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
}

impl Fallback {
    pub(crate) fn new(origin: Instant) -> Self {
        Fallback {
            origin,
            cells: HashMap::new(),
            grants: HashMap::new(),
            next: 0,
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
        match result {
            Ok(reservation) => {
                let start = self.instant(reservation.start());
                self.next += 1;
                let id = self.next;
                self.grants.retain(|_, (_, _, at)| *at + GRANT_MEMORY > now);
                self.grants.insert(id, (scope.to_owned(), reservation, now));
                Ok((start, id))
            }
            Err(NotUntil(at)) => Err(self.instant(at)),
        }
    }

    /// Starts the scope's cell afresh with this process's own recent starts
    /// (made in shared mode) already in it, so that falling back does not
    /// hand out a fresh burst on top of what the shared log allowed.
    pub(crate) fn seed(&mut self, scope: &str, limit: Option<SharedLimit>, starts: &[Instant]) {
        self.cells.remove(scope);
        for start in starts {
            let at = self.at(*start);
            // A start the share has no room for is simply not recorded:
            // the cell is full then, which is what it should say.
            let _ = self.cell(scope, limit).reserve(at, at, 0);
        }
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
        let (until, now) = (self.at(until), self.at(now));
        if let Some(cell) = self.cells.get_mut(scope) {
            cell.cell.penalize(until, now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(text: &str, burst: Option<u32>) -> SharedLimit {
        SharedLimit {
            rate: text.parse().unwrap(),
            burst: burst.and_then(NonZeroU32::new),
        }
    }

    #[test]
    fn shares_never_exceed_the_whole() {
        let third = share_of(limit("30/1s", None), 1.0 / 3.0);
        assert_eq!(third.rate.to_string(), "10/1s");
        let rounded = share_of(limit("5/1s", None), 1.0 / 3.0);
        assert_eq!(rounded.rate.count().get(), 1);
        assert_eq!(rounded.rate.window(), Duration::from_secs(1));
        let thin = share_of(limit("1/1s", None), 0.25);
        assert_eq!(thin.rate.count().get(), 1);
        assert_eq!(thin.rate.window(), Duration::from_secs(4));
        let bucket = share_of(limit("10/1s", Some(6)), 0.5);
        assert_eq!(
            (bucket.rate.count().get(), bucket.burst.map(NonZeroU32::get)),
            (5, Some(3))
        );
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
    fn seeding_counts_the_recent_shared_starts() {
        let t0 = Instant::now();
        let ms = Duration::from_millis(1);
        let mut f = Fallback::new(t0);
        let l = Some(limit("2/1s", None));
        f.seed("api_key", l, &[t0, t0 + 100 * ms, t0 + 200 * ms]);
        // Two of the three fit the share; the next start is a window after the first.
        let now = t0 + 300 * ms;
        assert_eq!(f.reserve("api_key", l, now, now, now), Err(t0 + 1_000 * ms));
    }
}
