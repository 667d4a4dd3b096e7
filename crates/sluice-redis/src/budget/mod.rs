//! [`RedisBudget`]: the engine's shared budget on Redis — construction, and each decision orchestrated from holds, leases and the fallback.
//!
//! A call's path: [`SharedBudget::reserve`] looks at the credential's known
//! holds (`credential`, `holds`), gets a slot from `lease` (the pool, or a
//! reservation sent through the command runner, `runner`) and holds it
//! until its time, or, when Redis cannot be asked, lets `fallback` decide.
//! Refunds and blocks go to the background `worker`; `events` brings in
//! the blocks other processes publish; `status` shows it all.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sluice::shared::{BoxFuture, Decision, Grant, Hold, ReserveRequest, SharedBudget};
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::credential::{Cred, Credentials, Mode};
use crate::decision::{self, Refund, denied};
use crate::events;
use crate::fallback;
use crate::holds::Kind;
use crate::instant::{after, since};
use crate::keys::part;
use crate::lease::{Held, Leases, Obtained, PoolKey, Slot, hold_by_priority};
use crate::runner::Runner;
use crate::status::{self, Status};
use crate::store::Store;
use crate::windows::{self, Asked, Leasing, Spends};
use crate::worker::Jobs;
use crate::{Error, RedisConfig};

mod recovery;

use recovery::{Holding, RecoveryHold, counted};

/// A [`SharedBudget`] on Redis (a single node or a cluster).
///
/// Cheap to clone; every clone is the same process's view (one lease pool
/// and one breaker). Build it inside a tokio runtime with
/// [`RedisBudget::connect`]; it never fails because Redis is down: it starts
/// in fallback and switches to shared mode when Redis answers.
///
/// `reserve` answers a granted call when its slot has come (it sleeps until
/// then inside the future, watching for blocks), so that a penalty another
/// process learns in the meantime still stops it: the engine sleeps no
/// further and starts at once.
#[derive(Clone)]
pub struct RedisBudget {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for RedisBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBudget")
            .field("config", &self.inner.config)
            .field("process", &self.inner.leases.process())
            .finish_non_exhaustive()
    }
}

