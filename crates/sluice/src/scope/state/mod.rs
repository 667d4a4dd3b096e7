//! One scope at run time: its limiter cell, what it learned, its admission, its counters.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use once_cell::race::OnceBox;
use parking_lot::{Mutex, MutexGuard};
use tokio::time::Instant;

use super::admission::{Admission, AdmittedNow, Permit, Refused};
use super::crowding::Crowding;
use super::drain_estimate;
use super::sent::{SECOND, SentLog};
use super::shadow::ShadowCounters;
use super::spend::{Ask, Budgets, Deferred, Ticket};
use crate::Rate;
use crate::adapt::Aimd;
use crate::config::{GroupLimits, Limits, Priority};
use crate::deadline::Deadline;
use crate::limiter::{LimiterCell, Micros, Reservation, micros};
use crate::outcome::{Outcome, Reason};

mod adapt;
mod held;
mod limit;
mod reload;
mod status;

pub(crate) use adapt::Adapted;
pub(crate) use held::Held;
pub use status::ScopeStatus;

use limit::Limit;

/// `now` in whole seconds, rounded up (saturating: 136 years).
fn seconds_up(now: Micros) -> u32 {
    u32::try_from(now.div_ceil(SECOND)).unwrap_or(u32::MAX)
}

/// `rate = "auto"` starts here, requests per second: below what nearly every
/// API allows, and enough that slow start gets answers to grow on (at 1/s
/// the first seconds carry one request each).
const AUTO_START: f64 = 4.0;

/// A concurrency permit from [`Scope::admit`] (none when the scope caps
/// nothing).
pub(crate) struct Admitted<'a> {
    pub(crate) permit: Option<Permit<'a>>,
    /// The call waited in the queue for it: the time it read before is
    /// stale.
    pub(crate) queued: bool,
}

impl<'a> Admitted<'a> {
    fn now(permit: Option<Permit<'a>>) -> Self {
        Admitted {
            permit,
            queued: false,
        }
    }
}

