//! A call's start slot: taken from the lease pool or reserved in Redis (by this call, or by the reservation in flight it waits for), then held until its time.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use sluice::limiter::micros;
use sluice::shared::{Decision, Hold, ReserveRequest, SharedLimit};
use tokio::time::Instant;

use super::pool::{LATE_FLOOR, PoolKey, Pooled, fair_cap};
use crate::RedisConfig;
use crate::breaker::Permit;
use crate::credential::{Cred, Mode};
use crate::decision::denied;
use crate::instant::{beyond, since};
use crate::keys::part;
use crate::runner::Runner;
use crate::store::{Clock, ReserveArgs, Reserved, SlotToken, Void};
use crate::unknown;
use crate::worker::Jobs;

/// Rounds of "look at the pool, maybe wait for a reservation in flight".
const ROUNDS: usize = 3;
/// Extra leased slots start at least this far ahead once the limit
/// binds (and always for a spend): a slot due sooner serves only the
/// callers already waiting (who asked for their own). While a window has
/// room, a lease of its slots places them where its callers are expected
/// instead, when they come faster than the limit's interval, and at once
/// when they come slower ([`Pool::spacing`]).
///
/// [`Pool::spacing`]: super::Pool::spacing
pub(crate) const LEAD: Duration = Duration::from_millis(20);

/// tokio's timer resolution: a caller told to wait less than this for its
/// slot wakes at the next tick anyway.
const TIMER_TICK: Duration = Duration::from_millis(1);

/// What getting a slot came to.
pub(crate) enum Obtained {
    /// A slot at `.0`, obtained (reserved or taken from the pool) at `.2`.
    Slot(Instant, SlotToken, Instant),
    /// Redis (or what it said moments ago) has no slot in the call's window.
    Denied(Decision),
    /// Redis cannot be asked: decide locally, for this reason.
    Fallback(String),
    /// The reservation timed out and was settled (voided by its id):
    /// nothing is charged for it; ask again.
    Again,
}

/// This process's side of the shared log: its lease pools' refills and
/// every reservation it sends.
pub(crate) struct Leases {
    runner: Arc<Runner>,
    jobs: Jobs,
    /// This process's id in the heartbeat set.
    process: String,
    /// Numbers the window entries of this process's reservations.
    members: AtomicU64,
    /// Whether the penalty subscription is live.
    events_live: Arc<AtomicBool>,
    max_lease: u32,
    events: bool,
    timeout: Duration,
    heartbeat: Duration,
}

impl Leases {
    pub(crate) fn new(
        config: &RedisConfig,
        runner: Arc<Runner>,
        jobs: Jobs,
        events_live: Arc<AtomicBool>,
    ) -> Self {
        Leases {
            runner,
            jobs,
            process: format!("{:016x}", rand::random::<u64>()),
            members: AtomicU64::new(0),
            events_live,
            max_lease: config.max_lease,
            events: config.events,
            timeout: config.timeout,
            heartbeat: config.heartbeat,
        }
    }

    /// This process's id in the heartbeat set.
    pub(crate) fn process(&self) -> &str {
        &self.process
    }

    /// The most slots one lease may take now: 1 (no lease) unless leased
    /// slots are safe, that is while this process hears of the blocks
    /// that void them.
    pub(crate) fn max_lease(&self) -> u32 {
        if self.max_lease > 1 && (!self.events || self.events_live.load(Ordering::SeqCst)) {
            self.max_lease
        } else {
            1
        }
    }

