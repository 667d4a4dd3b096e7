//! The worker's loop: gathers jobs, then sends them to Redis.

use std::sync::Arc;
use std::time::Duration;

use sluice::limiter::micros;
use sluice::shared::Hold;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::local::{Kept, LocalStart, TrueUp};
use crate::instant::since;
use crate::runner::Runner;
use crate::store::{Clock, SlotToken, Void};

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
pub(super) enum Job {
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

/// The worker's loop: gathers jobs, then sends blocks and local starts
/// (kept while the breaker is open) and refunds (dropped while it is open).
pub(super) async fn work(runner: Arc<Runner>, mut queue: mpsc::Receiver<Job>) {
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
