//! One scope at run time: its limiter cell, what it learned, its admission, its counters.

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

use super::admission::{Admission, Permit, Refused};
use super::drain_estimate;
use crate::Rate;
use crate::adapt::{Aimd, AimdState};
use crate::config::{Limits, littles_law, with_margin};
use crate::limiter::{LimiterCell, Micros, NotUntil, Reservation};
use crate::outcome::{Outcome, Reason};

/// Weight of the newest latency sample in the moving average.
const LATENCY_ALPHA: f64 = 0.2;
/// `rate = "auto"` starts here, requests per second: below what nearly every
/// API allows, and enough that slow start gets answers to grow on (at 1/s
/// the first seconds carry one request each).
const AUTO_START: f64 = 4.0;

/// Where a scope's rate comes from: the lowest of what was configured, what
/// the server stated, and what the auto controller allows.
#[derive(Debug)]
struct Limit {
    configured: Option<Rate>,
    burst: Option<NonZeroU32>,
    learned: Option<Rate>,
    auto: Option<Aimd>,
    margin: Duration,
    /// The rate lives in a shared budget; the local cell only mirrors the server.
    shared: bool,
}

impl Limit {
    fn effective(&self) -> Option<Rate> {
        let auto = self.auto.as_ref().map(|aimd| rate_of(aimd.rate()));
        [self.configured, self.learned, auto]
            .into_iter()
            .flatten()
            .min_by(|a, b| a.per_sec().total_cmp(&b.per_sec()))
    }

    /// The rate the cells enforce: the effective one, widened by the margin.
    fn enforced(&self) -> Option<Rate> {
        self.effective().map(|rate| with_margin(rate, self.margin))
    }

    /// Burst applies to the configured rate only; learned and auto rates
    /// use the exact window.
    fn burst(&self) -> Option<NonZeroU32> {
        self.burst.filter(|_| self.effective() == self.configured)
    }
}

/// A rate in requests per second as `N/W` with a window of about a second:
/// N = the rate rounded (at least one), W = N / rate, so the fraction is kept.
fn rate_of(per_second: f64) -> Rate {
    let fallback = Rate::per_second(NonZeroU32::MIN);
    if !per_second.is_finite() || per_second <= 0.0 {
        return fallback;
    }
    let count = per_second.round().clamp(1.0, f64::from(u32::MAX));
    let window = Duration::try_from_secs_f64(count / per_second).unwrap_or(Duration::from_secs(1));
    // In range: a whole number clamped to u32.
    NonZeroU32::new(count as u32)
        .and_then(|count| Rate::new(count, window))
        .unwrap_or(fallback)
}

/// A scope's mutable state, behind one short-lived lock.
#[derive(Debug)]
struct State {
    cell: LimiterCell,
    limit: Limit,
    /// The scope's quota is spent until this instant (0: not exhausted).
    quota_until: Micros,
    /// Exponentially weighted moving average of response latency.
    latency: Duration,
    last_used: Micros,
}

impl State {
    /// Puts the effective limit into the cell; returns it if it changed.
    fn apply(&mut self, before: Option<Rate>) -> Option<Option<Rate>> {
        let after = self.limit.effective();
        if after == before {
            return None;
        }
        if !self.limit.shared {
            self.cell
                .set_limit(self.limit.enforced(), self.limit.burst());
        }
        Some(after)
    }
}

/// One bucket: a credential's `api_key` scope (with admission), or a scope
/// the server reported (limiter cell only).
#[derive(Debug)]
pub(crate) struct Scope {
    pub(crate) credential: Arc<str>,
    pub(crate) name: Arc<str>,
    state: Mutex<State>,
    admission: Option<Admission>,
    /// `max_in_flight = "auto"`: the cap follows rate x latency up to this bound.
    auto_cap: Option<u32>,
    in_flight: AtomicUsize,
    peak_in_flight: AtomicUsize,
    outcomes: [AtomicU64; OUTCOME_KINDS.len()],
}