    /// A slot in `[not_before, latest]`: from the lease pool, or from a
    /// reservation (this call's, or one in flight that it waits for).
    pub(crate) async fn obtain(
        &self,
        cred: &Arc<Cred>,
        request: &ReserveRequest<'_>,
        key: &PoolKey,
        not_before: Instant,
        latest: Instant,
    ) -> Obtained {
        // A lease's slots beyond the callers present lie at least `LEAD`
        // ahead: a call that cannot wait that long leases nothing (its
        // kind could use none of them, and a burst of them would find the
        // window taken by its own lease).
        let leases = self.max_lease() > 1 && since(latest, Instant::now()) >= LEAD;
        for round in 0..ROUNDS {
            let reserved = cred.reserved.notified();
            tokio::pin!(reserved);
            reserved.as_mut().enable();
            let mut probe_out = false;
            let (fetch, epoch) = {
                let now = Instant::now();
                let mut state = cred.state.lock();
                if round == 0 {
                    state.pool.arrive(now);
                }
                let mut stale = state.pool.rekey(key);
                state.pool.allow_late(request.late_start);
                stale.extend(state.pool.sweep(now));
                if !stale.is_empty() {
                    // Room comes back: what Redis said is free no longer holds.
                    state.busy_until = None;
                    self.jobs.refund(&cred.name, stale);
                }
                if let Some(slot) = state.pool.take((not_before, latest), now) {
                    state.decisions.leased += 1;
                    state.mode = (Mode::Shared, None);
                    return Obtained::Slot(slot.at, slot.token, now);
                }
                // Redis said moments ago that nothing is free before
                // `busy_until`: a call that cannot wait that long is told
                // so without a round trip.
                if let Some(busy) = state.busy_until.filter(|busy| beyond(*busy, latest, now)) {
                    state.decisions.denied += 1;
                    return Obtained::Denied(denied(request, 0, since(busy, now), Hold::Rate));
                }
                match self.runner.permit(now, self.timeout * 2) {
                    Permit::Refuse => return Obtained::Fallback("circuit breaker open".into()),
                    // Redis may be back: a call deciding locally now, while
                    // the probe's answer puts the others in shared mode,
                    // would spend beside them a share Redis cannot see.
                    Permit::AwaitProbe(until) if until.min(latest) > now => {
                        probe_out = true;
                        (None, state.pool.epoch)
                    }
                    Permit::AwaitProbe(_) => {
                        return Obtained::Fallback("circuit breaker open".into());
                    }
                    Permit::Ask if leases && state.pool.fetching > 0 && round + 1 < ROUNDS => {
                        state.pool.waiters += 1;
                        (None, state.pool.epoch)
                    }
                    Permit::Ask | Permit::Probe => {
                        let want = if leases {
                            let cap = fair_cap(request.limit, state.processes, self.max_lease);
                            state.pool.fetching += 1;
                            state.pool.want(cap, now, pace(request.limit))
                        } else {
                            1
                        };
                        let spacing = state.pool.spacing(pace(request.limit));
                        (
                            Some((want, state.pool.waiters + 1, spacing)),
                            state.pool.epoch,
                        )
                    }
                }
            };
            if probe_out {
                self.runner.await_probe(latest, self.timeout * 2).await;
                continue;
            }
            let Some((want, immediate, spacing)) = fetch else {
                // Someone else is reserving: wait for it (at most the
                // command timeout, twice: a reservation that timed out is
                // settled with one more command), then look at the pool
                // again.
                // Only a reservation that failed (and was not settled)
                // sends its waiters to the fallback: one still out when the
                // wait ends is an unknown, and the waiter looks again (and
                // in the last round asks Redis itself).
                let _ = tokio::time::timeout(self.timeout * 2, reserved).await;
                let mut state = cred.state.lock();
                state.pool.waiters = state.pool.waiters.saturating_sub(1);
                if state.pool.epoch != epoch && state.pool.last_failed {
                    return Obtained::Fallback(
                        "the reservation this call waited for failed".into(),
                    );
                }
                continue;
            };
            // Counted in `fetching` from here: a call dropped while its
            // reservation is out must not leave the count up for good.
            let in_flight = InFlight {
                cred,
                armed: leases,
            };
            let obtained = self
                .reserve(
                    cred,
                    request,
                    (not_before, latest),
                    (want, immediate, spacing),
                    leases,
                )
                .await;
            in_flight.disarm();
            return match obtained {
                // Only a denial for the rate: a block or quota stands.
                Obtained::Denied(Decision::Denied {
                    hold: Hold::Rate, ..
                }) if leases => self
                    .pooled_after_denial(cred, (not_before, latest))
                    .await
                    .unwrap_or(obtained),
                other => other,
            };
        }
        Obtained::Fallback("no slot after waiting for reservations".into())
    }

