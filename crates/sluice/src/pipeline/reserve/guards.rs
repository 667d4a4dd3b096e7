//! What one attempt holds for its start — the turn's request, a slot on each scope, a shared grant — each in a guard that gives it back when dropped.

use std::sync::Arc;

use tokio::time::Instant;

use crate::engine::TurnState;
use crate::limiter::Micros;
use crate::scope::{ScopeRef, Slots};
use crate::shared::{Grant, SharedBudget};

/// Everything one attempt holds for its start. Dropped, it gives it all
/// back; [`Start::commit`] keeps it, when the request is sent.
#[must_use = "dropping a start refunds it"]
pub(in crate::pipeline) struct Start<'a> {
    pub(super) request: TurnRequest<'a>,
    pub(super) local: Local,
    pub(super) shared: Option<SharedGrant<'a>>,
    /// Now, when the start holds, as an instant and in engine microseconds:
    /// the caller's reading of the clock, or a new one if the reservation
    /// waited.
    pub(super) at: (Instant, Micros),
}

/// What a sent request spent on the credential's own scope: its start and
/// its cost in each unit, for the true-up after the answer; and the shared
/// budget's grant, which the true-up reaches too.
#[derive(Default)]
pub(in crate::pipeline) struct Spent<'a> {
    pub(in crate::pipeline) start: Option<Micros>,
    pub(in crate::pipeline) costs: Vec<(Arc<str>, u64)>,
    pub(in crate::pipeline) shared: Option<(&'a dyn SharedBudget, &'a str, Grant)>,
}

impl<'a> Start<'a> {
    /// When the start holds (the send's time).
    pub(in crate::pipeline) fn at(&self) -> (Instant, Micros) {
        self.at
    }

    /// The request is being sent: everything held is spent.
    pub(in crate::pipeline) fn commit(mut self) -> Spent<'a> {
        self.request.turn = None;
        let mut spent = match self.local.held.first() {
            Some((scope, ticket)) => Spent {
                start: Some(ticket.start()),
                costs: scope.costs_of(ticket),
                shared: None,
            },
            None => Spent::default(),
        };
        self.local.held.clear();
        if let Some(shared) = &mut self.shared {
            spent.shared = shared
                .grant
                .take()
                .map(|grant| (shared.budget, shared.credential, grant));
        }
        spent
    }
}

/// One request from the turn's budget.
pub(super) struct TurnRequest<'a> {
    pub(super) turn: Option<&'a TurnState>,
}

impl<'a> TurnRequest<'a> {
    pub(super) fn spend(turn: &'a TurnState) -> Option<Self> {
        // Lazily: a guard built for a request that was not spent would
        // refund one when dropped.
        turn.spend_request()
            .then(|| TurnRequest { turn: Some(turn) })
    }
}

impl Drop for TurnRequest<'_> {
    fn drop(&mut self) {
        if let Some(turn) = self.turn {
            turn.refund_request();
        }
    }
}

/// Slots held on each of a call's scopes, all for one start.
pub(super) struct Local {
    pub(super) held: Slots,
}

impl Local {
    /// The common start; `None` when there are no scopes.
    pub(super) fn start(&self) -> Option<Micros> {
        self.held.first().map(|(_, ticket)| ticket.start())
    }

    /// True while no penalty or block has voided any of the slots.
    pub(super) fn is_current(&self) -> bool {
        self.held
            .iter()
            .all(|(scope, reservation)| scope.is_current(reservation))
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        for (scope, reservation) in &self.held {
            scope.refund(reservation);
        }
    }
}

/// A slot the shared budget granted.
pub(super) struct SharedGrant<'a> {
    pub(super) budget: &'a dyn SharedBudget,
    pub(super) credential: &'a str,
    pub(super) grant: Option<Grant>,
}

impl SharedGrant<'_> {
    /// Whether the budget has learned of a hold on `scopes` since it
    /// granted this start ([`SharedBudget::held`]).
    pub(super) fn held(&self, scopes: &[ScopeRef]) -> bool {
        let names: Vec<&str> = scopes.iter().map(|scope| &*scope.name).collect();
        self.budget.held(self.credential, &names)
    }
}

impl Drop for SharedGrant<'_> {
    fn drop(&mut self) {
        if let Some(grant) = self.grant.take() {
            self.budget.refund(self.credential, grant);
        }
    }
}
