//! What a call asks of a scope, what it holds there once a start is
//! found (its ticket), and what it is told when none is: the types the
//! budgets ([`super::budgets`]) and their block ([`super::further`]) share.

use std::sync::Arc;

use crate::config::Priority;
use crate::limiter::{Micros, Reservation};

/// What a call asks of a scope.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Ask {
    pub(crate) priority: Priority,
    /// By unit name; units the scope does not have are not its to charge.
    pub(crate) costs: Vec<(Arc<str>, u64)>,
}

/// Everything a call holds on one scope for its start.
#[derive(Debug)]
pub(crate) struct Ticket {
    pub(crate) requests: Reservation,
    pub(super) low: Option<Reservation>,
    /// By unit index: the unit's reservation and its share's.
    pub(super) units: Vec<(usize, Reservation, Option<Reservation>)>,
}

impl Ticket {
    pub(crate) fn start(&self) -> Micros {
        self.requests.start()
    }

    /// True when the ticket charged a cost in some unit.
    pub(crate) fn charges_units(&self) -> bool {
        !self.units.is_empty()
    }

    /// True when `other` charges exactly what this ticket charges, in the
    /// same cells: the same requests, the same share (or none), the same
    /// cost in each unit. Two such tickets of a scope can change hands
    /// between calls without any cell noticing.
    pub(crate) fn same_spend(&self, other: &Ticket) -> bool {
        self.requests.amount() == other.requests.amount()
            && self.low.as_ref().map(Reservation::amount)
                == other.low.as_ref().map(Reservation::amount)
            && self.units.len() == other.units.len()
            && self.units.iter().zip(&other.units).all(|(mine, theirs)| {
                mine.0 == theirs.0
                    && mine.1.amount() == theirs.1.amount()
                    && mine.2.as_ref().map(Reservation::amount)
                        == theirs.2.as_ref().map(Reservation::amount)
            })
    }

    /// True when this ticket charges at least what `other` charges, in
    /// the same cells, in every cell `other` charges (it may charge more,
    /// and the low share besides): a call holding `other` can start on
    /// this ticket instead, overcharged but never over any window.
    pub(crate) fn covers(&self, other: &Ticket) -> bool {
        fn covers(mine: Option<&Reservation>, theirs: Option<&Reservation>) -> bool {
            theirs.is_none_or(|theirs| mine.is_some_and(|mine| mine.amount() >= theirs.amount()))
        }
        self.requests.amount() >= other.requests.amount()
            && covers(self.low.as_ref(), other.low.as_ref())
            && other.units.iter().all(|(index, requests, low)| {
                self.units.iter().any(|(mine, my_requests, my_low)| {
                    mine == index
                        && my_requests.amount() >= requests.amount()
                        && covers(my_low.as_ref(), low.as_ref())
                })
            })
    }
}

/// No start in time: when, which window, and whether the low share set it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Deferred {
    pub(crate) until: Micros,
    pub(crate) window: Option<String>,
    pub(crate) priority: bool,
}

/// One window's use, for `/v1/status` and `/metrics`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct WindowStatus {
    /// The window as configured, e.g. `30/1m`.
    pub window: String,
    /// Spent in the window ending now (requests, or units).
    pub used: u64,
    /// Left of its count now.
    pub remaining: u64,
    /// How long until the next request (or one unit) may start, from now.
    pub next_free_ms: u64,
}

/// One unit's windows, for `/v1/status` and `/metrics`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct UnitStatus {
    /// The unit's name, e.g. `tokens`.
    pub unit: String,
    /// Every window of the unit.
    pub windows: Vec<WindowStatus>,
    /// What the server last said remains of the unit, if it did.
    pub server_remaining: Option<u64>,
    /// When that count resets, from now.
    pub server_reset_in_ms: Option<u64>,
}
