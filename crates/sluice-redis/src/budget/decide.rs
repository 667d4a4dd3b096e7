//! One call's decision, orchestrated from holds, leases and the fallback.

use std::sync::Arc;
use std::time::Duration;

use sluice::shared::{Decision, Hold, ReserveRequest, SharedWindow};
use tokio::time::Instant;

use crate::credential::{Cred, Mode};
use crate::decision::{self, denied};
use crate::fallback;
use crate::instant::{after, since};
use crate::keys::part;
use crate::lease::{Obtained, PoolKey, Slot, SlotEnd, hold_by_priority};
use crate::spend;
use crate::windows::{Asked, Leasing};

use super::handle::RedisBudget;
use super::recovery::{RecoveryHold, counted};

/// Attempts to get a slot that no block voids.
const ATTEMPTS: usize = 4;

impl RedisBudget {
    /// One call's decision: known holds first, then a slot from the lease
    /// pool or Redis, held until its time (a block arriving meanwhile voids
    /// it: it goes back and the call looks again); without Redis, the
    /// fallback decides.
    pub(super) async fn decide(&self, request: ReserveRequest<'_>) -> Decision {
        let started = Instant::now();
        let Some(first) = request.scopes.first() else {
            return Decision::Granted {
                wait: request.not_before,
                grant: decision::unscoped(),
            };
        };
        let cred = self.inner.credentials.get(request.credential);
        let parts: Vec<String> = request.scopes.iter().map(|s| part(s)).collect();
        // What the local cells count of this call: its windows, or the
        // one-window case of its limit.
        let windows = fallback::windows(&request);
        let key = PoolKey {
            scope: parts[0].clone(),
            limit: request.limit,
        };
        cred.state.lock().limit = request.limit;
        let mut not_before = after(started, request.not_before);
        let latest = after(started, request.max_wait);
        for _ in 0..ATTEMPTS {
            let now = Instant::now();
            {
                let mut state = cred.state.lock();
                state.holds.prune(now);
                if let Some((index, until)) = state.holds.quota(&parts, now) {
                    state.decisions.denied += 1;
                    return denied(&request, index, since(until, now), Hold::Quota);
                }
                if let Some((index, until)) = state.holds.blocked(&parts, now) {
                    if until > latest {
                        state.decisions.denied += 1;
                        return denied(&request, index, since(until, now), Hold::Blocked);
                    }
                    not_before = not_before.max(until);
                }
            }
            if !request.windows.is_empty() {
                match self
                    .decide_windows(&cred, &request, not_before, latest)
                    .await
                {
                    Some(decision) => return decision,
                    // Its start went back: it came too late.
                    None => continue,
                }
            }
            self.confirm_spell(&cred).await;
            let (recovering, hold) =
                match self.hold_recovering(&cred, &request, &windows, &mut not_before, latest) {
                    Ok(held) => held,
                    Err(denial) => return denial,
                };
            // Callers of lower priority hold slots within this call's wait:
            // a swap can give it the earliest of them, so it asks for a slot
            // up to one wait further, for the caller the swap moves last
            // (who gives it back if that is past its own wait).
            let reach = if cred
                .waiting
                .outranks(request.priority, after(latest, Duration::from_micros(1)))
            {
                after(latest, since(latest, started))
            } else {
                latest
            };
            let obtained = self
                .inner
                .leases
                .obtain(&cred, &request, &key, not_before, reach)
                .await;
            // Redis answered: the start it gave (if any) is counted below
            // in place of the one held.
            drop(hold);
            let (at, token, obtained) = match obtained {
                Obtained::Slot(at, token, obtained) => (at, token, obtained),
                Obtained::Denied(decision) => return decision,
                // A reservation that timed out, settled: nothing charged.
                Obtained::Again => continue,
                Obtained::Fallback(reason) => {
                    let (decision, started) = fallback::decide(
                        &cred,
                        self.inner.config.fallback_share,
                        &request,
                        &windows,
                        (not_before, latest),
                        reason,
                    );
                    // Redis's log does not hold a local start: the worker
                    // adds it, so that the other processes count it too.
                    if let Some(limit) = request.limit {
                        self.inner.jobs.record(
                            (request.credential, &cred.unwritten),
                            first,
                            limit,
                            started.map(|(at, _)| at),
                        );
                    }
                    return decision;
                }
            };
            // Counted from now on: the fallback must know of it if Redis
            // goes away while this call waits for its slot.
            {
                let now = Instant::now();
                let mut state = cred.state.lock();
                state.fallback.remember(&windows, at, now);
                if let Some(share) = recovering {
                    state.fallback.count_shared(&windows, share, at);
                }
            }
            let slot = Slot::new(token, obtained, &key, &self.inner.jobs, &cred);
            match hold_by_priority(
                &cred,
                &parts,
                (request.priority, request.late_start),
                (at, slot),
                latest,
            )
            .await
            {
                SlotEnd::Ready(token) => {
                    return Decision::Granted {
                        wait: Duration::ZERO,
                        grant: decision::slot(&token),
                    };
                }
                SlotEnd::Moved(at) => {
                    cred.state.lock().decisions.denied += 1;
                    return denied(&request, 0, since(at, Instant::now()), Hold::Outranked);
                }
                SlotEnd::Late(at) => {
                    cred.state.lock().decisions.denied += 1;
                    return denied(&request, 0, since(at, Instant::now()), Hold::Rate);
                }
                // A block arrived while the slot waited, or the caller woke
                // too late for it: it went back; look again.
                SlotEnd::Voided => {}
            }
        }
        let now = Instant::now();
        cred.state.lock().decisions.denied += 1;
        let wait = since(not_before, now).max(Duration::from_millis(1));
        Decision::Denied {
            wait,
            scope: (*first).to_owned(),
            hold: Hold::Blocked,
        }
    }
}

