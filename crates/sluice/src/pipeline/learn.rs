//! Step 7: every response is read for rate signals, and the call's scopes follow what it says.
//!
//! A stated policy lowers the scope's rate, a reported remaining syncs its
//! cell, a rejection with a wait penalizes it, a long wait or a spent
//! long window exhausts its quota; a shared credential tells the other
//! processes too.

use std::num::NonZeroU32;
use std::time::{Duration, SystemTime};

use bytes::Bytes;

use super::holds::note_exhausted;
use super::job::Job;
use super::reserve::Spent;
use crate::Rate;
use crate::config::{Priority, Settle};
use crate::engine::{Credential, Engine};
use crate::limiter::{Micros, micros};
use crate::scope::{Adapted, Scope, ScopeRef};
use crate::shared::Hold;
use crate::signal::{self, DEFAULT_SCOPE, ScopeSignal, Signal};

/// What a response said, and the scope its wait was charged to, if it
/// asked for one.
pub(super) struct Learned {
    pub(super) signal: Signal,
    pub(super) charged: Option<ScopeRef>,
}

impl Learned {
    /// The scope a rejection in the response is blamed on: the one its
    /// wait was charged to, else the one the signal names. Found only for
    /// an answer that failed; an accepted one needs no scope found.
    pub(super) fn blamed<E, P>(
        &self,
        engine: &Engine<E>,
        job: &Job<'_, P>,
        primary: &ScopeRef,
        now: Micros,
    ) -> ScopeRef {
        match &self.charged {
            Some(scope) => scope.clone(),
            None => scope_named(engine, job, primary, self.signal.blamed_scope(), now),
        }
    }
}

/// The credential's scope `name`: a unit's name is the credential's own
/// scope's business, and so is the credential's own name (which is what a
/// look-up would find).
fn scope_named<E, P>(
    engine: &Engine<E>,
    job: &Job<'_, P>,
    primary: &ScopeRef,
    name: &str,
    now: Micros,
) -> ScopeRef {
    if name == DEFAULT_SCOPE || primary.has_unit(name) {
        primary.clone()
    } else {
        engine.scope_for(job.credential, job.name, name, now)
    }
}

/// Learns from a response to a request started at `sent` that arrived at
/// `now`, `latency` after it was sent.
pub(super) fn response<E, P>(
    engine: &Engine<E>,
    job: &Job<'_, P>,
    primary: &ScopeRef,
    response: &http::Response<Bytes>,
    sent: Micros,
    now: Micros,
    latency: Duration,
) -> Learned {
    // The fast path: a body that cannot matter is not looked at.
    let body: &[u8] = if signal::wants_body(
        response.status(),
        response.headers(),
        job.credential.limits.body_signals,
    ) {
        response.body()
    } else {
        &[]
    };
    // The wall clock is read only for a response with a time to measure.
    let signal =
        signal::read_with_body_at(response.status(), response.headers(), body, SystemTime::now);
    let charged = sync(engine, job, primary, &signal, now);
    crowding(primary, &signal);
    // Too many in flight is not too fast: the rate controller is not told.
    let rate_rejection = signal.throttled && !signal.concurrency;
    let adapted = primary.on_answer(latency, sent, now, rate_rejection);
    log_adapted(primary, &adapted, "auto");
    if adapted.ramped && job.credential.outranks {
        // The calls sleeping on starts reserved under the slower rate give
        // them back and reserve again under the new one (exact windows take
        // any start back; the calls keep their order by priority).
        job.credential.seats.outrank(Priority::High, Micros::MAX);
    }
    Learned { signal, charged }
}

/// A concurrency rejection lowers the credential's cap (the permits are
/// the primary scope's); an accepted request lets a lowered cap recover.
fn crowding(primary: &Scope, signal: &Signal) {
    if signal.concurrency {
        if let Some(cap) = primary.on_concurrency_rejection() {
            tracing::debug!(credential = %primary.credential, scope = %primary.name, cap, "server refused for too many in flight: concurrency cap lowered");
        }
    } else if !signal.throttled
        && let Some(cap) = primary.on_accepted()
    {
        tracing::debug!(credential = %primary.credential, scope = %primary.name, cap, "concurrency cap recovering");
    }
}

