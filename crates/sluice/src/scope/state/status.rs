//! What a scope counts and shows: its sent log, outcomes, and `/v1/status` view.

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde::Serialize;

use super::limit::Limit;
use super::scope::{OUTCOME_KINDS, Scope, State};
use crate::Rate;
use crate::adapt::{Aimd, AimdState};
use crate::limiter::{Micros, micros};
use crate::observe::ShadowDecision;
use crate::outcome::Outcome;
use crate::scope::admission::Admission;
use crate::scope::shadow::ShadowStatus;
use crate::scope::spend::{UnitStatus, WindowStatus};

/// A live view of one scope, for `/v1/status` and operators. Never holds a secret.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScopeStatus {
    /// The credential's name.
    pub credential: String,
    /// The scope's name.
    pub scope: String,
    /// Its configured rate, e.g. `10/1s`, if it has one.
    pub rate: Option<String>,
    /// The rate the server stated in a policy header, if it was learned.
    pub learned_rate: Option<String>,
    /// The rate in force: the lowest of configured, learned and auto.
    pub effective_rate: Option<String>,
    /// The `rate = "auto"` controller, if the credential probes for its limit.
    pub auto_rate: Option<AimdState>,
    /// Its burst when GCRA semantics are in use.
    pub burst: Option<u32>,
    /// The concurrency cap in force (admission scopes only).
    pub max_in_flight: Option<u32>,
    /// True when the cap follows rate x latency (`max_in_flight = "auto"`).
    pub max_in_flight_auto: bool,
    /// True while the server's concurrency rejections hold the cap below
    /// what is configured; it recovers by one as requests succeed.
    pub max_in_flight_lowered: bool,
    /// The admission queue's bound.
    pub queue_limit: Option<u32>,
    /// Requests in flight now.
    pub in_flight: usize,
    /// The most requests ever in flight at once.
    pub peak_in_flight: usize,
    /// Calls waiting for a permit now.
    pub queued: usize,
    /// How long the server has blocked the scope from now, if it has.
    pub blocked_for_ms: Option<u64>,
    /// True while the scope's quota is spent.
    pub quota_exhausted: bool,
    /// Time until the spent quota resets.
    pub quota_resets_in_ms: Option<u64>,
    /// What the server last said remains in its window (after any reserve).
    pub server_remaining: Option<u64>,
    /// When the server's window that `server_remaining` counts resets, from now.
    pub server_reset_in_ms: Option<u64>,
    /// Requests this process sent on the scope in the rolling window of
    /// the rate in force (`sent_window_ms`). In shadow mode it can exceed
    /// the limit: calls enforcing would have held were sent.
    pub sent_in_window: u64,
    /// The window `sent_in_window` counts over: the rate in force's, or a
    /// second when the scope has no rate.
    pub sent_window_ms: u64,
    /// `sent_in_window` at the end of each of the last 60 seconds, oldest
    /// first (the last is now): the rolling window's recent history.
    pub sent_history: Vec<u64>,
    /// The smoothed response latency.
    pub latency_ms: f64,
    /// Outcomes of calls decided on this scope, by status.
    pub outcomes: BTreeMap<String, u64>,
    /// Shadow mode's record: what enforcing would have done here.
    pub shadow: ShadowStatus,
    /// Every request window sluice keeps on the scope (the rate in force
    /// first): used, remaining and the next free slot.
    pub windows: Vec<WindowStatus>,
    /// Every unit's windows (the credential's own scope only).
    pub units: Vec<UnitStatus>,
    /// `priorities.low`: the share of every window low calls may start.
    pub low_share: Option<f64>,
}

impl Scope {
    /// A request on this scope was sent at `at`: logged for the
    /// rolling-window view.
    /// A request starts at `at`: the sent log records it, and the
    /// `rate = "auto"` controller counts it (one lock for both).
    pub(crate) fn record_start(&self, at: Micros) {
        let mut state = self.state();
        if let Some(aimd) = state.limit.auto_mut() {
            aimd.on_send(at);
        }
        let window = sent_window(&state.limit);
        state.sent.record(at, window);
    }

    /// Shadow mode: enforcing would have made `decision` here.
    pub(crate) fn record_shadow(&self, decision: ShadowDecision, wait: Duration) {
        self.rare().shadow.record(decision, wait);
    }

