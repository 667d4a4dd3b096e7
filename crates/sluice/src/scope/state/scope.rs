//! One scope: its state behind one lock, what few scopes need made on first use, and how each kind of scope is made.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use once_cell::race::OnceBox;
use parking_lot::{Mutex, MutexGuard};

use super::limit::Limit;
use crate::Rate;
use crate::adapt::Aimd;
use crate::config::{GroupLimits, Limits};
use crate::limiter::{LimiterCell, Micros, micros};
use crate::scope::admission::Admission;
use crate::scope::crowding::Crowding;
use crate::scope::sent::{SECOND, SentLog};
use crate::scope::shadow::ShadowCounters;
use crate::scope::spend::Budgets;

/// `now` in whole seconds, rounded up (saturating: 136 years).
pub(super) fn seconds_up(now: Micros) -> u32 {
    u32::try_from(now.div_ceil(SECOND)).unwrap_or(u32::MAX)
}

/// `rate = "auto"` starts here, requests per second: below what nearly every
/// API allows, and enough that slow start gets answers to grow on (at 1/s
/// the first seconds carry one request each).
pub(super) const AUTO_START: f64 = 4.0;

/// A scope's mutable state, behind one short-lived lock.
#[derive(Debug)]
pub(super) struct State {
    pub(super) cell: LimiterCell,
    /// Further windows, units and the low share (issue 14).
    pub(super) budgets: Budgets,
    pub(super) limit: Limit,
    /// Requests really sent (in shadow mode, more than the cell admitted).
    pub(super) sent: SentLog,
}

impl State {
    /// Puts the effective limit into the cell; returns it if it changed.
    pub(super) fn apply(&mut self, before: Option<Rate>) -> Option<Option<Rate>> {
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
pub(super) struct Rare {
    /// What the server's concurrency rejections made of the cap.
    pub(super) crowding: Mutex<Crowding>,
    /// Shadow mode: what enforcing would have done.
    pub(super) shadow: ShadowCounters,
    /// Calls that did not end `ok`, by outcome (in the order of
    /// `OUTCOME_KINDS` after `ok`): most scopes see nearly none.
    pub(super) failures: [AtomicU64; OUTCOME_KINDS.len() - 1],
}

/// One bucket: a credential's `api_key` scope (with admission), or a scope
/// the server reported (limiter cell only).
#[derive(Debug)]
pub(crate) struct Scope {
    pub(crate) credential: Arc<str>,
    pub(crate) name: Arc<str>,
    pub(super) state: Mutex<State>,
    /// The scope's admission, when `admits` (see [`Scope::admission`]): a
    /// flag beside the other small fields instead of an `Option`'s 8
    /// bytes of tag (issue 18, the memory of an idle scope).
    pub(super) admission: Admission,
    /// The scope caps concurrency and queues (a credential's own scope, a
    /// group); a scope the server reported does not.
    pub(super) admits: bool,
    /// `max_in_flight = "auto"`: the cap follows rate x latency up to
    /// `configured_cap`.
    pub(super) auto_cap: bool,
    /// The configured `max_in_flight` (the bound, under `"auto"`).
    pub(super) configured_cap: u32,
    /// 32 bits: a process holds nowhere near 4 billion requests at once,
    /// and an idle scope should stay small (issue 18).
    pub(super) in_flight: AtomicU32,
    pub(super) peak_in_flight: AtomicU32,
    /// The latest call's time, in whole seconds from the engine's origin
    /// rounded up, so that a scope is never taken for idle early (it may
    /// be forgotten up to a second late). Kept beside the names a look-up
    /// compares, set without the state's lock, and written at most once a
    /// second; 32 bits of seconds last 136 years (issue 18, the memory of
    /// an idle scope).
    pub(super) last_used: AtomicU32,
    /// Exponentially weighted moving average of response latency, in
    /// microseconds (32 bits: up to 71 minutes, saturating): kept without
    /// the state's lock, so an answer on a scope that does not probe its
    /// rate takes none (issue 18).
    pub(super) latency: AtomicU32,
    /// Whether the scope probes for its rate (`rate = "auto"`), fixed when
    /// it is made: only such a scope's answers need the state's lock.
    pub(super) probes: bool,
    /// Whether the server ever told the scope's cell to hold starts (a
    /// penalty, a budget, a block, a spent quota). Until it has, nothing
    /// holds the scope, and step 2 reads so without the state's lock. Set
    /// under that lock and never cleared: a call that reads it unset ran
    /// step 2 before the server's word, as it could have with the lock.
    pub(super) heard: AtomicBool,
    /// Calls that ended `ok` (the other outcomes are counted in [`Rare`]).
    pub(super) ok: AtomicU64,
    /// What few scopes ever need, made by the first call that does.
    pub(super) rare: OnceBox<Rare>,
}

pub(super) const OUTCOME_KINDS: [&str; 5] = [
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

    pub(super) fn build(
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

    pub(super) fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock()
    }

    /// The state, to pass the server's word to its cell.
    pub(super) fn told(&self) -> MutexGuard<'_, State> {
        let state = self.state();
        self.heard.store(true, Ordering::Relaxed);
        state
    }

    /// The smoothed response latency.
    pub(super) fn latency(&self) -> Duration {
        Duration::from_micros(u64::from(self.latency.load(Ordering::Relaxed)))
    }

    /// The scope's [`Rare`] block, made now if it was not yet.
    pub(super) fn rare(&self) -> &Rare {
        self.rare.get_or_init(Box::default)
    }

    /// The cap the server's concurrency rejections imposed, if one is in force.
    pub(super) fn lowered_cap(&self) -> Option<u32> {
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
