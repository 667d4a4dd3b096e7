//! A [`Turn`]: the calls of one model step, with their single-flight, read cache and request budget.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use futures_util::future::join_all;

use crate::call::{Call, Completion};
use crate::coalesce::Flights;
use crate::executor::Executor;
use crate::gate::Gate;
use crate::outcome::Outcome;

/// The calls of one model step. Cheap to clone; clones share the turn.
#[derive(Debug)]
pub struct Turn<E> {
    pub(crate) gate: Gate<E>,
    pub(crate) shared: Arc<TurnShared>,
}

impl<E> Clone for Turn<E> {
    fn clone(&self) -> Self {
        Turn {
            gate: self.gate.clone(),
            shared: self.shared.clone(),
        }
    }
}

/// What the calls of one turn share.
#[derive(Debug)]
pub(crate) struct TurnShared {
    pub(crate) flights: Flights,
    /// Upstream requests this turn has caused.
    requests: AtomicU32,
    budget: Option<u32>,
}

impl TurnShared {
    /// Takes one request from the turn's budget; false when it is spent.
    pub(crate) fn spend_request(&self) -> bool {
        let Some(budget) = self.budget else {
            self.requests.fetch_add(1, Ordering::SeqCst);
            return true;
        };
        self.requests
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |spent| {
                (spent < budget).then_some(spent + 1)
            })
            .is_ok()
    }

    /// Gives back a request that was not sent.
    pub(crate) fn refund_request(&self) {
        let _ = self
            .requests
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |spent| {
                spent.checked_sub(1)
            });
    }
}

impl<E: Executor> Turn<E> {
    pub(crate) fn new(gate: Gate<E>) -> Self {
        let defaults = &gate.inner.defaults;
        let shared = Arc::new(TurnShared {
            flights: Flights::new(defaults.turn_cache_ttl),
            requests: AtomicU32::new(0),
            budget: defaults.turn_budget,
        });
        Turn { gate, shared }
    }

    /// Runs a batch of calls concurrently: exactly one outcome per call, in order.
    pub async fn run(&self, calls: impl IntoIterator<Item = Call<E::Payload>>) -> Vec<Outcome> {
        join_all(calls.into_iter().map(|call| self.call(call))).await
    }

    /// Runs one call in this turn.
    pub async fn call(&self, call: Call<E::Payload>) -> Outcome {
        self.complete(call).await.outcome
    }

    /// Runs one call and keeps the upstream response alongside the outcome.
    pub async fn complete(&self, call: Call<E::Payload>) -> Completion {
        self.gate.inner.complete(&self.shared, call).await
    }

    /// Upstream requests this turn has caused so far.
    pub fn upstream_requests(&self) -> u32 {
        self.shared.requests.load(Ordering::SeqCst)
    }
}