const OUTCOME_KINDS: [&str; 5] = [
    "ok",
    "rate_limited",
    "quota_exhausted",
    "timed_out",
    "error",
];

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
    /// The smoothed response latency.
    pub latency_ms: f64,
    /// Outcomes of calls decided on this scope, by status.
    pub outcomes: BTreeMap<String, u64>,
}

/// A change the scope made to itself, for the debug log.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Adapted {
    pub(crate) rate: Option<Option<Rate>>,
    pub(crate) cap: Option<u32>,
}

impl Scope {
    /// A credential's own scope: its configured rate, semaphore and queue.
    pub(crate) fn primary(
        credential: Arc<str>,
        name: Arc<str>,
        limits: &Limits,
        now: Micros,
    ) -> Self {
        let cap = limits.max_in_flight;
        let admission = Admission::new(cap, limits.queue);
        let auto = limits.auto_rate.then(|| {
            let ceiling = limits.rate.map(|rate| rate.per_sec());
            Aimd::new(AUTO_START.min(ceiling.unwrap_or(AUTO_START)), ceiling, now)
        });
        let limit = Limit {
            configured: limits.rate,
            burst: limits.burst,
            learned: None,
            auto,
            margin: limits.margin,
            shared: limits.shared,
        };
        let scope = Self::build(credential, name, limit, limits, Some(admission), now);
        if limits.auto_concurrency {
            scope.adjust_cap();
        }
        scope
    }

    /// A scope the server reported: follows the server's signals, and its
    /// stated policy when the credential learns.
    pub(crate) fn reported(
        credential: Arc<str>,
        name: Arc<str>,
        limits: &Limits,
        now: Micros,
    ) -> Self {
        let limit = Limit {
            configured: None,
            burst: None,
            learned: None,
            auto: None,
            margin: limits.margin,
            shared: limits.shared,
        };
        Self::build(credential, name, limit, limits, None, now)
    }