/// A scope's mutable state, behind one short-lived lock.
#[derive(Debug)]
struct State {
    cell: LimiterCell,
    /// Further windows, units and the low share (issue 14).
    budgets: Budgets,
    limit: Limit,
    /// Requests really sent (in shadow mode, more than the cell admitted).
    sent: SentLog,
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

/// What few scopes ever need, in one block made on first use: an idle
/// scope should stay small (issue 18). A scope without it reads as one
/// with a fresh one: no cap lowered, no shadow decision counted.
#[derive(Debug, Default)]
struct Rare {
    /// What the server's concurrency rejections made of the cap.
    crowding: Mutex<Crowding>,
    /// Shadow mode: what enforcing would have done.
    shadow: ShadowCounters,
    /// Calls that did not end `ok`, by outcome (in the order of
    /// `OUTCOME_KINDS` after `ok`): most scopes see nearly none.
    failures: [AtomicU64; OUTCOME_KINDS.len() - 1],
}

/// One bucket: a credential's `api_key` scope (with admission), or a scope
/// the server reported (limiter cell only).
#[derive(Debug)]
pub(crate) struct Scope {
    pub(crate) credential: Arc<str>,
    pub(crate) name: Arc<str>,
    state: Mutex<State>,
    /// The scope's admission, when `admits` (see [`Scope::admission`]): a
    /// flag beside the other small fields instead of an `Option`'s 8
    /// bytes of tag (issue 18, the memory of an idle scope).
    admission: Admission,
    /// The scope caps concurrency and queues (a credential's own scope, a
    /// group); a scope the server reported does not.
    admits: bool,
    /// `max_in_flight = "auto"`: the cap follows rate x latency up to
    /// `configured_cap`.
    auto_cap: bool,
    /// The configured `max_in_flight` (the bound, under `"auto"`).
    configured_cap: u32,
    /// 32 bits: a process holds nowhere near 4 billion requests at once,
    /// and an idle scope should stay small (issue 18).
    in_flight: AtomicU32,
    peak_in_flight: AtomicU32,
    /// The latest call's time, in whole seconds from the engine's origin
    /// rounded up, so that a scope is never taken for idle early (it may
    /// be forgotten up to a second late). Kept beside the names a look-up
    /// compares, set without the state's lock, and written at most once a
    /// second; 32 bits of seconds last 136 years (issue 18, the memory of
    /// an idle scope).
    last_used: AtomicU32,
    /// Exponentially weighted moving average of response latency, in
    /// microseconds (32 bits: up to 71 minutes, saturating): kept without
    /// the state's lock, so an answer on a scope that does not probe its
    /// rate takes none (issue 18).
    latency: AtomicU32,
    /// Whether the scope probes for its rate (`rate = "auto"`), fixed when
    /// it is made: only such a scope's answers need the state's lock.
    probes: bool,
    /// Whether the server ever told the scope's cell to hold starts (a
    /// penalty, a budget, a block, a spent quota). Until it has, nothing
    /// holds the scope, and step 2 reads so without the state's lock. Set
    /// under that lock and never cleared: a call that reads it unset ran
    /// step 2 before the server's word, as it could have with the lock.
    heard: AtomicBool,
    /// Calls that ended `ok` (the other outcomes are counted in [`Rare`]).
    ok: AtomicU64,
    /// What few scopes ever need, made by the first call that does.
    rare: OnceBox<Rare>,
}

const OUTCOME_KINDS: [&str; 5] = [
    "ok",
    "rate_limited",
    "quota_exhausted",
    "timed_out",
    "error",
];

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
        // Shadow mode spends no shared budget: it models the rate locally,
        // on this process's own traffic (issue 20).
        let shared = limits.shared && limits.enforce;
        let limit = Limit::new(limits.rate, limits.burst, auto, limits.margin, shared);
        let budgets = Budgets::new(
            &limits.rates(),
            limits.burst,
            &limits.units,
            limits.low_share,
            limits.margin,
        );
        let scope = Self::build(
            credential,
            name,
            limit,
            limits,
            budgets,
            Some(admission),
            now,
        );
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
        let limit = Limit::new(
            None,
            None,
            None,
            limits.margin,
            limits.shared && limits.enforce,
        );
        Self::build(credential, name, limit, limits, Budgets::none(), None, now)
    }

    /// A limit group of the credential (`[credentials.X.groups.G]`): its
    /// own windows, semaphore and queue.
    pub(crate) fn group(
        credential: Arc<str>,
        name: Arc<str>,
        group: &GroupLimits,
        limits: &Limits,
        now: Micros,
    ) -> Self {
        let limit = Limit::new(
            group.rates.first().copied(),
            group.burst,
            None,
            limits.margin,
            limits.shared && limits.enforce,
        );
        let budgets = Budgets::new(
            &group.rates,
            group.burst,
            &[],
            limits.low_share,
            limits.margin,
        );
        let admission = Admission::new(group.max_in_flight, group.queue);
        let mut scope = Self::build(
            credential,
            name,
            limit,
            limits,
            budgets,
            Some(admission),
            now,
        );
        // A group's cap is its own, never `max_in_flight = "auto"`'s.
        scope.auto_cap = false;
        scope
    }

    fn build(
        credential: Arc<str>,
        name: Arc<str>,
        limit: Limit,
        limits: &Limits,
        budgets: Budgets,
        admission: Option<Admission>,
        now: Micros,
    ) -> Self {
        let cell = match limit.enforced() {
            Some(rate) if !limit.shared => {
                let mut rates = vec![rate];
                rates.extend(budgets.further(limit.margin()));
                LimiterCell::windows(&rates, limit.burst())
            }
            _ => LimiterCell::unlimited(),
        };
        let auto_cap = limits.auto_concurrency && admission.is_some();
        let admits = admission.is_some();
        // A scope that admits nothing keeps an empty admission it never reads.
        let admission = admission.unwrap_or_else(|| Admission::new(0, 0));
        let probes = limit.auto().is_some();
        Scope {
            credential,
            name,
            state: Mutex::new(State {
                cell,
                budgets,
                limit,
                sent: SentLog::default(),
            }),
            admission,
            admits,
            auto_cap,
            configured_cap: limits.max_in_flight,
            in_flight: AtomicU32::new(0),
            peak_in_flight: AtomicU32::new(0),
            last_used: AtomicU32::new(seconds_up(now)),
            latency: AtomicU32::new(
                u32::try_from(micros(limits.expected_latency)).unwrap_or(u32::MAX),
            ),
            probes,
            heard: AtomicBool::new(false),
            ok: AtomicU64::new(0),
            rare: OnceBox::new(),
        }
    }

    /// The scope's admission, if it caps concurrency.
    pub(super) fn admission(&self) -> Option<&Admission> {
        self.admits.then_some(&self.admission)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock()
    }

    /// The state, to pass the server's word to its cell.
    fn told(&self) -> MutexGuard<'_, State> {
        let state = self.state();
        self.heard.store(true, Ordering::Relaxed);
        state
    }

    /// The smoothed response latency.
    fn latency(&self) -> Duration {
        Duration::from_micros(u64::from(self.latency.load(Ordering::Relaxed)))
    }

    /// The scope's [`Rare`] block, made now if it was not yet.
    fn rare(&self) -> &Rare {
        self.rare.get_or_init(Box::default)
    }

    /// The cap the server's concurrency rejections imposed, if one is in force.
    fn lowered_cap(&self) -> Option<u32> {
        self.rare.get()?.crowding.lock().limit()
    }

    pub(crate) fn touch(&self, now: Micros) {
        // A plain store, not a locked read-modify-write: racing calls in
        // the same second may leave it a second older than the latest,
        // which an idle threshold of minutes does not notice.
        let second = seconds_up(now);
        if second > self.last_used.load(Ordering::Relaxed) {
            self.last_used.store(second, Ordering::Relaxed);
        }
    }

    /// Whether this is the scope `name` of `credential`.
    pub(crate) fn is(&self, credential: &str, name: &str) -> bool {
        *self.name == *name && *self.credential == *credential
    }

    /// Waits for a concurrency permit in the bounded queue. A full queue, or
    /// a queue that cannot drain within what is left of `deadline`, sheds at
    /// once with the drain estimate, as does one that would wait longer
    /// than `inline`; a permit that does not come by `deadline` times out.
    /// `now` and `at` are the caller's one reading of the clock;
    /// [`Admitted::queued`] says whether it went stale here.
    pub(crate) async fn admit(
        &self,
        (now, at): (Micros, Instant),
        inline: Duration,
        deadline: &Deadline,
        priority: Priority,
    ) -> Result<Admitted<'_>, Outcome> {
        let Some(admission) = self.admission() else {
            return Ok(Admitted::now(None));
        };
        if let Some(permit) = admission.try_admit() {
            return Ok(Admitted::now(Some(permit)));
        }
        let estimate = |ahead| self.drain_estimate(admission, ahead, now);
        match admission
            .admit_as(priority, deadline, (at, inline), estimate)
            .await
        {
            Ok(permit) => Ok(Admitted {
                permit: Some(permit),
                queued: true,
            }),
            Err((Refused::Shed { running }, drain)) => Err(Outcome::rate_limited(
                &self.name,
                Reason::Shed,
                drain,
                Some(running),
            )),
            Err((Refused::Later, wait)) => {
                let window = self.state().limit.enforced().map(|rate| rate.to_string());
                Err(
                    Outcome::rate_limited(&self.name, Reason::Throttled, wait, None)
                        .in_window(window),
                )
            }
            Err((Refused::TimedOut, _)) => Err(Outcome::timed_out(deadline.len(), false)),
        }
    }

    /// [`Scope::admit`] when it needs no wait: `Some(None)` when the scope
    /// caps nothing, `Some(permit)` when one is free and nobody waits,
    /// `None` when the call would have to queue.
    pub(crate) fn admit_at_once(&self) -> Option<Option<Permit<'_>>> {
        match self.admission() {
            None => Some(None),
            Some(admission) => admission.try_admit().map(Some),
        }
    }

    /// True when the scope caps concurrency and every permit is out: a
    /// new call would queue.
    pub(crate) fn permits_exhausted(&self) -> bool {
        self.admission()
            .is_some_and(|admission| admission.running() >= admission.cap() as usize)
    }

    /// Shadow mode's admission (issue 20): what [`Scope::admit`] would do,
    /// decided at once. A permit when one is free; else the call counts as
    /// queued while it runs without one, and the decision is a wait (the
    /// queue's drain estimate) or a shed — the queue is full, or cannot
    /// drain within the deadline.
    pub(crate) fn admit_now(
        &self,
        now: Micros,
        at: Instant,
        deadline: &Deadline,
    ) -> AdmittedNow<'_> {
        let Some(admission) = self.admission() else {
            return AdmittedNow::Permit { permit: None };
        };
        let estimate = |ahead| self.drain_estimate(admission, ahead, now);
        match admission.admit_now(deadline, at, estimate) {
            Ok(Ok(permit)) => AdmittedNow::Permit {
                permit: Some(permit),
            },
            Ok(Err((queued, wait))) => AdmittedNow::Wait {
                _queued: queued,
                wait,
            },
            Err(wait) => AdmittedNow::Shed { wait },
        }
    }

    /// When a start would be free for a call with `ahead` calls in line
    /// before it: the rate's next starts and the permits, together.
    fn drain_estimate(&self, admission: &Admission, ahead: usize, now: Micros) -> Duration {
        let calls = ahead.saturating_add(1);
        let slots: Vec<Duration> = {
            let state = self.state();
            let interval = state
                .limit
                .enforced()
                .map_or(0, |rate| micros(rate.interval()));
            if state.limit.shared {
                // The shared budget keeps the windows; locally, only the spacing.
                (0..calls)
                    .map(|i| {
                        let i = u64::try_from(i).unwrap_or(u64::MAX);
                        Duration::from_micros(interval.saturating_mul(i))
                    })
                    .collect()
            } else {
                state
                    .cell
                    .next_starts(now, calls, interval)
                    .into_iter()
                    .map(|start| Duration::from_micros(start.saturating_sub(now)))
                    .collect()
            }
        };
        drain_estimate(&slots, admission.cap(), admission.running(), self.latency())
    }

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

    /// The earliest start at or after `now`, charging nothing.
    pub(crate) fn earliest(&self, now: Micros) -> Micros {
        self.state().cell.earliest(now)
    }

    /// Reserves a start for a call asking `ask`: a request in every
    /// window, its costs in every unit window, its low share; all at one
    /// start no earlier than `not_before`, at most `max_wait` after `now`.
    pub(crate) fn reserve(
        &self,
        now: Micros,
        not_before: Micros,
        max_wait: Micros,
        ask: &Ask,
    ) -> Result<Ticket, Deferred> {
        let mut state = self.state();
        let State {
            cell,
            budgets,
            limit,
            ..
        } = &mut *state;
        let first = limit.effective();
        budgets.reserve(cell, first, (now, not_before, max_wait), ask)
    }

    pub(crate) fn refund(&self, ticket: &Ticket) {
        let mut state = self.state();
        state.cell.refund(&ticket.requests);
        state.budgets.change(|budgets| budgets.refund(ticket));
    }

    /// Gives back every one of the `tickets` held on each scope, when that
    /// is exact on all of them (a bucket takes a start back only while it
    /// is among the last charged; `LimiterCell::gives_back_exactly`), and
    /// returns true; otherwise gives back nothing. The scopes are locked
    /// together, in one order, so that the answer holds while it acts.
    pub(crate) fn give_back_exactly(held: &[(&Scope, &Ticket)]) -> bool {
        let mut scopes: Vec<(&Scope, Vec<&Ticket>)> = Vec::new();
        for &(scope, ticket) in held {
            match scopes.iter_mut().find(|(s, _)| std::ptr::eq(*s, scope)) {
                Some((_, tickets)) => tickets.push(ticket),
                None => scopes.push((scope, vec![ticket])),
            }
        }
        scopes.sort_by_key(|(scope, _)| std::ptr::from_ref::<Scope>(scope) as usize);
        let mut states: Vec<(MutexGuard<'_, State>, &[&Ticket])> = scopes
            .iter()
            .map(|(scope, tickets)| (scope.state(), tickets.as_slice()))
            .collect();
        let exact = states.iter().all(|(state, tickets)| {
            let requests: Vec<&Reservation> = tickets.iter().map(|t| &t.requests).collect();
            state.cell.gives_back_exactly(&requests) && state.budgets.give_back_exactly(tickets)
        });
        if exact {
            for (state, tickets) in &mut states {
                let requests: Vec<&Reservation> = tickets.iter().map(|t| &t.requests).collect();
                state.cell.refund_all(&requests);
                state.budgets.change(|budgets| budgets.refund_all(tickets));
            }
        }
        exact
    }

    pub(crate) fn is_current(&self, ticket: &Ticket) -> bool {
        let state = self.state();
        state.cell.is_current(&ticket.requests) && state.budgets.is_current(ticket)
    }

    /// Why `ask` can never be granted on this scope, if it cannot.
    pub(crate) fn never_fits(&self, ask: &Ask) -> Option<String> {
        if ask.costs.is_empty() {
            // Only a cost can outgrow a window.
            return None;
        }
        self.state().budgets.never_fits(ask)
    }

    /// What `ticket` charged in each unit.
    pub(crate) fn costs_of(&self, ticket: &Ticket) -> Vec<(Arc<str>, u64)> {
        if !ticket.charges_units() {
            return Vec::new();
        }
        ticket.costs(&self.state().budgets)
    }

    /// The true-up of a call started at `start`; false without that unit.
    pub(crate) fn settle(
        &self,
        unit: &str,
        start: Micros,
        estimate: u64,
        actual: u64,
        priority: Priority,
    ) -> bool {
        self.state()
            .budgets
            .change(|budgets| budgets.settle(unit, start, estimate, actual, priority))
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

    /// True when `name` is one of the scope's units.
    pub(crate) fn has_unit(&self, name: &str) -> bool {
        self.state().budgets.has_unit(name)
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

    /// Every window and unit budget `ask` spends on this scope, as the
    /// shared backend charges them: the request windows (the rate in force
    /// first, cost 1), then each unit's windows at the call's cost.
    pub(crate) fn shared_windows(&self, ask: &Ask) -> Vec<crate::shared::SharedWindow> {
        let state = self.state();
        let margin = state.limit.margin();
        let requests = state
            .limit
            .enforced()
            .into_iter()
            .chain(state.budgets.further(margin));
        let requests: Vec<Rate> = requests.collect();
        let mut windows: Vec<_> = requests
            .iter()
            .enumerate()
            .map(|(index, rate)| crate::shared::SharedWindow {
                scope: self.name.to_string(),
                unit: None,
                index,
                rate: *rate,
                cost: 1,
                low: false,
                burst: if index == 0 {
                    state.limit.burst()
                } else {
                    None
                },
            })
            .collect();
        windows.extend(state.budgets.shared_units(&self.name, ask, margin));
        let burst = state.limit.burst();
        windows.extend(
            state
                .budgets
                .shared_low(&self.name, &requests, burst, ask, margin),
        );
        windows
    }

    /// The rate the cells enforce now (for the shared budget's requests),
    /// and how late after its granted slot a start may still come (half
    /// the window margin), read together.
    pub(crate) fn enforced_late(&self) -> Option<(Rate, Duration)> {
        self.state().limit.enforced_late()
    }

    /// True when forgetting the scope changes nothing: nobody is using it,
    /// its cell is as good as fresh, nothing was learned, and it has been
    /// idle for `idle`.
    pub(crate) fn is_evictable(&self, now: Micros, idle: Micros) -> bool {
        if self.in_flight() > 0 || self.admission().is_some_and(|a| !a.is_idle()) {
            return false;
        }
        let state = self.state();
        state.cell.is_idle(now)
            && state.budgets.is_idle(now)
            && state.limit.is_configured_only()
            && (u64::from(self.last_used.load(Ordering::Relaxed)) * SECOND).saturating_add(idle)
                <= now
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{CredentialConfig, Defaults};

    fn scope() -> Scope {
        let limits = CredentialConfig::with_rate("10/1s".parse().unwrap())
            .resolve("k", &Defaults::default())
            .unwrap();
        Scope::primary(Arc::from("k"), Arc::from("api_key"), &limits, 0)
    }

    #[test]
    fn each_word_of_the_server_holds_the_scope_as_step_2_reads_it() {
        let fresh = scope();
        assert_eq!(fresh.holds(0), (None, None));
        assert_eq!(fresh.quota_until(0), None);
        assert_eq!(fresh.blocked_until(0), None);

        let penalized = scope();
        penalized.penalize(2_000, 1_000);
        assert_eq!(penalized.holds(1_000), (None, Some(2_000)));
        assert_eq!(penalized.blocked_until(1_500), Some(2_000));
        assert_eq!(penalized.holds(2_000), (None, None));

        let blocked = scope();
        blocked.block(3_000, 1_000);
        assert_eq!(blocked.holds(1_000), (None, Some(3_000)));

        let empty = scope();
        empty.sync(0, 4_000, 1_000);
        assert_eq!(empty.blocked_until(1_000), Some(4_000));
        let some_left = scope();
        some_left.sync(5, 4_000, 1_000);
        assert_eq!(some_left.holds(1_000), (None, None));

        let spent = scope();
        assert!(spent.exhaust(9_000, 1_000));
        assert_eq!(spent.holds(1_000), (Some(9_000), None));
        assert_eq!(spent.quota_until(8_999), Some(9_000));
        assert_eq!(spent.quota_until(9_000), None);
    }
}
