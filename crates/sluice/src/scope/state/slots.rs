//! Step 5 on a scope: start slots reserved, given back and trued up, on the scope's cell and its further budgets.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::MutexGuard;

use super::scope::{Scope, State};
use crate::Rate;
use crate::config::Priority;
use crate::limiter::{Micros, Reservation};
use crate::scope::spend::{Ask, Deferred, Ticket};

impl Scope {
    /// The earliest start at or after `now`, charging nothing.
    pub(crate) fn earliest(&self, now: Micros) -> Micros {
        self.state().cell.earliest(now)
    }

    /// Reserves a start for a call asking `ask`: a request in every
    /// window, its costs in every unit window, its low share; all at one
    /// start no earlier than `not_before`, at most `max_wait` after `now`.
    pub(crate) fn reserve(
        &self,
        now: Micros,
        not_before: Micros,
        max_wait: Micros,
        ask: &Ask,
    ) -> Result<Ticket, Deferred> {
        let mut state = self.state();
        let State {
            cell,
            budgets,
            limit,
            ..
        } = &mut *state;
        let first = limit.effective();
        budgets.reserve(cell, first, (now, not_before, max_wait), ask)
    }

    pub(crate) fn refund(&self, ticket: &Ticket) {
        let mut state = self.state();
        state.cell.refund(&ticket.requests);
        state.budgets.change(|budgets| budgets.refund(ticket));
    }

    /// Gives back every one of the `tickets` held on each scope, when that
    /// is exact on all of them (a bucket takes a start back only while it
    /// is among the last charged; `LimiterCell::gives_back_exactly`), and
    /// returns true; otherwise gives back nothing. The scopes are locked
    /// together, in one order, so that the answer holds while it acts.
    pub(crate) fn give_back_exactly(held: &[(&Scope, &Ticket)]) -> bool {
        let mut scopes: Vec<(&Scope, Vec<&Ticket>)> = Vec::new();
        for &(scope, ticket) in held {
            match scopes.iter_mut().find(|(s, _)| std::ptr::eq(*s, scope)) {
                Some((_, tickets)) => tickets.push(ticket),
                None => scopes.push((scope, vec![ticket])),
            }
        }
        scopes.sort_by_key(|(scope, _)| std::ptr::from_ref::<Scope>(scope) as usize);
        let mut states: Vec<(MutexGuard<'_, State>, &[&Ticket])> = scopes
            .iter()
            .map(|(scope, tickets)| (scope.state(), tickets.as_slice()))
            .collect();
        let exact = states.iter().all(|(state, tickets)| {
            let requests: Vec<&Reservation> = tickets.iter().map(|t| &t.requests).collect();
            state.cell.gives_back_exactly(&requests) && state.budgets.give_back_exactly(tickets)
        });
        if exact {
            for (state, tickets) in &mut states {
                let requests: Vec<&Reservation> = tickets.iter().map(|t| &t.requests).collect();
                state.cell.refund_all(&requests);
                state.budgets.change(|budgets| budgets.refund_all(tickets));
            }
        }
        exact
    }

    pub(crate) fn is_current(&self, ticket: &Ticket) -> bool {
        let state = self.state();
        state.cell.is_current(&ticket.requests) && state.budgets.is_current(ticket)
    }

    /// Why `ask` can never be granted on this scope, if it cannot.
    pub(crate) fn never_fits(&self, ask: &Ask) -> Option<String> {
        if ask.costs.is_empty() {
            // Only a cost can outgrow a window.
            return None;
        }
        self.state().budgets.never_fits(ask)
    }

    /// What `ticket` charged in each unit.
    pub(crate) fn costs_of(&self, ticket: &Ticket) -> Vec<(Arc<str>, u64)> {
        if !ticket.charges_units() {
            return Vec::new();
        }
        self.state().budgets.costs(ticket)
    }

    /// The true-up of a call started at `start`; false without that unit.
    pub(crate) fn settle(
        &self,
        unit: &str,
        start: Micros,
        estimate: u64,
        actual: u64,
        priority: Priority,
    ) -> bool {
        self.state()
            .budgets
            .change(|budgets| budgets.settle(unit, start, estimate, actual, priority))
    }

    /// True when `name` is one of the scope's units.
    pub(crate) fn has_unit(&self, name: &str) -> bool {
        self.state().budgets.has_unit(name)
    }

    /// Every window and unit budget `ask` spends on this scope, as the
    /// shared backend charges them: the request windows (the rate in force
    /// first, cost 1), then each unit's windows at the call's cost.
    pub(crate) fn shared_windows(&self, ask: &Ask) -> Vec<crate::shared::SharedWindow> {
        let state = self.state();
        let margin = state.limit.margin();
        let requests = state
            .limit
            .enforced()
            .into_iter()
            .chain(state.budgets.further(margin));
        let requests: Vec<Rate> = requests.collect();
        let mut windows: Vec<_> = requests
            .iter()
            .enumerate()
            .map(|(index, rate)| crate::shared::SharedWindow {
                scope: self.name.to_string(),
                unit: None,
                index,
                rate: *rate,
                cost: 1,
                low: false,
                burst: if index == 0 {
                    state.limit.burst()
                } else {
                    None
                },
            })
            .collect();
        windows.extend(state.budgets.shared_units(&self.name, ask, margin));
        let burst = state.limit.burst();
        windows.extend(
            state
                .budgets
                .shared_low(&self.name, &requests, burst, ask, margin),
        );
        windows
    }

    /// The rate the cells enforce now (for the shared budget's requests),
    /// and how late after its granted slot a start may still come (half
    /// the window margin), read together.
    pub(crate) fn enforced_late(&self) -> Option<(Rate, Duration)> {
        self.state().limit.enforced_late()
    }
}
