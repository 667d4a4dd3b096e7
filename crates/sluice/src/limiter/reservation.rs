//! A reservation for a start slot: when it may start, what it spends, and what undoes it.

#[cfg(doc)]
use super::LimiterCell;
use super::Micros;
use super::gcra::GcraUndo;

/// A reservation for a start slot.
///
/// Hold it until the request starts; [`LimiterCell::refund`] it if the
/// request is not sent. A penalty or a server block voids reservations whose
/// start had not come yet: [`LimiterCell::is_current`] tells, and the caller
/// reserves again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    pub(super) start: Micros,
    pub(super) amount: u64,
    pub(super) generation: u64,
    /// The undo record of the first window, when it is a bucket (the
    /// further windows are exact: they take any start back).
    pub(super) gcra: Option<GcraUndo>,
    pub(super) server_charged: u64,
}

impl Reservation {
    /// When the request may start.
    pub fn start(&self) -> Micros {
        self.start
    }

    /// What it spends (1 for a request, the cost in a unit).
    pub fn amount(&self) -> u64 {
        self.amount
    }
}

/// The undo records `reservations` hold for the first window.
pub(super) fn undos_of(reservations: &[&Reservation]) -> Vec<GcraUndo> {
    reservations.iter().filter_map(|r| r.gcra).collect()
}
