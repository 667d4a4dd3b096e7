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
    /// Whether anyone can ask for [`TurnState::requests`]: not for the turn
    /// of a single call, which then counts only against a budget.
    counted: bool,
}

impl TurnState {
    /// A turn's state, for a [`Turn`](crate::Turn) its harness holds.
    pub(crate) fn new(defaults: &Defaults) -> Self {
        TurnState {
            flights: Flights::new(defaults.turn_cache_ttl),
            requests: AtomicU32::new(0),
            budget: defaults.turn_budget,
            counted: true,
        }
    }

    /// The state of a turn of one call ([`Gate::call`](crate::Gate::call)):
    /// nobody reads its count, so without a budget a request costs no
    /// locked increment.
    pub(crate) fn single(defaults: &Defaults) -> Self {
        TurnState {
            counted: false,
            ..TurnState::new(defaults)
        }
    }

    /// Takes one request from the turn's budget; false when it is spent.
    pub(crate) fn spend_request(&self) -> bool {
        let Some(budget) = self.budget else {
            if self.counted {
                self.requests.fetch_add(1, Ordering::SeqCst);
            }
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
        if self.budget.is_none() && !self.counted {
            return;
        }
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
