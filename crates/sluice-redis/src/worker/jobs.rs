//! [`Jobs`]: what the decision path hands the worker, never waiting on Redis.

use std::sync::Arc;

use sluice::shared::{Hold, SharedLimit};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;
use tokio::time::Instant;

use super::local::{Charged, LocalStart, TrueUp};
use super::run::{Job, work};
use super::unwritten::Unwritten;
use crate::runner::Runner;
use crate::spend::Budget;
use crate::store::{SlotToken, Void};

/// Queued background jobs before new ones are dropped (a dropped refund
/// under-spends; a dropped block is still known locally and to Redis
/// through the next one).
const JOB_QUEUE: usize = 4_096;

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
