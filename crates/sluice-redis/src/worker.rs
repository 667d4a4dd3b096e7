//! The background worker: refunds (batched per credential) and blocks (kept and replayed while Redis is unreachable), so that neither waits on Redis.

use std::sync::Arc;
use std::time::Duration;

use sluice::limiter::micros;
use sluice::shared::Hold;
use tokio::sync::mpsc;
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::instant::since;
use crate::runner::Runner;
use crate::store::{Clock, SlotToken};

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
/// How often the worker replays pending blocks.
const REPLAY_EVERY: Duration = Duration::from_millis(250);

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

    fn send(&self, job: Job) {
        if self.0.try_send(job).is_err() {
            tracing::warn!("the Redis background queue is full; a refund or block was dropped");
        }
    }
}

/// The worker's loop: gathers jobs, then sends blocks (kept while the
/// breaker is open) and refunds (dropped while it is open).
async fn work(runner: Arc<Runner>, mut queue: mpsc::Receiver<Job>) {
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