struct Inner {
    config: RedisConfig,
    runner: Arc<Runner>,
    credentials: Arc<Credentials>,
    leases: Leases,
    /// Calls on several windows or units: leased spends, one script per lease.
    spends: Arc<Spends>,
    jobs: Jobs,
    events_live: Arc<AtomicBool>,
    /// The worker and the subscription, stopped with the budget.
    tasks: Vec<AbortHandle>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Attempts to get a slot that no block voids.
const ATTEMPTS: usize = 4;

impl RedisBudget {
    /// Validates `config`, builds the clients and starts the background
    /// work (refunds and blocks, the penalty subscription). Waits at most
    /// the connect timeout for a first connection; an unreachable Redis is
    /// not an error (the budget starts in fallback), but one that refuses
    /// us is ([`Error::Refused`]: a wrong password or ACL user, a server
    /// certificate that does not check against the roots or `tls_ca_file`).
    pub async fn connect(config: RedisConfig) -> Result<Self, Error> {
        config.validate()?;
        let runner = Arc::new(Runner::new(&config)?);
        runner.warm_up().await?;
        let (jobs, worker) = Jobs::start(runner.clone());
        let events_live = Arc::new(AtomicBool::new(false));
        let credentials = Arc::new(Credentials::new(Instant::now()));
        let mut tasks = vec![worker];
        if config.events {
            let task = events::subscribe(
                &config,
                runner.store().channel(),
                events_live.clone(),
                Arc::downgrade(&credentials),
            );
            tasks.push(tokio::spawn(task).abort_handle());
        }
        let leases = Leases::new(&config, runner.clone(), jobs.clone(), events_live.clone());
        // Built before waiting, so that a caller giving up on `connect`
        // stops the tasks too.
        let spends = Arc::new(Spends::new(
            leases.process(),
            config.heartbeat,
            jobs.clone(),
        ));
        let inner = Arc::new(Inner {
            config,
            runner,
            credentials,
            leases,
            spends,
            jobs,
            events_live,
            tasks,
        });
        if inner.config.events {
            // Let the subscription come up before the first slot is leased.
            let until = Instant::now() + inner.config.connect_timeout;
            while !inner.events_live.load(Ordering::SeqCst) && Instant::now() < until {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        Ok(RedisBudget { inner })
    }

    /// This process's id in the heartbeat set.
    pub fn process_id(&self) -> &str {
        self.inner.leases.process()
    }

    /// The scripts and key names this budget uses (for tools and tests).
    pub fn store(&self) -> &Store {
        self.inner.runner.store()
    }

    /// What operators see: the backend's state, errors, and each credential's mode.
    pub fn status(&self) -> Status {
        let inner = &self.inner;
        status::status(
            &inner.config,
            &inner.runner,
            &inner.credentials,
            &inner.spends,
            inner.events_live.load(Ordering::SeqCst),
        )
    }

    /// One call's decision: known holds first, then a slot from the lease
    /// pool or Redis, held until its time (a block arriving meanwhile voids
    /// it: it goes back and the call looks again); without Redis, the
    /// fallback decides.
    async fn decide(&self, request: ReserveRequest<'_>) -> Decision {
        let started = Instant::now();
        let Some(first) = request.scopes.first() else {
            return Decision::Granted {
                wait: request.not_before,
                grant: decision::unscoped(),
            };
        };
        let cred = self.inner.credentials.get(request.credential);
        let parts: Vec<String> = request.scopes.iter().map(|s| part(s)).collect();
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
                    .decide_windows(&cred, &request, &parts, not_before, latest)
                    .await
                {
                    Some(decision) => return decision,
                    // Its start went back: it came too late.
                    None => continue,
                }
            }
            self.confirm_spell(&cred).await;
            // Back from a fallback spell: Redis may not hold its local
            // starts yet, nor those of processes still away, so while the
            // spell binds a shared start must also fit this process's share,
            // held in its cell while Redis is asked (docs/shared-limiter.md,
            // "Failure modes").
            let (recovering, held) = {
                let mut state = cred.state.lock();
                let current = fallback::share(self.inner.config.fallback_share, state.processes);
                let share = state.fallback.spell.share_in_force(current);
                let limit = request.limit.map(|limit| fallback::share_of(limit, share));
                let counted = counted(&state, self.inner.config.heartbeat);
                let held = state.fallback.hold_recovering(
                    &parts[0],
                    limit,
                    (now, not_before, latest),
                    counted,
                );
                (held.as_ref().map(|_| limit), held)
            };
            let hold = match held {
                None => RecoveryHold::none(&cred),
                Some(Err(earliest)) => {
                    cred.state.lock().decisions.denied += 1;
                    return denied(&request, 0, since(earliest, now), Hold::Rate);
                }
                Some(Ok((start, held))) => {
                    not_before = not_before.max(start);
                    RecoveryHold::new(&cred, Holding::Cell(parts[0].clone(), held))
                }
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
                        &parts,
                        not_before,
                        latest,
                        reason,
                    );
                    // Redis's log does not hold a local start: the worker
                    // adds it, so that the other processes count it too.
                    if let Some(limit) = request.limit {
                        self.inner.jobs.record(
                            (request.credential, &cred.unwritten),
                            first,
                            limit,
                            started,
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
                state.fallback.remember(at, request.limit, now);
                if let Some(limit) = recovering {
                    state.fallback.count_shared(&parts[0], limit, at);
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
                Held::Ready(token) => {
                    return Decision::Granted {
                        wait: Duration::ZERO,
                        grant: decision::slot(&token),
                    };
                }
                Held::Moved(at) => {
                    cred.state.lock().decisions.denied += 1;
                    return denied(&request, 0, since(at, Instant::now()), Hold::Outranked);
                }
                Held::Late(at) => {
                    cred.state.lock().decisions.denied += 1;
                    return denied(&request, 0, since(at, Instant::now()), Hold::Rate);
                }
                // A block arrived while the slot waited: it went back; look again.
                Held::Voided => {}
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
        parts: &[String],
        not_before: Instant,
        latest: Instant,
    ) -> Option<Decision> {
        let configured = self.inner.config.fallback_share;
        self.confirm_spell(cred).await;
        let now = Instant::now();
        let mut not_before = not_before;
        // Back from a fallback spell: Redis's logs do not hold the local
        // spends, so for the longest window a shared start must also fit
        // this process's share of every window (as for one window).
        let (recovering, held) = {
            let mut state = cred.state.lock();
            let current = fallback::share(configured, state.processes);
            let share = state.fallback.spends.spell.share_in_force(current);
            let counted = counted(&state, self.inner.config.heartbeat);
            let held = state.fallback.spends.hold_recovering(
                request.windows,
                share,
                (now, not_before, latest),
                counted,
            );
            (held.as_ref().map(|_| share), held)
        };
        let hold = match held {
            None => RecoveryHold::none(cred),
            Some(Err(late)) => {
                cred.state.lock().decisions.denied += 1;
                let index = fallback::scope_index(request, late.window);
                return Some(denied(request, index, since(late.at, now), Hold::Rate));
            }
            Some(Ok((start, held))) => {
                not_before = not_before.max(start);
                RecoveryHold::new(cred, Holding::Windows(held))
            }
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
                request,
                (since(not_before, now), since(latest, now)),
                leasing,
                (&beat, &cred.clock),
            )
            .await;
        // Redis answered: the start it gave (if any) is counted below in
        // place of the one held.
        drop(hold);
        let (decision, leased) = match asked {
            Asked::Decided(decision, processes) => {
                cred.state.lock().counted(processes, Instant::now());
                (decision, false)
            }
            Asked::Leased(decision) => (decision, true),
            Asked::Again => return None,
            Asked::Fallback(reason) => {
                let (decision, started) = fallback::decide_windows(
                    cred, configured, request, parts, not_before, latest, reason,
                );
                // As for one limit: the worker adds the local spend to
                // every budget in Redis, so that the other processes count it.
                if let Some((at, spend)) = started {
                    let budgets = windows::budgets(request.windows);
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
            let now = Instant::now();
            let mut state = cred.state.lock();
            state.mode = (Mode::Shared, None);
            match &decision {
                Decision::Granted { wait, .. } => {
                    if leased {
                        state.decisions.leased += 1;
                    } else {
                        state.decisions.shared += 1;
                    }
                    let at = after(now, *wait);
                    let spends = &mut state.fallback.spends;
                    spends.remember(request.windows, at, now);
                    if let Some(share) = recovering {
                        spends.count_shared(request.windows, share, at);
                    }
                }
                Decision::Denied { .. } => state.decisions.denied += 1,
            }
        }
        Some(decision)
    }
}

impl SharedBudget for RedisBudget {
    fn reserve<'a>(&'a self, request: ReserveRequest<'a>) -> BoxFuture<'a, Decision> {
        Box::pin(self.decide(request))
    }

    fn refund(&self, credential: &str, grant: Grant) {
        if let Some(member) = Spends::member(&grant) {
            self.inner.spends.refund(&self.inner.runner, member);
            return;
        }
        match decision::refund(&grant) {
            Refund::Fallback(id) => {
                let cred = self.inner.credentials.get(credential);
                cred.state.lock().fallback.refund(id);
            }
            Refund::FallbackSpend(id) => {
                let cred = self.inner.credentials.get(credential);
                cred.state.lock().fallback.spends.refund(id);
            }
            Refund::Slot(token) => {
                // Room comes back: what Redis said is free no longer holds.
                let cred = self.inner.credentials.get(credential);
                cred.state.lock().busy_until = None;
                self.inner.jobs.refund(credential, vec![token]);
            }
            Refund::Nothing => {}
        }
    }

    fn refund_now<'a>(&'a self, credential: &'a str, grants: Vec<Grant>) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let mut spends = Vec::new();
            for grant in grants {
                match Spends::member(&grant) {
                    Some(member) => spends.push(member.to_owned()),
                    // The fallback's cells take theirs back at once; a
                    // request window's slot goes back in the background.
                    None => self.refund(credential, grant),
                }
            }
            let refunds = spends
                .iter()
                .map(|member| self.inner.spends.refund_now(&self.inner.runner, member));
            futures_util::future::join_all(refunds).await;
        })
    }

    fn block(&self, credential: &str, scope: &str, wait: Duration, hold: Hold) {
        let now = Instant::now();
        let until = after(now, wait);
        if until <= now {
            return;
        }
        let cred = self.inner.credentials.get(credential);
        let kind = match hold {
            Hold::Quota => Kind::Quota,
            Hold::Blocked | Hold::Rate | Hold::Outranked => Kind::Blocked,
        };
        cred.note_hold(kind, &part(scope), until, now);
        self.inner.jobs.block(credential, scope, until, hold);
    }

    fn settle(&self, credential: &str, grant: &Grant, unit: &str, estimate: u64, actual: u64) {
        if let Some(member) = Spends::member(grant) {
            self.inner
                .spends
                .settle(&self.inner.runner, member, unit, estimate, actual);
        } else if let Some(id) = decision::fallback_spend_id(grant) {
            let cred = self.inner.credentials.get(credential);
            cred.state
                .lock()
                .fallback
                .spends
                .settle(id, unit, estimate, actual);
            // What the worker wrote (or will write) of it to Redis too.
            self.inner
                .jobs
                .true_up_spend(credential, id, unit, estimate, actual);
        }
    }
}