    fn build(
        credential: Arc<str>,
        name: Arc<str>,
        limit: Limit,
        limits: &Limits,
        admission: Option<Admission>,
        now: Micros,
    ) -> Self {
        let cell = match limit.enforced() {
            Some(rate) if !limit.shared => LimiterCell::new(rate, limit.burst()),
            _ => LimiterCell::unlimited(),
        };
        let auto_cap =
            (limits.auto_concurrency && admission.is_some()).then_some(limits.max_in_flight);
        Scope {
            credential,
            name,
            state: Mutex::new(State {
                cell,
                limit,
                quota_until: 0,
                latency: limits.expected_latency,
                last_used: now,
            }),
            admission,
            auto_cap,
            in_flight: AtomicUsize::new(0),
            peak_in_flight: AtomicUsize::new(0),
            outcomes: Default::default(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding this lock cannot leave the state torn (every
        // update is a plain assignment), so a poisoned lock is still usable.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn touch(&self, now: Micros) {
        let mut state = self.state();
        state.last_used = state.last_used.max(now);
    }

    /// Waits for a concurrency permit in the bounded queue. A full queue, or
    /// a queue that cannot drain within `remaining`, sheds at once with the
    /// drain estimate; a permit that does not come by `deadline` times out.
    pub(crate) async fn admit(
        &self,
        now: Micros,
        deadline: Instant,
        remaining: Duration,
        deadline_len: Duration,
    ) -> Result<Option<Permit<'_>>, Outcome> {
        let Some(admission) = &self.admission else {
            return Ok(None);
        };
        let estimate = |ahead| self.drain_estimate(admission, ahead, now);
        match admission.admit(deadline, remaining, estimate).await {
            Ok(permit) => Ok(Some(permit)),
            Err((Refused::Shed { running }, drain)) => Err(Outcome::rate_limited(
                &self.name,
                Reason::Shed,
                drain,
                Some(running),
            )),
            Err((Refused::TimedOut, _)) => Err(Outcome::timed_out(deadline_len, false)),
            Err((Refused::Closed, _)) => Err(Outcome::error(None, "the scope was shut down")),
        }
    }

    fn drain_estimate(&self, admission: &Admission, ahead: usize, now: Micros) -> Duration {
        let mut state = self.state();
        let next_slot = Duration::from_micros(state.cell.earliest(now) - now);
        let interval = state.limit.enforced().map(|rate| rate.interval());
        drain_estimate(ahead, admission.cap(), state.latency, interval, next_slot)
    }

    /// `(quota spent until, blocked by the server until)`, each if still ahead.
    pub(crate) fn holds(&self, now: Micros) -> (Option<Micros>, Option<Micros>) {
        let state = self.state();
        let quota = (state.quota_until > now).then_some(state.quota_until);
        (quota, state.cell.blocked_until(now))
    }

    pub(crate) fn reserve(
        &self,
        now: Micros,
        not_before: Micros,
        max_wait: Micros,
    ) -> Result<Reservation, NotUntil> {
        self.state().cell.reserve(now, not_before, max_wait)
    }

    pub(crate) fn refund(&self, reservation: &Reservation) {
        self.state().cell.refund(reservation);
    }

    pub(crate) fn is_current(&self, reservation: &Reservation) -> bool {
        self.state().cell.is_current(reservation)
    }

    pub(crate) fn sync(&self, remaining: u64, reset_at: Micros, now: Micros) {
        self.state().cell.sync(remaining, reset_at, now);
    }

    pub(crate) fn penalize(&self, until: Micros, now: Micros) {
        self.state().cell.penalize(until, now);
    }

    /// Mirrors a block another process learned: nothing starts before `until`.
    pub(crate) fn block(&self, until: Micros, now: Micros) {
        self.state().cell.sync(0, until, now);
    }

    /// Marks the quota spent until `until`; true if it was not already.
    pub(crate) fn exhaust(&self, until: Micros, now: Micros) -> bool {
        let mut state = self.state();
        let fresh = state.quota_until <= now;
        state.quota_until = state.quota_until.max(until);
        fresh
    }

    /// The rate the cells enforce now (for the shared budget's requests).
    pub(crate) fn enforced(&self) -> Option<Rate> {
        self.state().limit.enforced()
    }

    /// The server stated a policy of `stated`: adopt it if it is lower than
    /// what is in force (a configured rate never rises by learning).
    pub(crate) fn learn(&self, stated: Rate) -> Adapted {
        let mut state = self.state();
        let before = state.limit.effective();
        let lower = state.limit.learned.is_none_or(|learned| learned != stated);
        if lower {
            state.limit.learned = Some(stated);
            let ceiling = [state.limit.configured, Some(stated)]
                .into_iter()
                .flatten()
                .map(|rate| rate.per_sec())
                .min_by(f64::total_cmp);
            if let Some(aimd) = &mut state.limit.auto {
                aimd.set_ceiling(ceiling);
            }
        }
        let rate = state.apply(before);
        drop(state);
        Adapted {
            rate,
            cap: rate.and_then(|_| self.adjust_cap()),
        }
    }

    /// A request starts: the `rate = "auto"` controller counts what it sends.
    pub(crate) fn on_send(&self, started: Micros) {
        if let Some(aimd) = &mut self.state().limit.auto {
            aimd.on_send(started);
        }
    }

    /// A response to a request started at `started` arrived: feeds the
    /// `rate = "auto"` controller.
    pub(crate) fn on_response(&self, started: Micros, now: Micros, throttled: bool) -> Adapted {
        let mut state = self.state();
        let before = state.limit.effective();
        let changed = match &mut state.limit.auto {
            Some(aimd) => aimd.on_response(started, now, throttled).is_some(),
            None => false,
        };
        let rate = if changed { state.apply(before) } else { None };
        drop(state);
        Adapted {
            rate,
            cap: rate.and_then(|_| self.adjust_cap()),
        }
    }

    /// Records a response's latency; with `max_in_flight = "auto"` the cap
    /// follows. Returns the new cap when it moved.
    pub(crate) fn record_latency(&self, latency: Duration) -> Option<u32> {
        {
            let mut state = self.state();
            let blended = state.latency.as_secs_f64() * (1.0 - LATENCY_ALPHA)
                + latency.as_secs_f64() * LATENCY_ALPHA;
            state.latency = Duration::from_secs_f64(blended);
        }
        self.adjust_cap()
    }

    /// Little's law: the cap follows the rate in force times the smoothed
    /// latency, at least 1, at most the configured bound.
    fn adjust_cap(&self) -> Option<u32> {
        let (bound, admission) = (self.auto_cap?, self.admission.as_ref()?);
        let (rate, latency) = {
            let state = self.state();
            (state.limit.effective()?, state.latency)
        };
        let cap = littles_law(rate, latency).min(bound);
        (cap != admission.cap()).then(|| {
            admission.set_cap(cap);
            cap
        })
    }

    pub(crate) fn record_outcome(&self, outcome: &Outcome) {
        if let Some(index) = OUTCOME_KINDS
            .iter()
            .position(|kind| *kind == outcome.status())
        {
            self.outcomes[index].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts a request in flight until the guard drops.
    pub(crate) fn start_request(&self) -> InFlight<'_> {
        let now_in_flight = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak_in_flight
            .fetch_max(now_in_flight, Ordering::SeqCst);
        InFlight(&self.in_flight)
    }

    /// Requests in flight now.
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }

    /// True when forgetting the scope changes nothing: nobody is using it,
    /// its cell is as good as fresh, nothing was learned, and it has been
    /// idle for `idle`.
    pub(crate) fn is_evictable(&self, now: Micros, idle: Micros) -> bool {
        if self.in_flight() > 0 || self.admission.as_ref().is_some_and(|a| !a.is_idle()) {
            return false;
        }
        let state = self.state();
        state.cell.is_idle(now)
            && state.quota_until <= now
            && state.limit.learned.is_none()
            && state.limit.auto.is_none()
            && state.last_used.saturating_add(idle) <= now
    }

    pub(crate) fn status(&self, now: Micros) -> ScopeStatus {
        let state = self.state();
        let ms = |until: Micros| (until - now).div_ceil(1_000);
        let show = |rate: Option<Rate>| rate.map(|rate| rate.to_string());
        ScopeStatus {
            credential: self.credential.to_string(),
            scope: self.name.to_string(),
            rate: show(state.limit.configured),
            learned_rate: show(state.limit.learned),
            effective_rate: show(state.limit.effective()),
            auto_rate: state.limit.auto.as_ref().map(Aimd::state),
            burst: state.limit.burst().map(NonZeroU32::get),
            max_in_flight: self.admission.as_ref().map(Admission::cap),
            max_in_flight_auto: self.auto_cap.is_some(),
            queue_limit: self.admission.as_ref().map(Admission::queue),
            in_flight: self.in_flight(),
            peak_in_flight: self.peak_in_flight.load(Ordering::SeqCst),
            queued: self.admission.as_ref().map_or(0, Admission::queued),
            blocked_for_ms: state.cell.blocked_until(now).map(ms),
            quota_exhausted: state.quota_until > now,
            quota_resets_in_ms: (state.quota_until > now).then(|| ms(state.quota_until)),
            server_remaining: state
                .cell
                .server_remaining(now)
                .map(|(remaining, _)| remaining),
            latency_ms: state.latency.as_secs_f64() * 1_000.0,
            outcomes: OUTCOME_KINDS
                .iter()
                .zip(&self.outcomes)
                .map(|(kind, count)| ((*kind).to_owned(), count.load(Ordering::Relaxed)))
                .collect(),
        }
    }
}

/// A request in flight on a scope.
#[derive(Debug)]
pub(crate) struct InFlight<'a>(&'a AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_from_floats() {
        let r = rate_of(19.6);
        assert_eq!(r.count().get(), 20);
        assert!((r.per_sec() - 19.6).abs() < 1e-6);
        assert_eq!(rate_of(0.5), "1/2s".parse().unwrap());
        assert_eq!(rate_of(f64::NAN).count().get(), 1);
    }
}
