//! [`RedisBudget`]: the engine's shared budget on Redis, with leases, a circuit breaker and a local fallback.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use sluice::limiter::micros;
use sluice::shared::{BoxFuture, Decision, Grant, Hold, ReserveRequest, SharedBudget};
use tokio::sync::{Notify, mpsc};
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::breaker::{Breaker, BreakerState, Permit};
use crate::connection::Connector;
use crate::events::{self, Event};
use crate::fallback::{Fallback, share_of};
use crate::holds::{Holds, Kind};
use crate::keys::part;
use crate::lease::{Pool, PoolKey, Pooled, fair_cap};
use crate::status::{CredentialStatus, DecisionCounts, ErrorCounts, Mode, Status};
use crate::store::{Clock, ReserveArgs, Reserved, SlotToken, Store};
use crate::{Error, RedisConfig};

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
            .field("config", &self.inner.core.config)
            .field("process", &self.inner.process)
            .finish_non_exhaustive()
    }
}

/// The part background tasks share (no credential state, so no cycle).
struct Core {
    config: RedisConfig,
    store: Store,
    connector: Connector,
    breaker: Mutex<Breaker>,
    commands: AtomicU64,
    errors: Mutex<(ErrorCounts, Option<String>)>,
}

struct Inner {
    core: Arc<Core>,
    creds: Mutex<HashMap<String, Arc<Cred>>>,
    process: String,
    members: AtomicU64,
    origin: Instant,
    events_live: Arc<AtomicBool>,
    jobs: mpsc::Sender<Job>,
    tasks: Vec<AbortHandle>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// One credential as this process sees it.
struct Cred {
    name: String,
    part: String,
    state: Mutex<CredState>,
    /// A reservation finished (callers waiting on it look at the pool again).
    reserved: Notify,
    /// A block or quota was noted (callers holding slots look again).
    held: Notify,
}

struct CredState {
    pool: Pool,
    holds: Holds,
    fallback: Fallback,
    processes: u32,
    mode: (Mode, Option<String>),
    decisions: DecisionCounts,
    limit: Option<sluice::shared::SharedLimit>,
    /// The earliest free shared slot, as the last denial said.
    busy_until: Option<Instant>,
    /// This process's shared starts within the last window, to seed the
    /// fallback cell when Redis goes away.
    recent: VecDeque<Instant>,
}

/// Work sent in the background: `refund` and `block` never wait on Redis.
enum Job {
    Refund {
        credential: String,
        tokens: Vec<SlotToken>,
    },
    Block {
        credential: String,
        scope: String,
        until: Instant,
        hold: Hold,
    },
}

/// Queued background jobs before new ones are dropped (a dropped refund
/// under-spends; a dropped block is still known locally and to Redis
/// through the next one).
const JOB_QUEUE: usize = 4_096;
/// Blocks kept for replay while Redis is unreachable.
const PENDING_BLOCKS: usize = 64;
/// How long refunds are gathered into one round trip.
const REFUND_BATCH: Duration = Duration::from_millis(25);
/// How often the worker replays pending blocks.
const REPLAY_EVERY: Duration = Duration::from_millis(250);
/// Rounds of "look at the pool, maybe wait for a reservation in flight".
const ROUNDS: usize = 3;
/// Attempts to get a slot that no block voids.
const ATTEMPTS: usize = 4;
/// Extra leased slots start at least this far ahead: a slot due sooner
/// serves only the callers already waiting (who asked for their own).
const LEAD: Duration = Duration::from_millis(20);
/// Far enough to stand for "no limit" without overflowing an `Instant`.
const FAR: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn after(instant: Instant, wait: Duration) -> Instant {
    instant
        .checked_add(wait)
        .or_else(|| instant.checked_add(FAR))
        .unwrap_or(instant)
}

fn since(later: Instant, earlier: Instant) -> Duration {
    later.saturating_duration_since(earlier)
}

/// What getting a slot came to.
enum Obtained {
    Slot(Instant, SlotToken, Instant),
    Denied(Decision),
    Fallback(String),
}

impl RedisBudget {
    /// Validates `config`, builds the clients and starts the background
    /// work (refunds and blocks, the penalty subscription). Waits at most
    /// the connect timeout for a first connection; an unreachable Redis is
    /// not an error (the budget starts in fallback).
    pub async fn connect(config: RedisConfig) -> Result<Self, Error> {
        config.validate()?;
        let connector = Connector::new(&config)?;
        let store = Store::new(&config.key_prefix).with_secrets(&config.secrets(), config.timeout);
        let breaker = Breaker::new(
            config.breaker_failures,
            config.breaker_open_for,
            config.breaker_max_open_for,
        );
        let core = Arc::new(Core {
            config,
            store,
            connector,
            breaker: Mutex::new(breaker),
            commands: AtomicU64::new(0),
            errors: Mutex::new((ErrorCounts::default(), None)),
        });
        core.connector.warm_up().await;
        let (jobs, queue) = mpsc::channel(JOB_QUEUE);
        let worker = tokio::spawn(work(core.clone(), queue)).abort_handle();
        let events_live = Arc::new(AtomicBool::new(false));
        let process = format!("{:016x}", rand::random::<u64>());
        let inner = Arc::new_cyclic(|weak: &Weak<Inner>| {
            let mut tasks = vec![worker];
            if core.config.events {
                let weak = weak.clone();
                let task = events::run(
                    core.config.urls.clone(),
                    core.store.channel().to_owned(),
                    core.config.connect_timeout,
                    events_live.clone(),
                    move |event, at| match weak.upgrade() {
                        Some(inner) => {
                            inner.on_event(event, at);
                            true
                        }
                        None => false,
                    },
                );
                tasks.push(tokio::spawn(task).abort_handle());
            }
            Inner {
                core: core.clone(),
                creds: Mutex::new(HashMap::new()),
                process,
                members: AtomicU64::new(0),
                origin: Instant::now(),
                events_live: events_live.clone(),
                jobs,
                tasks,
            }
        });
        if core.config.events {
            // Let the subscription come up before the first slot is leased.
            let until = Instant::now() + core.config.connect_timeout;
            while !events_live.load(Ordering::SeqCst) && Instant::now() < until {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        Ok(RedisBudget { inner })
    }

    /// This process's id in the heartbeat set.
    pub fn process_id(&self) -> &str {
        &self.inner.process
    }

    /// The scripts and key names this budget uses (for tools and tests).
    pub fn store(&self) -> &Store {
        &self.inner.core.store
    }

    /// What operators see: the backend's state, errors, and each credential's mode.
    pub fn status(&self) -> Status {
        let core = &self.inner.core;
        let now = Instant::now();
        let (breaker, failures, probe_in) = {
            let breaker = lock(&core.breaker);
            (
                breaker.state(),
                breaker.consecutive_failures(),
                breaker.retry_in(now),
            )
        };
        let (errors, last_error) = lock(&core.errors).clone();
        let creds: Vec<Arc<Cred>> = lock(&self.inner.creds).values().cloned().collect();
        let mut credentials: Vec<CredentialStatus> = creds
            .iter()
            .map(|cred| {
                let state = lock(&cred.state);
                let (mode, reason) = if breaker == BreakerState::Closed {
                    state.mode.clone()
                } else {
                    (
                        Mode::Fallback,
                        Some(format!(
                            "circuit breaker {} after {failures} failures{}",
                            match breaker {
                                BreakerState::Open => "open",
                                _ => "probing",
                            },
                            last_error
                                .as_ref()
                                .map(|e| format!(": {e}"))
                                .unwrap_or_default()
                        )),
                    )
                };
                let share = self.share(state.processes);
                CredentialStatus {
                    credential: cred.name.clone(),
                    mode,
                    reason,
                    lease_size: state.pool.size(),
                    pooled_slots: state.pool.pooled(),
                    processes_seen: state.processes,
                    fallback_per_sec: state.limit.map(|l| share_of(l, share).rate.per_sec()),
                    decisions: DecisionCounts {
                        returned: state.pool.returned,
                        ..state.decisions
                    },
                }
            })
            .collect();
        credentials.sort_by(|a, b| a.credential.cmp(&b.credential));
        Status {
            topology: if core.config.cluster {
                "cluster"
            } else {
                "single"
            },
            servers: core.config.urls.iter().map(|u| u.redacted()).collect(),
            breaker,
            consecutive_failures: failures,
            probe_in_ms: u64::try_from(probe_in.as_millis()).unwrap_or(u64::MAX),
            commands: core.commands.load(Ordering::Relaxed),
            errors,
            last_error,
            events_live: self.inner.events_live.load(Ordering::SeqCst),
            credentials,
        }
    }

    fn share(&self, processes: u32) -> f64 {
        self.inner
            .core
            .config
            .fallback_share
            .unwrap_or(1.0 / f64::from(processes.max(1)))
    }

    fn cred(&self, name: &str) -> Arc<Cred> {
        let mut creds = lock(&self.inner.creds);
        if let Some(cred) = creds.get(name) {
            return cred.clone();
        }
        let cred = Arc::new(Cred {
            name: name.to_owned(),
            part: part(name),
            state: Mutex::new(CredState {
                pool: Pool::default(),
                holds: Holds::default(),
                fallback: Fallback::new(self.inner.origin),
                processes: 0,
                mode: (Mode::Shared, None),
                decisions: DecisionCounts::default(),
                limit: None,
                busy_until: None,
                recent: VecDeque::new(),
            }),
            reserved: Notify::new(),
            held: Notify::new(),
        });
        creds.insert(name.to_owned(), cred.clone());
        cred
    }

    async fn decide(&self, request: ReserveRequest<'_>) -> Decision {
        let started = Instant::now();
        let Some(first) = request.scopes.first() else {
            return Decision::Granted {
                wait: request.not_before,
                grant: Grant {
                    token: "r|-".into(),
                },
            };
        };
        let cred = self.cred(request.credential);
        let parts: Vec<String> = request.scopes.iter().map(|s| part(s)).collect();
        let key = PoolKey {
            scope: parts[0].clone(),
            limit: request.limit,
        };
        lock(&cred.state).limit = request.limit;
        let mut not_before = after(started, request.not_before);
        let latest = after(started, request.max_wait);
        for _ in 0..ATTEMPTS {
            let now = Instant::now();
            {
                let mut state = lock(&cred.state);
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
            let (at, token, obtained) = match self
                .obtain(&cred, &request, &parts, &key, not_before, latest)
                .await
            {
                Obtained::Slot(at, token, obtained) => (at, token, obtained),
                Obtained::Denied(decision) => return decision,
                Obtained::Fallback(reason) => {
                    return self.fallback(&cred, &request, &parts, not_before, latest, reason);
                }
            };
            // Counted from now on: the fallback must know of it if Redis
            // goes away while this call waits for its slot.
            remember(&mut lock(&cred.state), at, request.limit);
            if self.hold_until(&cred, &parts, at, obtained).await {
                return Decision::Granted {
                    wait: since(at, Instant::now()),
                    grant: Grant {
                        token: token.encode(),
                    },
                };
            }
            // A block arrived while the slot waited: give it back, look again.
            self.send(Job::Refund {
                credential: cred.name.clone(),
                tokens: vec![token],
            });
        }
        let now = Instant::now();
        lock(&cred.state).decisions.denied += 1;
        let wait = since(not_before, now).max(Duration::from_millis(1));
        Decision::Denied {
            wait,
            scope: (*first).to_owned(),
            hold: Hold::Blocked,
        }
    }

    /// A slot in `[not_before, latest]`: from the lease pool, or from a
    /// reservation (this call's, or one in flight that it waits for).
    async fn obtain(
        &self,
        cred: &Arc<Cred>,
        request: &ReserveRequest<'_>,
        parts: &[String],
        key: &PoolKey,
        not_before: Instant,
        latest: Instant,
    ) -> Obtained {
        let core = &self.inner.core;
        let leases = core.config.max_lease > 1
            && (!core.config.events || self.inner.events_live.load(Ordering::SeqCst));
        for round in 0..ROUNDS {
            let reserved = cred.reserved.notified();
            tokio::pin!(reserved);
            reserved.as_mut().enable();
            let (fetch, epoch) = {
                let now = Instant::now();
                let mut state = lock(&cred.state);
                let mut stale = state.pool.rekey(key);
                stale.extend(state.pool.sweep(now));
                if !stale.is_empty() {
                    self.send(Job::Refund {
                        credential: cred.name.clone(),
                        tokens: stale,
                    });
                }
                if let Some(slot) = state.pool.take(not_before, latest, now) {
                    state.decisions.leased += 1;
                    state.mode = (Mode::Shared, None);
                    return Obtained::Slot(slot.at, slot.token, now);
                }
                // Redis said moments ago that nothing is free before
                // `busy_until`: a call that cannot wait that long is told
                // so without a round trip.
                if let Some(busy) = state.busy_until.filter(|busy| latest < *busy) {
                    state.decisions.denied += 1;
                    return Obtained::Denied(denied(request, 0, since(busy, now), Hold::Rate));
                }
                let permit = lock(&core.breaker).permit(now, core.config.timeout * 2);
                match permit {
                    Permit::Refuse => return Obtained::Fallback("circuit breaker open".into()),
                    Permit::Ask if leases && state.pool.fetching && round + 1 < ROUNDS => {
                        state.pool.waiters += 1;
                        (None, state.pool.epoch)
                    }
                    Permit::Ask | Permit::Probe => {
                        let want = if leases {
                            let cap =
                                fair_cap(request.limit, state.processes, core.config.max_lease);
                            state.pool.fetching = true;
                            state.pool.want(cap)
                        } else {
                            1
                        };
                        (Some((want, state.pool.waiters + 1)), state.pool.epoch)
                    }
                }
            };
            let Some((want, immediate)) = fetch else {
                // Someone else is reserving: wait for it (at most the
                // command timeout), then look at the pool again.
                let waited = tokio::time::timeout(core.config.timeout, reserved).await;
                let mut state = lock(&cred.state);
                state.pool.waiters = state.pool.waiters.saturating_sub(1);
                if waited.is_err() || (state.pool.epoch != epoch && state.pool.last_failed) {
                    return Obtained::Fallback(
                        "the reservation this call waited for failed".into(),
                    );
                }
                continue;
            };
            return self
                .reserve_in_redis(
                    cred,
                    request,
                    parts,
                    (not_before, latest),
                    (want, immediate),
                    leases,
                )
                .await;
        }
        Obtained::Fallback("no slot after waiting for reservations".into())
    }

    async fn reserve_in_redis(
        &self,
        cred: &Arc<Cred>,
        request: &ReserveRequest<'_>,
        parts: &[String],
        (not_before, latest): (Instant, Instant),
        (want, immediate): (u32, u32),
        leases: bool,
    ) -> Obtained {
        let core = &self.inner.core;
        let member = format!(
            "{}:{}",
            self.inner.process,
            self.inner.members.fetch_add(1, Ordering::Relaxed)
        );
        let scopes: Vec<&str> = request.scopes.to_vec();
        let sent = Instant::now();
        let max_wait = micros(since(latest, sent));
        let args = ReserveArgs {
            credential: request.credential,
            scopes: &scopes,
            limit: request.limit,
            not_before: micros(since(not_before, sent)),
            max_wait,
            slots: want,
            horizon: max_wait,
            immediate,
            lead: micros(LEAD),
            process: Some(&self.inner.process),
            heartbeat: micros(core.config.heartbeat),
            member_prefix: &member,
        };
        let result =
            core.run(|store, mut conn| async move {
                store.reserve(&mut conn, &args, Clock::Server).await
            })
            .await;
        let received = Instant::now();
        let outcome = {
            let mut state = lock(&cred.state);
            if leases {
                state.pool.fetching = false;
                state.pool.epoch += 1;
                state.pool.last_failed = result.is_err();
            }
            match result {
                Ok(Reserved::Granted { view, slots }) => {
                    if view.processes > 0 {
                        state.processes = view.processes;
                    }
                    state.holds.absorb(&view, received);
                    state.mode = (Mode::Shared, None);
                    state.decisions.shared += 1;
                    state.busy_until = None;
                    let mut slots = slots.into_iter().map(|slot| Pooled {
                        at: received + Duration::from_micros(slot.wait),
                        token: slot.token,
                    });
                    match slots.next() {
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
                    if view.processes > 0 {
                        state.processes = view.processes;
                    }
                    state.holds.absorb(&view, received);
                    state.mode = (Mode::Shared, None);
                    state.decisions.denied += 1;
                    if hold == Hold::Rate && not_before <= sent {
                        state.busy_until = Some(received + Duration::from_micros(wait));
                    }
                    let index = scope.min(parts.len().saturating_sub(1));
                    Obtained::Denied(denied(request, index, Duration::from_micros(wait), hold))
                }
                Err(error) => Obtained::Fallback(error.to_string()),
            }
        };
        cred.reserved.notify_waiters();
        outcome
    }

    /// Sleeps until `at`, watching for holds; false when one voids the slot.
    async fn hold_until(
        &self,
        cred: &Cred,
        parts: &[String],
        at: Instant,
        obtained: Instant,
    ) -> bool {
        loop {
            let held = cred.held.notified();
            tokio::pin!(held);
            held.as_mut().enable();
            let now = Instant::now();
            if lock(&cred.state).holds.voids(parts, at, obtained, now) {
                return false;
            }
            if now >= at {
                return true;
            }
            tokio::select! {
                () = tokio::time::sleep_until(at) => {}
                () = &mut held => {}
            }
        }
    }

    /// Decides locally at this process's share of the rate.
    fn fallback(
        &self,
        cred: &Cred,
        request: &ReserveRequest<'_>,
        parts: &[String],
        not_before: Instant,
        latest: Instant,
        reason: String,
    ) -> Decision {
        let now = Instant::now();
        let mut state = lock(&cred.state);
        let share = self.share(state.processes);
        let limit = request.limit.map(|limit| share_of(limit, share));
        tracing::debug!(credential = %cred.name, %reason, "deciding locally");
        if state.mode.0 == Mode::Shared {
            // Leased slots cannot be given back while Redis is away, and the
            // local cell would not count them: drop them (under-spending).
            state.pool.drain_all();
            let mut recent: Vec<Instant> = state.recent.iter().copied().collect();
            recent.sort();
            state.fallback.seed(&parts[0], limit, &recent);
        }
        state.mode = (Mode::Fallback, Some(reason));
        match state
            .fallback
            .reserve(&parts[0], limit, now, not_before.max(now), latest)
        {
            Ok((start, id)) => {
                state.decisions.fallback += 1;
                Decision::Granted {
                    wait: since(start, now),
                    grant: Grant {
                        token: format!("f|{id}"),
                    },
                }
            }
            Err(at) => {
                state.decisions.denied += 1;
                denied(request, 0, since(at, now), Hold::Rate)
            }
        }
    }

    fn send(&self, job: Job) {
        if self.inner.jobs.try_send(job).is_err() {
            tracing::warn!("the Redis background queue is full; a refund or block was dropped");
        }
    }
}

/// Most shared starts remembered for seeding the fallback.
const RECENT: usize = 4_096;

/// Remembers a shared start at `at`, forgetting those a window old.
fn remember(state: &mut CredState, at: Instant, limit: Option<sluice::shared::SharedLimit>) {
    let window = limit.map_or(Duration::ZERO, |l| l.rate.window());
    let now = Instant::now();
    while state
        .recent
        .front()
        .is_some_and(|first| *first + window <= now || state.recent.len() >= RECENT)
    {
        state.recent.pop_front();
    }
    if !window.is_zero() {
        state.recent.push_back(at);
    }
}

fn denied(request: &ReserveRequest<'_>, index: usize, wait: Duration, hold: Hold) -> Decision {
    Decision::Denied {
        wait,
        scope: request
            .scopes
            .get(index)
            .or(request.scopes.first())
            .map_or_else(String::new, |s| (*s).to_owned()),
        hold,
    }
}

impl Inner {
    fn cred_by_part(&self, part: &str) -> Option<Arc<Cred>> {
        lock(&self.creds)
            .values()
            .find(|cred| cred.part == part)
            .cloned()
    }

    /// A hold another process (or this one) published.
    fn on_event(&self, event: Event, at: Instant) {
        if let Some(cred) = self.cred_by_part(&event.credential) {
            let until = at + Duration::from_micros(event.wait);
            note_hold(&cred, event.kind, &event.scope, until, at);
        }
    }
}

/// Notes a hold on `cred`'s `scope`: leased slots it voids are dropped (Redis
/// voided them too), the fallback cell restarts empty, waiting callers look again.
fn note_hold(cred: &Cred, kind: Kind, scope: &str, until: Instant, now: Instant) {
    {
        let mut state = lock(&cred.state);
        state.holds.note(kind, scope, until);
        state.busy_until = None;
        if kind == Kind::Blocked {
            state.holds.announce(scope, now);
            state.fallback.penalize(scope, until, now);
        }
        // Leased slots on the held scope were voided in Redis (a block bumps
        // the generation and drops future window entries): drop them here.
        // Holds on other scopes are checked when a call takes a slot.
        if state.pool.key().is_some_and(|key| key.scope == scope) {
            state.pool.drain_all();
        }
    }
    cred.held.notify_waiters();
}

impl SharedBudget for RedisBudget {
    fn reserve<'a>(&'a self, request: ReserveRequest<'a>) -> BoxFuture<'a, Decision> {
        Box::pin(self.decide(request))
    }

    fn refund(&self, credential: &str, grant: Grant) {
        if let Some(id) = grant
            .token
            .strip_prefix("f|")
            .and_then(|id| id.parse::<u64>().ok())
        {
            let cred = self.cred(credential);
            lock(&cred.state).fallback.refund(id);
            return;
        }
        match SlotToken::decode(&grant.token) {
            Some(token) if token.undo != crate::store::Undo::Nothing => self.send(Job::Refund {
                credential: credential.to_owned(),
                tokens: vec![token],
            }),
            _ => {}
        }
    }

    fn block(&self, credential: &str, scope: &str, wait: Duration, hold: Hold) {
        let now = Instant::now();
        let until = after(now, wait);
        if until <= now {
            return;
        }
        let cred = self.cred(credential);
        let kind = match hold {
            Hold::Quota => Kind::Quota,
            Hold::Blocked | Hold::Rate => Kind::Blocked,
        };
        note_hold(&cred, kind, &part(scope), until, now);
        self.send(Job::Block {
            credential: credential.to_owned(),
            scope: scope.to_owned(),
            until,
            hold,
        });
    }
}

impl Core {
    /// Runs one script call under the timeout, counting it and telling the
    /// breaker. Never resends: a timeout is a failure whose fate is unknown.
    async fn run<'s, T, F, Fut>(&'s self, call: F) -> Result<T, Error>
    where
        F: FnOnce(&'s Store, crate::connection::Conn) -> Fut,
        Fut: std::future::Future<Output = Result<T, Error>> + 's,
    {
        let result = match self.connector.get() {
            Err(error) => Err(error),
            Ok(conn) => {
                self.commands.fetch_add(1, Ordering::Relaxed);
                match tokio::time::timeout(self.config.timeout, call(&self.store, conn)).await {
                    Ok(result) => result,
                    Err(_) => Err(Error::Timeout(self.config.timeout)),
                }
            }
        };
        match &result {
            Ok(_) => lock(&self.breaker).success(),
            Err(error) => {
                lock(&self.breaker).failure(Instant::now());
                let mut errors = lock(&self.errors);
                match error {
                    Error::Timeout(_) => errors.0.timeout += 1,
                    Error::Connection(_) => errors.0.connection += 1,
                    Error::Server(_) => errors.0.server += 1,
                    _ => errors.0.reply += 1,
                }
                errors.1 = Some(error.to_string());
                tracing::debug!(%error, "a Redis command failed");
            }
        }
        result
    }

    fn closed(&self) -> bool {
        lock(&self.breaker).state() == BreakerState::Closed
    }
}

/// The background worker: refunds (batched per credential) and blocks (kept
/// and replayed while Redis is unreachable).
async fn work(core: Arc<Core>, mut queue: mpsc::Receiver<Job>) {
    let mut pending: Vec<(String, String, Instant, Hold)> = Vec::new();
    loop {
        let mut jobs = Vec::new();
        match tokio::time::timeout(REPLAY_EVERY, queue.recv()).await {
            Ok(None) => return,
            Ok(Some(job)) => {
                // Refunds are not urgent: gather them for a moment into one
                // round trip per credential. A block goes out at once.
                let gather_until = Instant::now() + REFUND_BATCH;
                let mut urgent = matches!(job, Job::Block { .. });
                jobs.push(job);
                while jobs.len() < 256 {
                    let next = if urgent {
                        queue.try_recv().ok()
                    } else {
                        tokio::time::timeout_at(gather_until, queue.recv())
                            .await
                            .ok()
                            .flatten()
                    };
                    match next {
                        Some(job) => {
                            urgent |= matches!(job, Job::Block { .. });
                            jobs.push(job);
                        }
                        None => break,
                    }
                }
            }
            Err(_) => {}
        }
        let mut refunds: Vec<(String, Vec<SlotToken>)> = Vec::new();
        for job in jobs {
            match job {
                Job::Refund { credential, tokens } => {
                    match refunds.iter_mut().find(|(c, _)| *c == credential) {
                        Some((_, all)) => all.extend(tokens),
                        None => refunds.push((credential, tokens)),
                    }
                }
                Job::Block {
                    credential,
                    scope,
                    until,
                    hold,
                } => pending.push((credential, scope, until, hold)),
            }
        }
        if !core.closed() {
            // Refunds only give back budget: dropping them while Redis is
            // away under-spends, never overspends.
            pending.retain(|(_, _, until, _)| *until > Instant::now());
            if pending.len() > PENDING_BLOCKS {
                let excess = pending.len() - PENDING_BLOCKS;
                pending.drain(..excess);
            }
            continue;
        }
        let mut failed = Vec::new();
        for (credential, scope, until, hold) in pending.drain(..) {
            let now = Instant::now();
            if until <= now {
                continue;
            }
            let wait = micros(since(until, now));
            let result = core
                .run(|store, mut conn| {
                    let (credential, scope) = (&credential, &scope);
                    async move {
                        store
                            .block(&mut conn, credential, scope, wait, hold, Clock::Server)
                            .await
                    }
                })
                .await;
            if result.is_err() {
                failed.push((credential, scope, until, hold));
            }
        }
        pending = failed;
        for (credential, tokens) in refunds {
            let _ = core
                .run(|store, mut conn| {
                    let (credential, tokens) = (&credential, &tokens);
                    async move { store.refund(&mut conn, credential, tokens).await }
                })
                .await;
        }
    }
}