/// Syncs every scope the signal reports on, and penalizes the one a
/// rejection's wait applies to, at `now` (when the answer came). Returns
/// the scope the wait was charged to, if any.
fn sync<E, P>(
    engine: &Engine<E>,
    job: &Job<'_, P>,
    primary: &ScopeRef,
    signal: &Signal,
    now: Micros,
) -> Option<ScopeRef> {
    let credential = job.credential;
    let tool = job.name;
    let quota_after = micros(engine.defaults.quota_after);
    let limits = &credential.limits;
    // The call holds the credential's own scope: used now, as a look-up
    // would mark it.
    primary.touch(now);
    for report in &signal.scopes {
        // A report in one of the credential's units (OpenAI's `tokens`,
        // an IETF policy named for the unit) syncs that unit's budget.
        if primary.has_unit(&report.name) {
            if let (Some(remaining), Some(reset)) = (report.remaining, report.reset) {
                primary.sync_unit(
                    &report.name,
                    remaining,
                    now.saturating_add(micros(reset)),
                    now,
                );
            }
            continue;
        }
        let scope = engine.scope_for(credential, tool, &report.name, now);
        if limits.learn
            && let Some(stated) = stated_policy(report, limits.policy_window)
        {
            let adapted = scope.learn(stated);
            log_adapted(&scope, &adapted, report.source);
        }
        if let (Some(remaining), Some(reset)) = (report.remaining, report.reset) {
            let long = report.is_quota_spent(engine.defaults.quota_after);
            // Headroom: what the key's other users are left is not ours to spend.
            let reserve = limits.reserve.map_or(0, |reserve| reserve.of(report.limit));
            let ours = remaining.saturating_sub(reserve);
            scope.sync(ours, now.saturating_add(micros(reset)), now);
            if long {
                exhaust(engine, credential, &scope, reset, now);
            } else if ours == 0 {
                if remaining > 0 {
                    tracing::debug!(scope = %scope.name, remaining, reserve, "leaving the rest of the window to the key's other users");
                }
                share_block(engine, credential, &scope, reset, Hold::Blocked);
            }
        }
    }
    let named = |name: &str| scope_named(engine, job, primary, name, now);
    bind_cost(primary, signal, now);
    if signal.throttled && signal.quota {
        // A quota the body named as spent: until the wait it states, else
        // for `quota_after`, when one call may look again.
        let wait = signal.wait();
        let name = wait.as_ref().and_then(|wait| wait.scope.as_deref());
        let scope = named(name.unwrap_or(signal.blamed_scope()));
        let resets_in = wait
            .map(|wait| wait.delay)
            .filter(|delay| !delay.is_zero())
            .unwrap_or(engine.defaults.quota_after);
        exhaust(engine, credential, &scope, resets_in, now);
        return Some(scope);
    }
    if signal.throttled
        && !signal.concurrency
        && let Some(wait) = signal.wait()
        && !wait.delay.is_zero()
    {
        let scope = named(wait.scope.as_deref().unwrap_or(signal.blamed_scope()));
        if micros(wait.delay) > quota_after {
            exhaust(engine, credential, &scope, wait.delay, now);
        } else {
            tracing::debug!(scope = %scope.name, wait_ms = wait.delay.as_millis() as u64, source = wait.source, "server asked for a wait");
            scope.penalize(now.saturating_add(micros(wait.delay)), now);
            share_block(engine, credential, &scope, wait.delay, Hold::Blocked);
        }
        return Some(scope);
    }
    None
}

/// A cost wait (GraphQL points) in a unit the credential has: that unit's
/// budget follows the server's count, `available` now and room for the
/// rejected request's cost after the wait. The wait itself still defers
/// the scope (a call that declares no cost in the unit would otherwise
/// come straight back); without such a unit it is a wait on the credential.
fn bind_cost(primary: &Scope, signal: &Signal, now: Micros) {
    if let Some(cost) = &signal.cost
        && primary.sync_unit(
            cost.unit,
            cost.available,
            now.saturating_add(micros(cost.delay)),
            now,
        )
    {
        tracing::debug!(
            unit = cost.unit,
            available = cost.available,
            wait_ms = cost.delay.as_millis() as u64,
            "the server's cost budget synced the unit"
        );
    }
}

