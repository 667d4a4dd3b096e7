//! One scope at run time: its limiter cell, server state, admission queue and counters.

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::{Semaphore, SemaphorePermit};
use tokio::time::Instant;

use super::drain_estimate;
use crate::limiter::{LimiterCell, Micros, NotUntil, Reservation};
use crate::outcome::{Outcome, Reason};
use crate::{Rate, config::Limits};

/// Weight of the newest latency sample in the moving average.
const LATENCY_ALPHA: f64 = 0.2;

/// A scope's mutable state, behind one short-lived lock.
#[derive(Debug)]
struct State {
    cell: LimiterCell,
    rate: Option<Rate>,
    /// The rate the cell enforces (the configured one plus the window margin).
    enforced: Option<Rate>,
    burst: Option<NonZeroU32>,
    /// The scope's quota is spent until this instant (0: not exhausted).
    quota_until: Micros,
    /// Exponentially weighted moving average of response latency.
    latency: Duration,
    last_used: Micros,
}

/// The bounded queue in front of the scope's concurrency permits.
#[derive(Debug)]
struct Admission {
    semaphore: Semaphore,
    max_in_flight: u32,
    queue: u32,
    queued: AtomicUsize,
}

/// One bucket: a credential's `api_key` scope (with admission), or a scope
/// the server reported (limiter cell only).
#[derive(Debug)]
pub(crate) struct Scope {
    pub(crate) credential: Arc<str>,
    pub(crate) name: Arc<str>,
    state: Mutex<State>,
    admission: Option<Admission>,
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

/// A permit to have a request in flight (none for scopes without admission).
type Admitted<'a> = Option<SemaphorePermit<'a>>;

/// A live view of one scope, for `/v1/status` and operators. Never holds a secret.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScopeStatus {
    /// The credential's name.
    pub credential: String,
    /// The scope's name.
    pub scope: String,
    /// Its own rate, e.g. `10/1s`, if it has one.
    pub rate: Option<String>,
    /// Its burst when GCRA semantics are in use.
    pub burst: Option<u32>,
    /// The concurrency cap (admission scopes only).
    pub max_in_flight: Option<u32>,
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
    /// What the server last said remains in its window.
    pub server_remaining: Option<u64>,
    /// The smoothed response latency.
    pub latency_ms: f64,
    /// Outcomes of calls decided on this scope, by status.
    pub outcomes: BTreeMap<String, u64>,
}

impl Scope {
    /// A credential's own scope: its configured rate, semaphore and queue.
    pub(crate) fn primary(
        credential: Arc<str>,
        name: Arc<str>,
        limits: &Limits,
        now: Micros,
    ) -> Self {
        let cell = match limits.enforced {
            Some(rate) => LimiterCell::new(rate, limits.burst),
            None => LimiterCell::unlimited(),
        };
        let admission = Admission {
            semaphore: Semaphore::new(limits.max_in_flight as usize),
            max_in_flight: limits.max_in_flight,
            queue: limits.queue,
            queued: AtomicUsize::new(0),
        };
        Self::build(credential, name, cell, limits, Some(admission), now)
    }

    /// A scope the server reported: follows the server's signals only.
    pub(crate) fn reported(
        credential: Arc<str>,
        name: Arc<str>,
        limits: &Limits,
        now: Micros,
    ) -> Self {
        let limits = Limits {
            rate: None,
            enforced: None,
            burst: None,
            ..limits.clone()
        };
        Self::build(
            credential,
            name,
            LimiterCell::unlimited(),
            &limits,
            None,
            now,
        )
    }

    fn build(
        credential: Arc<str>,
        name: Arc<str>,
        cell: LimiterCell,
        limits: &Limits,
        admission: Option<Admission>,
        now: Micros,
    ) -> Self {
        Scope {
            credential,
            name,
            state: Mutex::new(State {
                cell,
                rate: limits.rate,
                enforced: limits.enforced,
                burst: limits.burst,
                quota_until: 0,
                latency: limits.expected_latency,
                last_used: now,
            }),
            admission,
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
    ) -> Result<Admitted<'_>, Outcome> {
        let Some(admission) = &self.admission else {
            return Ok(None);
        };
        if let Ok(permit) = admission.semaphore.try_acquire() {
            return Ok(Some(permit));
        }
        let ahead = admission.queued.fetch_add(1, Ordering::SeqCst);
        let _slot = QueueSlot(&admission.queued);
        let estimate = self.drain_estimate(ahead, now);
        if ahead >= admission.queue as usize || estimate >= remaining {
            let running =
                admission.max_in_flight as usize - admission.semaphore.available_permits();
            return Err(Outcome::rate_limited(
                &self.name,
                Reason::Shed,
                estimate,
                Some(running),
            ));
        }
        match tokio::time::timeout_at(deadline, admission.semaphore.acquire()).await {
            Ok(Ok(permit)) => Ok(Some(permit)),
            Ok(Err(_closed)) => Err(Outcome::error(None, "the scope was shut down")),
            Err(_elapsed) => Err(Outcome::timed_out(deadline_len, false)),
        }
    }

    fn drain_estimate(&self, ahead: usize, now: Micros) -> Duration {
        let Some(admission) = &self.admission else {
            return Duration::ZERO;
        };
        let mut state = self.state();
        let next_slot = Duration::from_micros(state.cell.earliest(now) - now);
        let interval = state.enforced.map(|rate| rate.interval());
        drain_estimate(
            ahead,
            admission.max_in_flight,
            state.latency,
            interval,
            next_slot,
        )
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

    pub(crate) fn record_latency(&self, latency: Duration) {
        let mut state = self.state();
        let blended = state.latency.as_secs_f64() * (1.0 - LATENCY_ALPHA)
            + latency.as_secs_f64() * LATENCY_ALPHA;
        state.latency = Duration::from_secs_f64(blended);
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
    /// its cell is as good as fresh, and it has been idle for `idle`.
    pub(crate) fn is_evictable(&self, now: Micros, idle: Micros) -> bool {
        if self.in_flight() > 0 {
            return false;
        }
        if let Some(admission) = &self.admission
            && (admission.queued.load(Ordering::SeqCst) > 0
                || admission.semaphore.available_permits() < admission.max_in_flight as usize)
        {
            return false;
        }
        let state = self.state();
        state.cell.is_idle(now)
            && state.quota_until <= now
            && state.last_used.saturating_add(idle) <= now
    }

    pub(crate) fn status(&self, now: Micros) -> ScopeStatus {
        let state = self.state();
        let ms = |until: Micros| (until - now).div_ceil(1_000);
        ScopeStatus {
            credential: self.credential.to_string(),
            scope: self.name.to_string(),
            rate: state.rate.map(|rate| rate.to_string()),
            burst: state.burst.map(NonZeroU32::get),
            max_in_flight: self.admission.as_ref().map(|a| a.max_in_flight),
            queue_limit: self.admission.as_ref().map(|a| a.queue),
            in_flight: self.in_flight(),
            peak_in_flight: self.peak_in_flight.load(Ordering::SeqCst),
            queued: self
                .admission
                .as_ref()
                .map_or(0, |a| a.queued.load(Ordering::SeqCst)),
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

/// A place in the admission queue, given back when the call leaves it
/// (with a permit, shed, timed out, or cancelled by its caller).
struct QueueSlot<'a>(&'a AtomicUsize);

impl Drop for QueueSlot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
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
