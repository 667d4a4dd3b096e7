//! What the calls of one turn share: single-flight with the read cache, and the turn's request budget.

use std::sync::atomic::{AtomicU32, Ordering};

use crate::coalesce::Flights;
use crate::config::Defaults;

/// One turn's state, behind the [`Turn`](crate::Turn) handles' `Arc`.
#[derive(Debug)]
pub(crate) struct TurnState {
    pub(crate) flights: Flights,
    /// Upstream requests this turn has caused.
    requests: AtomicU32,
    budget: Option<u32>,
}

impl TurnState {
    pub(crate) fn new(defaults: &Defaults) -> Self {
        TurnState {
            flights: Flights::new(defaults.turn_cache_ttl),
            requests: AtomicU32::new(0),
            budget: defaults.turn_budget,
        }
    }

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

    /// Upstream requests this turn has caused so far.
    pub(crate) fn requests(&self) -> u32 {
        self.requests.load(Ordering::SeqCst)
    }
}
