//! How a scope adapts: the rate it learns or probes for, and its concurrency cap.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::scope::Scope;
use crate::Rate;
use crate::config::littles_law;
use crate::limiter::Micros;

/// Weight of the newest latency sample in the moving average.
const LATENCY_ALPHA: f64 = 0.2;

/// A change the scope made to itself, for the debug log.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Adapted {
    pub(crate) rate: Option<Option<Rate>>,
    pub(crate) cap: Option<u32>,
    /// The rate rose in the auto controller's slow start.
    pub(crate) ramped: bool,
}

impl Scope {
    /// The server stated a policy of `stated`: adopt it if it is lower than
    /// what is in force (a configured rate never rises by learning).
    pub(crate) fn learn(&self, stated: Rate) -> Adapted {
        let mut state = self.state();
        let before = state.limit.effective();
        let lower = state
            .limit
            .learned()
            .is_none_or(|learned| learned != stated);
        if lower {
            state.limit.set_learned(stated);
            let ceiling = [state.limit.configured, Some(stated)]
                .into_iter()
                .flatten()
                .map(|rate| rate.per_sec())
                .min_by(f64::total_cmp);
            if let Some(aimd) = state.limit.auto_mut() {
                aimd.set_ceiling(ceiling);
            }
        }
        let rate = state.apply(before);
        drop(state);
        Adapted {
            rate,
            cap: rate.and_then(|_| self.adjust_cap()),
            ramped: false,
        }
    }

    /// A response to a request started at `started` arrived at `now`,
    /// `latency` after it was sent: the smoothed latency takes it in, and
    /// the `rate = "auto"` controller is fed (one lock for both); with
    /// `max_in_flight = "auto"` the cap follows.
    /// True in the returned [`Adapted`]'s `ramped` when the controller,
    /// still in slow start, raised the rate in force: the starts reserved
    /// under the slower rate are then later than they need be.
    pub(crate) fn on_answer(
        &self,
        latency: Duration,
        started: Micros,
        now: Micros,
        throttled: bool,
    ) -> Adapted {
        // Answers racing on one scope may each blend into the same
        // average, and one sample is lost: a smoothed estimate does not
        // notice, and no answer takes a lock for it.
        let smoothed = self.latency.load(Ordering::Relaxed) as f64;
        // Through u64, which converts to a float inline where u128 needs a
        // library call (no latency is 584,000 years).
        let sample = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX) as f64;
        let blended = smoothed * (1.0 - LATENCY_ALPHA) + sample * LATENCY_ALPHA;
        // A cast from a float saturates: no latency can panic here.
        self.latency
            .store(blended.round() as u32, Ordering::Relaxed);
        let (rate, ramped) = if self.probes {
            self.probe(started, now, throttled)
        } else {
            (None, false)
        };
        Adapted {
            ramped,
            rate,
            // The latency moved, and maybe the rate: the cap follows both.
            cap: self.adjust_cap(),
        }
    }

    /// Feeds the `rate = "auto"` controller an answer: the rate in force
    /// if it changed, and whether it rose in slow start.
    fn probe(&self, started: Micros, now: Micros, throttled: bool) -> (Option<Option<Rate>>, bool) {
        let mut state = self.state();
        let before = state.limit.effective();
        let (changed, slow_start) = match state.limit.auto_mut() {
            Some(aimd) => {
                let slow_start = aimd.in_slow_start();
                (
                    aimd.on_response(started, now, throttled).is_some(),
                    slow_start,
                )
            }
            None => (false, false),
        };
        let rate = if changed { state.apply(before) } else { None };
        drop(state);
        let raised = |after: &Option<Rate>| match (before, after) {
            (Some(before), Some(after)) => after.per_sec() > before.per_sec(),
            _ => false,
        };
        (rate, slow_start && rate.as_ref().is_some_and(raised))
    }

    /// Little's law: the cap follows the rate in force times the smoothed
    /// latency, at least 1, at most the configured bound.
    pub(super) fn adjust_cap(&self) -> Option<u32> {
        let (bound, admission) = (self.auto_bound()?, self.admission()?);
        let rate = self.state().limit.effective()?;
        let latency = self.latency();
        let mut cap = littles_law(rate, latency).min(bound);
        if let Some(lowered) = self.lowered_cap() {
            cap = cap.min(lowered);
        }
        (cap != admission.cap()).then(|| {
            admission.set_cap(cap);
            cap
        })
    }

    /// Under `max_in_flight = "auto"`, the bound the cap follows up to.
    fn auto_bound(&self) -> Option<u32> {
        self.auto_cap.then_some(self.configured_cap)
    }

    /// The cap the configuration (or `"auto"`) allows, ignoring rejections.
    fn ceiling(&self) -> u32 {
        let auto = self.auto_bound().and_then(|bound| {
            let state = self.state();
            Some(littles_law(state.limit.effective()?, self.latency()).min(bound))
        });
        auto.unwrap_or(self.configured_cap)
    }

    /// The server refused a request for too many in flight: the cap drops
    /// below what was running. Returns the new cap (admission scopes only).
    pub(crate) fn on_concurrency_rejection(&self) -> Option<u32> {
        let admission = self.admission()?;
        let cap = self
            .rare()
            .crowding
            .lock()
            .on_rejection(admission.cap(), admission.running());
        admission.set_cap(cap);
        Some(cap)
    }

    /// A request was accepted: a lowered cap climbs back by one once as
    /// many requests as it allows have succeeded. Returns the new cap.
    pub(crate) fn on_accepted(&self) -> Option<u32> {
        let admission = self.admission()?;
        // Never rejected, never lowered: nothing to climb back.
        let rare = self.rare.get()?;
        let ceiling = self.ceiling();
        let raised = rare.crowding.lock().on_success(ceiling)?;
        admission.set_cap(raised);
        Some(raised)
    }
}
