//! A reload's new limits put into a live scope, keeping its cell's log, its permits and its waiting calls.

use std::num::NonZeroU32;

use super::scope::Scope;
use crate::Rate;

impl Scope {
    /// Puts the configured `rate` and `burst` of a reloaded configuration
    /// in place of this scope's, `max_in_flight` as its cap (or the cap
    /// `"auto"` follows the new rate to), and `queue` as its queue's bound
    /// (calls already waiting past a lowered bound keep their places). The
    /// cell keeps every start it logged, past and reserved, so a lowered
    /// rate counts what was already spent; calls holding a reserved start
    /// keep it. What the server stated or the auto controller found still
    /// caps the rate.
    pub(crate) fn relimit(
        &self,
        (rate, burst): (Option<Rate>, Option<NonZeroU32>),
        cap: u32,
        queue: u32,
    ) {
        {
            let mut state = self.state();
            let before = state.limit.effective();
            let burst_before = state.limit.burst();
            state.limit.configured = rate;
            state.limit.burst = burst;
            // `apply` moves the cell only when the effective rate changed.
            if state.apply(before).is_none()
                && state.limit.burst() != burst_before
                && !state.limit.shared
            {
                let (enforced, burst) = (state.limit.enforced(), state.limit.burst());
                state.cell.set_limit(enforced, burst);
            }
        }
        if let Some(admission) = self.admission() {
            admission.set_queue(queue);
        }
        if self.auto_cap {
            self.adjust_cap();
        } else if let Some(admission) = self.admission() {
            // A cap the server's concurrency rejections lowered stays lowered.
            admission.set_cap(self.lowered_cap().map_or(cap, |lowered| lowered.min(cap)));
        }
    }
}