    /// Redis said "full" to this call, but the slots it wanted may be in
    /// this process's own leases, fetched by other callers and landing in
    /// the pool around now: a denial then would leave them unused while
    /// the call is deferred (at 10/1s, a burst of 10 calls started 9 and
    /// deferred one with a slot pooled, when two leases were in flight and
    /// only the first was waited for). Looks at the pool again each time a
    /// reservation lands, while any is in flight (at most the timeout).
    async fn pooled_after_denial(
        &self,
        cred: &Arc<Cred>,
        window: (Instant, Instant),
    ) -> Option<Obtained> {
        let until = tokio::time::Instant::now() + self.timeout;
        loop {
            // Registered before the pool is read: a landing after it wakes us.
            let landed = cred.reserved.notified();
            tokio::pin!(landed);
            landed.as_mut().enable();
            {
                let now = Instant::now();
                let mut state = cred.state.lock();
                if let Some(slot) = state.pool.take(window, now) {
                    // The denial counted by `reserve` did not happen after all.
                    state.decisions.denied = state.decisions.denied.saturating_sub(1);
                    state.decisions.leased += 1;
                    state.mode = (Mode::Shared, None);
                    return Some(Obtained::Slot(slot.at, slot.token, now));
                }
                if state.pool.fetching == 0 {
                    return None;
                }
            }
            if tokio::time::timeout_at(until, landed).await.is_err() {
                return None;
            }
        }
    }

    /// Reserves `want` slots in Redis, `immediate` of which may start at
    /// once and the rest `spacing` apart from then; the first goes to this
    /// call, the others into the pool.
    async fn reserve(
        &self,
        cred: &Arc<Cred>,
        request: &ReserveRequest<'_>,
        (not_before, latest): (Instant, Instant),
        (want, immediate, spacing): (u32, u32, Duration),
        leases: bool,
    ) -> Obtained {
        let member = format!(
            "{}:{}",
            self.process,
            self.members.fetch_add(1, Ordering::Relaxed)
        );
        let scopes: Vec<&str> = request.scopes.to_vec();
        let beat = cred.state.lock().beat.name(&self.process);
        let sent = Instant::now();
        let max_wait = micros(since(latest, sent));
        let args = ReserveArgs {
            credential: request.credential,
            scopes: &scopes,
            limit: request.limit,
            not_before: micros(since(not_before, sent)),
            max_wait,
            slots: want,
            horizon: max_wait.max(micros(lease_horizon(request.limit, want))),
            immediate,
            lead: micros(LEAD),
            pace: micros(spacing),
            tick: micros(TIMER_TICK),
            process: Some(beat.as_ref()),
            heartbeat: micros(self.heartbeat),
            member_prefix: &member,
        };
        let result =
            self.runner
                .run(|store, mut conn| async move {
                    store.reserve(&mut conn, &args, Clock::Server).await
                })
                .await;
        // No answer: an unknown, settled by its id before anything is
        // spent for this call (`crate::unknown`).
        let settled = match &result {
            Err(error) if unknown::may_have_run(error) => {
                let void = self.void(request, &member, want);
                unknown::settle(&self.runner, &self.jobs, void).await
            }
            _ => false,
        };
        let received = Instant::now();
        // The waits count from the script's now, placed on this process's
        // clock (`crate::clock`): the answer's arrival is later by its
        // return trip, which under load reaches hundreds of ms.
        let base = match &result {
            Ok(Reserved::Granted { view, .. } | Reserved::Denied { view, .. }) => view
                .now
                .map_or(received, |now| cred.clock.place(sent, now, received)),
            Err(_) => received,
        };
        let late = request.late_start.max(LATE_FLOOR);
        let outcome = {
            let mut state = cred.state.lock();
            if leases {
                state.pool.fetching = state.pool.fetching.saturating_sub(1);
                state.pool.epoch += 1;
                state.pool.last_failed = result.is_err() && !settled;
            }
            match result {
                Ok(Reserved::Granted { view, slots, next }) => {
                    state.counted(view.processes, received);
                    state.holds.absorb(&view, base);
                    state.mode = (Mode::Shared, None);
                    state.decisions.shared += 1;
                    // Nothing else is free before the limit's next start:
                    // until then, a caller that finds the pool empty and
                    // cannot wait that long is denied without a round trip.
                    state.busy_until = next.map(|next| base + Duration::from_micros(next));
                    let mut slots = slots.into_iter().map(|slot| Pooled {
                        at: base + Duration::from_micros(slot.wait),
                        token: slot.token,
                    });
                    match slots.next() {
                        // The answer came too late for its first slot: a
                        // start now would lie past the time the log
                        // charged by more than the window margin absorbs.
                        // It goes back (the others wait in the pool while
                        // they are on time), and the call asks again.
                        Some(first) if first.at + late < received => {
                            state.pool.fill(slots);
                            state.busy_until = None;
                            state.decisions.shared -= 1;
                            state.pool.returned += 1;
                            self.jobs.refund(&cred.name, vec![first.token]);
                            Obtained::Again
                        }
                        Some(first) => {
                            state.pool.fill(slots);
                            Obtained::Slot(first.at, first.token, received)
                        }
                        None => Obtained::Fallback("Redis granted no slot".into()),
                    }
                }
                Ok(Reserved::Denied {
                    view,
                    wait,
                    scope,
                    hold,
                }) => {
                    state.counted(view.processes, received);
                    state.holds.absorb(&view, base);
                    state.mode = (Mode::Shared, None);
                    state.decisions.denied += 1;
                    let free = base + Duration::from_micros(wait);
                    if hold == Hold::Rate && not_before <= sent {
                        state.busy_until = Some(free);
                    }
                    let index = scope.min(request.scopes.len().saturating_sub(1));
                    Obtained::Denied(denied(request, index, since(free, received), hold))
                }
                Err(_) if settled => Obtained::Again,
                Err(error) => Obtained::Fallback(error.to_string()),
            }
        };
        cred.reserved.notify_waiters();
        outcome
    }