    pub(crate) fn record_outcome(&self, outcome: &Outcome) {
        // The failures in the order of OUTCOME_KINDS after `ok` (a test
        // pins the two together).
        let failure = match outcome {
            Outcome::Ok { .. } => {
                self.ok.fetch_add(1, Ordering::Relaxed);
                return;
            }
            Outcome::RateLimited { .. } => 0,
            Outcome::QuotaExhausted { .. } => 1,
            Outcome::TimedOut { .. } => 2,
            Outcome::Error { .. } => 3,
        };
        self.rare().failures[failure].fetch_add(1, Ordering::Relaxed);
    }

    /// Calls counted under each outcome, every kind present.
    fn outcome_counts(&self) -> BTreeMap<String, u64> {
        let rare = self.rare.get();
        let failures = (0..OUTCOME_KINDS.len() - 1)
            .map(|index| rare.map_or(0, |rare| rare.failures[index].load(Ordering::Relaxed)));
        let counts = std::iter::once(self.ok.load(Ordering::Relaxed)).chain(failures);
        OUTCOME_KINDS
            .iter()
            .zip(counts)
            .map(|(kind, count)| ((*kind).to_owned(), count))
            .collect()
    }

    pub(crate) fn status(&self, now: Micros) -> ScopeStatus {
        let mut state = self.state();
        let first = state.limit.effective();
        let (windows, units) = {
            let State { cell, budgets, .. } = &mut *state;
            budgets.change(|budgets| budgets.status(cell, first, now))
        };
        let low_share = state.budgets.share();
        let ms = |until: Micros| (until - now).div_ceil(1_000);
        let show = |rate: Option<Rate>| rate.map(|rate| rate.to_string());
        let window = sent_window(&state.limit);
        let server = state.cell.server_remaining(now);
        let quota = state.cell.quota_until(now);
        ScopeStatus {
            credential: self.credential.to_string(),
            scope: self.name.to_string(),
            rate: show(state.limit.configured),
            learned_rate: show(state.limit.learned()),
            effective_rate: show(state.limit.effective()),
            auto_rate: state.limit.auto().map(Aimd::state),
            burst: state.limit.burst().map(NonZeroU32::get),
            max_in_flight: self.admission().map(Admission::cap),
            max_in_flight_auto: self.auto_cap,
            max_in_flight_lowered: self.lowered_cap().is_some(),
            queue_limit: self.admission().map(Admission::queue),
            in_flight: self.in_flight(),
            peak_in_flight: self.peak_in_flight.load(Ordering::SeqCst) as usize,
            queued: self.admission().map_or(0, Admission::queued),
            blocked_for_ms: state.cell.blocked_until(now).map(ms),
            quota_exhausted: quota.is_some(),
            quota_resets_in_ms: quota.map(ms),
            server_remaining: server.map(|(remaining, _)| remaining),
            server_reset_in_ms: server.map(|(_, reset_at)| ms(reset_at)),
            sent_in_window: state.sent.in_window(now, window),
            sent_window_ms: window / 1_000,
            sent_history: state.sent.history(now, window),
            latency_ms: self.latency.load(Ordering::Relaxed) as f64 / 1_000.0,
            outcomes: self.outcome_counts(),
            shadow: self
                .rare
                .get()
                .map_or_else(ShadowStatus::default, |rare| rare.shadow.status()),
            windows,
            units,
            low_share,
        }
    }
}

/// The window the sent log counts over: the rate in force's, else a second.
fn sent_window(limit: &Limit) -> Micros {
    limit
        .effective()
        .map_or(1_000_000, |rate| micros(rate.window()))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::config::{CredentialConfig, Defaults};
    use crate::outcome::Reason;

    #[test]
    fn each_outcome_is_counted_under_its_own_status() {
        let limits = CredentialConfig::with_rate("10/1s".parse().unwrap())
            .resolve("k", &Defaults::default())
            .unwrap();
        let scope = Scope::primary(Arc::from("k"), Arc::from("api_key"), &limits, 0);
        let second = Duration::from_secs(1);
        let outcomes = [
            Outcome::Ok {
                http_status: 200,
                body: serde_json::Value::Null.into(),
            },
            Outcome::rate_limited("api_key", Reason::Shed, second, Some(1)),
            Outcome::quota_exhausted("api_key", second),
            Outcome::timed_out(second, false),
            Outcome::error(None, "failed"),
        ];
        for (times, outcome) in outcomes.iter().enumerate() {
            for _ in 0..=times {
                scope.record_outcome(outcome);
            }
        }
        let counted = scope.status(0).outcomes;
        for (times, outcome) in outcomes.iter().enumerate() {
            assert_eq!(counted[outcome.status()], times as u64 + 1, "{outcome:?}");
        }
        assert_eq!(counted.len(), OUTCOME_KINDS.len());
    }
}
