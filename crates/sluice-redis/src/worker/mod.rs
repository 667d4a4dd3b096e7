//! The background worker: refunds (batched per credential), blocks and the fallback's local starts (kept and replayed while Redis is unreachable), so that none waits on Redis.

use std::sync::Arc;
use std::time::Duration;

use sluice::limiter::micros;
use sluice::shared::{Hold, SharedLimit};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::instant::since;
use crate::runner::Runner;
use crate::spend::Budget;
use crate::store::{Clock, SlotToken, Void};

mod local;
mod unwritten;

use local::{Charged, Kept, LocalStart, TrueUp};
pub(crate) use unwritten::Unwritten;

/// Queued background jobs before new ones are dropped (a dropped refund
/// under-spends; a dropped block is still known locally and to Redis
/// through the next one).
const JOB_QUEUE: usize = 4_096;
/// Jobs taken from the queue for one round.
const BATCH: usize = 256;
/// Blocks kept for replay while Redis is unreachable.
const PENDING_BLOCKS: usize = 64;
/// How long refunds are gathered into one round trip.
const REFUND_BATCH: Duration = Duration::from_millis(25);
/// Reservations to void kept while Redis is unreachable, and how long:
/// a void mark outlives a reservation queued this long (`Store::void`).
const PENDING_VOIDS: usize = 4_096;
const VOID_FOR: Duration = Duration::from_secs(60);
/// How often the worker replays pending blocks.
const REPLAY_EVERY: Duration = Duration::from_millis(250);

/// Work sent in the background: `refund`, `block` and `record` never wait on Redis.
enum Job {
    Record(LocalStart),
    TrueUp(TrueUp),
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
    Void(Void),
}

/// Hands work to the worker; cheap to clone. The worker stops when every
/// clone is gone.
#[derive(Clone)]
pub(crate) struct Jobs(mpsc::Sender<Job>);

impl Jobs {
    /// Starts the worker on `runner`.
    pub(crate) fn start(runner: Arc<Runner>) -> (Jobs, AbortHandle) {
        let (jobs, queue) = mpsc::channel(JOB_QUEUE);
        let worker = tokio::spawn(work(runner, queue)).abort_handle();
        (Jobs(jobs), worker)
    }

    /// Gives `tokens` of `credential` back to the shared log.
    pub(crate) fn refund(&self, credential: &str, tokens: Vec<SlotToken>) {
        self.send(Job::Refund {
            credential: credential.to_owned(),
            tokens,
        });
    }

    /// Blocks `scope` of `credential` in Redis until `until`.
    pub(crate) fn block(&self, credential: &str, scope: &str, until: Instant, hold: Hold) {
        self.send(Job::Block {
            credential: credential.to_owned(),
            scope: scope.to_owned(),
            until,
            hold,
        });
    }

    /// Settles a reservation whose answer never came, once Redis answers
    /// (see `crate::unknown`).
    pub(crate) fn void(&self, void: Void) {
        self.send(Job::Void(void));
    }

    /// Adds starts the fallback granted on `scope` of `credential`
    /// (decided at a share of `limit`) to the shared log at `limit`, now or,
    /// while Redis is unreachable, once it answers again; each counts in
    /// `unwritten` until then.
    pub(crate) fn record(
        &self,
        (credential, unwritten): (&str, &Unwritten),
        scope: &str,
        limit: SharedLimit,
        starts: impl IntoIterator<Item = Instant>,
    ) {
        let charged = Charged::Limit {
            scope: scope.to_owned(),
            limit,
        };
        self.record_charged((credential, unwritten), &charged, starts);
    }

    /// Adds a spend the fallback granted (`spend`, its id) on several of
    /// `credential`'s windows or units at `at` to every one of `budgets`,
    /// as [`Jobs::record`] does for one limit.
    pub(crate) fn record_spend(
        &self,
        credential: (&str, &Unwritten),
        budgets: Vec<Budget>,
        spend: u64,
        at: Instant,
    ) {
        let charged = Charged::Budgets { budgets, spend };
        self.record_charged(credential, &charged, [at]);
    }

