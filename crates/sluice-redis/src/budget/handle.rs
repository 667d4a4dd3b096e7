//! [`RedisBudget`] itself: connecting, the status, and the engine's
//! [`SharedBudget`] interface (each decision is `decide`'s).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sluice::shared::{BoxFuture, Decision, Grant, Hold, ReserveRequest, SharedBudget};
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::credential::Credentials;
use crate::decision::{self, Refund};
use crate::events;
use crate::holds::Kind;
use crate::instant::after;
use crate::keys::part;
use crate::lease::Leases;
use crate::runner::Runner;
use crate::status::{self, Status};
use crate::store::Store;
use crate::windows::Spends;
use crate::worker::Jobs;
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
    pub(super) inner: Arc<Inner>,
}

impl std::fmt::Debug for RedisBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBudget")
            .field("config", &self.inner.config)
            .field("process", &self.inner.leases.process())
            .finish_non_exhaustive()
    }
}

pub(super) struct Inner {
    pub(super) config: RedisConfig,
    pub(super) runner: Arc<Runner>,
    pub(super) credentials: Arc<Credentials>,
    pub(super) leases: Leases,
    /// Calls on several windows or units: leased spends, one script per lease.
    pub(super) spends: Arc<Spends>,
    pub(super) jobs: Jobs,
    pub(super) events_live: Arc<AtomicBool>,
    /// The worker and the subscription, stopped with the budget.
    pub(super) tasks: Vec<AbortHandle>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

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
            let runner = &self.inner.runner;
            self.inner
                .spends
                .settle(runner, member, unit, (estimate, actual));
        } else if let Some(id) = decision::fallback_id(grant) {
            let cred = self.inner.credentials.get(credential);
            cred.state
                .lock()
                .fallback
                .settle(id, unit, estimate, actual);
            // What the worker wrote (or will write) of it to Redis too.
            self.inner
                .jobs
                .true_up_spend(credential, id, unit, estimate, actual);
        }
    }

    fn settle_now<'a>(
        &'a self,
        credential: &'a str,
        grant: &'a Grant,
        unit: &'a str,
        estimate: u64,
        actual: u64,
    ) -> BoxFuture<'a, ()> {
        match Spends::member(grant) {
            Some(member) => Box::pin(self.inner.spends.settle_now(
                &self.inner.runner,
                member,
                unit,
                (estimate, actual),
            )),
            // The fallback's cells take it at once.
            None => {
                self.settle(credential, grant, unit, estimate, actual);
                Box::pin(std::future::ready(()))
            }
        }
    }

    fn reserve_instead<'a>(
        &'a self,
        request: ReserveRequest<'a>,
        held: &'a Grant,
    ) -> BoxFuture<'a, Decision> {
        Box::pin(self.move_earlier(request, held))
    }

    fn answer_within(&self) -> Option<Duration> {
        Some(self.inner.config.timeout)
    }

    fn held(&self, credential: &str, scopes: &[&str]) -> bool {
        let parts: Vec<String> = scopes.iter().map(|scope| part(scope)).collect();
        let now = Instant::now();
        let cred = self.inner.credentials.get(credential);
        let state = cred.state.lock();
        state.holds.blocked(&parts, now).is_some() || state.holds.quota(&parts, now).is_some()
    }
}
