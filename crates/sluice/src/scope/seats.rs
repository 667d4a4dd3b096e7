//! What a call sleeping until its start slot holds, seated so that calls of
//! higher priority are served first ([`crate::priority_seats`]): its slot on each
//! scope and, on a shared credential, the shared budget's grant.

use std::sync::Arc;

use super::{ScopeRef, Ticket};
use crate::limiter::Micros;
use crate::shared::{Grant, SharedBudget};

/// A credential's waiting calls, by their start in engine microseconds.
pub(crate) type Seats = crate::priority_seats::Seats<Micros, Holding>;

/// Where a shared grant goes back: the budget and the credential.
pub(crate) type GrantHome = (Arc<dyn SharedBudget>, Arc<str>);

/// A call's slot on each of its scopes, all for one start. A `Vec`: a
/// ticket is large, and inline it made every move of a reservation a copy
/// dearer than the allocation it saved (callgrind, issue 18).
pub(crate) type Slots = Vec<(ScopeRef, Ticket)>;

/// Everything a waiting call holds for its start.
pub(crate) struct Holding {
    pub(crate) local: Slots,
    /// The shared budget's grant for the same start, on a shared credential,
    /// and where it goes back if nobody uses it.
    pub(crate) grant: Option<(Grant, GrantHome)>,
}

impl Holding {
    /// Gives the local slots back; the grant, if any, is the caller's to
    /// give back (at once or awaited).
    pub(crate) fn give_back_local(self) -> Option<(Grant, GrantHome)> {
        for (scope, ticket) in &self.local {
            scope.refund(ticket);
        }
        self.grant
    }
}

impl crate::priority_seats::Seated for Holding {
    /// The same scopes, the same charges on each (requests, low share,
    /// the cost in each unit), and a grant or none.
    fn same_spend(&self, other: &Holding) -> bool {
        self.grant.is_some() == other.grant.is_some()
            && self.local.len() == other.local.len()
            && self.local.iter().zip(&other.local).all(|(mine, theirs)| {
                ScopeRef::ptr_eq(&mine.0, &theirs.0) && mine.1.same_spend(&theirs.1)
            })
    }

    /// On the same first scope (the credential's, which the true-up
    /// reads), a ticket covering each of `other`'s on the same scope, and
    /// a grant or none as `other` has: the grant was spent for the same
    /// scopes at the same costs as the tickets.
    fn covers(&self, other: &Holding) -> bool {
        let same_first = match (self.local.first(), other.local.first()) {
            (Some(mine), Some(theirs)) => ScopeRef::ptr_eq(&mine.0, &theirs.0),
            _ => false,
        };
        same_first
            && self.grant.is_some() == other.grant.is_some()
            && other.local.iter().all(|(scope, ticket)| {
                self.local
                    .iter()
                    .any(|(mine, held)| ScopeRef::ptr_eq(mine, scope) && held.covers(ticket))
            })
    }

    fn give_back(self) {
        if let Some((grant, (budget, credential))) = self.give_back_local() {
            budget.refund(&credential, grant);
        }
    }

    /// Local slots only: a shared grant goes back by its own round trip,
    /// never exactly together with others.
    fn give_back_together(all: &[&Holding]) -> bool {
        all.iter().all(|holding| holding.grant.is_none()) && {
            let held: Vec<(&super::Scope, &Ticket)> = all
                .iter()
                .flat_map(|holding| holding.local.iter())
                .map(|(scope, ticket)| (&**scope, ticket))
                .collect();
            super::Scope::give_back_exactly(&held)
        }
    }
}