    /// The true-up of a local spend in `unit`: `actual` where `estimate`
    /// was charged, in what Redis is told (or was told) of it.
    pub(crate) fn true_up_spend(
        &self,
        credential: &str,
        spend: u64,
        unit: &str,
        estimate: u64,
        actual: u64,
    ) {
        self.send(Job::TrueUp(TrueUp {
            credential: credential.to_owned(),
            spend,
            unit: unit.to_owned(),
            estimate,
            actual,
        }));
    }

    fn record_charged(
        &self,
        (credential, unwritten): (&str, &Unwritten),
        charged: &Charged,
        starts: impl IntoIterator<Item = Instant>,
    ) {
        for at in starts {
            self.send(Job::Record(LocalStart {
                id: 0,
                credential: credential.to_owned(),
                charged: charged.clone(),
                at,
                _pending: unwritten.one(),
            }));
        }
    }

    fn send(&self, job: Job) {
        if self.0.try_send(job).is_err() {
            tracing::warn!(
                "the Redis background queue is full; a refund, block or local start was dropped"
            );
        }
    }
}

/// The worker's loop: gathers jobs, then sends blocks and local starts
/// (kept while the breaker is open) and refunds (dropped while it is open).
async fn work(runner: Arc<Runner>, mut queue: mpsc::Receiver<Job>) {
    let mut pending: Vec<(String, String, Instant, Hold)> = Vec::new();
    let mut kept = Kept::new();
    // Each with when it is dropped, and the answers Redis had given when
    // it was kept: it goes out after the next one, never as a probe.
    let mut voids: Vec<(Void, Instant, u64)> = Vec::new();
    loop {
        let mut jobs = Vec::new();
        // Kept work goes out as soon as Redis answers again.
        let waiting = !pending.is_empty() || kept.waiting() || !voids.is_empty();
        let next = tokio::select! {
            job = tokio::time::timeout(REPLAY_EVERY, queue.recv()) => job.ok(),
            () = runner.back(), if waiting => None,
        };
        match next {
            Some(None) => return,
            Some(Some(job)) => {
                // Refunds are not urgent: gather them for a moment into one
                // round trip per credential. A block or a local start goes
                // out at once.
                let gather_until = Instant::now() + REFUND_BATCH;
                let mut urgent = !matches!(job, Job::Refund { .. });
                jobs.push(job);
                while jobs.len() < BATCH {
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
                            urgent |= !matches!(job, Job::Refund { .. });
                            jobs.push(job);
                        }
                        None => break,
                    }
                }
            }
            None => {}
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
                Job::Record(start) => kept.add(start),
                Job::TrueUp(up) => kept.true_up(up, Instant::now()),
                Job::Void(void) => {
                    voids.push((void, Instant::now() + VOID_FOR, runner.answered()));
                }
            }
        }
        let now = Instant::now();
        voids.retain(|(_, until, _)| *until > now);
        if voids.len() > PENDING_VOIDS {
            let excess = voids.len() - PENDING_VOIDS;
            voids.drain(..excess);
        }
        kept.prune(Instant::now());
        if !runner.closed() {
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
            let result = runner
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
        // Before the local starts: a reservation that may still charge a
        // slot is settled first.
        // One failure keeps the rest for the next round: the worker never
        // stands in for the breaker's probe.
        let mut unsettled = Vec::new();
        let mut failed = false;
        let answered = runner.answered();
        for (void, until, kept_at) in voids.drain(..) {
            if !failed && answered > kept_at {
                let result = runner
                    .run(|store, mut conn| {
                        let void = &void;
                        async move { store.void(&mut conn, void).await }
                    })
                    .await;
                failed = result.is_err();
                if !failed {
                    continue;
                }
            }
            unsettled.push((void, until, kept_at));
        }
        voids = unsettled;
        kept.send(&runner).await;
        for (credential, tokens) in refunds {
            let _ = runner
                .run(|store, mut conn| {
                    let (credential, tokens) = (&credential, &tokens);
                    async move { store.refund(&mut conn, credential, tokens).await }
                })
                .await;
        }
    }
}