/// The request rate a report states, if it states one: a limit with a
/// window (its own, or the credential's `policy_window` for headers that
/// never say). Token budgets are not request rates.
fn stated_policy(report: &ScopeSignal, policy_window: Option<Duration>) -> Option<Rate> {
    if report.name.contains("token") {
        return None;
    }
    let count = NonZeroU32::new(u32::try_from(report.limit?).ok()?)?;
    Rate::new(count, report.window.or(policy_window)?)
}

/// The true-up (issue 14): for each unit the tool settles, the true cost
/// read from the answer replaces the estimate charged at the call's start,
/// in every window of the unit. An unreadable value keeps the estimate.
/// On a shared credential whose calls wait for their starts, a true-up
/// below the estimate is returned, to be awaited: it lands in the shared
/// budget, then the waiting calls ask for the room (issue 50).
pub(super) fn settle<'s, P>(
    job: &'s Job<'_, P>,
    primary: &Scope,
    spent: &'s Spent<'_>,
    response: &http::Response<Bytes>,
) -> Option<impl Future<Output = ()> + 's> {
    let start = spent.start?;
    let mut settled = Vec::new();
    for (unit, how) in &job.spend.settle {
        let estimate = spent
            .costs
            .iter()
            .find(|(name, _)| &**name == unit.as_str())
            .map_or(0, |(_, cost)| *cost);
        match true_cost(how, response) {
            Some(actual) => settled.push((unit.as_str(), estimate, actual)),
            None => {
                tracing::debug!(%unit, estimate, "the true cost could not be read; keeping the estimate");
            }
        }
    }
    let true_up = || {
        for &(unit, estimate, actual) in &settled {
            if primary.settle(unit, start, estimate, actual, job.ask.priority) {
                tracing::debug!(%unit, estimate, actual, "settled the call's cost");
            }
        }
    };
    // Room freed goes first to the calls waiting on starts.
    let freed = settled
        .iter()
        .any(|&(_, estimate, actual)| actual < estimate);
    if freed {
        super::reserve::replan(job.credential, true_up);
    } else {
        true_up();
    }
    let (budget, credential, grant) = spent.shared.as_ref()?;
    let seats = &job.credential.seats;
    if freed && !seats.is_empty() {
        let shared = (*budget, *credential, grant);
        return Some(super::reserve::replan_shared(seats, shared, settled));
    }
    for &(unit, estimate, actual) in &settled {
        budget.settle(credential, grant, unit, estimate, actual);
    }
    None
}

/// The true cost a settle rule reads: a header's integer value, or the
/// integer at a JSON pointer into the body.
fn true_cost(how: &Settle, response: &http::Response<Bytes>) -> Option<u64> {
    match how {
        Settle::Header(name) => response
            .headers()
            .get(name.as_str())?
            .to_str()
            .ok()?
            .trim()
            .parse()
            .ok(),
        Settle::Pointer(pointer) => {
            let body: serde_json::Value = serde_json::from_slice(response.body()).ok()?;
            body.pointer(pointer)?.as_u64()
        }
    }
}

/// Says, at debug level, what a scope changed about itself and why.
fn log_adapted(scope: &Scope, adapted: &Adapted, why: &str) {
    if let Some(rate) = &adapted.rate {
        let rate = rate.map_or_else(|| "none".to_owned(), |rate| rate.to_string());
        tracing::debug!(credential = %scope.credential, scope = %scope.name, %rate, why, "rate in force changed");
    }
    if let Some(cap) = adapted.cap {
        tracing::debug!(credential = %scope.credential, scope = %scope.name, cap, why, "concurrency cap changed");
    }
}

/// Tells the other processes on a shared credential what this one learned.
fn share_block<E>(
    engine: &Engine<E>,
    credential: &Credential,
    scope: &Scope,
    wait: Duration,
    hold: Hold,
) {
    if let Some(budget) = engine.shared_for(credential) {
        budget.block(&credential.name, &scope.name, wait, hold);
    }
}

/// A quota this process found spent: marked here and shared.
fn exhaust<E>(
    engine: &Engine<E>,
    credential: &Credential,
    scope: &Scope,
    resets_in: Duration,
    now: Micros,
) {
    if note_exhausted(engine, credential, scope, resets_in, now) {
        share_block(engine, credential, scope, resets_in, Hold::Quota);
    }
}