    /// What reservation `member` of `want` slots may have logged: its
    /// window entries (`{member}:{n}`) in the first scope's log.
    fn void(&self, request: &ReserveRequest<'_>, member: &str, want: u32) -> Void {
        let window = request.limit.is_some_and(|limit| limit.burst.is_none());
        let (logs, members) = match request.scopes.first() {
            Some(first) if window => {
                let keys = self.runner.store().keys(request.credential);
                let members = (1..=want.max(1)).map(|n| format!("{member}:{n}"));
                (vec![keys.window(&part(first))], members.collect())
            }
            _ => (Vec::new(), Vec::new()),
        };
        Void {
            credential: request.credential.to_owned(),
            id: member.to_owned(),
            logs,
            members,
        }
    }
}

/// How far ahead a lease of `want` slots may reach beyond its caller's
/// own wait: twice the time the limit takes to admit them, at most one
/// window. The caller's wait alone held a lease at three times the limit
/// to the one or two slots freed within it, a round trip per call; slots
/// further ahead wait in the pool for the callers that come meanwhile.
fn lease_horizon(limit: Option<SharedLimit>, want: u32) -> Duration {
    match limit {
        Some(limit) if want > 1 => {
            (pace(Some(limit)) * want.saturating_mul(2)).min(limit.rate.window())
        }
        _ => Duration::ZERO,
    }
}

/// The limit's interval between starts (`W / N`); zero without a limit.
fn pace(limit: Option<SharedLimit>) -> Duration {
    limit.map_or(Duration::ZERO, |limit| {
        limit.rate.window() / limit.rate.count().get()
    })
}

/// Sleeps until `at`, watching for holds; false when one voids the slot
/// (obtained at `obtained`) before it comes, or when this caller wakes
/// more than `late` (at least [`LATE_FLOOR`]) after it: on a loaded
/// machine a timer fires late, and a start that late would lie past the
/// time the log charged by more than the window margin absorbs.
pub(crate) async fn hold_until(
    cred: &Cred,
    parts: &[String],
    (at, late): (Instant, Duration),
    obtained: Instant,
) -> bool {
    let late = late.max(LATE_FLOOR);
    loop {
        let held = cred.held.notified();
        tokio::pin!(held);
        held.as_mut().enable();
        let now = Instant::now();
        if cred.state.lock().holds.voids(parts, at, obtained, now) {
            return false;
        }
        if now >= at {
            return now <= at + late;
        }
        tokio::select! {
            () = tokio::time::sleep_until(at) => {}
            () = &mut held => {}
        }
    }
}

/// One lease reservation counted in the pool's `fetching`: `reserve` takes
/// it off when the answer comes; dropped before that (the call cancelled
/// mid-flight), it takes it off itself and wakes the callers waiting on it.
struct InFlight<'a> {
    cred: &'a Cred,
    armed: bool,
}

impl InFlight<'_> {
    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if self.armed {
            {
                let mut state = self.cred.state.lock();
                state.pool.fetching = state.pool.fetching.saturating_sub(1);
                state.pool.epoch += 1;
                state.pool.last_failed = true;
            }
            self.cred.reserved.notify_waiters();
        }
    }
}
