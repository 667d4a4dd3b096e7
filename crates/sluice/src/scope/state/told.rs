//! What the server told a scope — remaining counts, penalties, blocks, spent quotas — and what step 2 reads of it.

use std::sync::atomic::Ordering;

use super::scope::Scope;
use crate::limiter::Micros;

impl Scope {
    /// When the spent quota resets, if it is spent at `now`.
    pub(crate) fn quota_until(&self, now: Micros) -> Option<Micros> {
        self.holds(now).0
    }

    /// What holds the scope at `now`, read under one lock: when a spent
    /// quota resets, and when the server's block ends.
    pub(crate) fn holds(&self, now: Micros) -> (Option<Micros>, Option<Micros>) {
        // See `heard`: until the server spoke, nothing holds the scope.
        if !self.heard.load(Ordering::Relaxed) {
            return (None, None);
        }
        let state = self.state();
        (state.cell.quota_until(now), state.cell.blocked_until(now))
    }

    /// When the server's block ends, if it blocks the scope at `now`.
    pub(crate) fn blocked_until(&self, now: Micros) -> Option<Micros> {
        self.holds(now).1
    }

    /// The server's count of `unit`; false when the scope has no such unit.
    pub(crate) fn sync_unit(
        &self,
        unit: &str,
        remaining: u64,
        reset_at: Micros,
        now: Micros,
    ) -> bool {
        self.state()
            .budgets
            .change(|budgets| budgets.sync(unit, remaining, reset_at, now))
    }

    pub(crate) fn sync(&self, remaining: u64, reset_at: Micros, now: Micros) {
        self.told().cell.sync(remaining, reset_at, now);
    }

    pub(crate) fn penalize(&self, until: Micros, now: Micros) {
        self.told().cell.penalize(until, now);
    }

    /// Mirrors a block another process learned: nothing starts before `until`.
    pub(crate) fn block(&self, until: Micros, now: Micros) {
        self.told().cell.sync(0, until, now);
    }

    /// Marks the quota spent until `until`; true if it was not already.
    pub(crate) fn exhaust(&self, until: Micros, now: Micros) -> bool {
        self.told().cell.exhaust(until, now)
    }
}