impl RedisBudget {
    /// A call on several windows, groups or units: one spend in Redis,
    /// or the fallback's cells at this process's share of every window.
    /// `None`: Redis's start came back too late and went back; ask again.
    async fn decide_windows(
        &self,
        cred: &Arc<Cred>,
        request: &ReserveRequest<'_>,
        not_before: Instant,
        latest: Instant,
    ) -> Option<Decision> {
        let configured = self.inner.config.fallback_share;
        self.confirm_spell(cred).await;
        let mut not_before = not_before;
        let (recovering, hold) =
            match self.hold_recovering(cred, request, request.windows, &mut not_before, latest) {
                Ok(held) => held,
                Err(denial) => return Some(denial),
            };
        // Neither in fallback (a leased start handed out then would be one
        // the local cells, which took in the shared starts at the switch,
        // do not count) nor while recovering from it (the local cells
        // bound every start then, and leased starts would only go stale).
        let leasing = {
            let state = cred.state.lock();
            (state.mode.0 == Mode::Shared && recovering.is_none()).then(|| Leasing {
                max_lease: self.inner.leases.max_lease(),
                processes: state.processes,
            })
        };
        // As for one window: a probe's answer is waited for, not decided
        // beside.
        let stale_probe = self.inner.config.timeout * 2;
        self.inner.runner.await_probe(latest, stale_probe).await;
        let now = Instant::now();
        let process = self.inner.leases.process();
        let beat = cred.state.lock().beat.name(process);
        let asked = self
            .inner
            .spends
            .reserve(
                &self.inner.runner,
                (request, None),
                (since(not_before, now), since(latest, now)),
                leasing,
                (&beat, &cred.clock),
            )
            .await;
        // Redis answered: the start it gave (if any) is counted below in
        // place of the one held.
        drop(hold);
        let (decision, leased) = match asked {
            Asked::Decided(decision, told) => {
                cred.state.lock().told(&told);
                (decision, false)
            }
            Asked::Leased(decision) => (decision, true),
            Asked::Again => return None,
            Asked::Fallback(reason) => {
                let (decision, started) = fallback::decide(
                    cred,
                    configured,
                    request,
                    request.windows,
                    (not_before, latest),
                    reason,
                );
                // As for one limit: the worker adds the local spend to
                // every budget in Redis, so that the other processes count it.
                if let Some((at, spend)) = started {
                    let budgets = spend::budgets(request.windows);
                    self.inner.jobs.record_spend(
                        (request.credential, &cred.unwritten),
                        budgets,
                        spend,
                        at,
                    );
                }
                return Some(decision);
            }
        };
        {
            let mut state = cred.state.lock();
            state.mode = (Mode::Shared, None);
            state.count_spend(
                request.windows,
                &decision,
                (leased, recovering),
                Instant::now(),
            );
        }
        Some(decision)
    }
}

impl RedisBudget {
    /// Back from a fallback spell, Redis's logs may not hold its local
    /// starts yet, nor those of processes still away: while the spell
    /// binds, a shared start must also fit this process's share of every
    /// window of the call (`windows`), held in the local cells while Redis
    /// is asked (docs/shared-limiter.md, "Failure modes"). `Ok`: the share
    /// in force while the spell binds, and what is held (`not_before`
    /// moved to its start); `Err`: the call's denial, no start in time.
    fn hold_recovering<'c>(
        &self,
        cred: &'c Cred,
        request: &ReserveRequest<'_>,
        windows: &[SharedWindow],
        not_before: &mut Instant,
        latest: Instant,
    ) -> Result<(Option<f64>, RecoveryHold<'c>), Decision> {
        let now = Instant::now();
        let mut state = cred.state.lock();
        let current = fallback::share(self.inner.config.fallback_share, state.processes);
        let share = state.fallback.spell.share_in_force(current);
        let counted = counted(&state, self.inner.config.heartbeat);
        let held =
            state
                .fallback
                .hold_recovering(windows, share, (now, *not_before, latest), counted);
        match held {
            None => Ok((None, RecoveryHold::none(cred))),
            Some(Err(late)) => {
                state.decisions.denied += 1;
                let index = fallback::scope_index(request, late.window);
                Err(denied(request, index, since(late.at, now), Hold::Rate))
            }
            Some(Ok((start, held))) => {
                *not_before = (*not_before).max(start);
                Ok((Some(share), RecoveryHold::new(cred, held)))
            }
        }
    }
}
