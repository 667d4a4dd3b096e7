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
use crate::store::{Clock, RecordArgs, SlotToken};

/// Queued background jobs before new ones are dropped (a dropped refund
/// under-spends; a dropped block is still known locally and to Redis
/// through the next one).
const JOB_QUEUE: usize = 4_096;
/// Jobs taken from the queue for one round.
const BATCH: usize = 256;
/// Blocks kept for replay while Redis is unreachable.
const PENDING_BLOCKS: usize = 64;
/// Local starts kept for recording while Redis is unreachable (the
/// latest; those a window old are dropped first, as they no longer count).
const PENDING_STARTS: usize = 4_096;
/// How long refunds are gathered into one round trip.
const REFUND_BATCH: Duration = Duration::from_millis(25);
/// How often the worker replays pending blocks.
const REPLAY_EVERY: Duration = Duration::from_millis(250);

/// Work sent in the background: `refund`, `block` and `record` never wait on Redis.
enum Job {
    Record(LocalStart),
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

/// A start the fallback granted without Redis, to be added to the shared
/// log so that every process counts it.
#[derive(Debug, Clone, PartialEq)]
struct LocalStart {
    /// Numbers the start once the worker has it (0 until then).
    id: u64,
    credential: String,
    scope: String,
    limit: SharedLimit,
    at: Instant,
}

impl LocalStart {
    /// A window after the start it no longer counts anywhere.
    fn counts_at(&self, now: Instant) -> bool {
        self.at + self.limit.rate.window() > now
    }
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

    /// Adds starts the fallback granted on `scope` of `credential`
    /// (decided at a share of `limit`) to the shared log at `limit`, now or,
    /// while Redis is unreachable, once it answers again.
    pub(crate) fn record(
        &self,
        credential: &str,
        scope: &str,
        limit: SharedLimit,
        starts: impl IntoIterator<Item = Instant>,
    ) {
        for at in starts {
            self.send(Job::Record(LocalStart {
                id: 0,
                credential: credential.to_owned(),
                scope: scope.to_owned(),
                limit,
                at,
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
    let mut starts: Vec<LocalStart> = Vec::new();
    let members = format!("{:016x}:l", rand::random::<u64>());
    let mut numbered: u64 = 0;
    loop {
        let mut jobs = Vec::new();
        // Kept work goes out as soon as Redis answers again.
        let kept = !pending.is_empty() || !starts.is_empty();
        let next = tokio::select! {
            job = tokio::time::timeout(REPLAY_EVERY, queue.recv()) => job.ok(),
            () = runner.back(), if kept => None,
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
                Job::Record(mut start) => {
                    numbered += 1;
                    start.id = numbered;
                    starts.push(start);
                }
            }
        }
        let now = Instant::now();
        starts.retain(|start| start.counts_at(now));
        if starts.len() > PENDING_STARTS {
            starts.sort_by_key(|start| start.at);
            let excess = starts.len() - PENDING_STARTS;
            starts.drain(..excess);
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
        for group in by_scope(std::mem::take(&mut starts)) {
            let sent = Instant::now();
            let entries: Vec<(i64, String)> = group
                .iter()
                .map(|start| (offset(start.at, sent), format!("{members}{}", start.id)))
                .collect();
            let Some(first) = group.first() else {
                continue;
            };
            let args = RecordArgs {
                credential: &first.credential,
                scope: &first.scope,
                limit: first.limit,
                starts: &entries,
            };
            let result = runner
                .run(|store, mut conn| {
                    let args = &args;
                    async move { store.record(&mut conn, args, Clock::Server).await }
                })
                .await;
            if result.is_err() {
                // The command's fate is unknown: sent again, a window logs
                // each start once (by its member) and a bucket may count it
                // twice (spending less); none is lost (spending more).
                starts.extend(group);
            }
        }
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

/// `starts` grouped by credential, scope and limit, each group earliest first.
fn by_scope(mut starts: Vec<LocalStart>) -> Vec<Vec<LocalStart>> {
    starts.sort_by(|a, b| (&a.credential, &a.scope, a.at).cmp(&(&b.credential, &b.scope, b.at)));
    let mut groups: Vec<Vec<LocalStart>> = Vec::new();
    for start in starts {
        match groups.iter_mut().find(|group| {
            group.first().is_some_and(|first| {
                first.credential == start.credential
                    && first.scope == start.scope
                    && first.limit == start.limit
            })
        }) {
            Some(group) => group.push(start),
            None => groups.push(vec![start]),
        }
    }
    groups
}

/// `at` in signed µs from `now`, as the record script takes a start.
fn offset(at: Instant, now: Instant) -> i64 {
    // One of the two is zero.
    let ahead = i64::try_from(micros(since(at, now))).unwrap_or(i64::MAX);
    let ago = i64::try_from(micros(since(now, at))).unwrap_or(i64::MAX);
    ahead - ago
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(credential: &str, scope: &str, rate: &str, at: Instant) -> LocalStart {
        LocalStart {
            id: 0,
            credential: credential.to_owned(),
            scope: scope.to_owned(),
            limit: SharedLimit {
                rate: rate.parse().unwrap(),
                burst: None,
            },
            at,
        }
    }

    #[test]
    fn local_starts_go_out_by_scope_and_limit_earliest_first() {
        let t0 = Instant::now();
        let ms = Duration::from_millis(1);
        let groups = by_scope(vec![
            start("key", "api_key", "10/1s", t0 + 3 * ms),
            start("other", "api_key", "10/1s", t0),
            start("key", "api_key", "10/1s", t0 + ms),
            start("key", "api_key", "20/1s", t0 + 2 * ms),
            start("key", "model", "10/1s", t0),
        ]);
        let seen: Vec<Vec<(&str, &str, u32, Duration)>> = groups
            .iter()
            .map(|group| {
                group
                    .iter()
                    .map(|s| {
                        (
                            s.credential.as_str(),
                            s.scope.as_str(),
                            s.limit.rate.count().get(),
                            s.at - t0,
                        )
                    })
                    .collect()
            })
            .collect();
        assert_eq!(
            seen,
            vec![
                vec![("key", "api_key", 10, ms), ("key", "api_key", 10, 3 * ms)],
                vec![("key", "api_key", 20, 2 * ms)],
                vec![("key", "model", 10, Duration::ZERO)],
                vec![("other", "api_key", 10, Duration::ZERO)],
            ]
        );
    }

    #[test]
    fn a_start_is_sent_as_signed_microseconds_from_now() {
        let now = Instant::now() + Duration::from_secs(10);
        let ms = Duration::from_millis(1);
        assert_eq!(offset(now, now), 0);
        assert_eq!(offset(now + 3 * ms, now), 3_000);
        assert_eq!(offset(now - 2 * ms, now), -2_000);
    }

    #[test]
    fn a_start_counts_for_one_window() {
        let t0 = Instant::now();
        let s = start("key", "api_key", "10/1s", t0);
        assert!(s.counts_at(t0 + Duration::from_millis(999)));
        assert!(!s.counts_at(t0 + Duration::from_secs(1)));
    }
}
