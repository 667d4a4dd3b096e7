//! The further request windows, the units and the low share of a scope
//! that has any: where a start fits them all, charging, refunds, true-ups.

use std::num::NonZeroU32;
use std::sync::Arc;

use super::ask::{Ask, Deferred, Ticket, UnitStatus, WindowStatus};
use crate::Rate;
use crate::config::{Priority, UnitLimits};
use crate::limiter::{Binding, LimiterCell, Micros, Reservation, WindowUsage};

/// A unit on a scope: its windows and, for `priorities.low`, the share of them.
#[derive(Debug)]
pub(super) struct Unit {
    pub(super) name: Arc<str>,
    rates: Vec<Rate>,
    /// The first window's burst, if it is a bucket.
    burst: Option<NonZeroU32>,
    cell: LimiterCell,
    low: Option<LimiterCell>,
}

/// What [`Budgets`] holds when a scope has any of it.
#[derive(Debug)]
pub(crate) struct Further {
    /// The request windows after the first, as configured.
    pub(super) windows: Vec<Rate>,
    pub(super) units: Vec<Unit>,
    /// The low-priority share of the request windows.
    pub(super) low: Option<LimiterCell>,
    pub(super) share: Option<f64>,
}

/// What `tickets` hold in unit `index`: its reservations, and its low
/// share's.
fn unit_reservations<'t>(
    tickets: &[&'t Ticket],
    index: usize,
) -> (Vec<&'t Reservation>, Vec<&'t Reservation>) {
    let held = tickets
        .iter()
        .flat_map(|ticket| &ticket.units)
        .filter(|(unit, _, _)| *unit == index);
    let spent = held.clone().map(|(_, spent, _)| spent).collect();
    let shares = held.filter_map(|(_, _, share)| share.as_ref()).collect();
    (spent, shares)
}

/// The share of a window low calls may start: at least one.
fn share_of(rate: Rate, share: f64) -> Rate {
    let count = (f64::from(rate.count().get()) * share).floor();
    let count =
        NonZeroU32::new(count.clamp(1.0, f64::from(u32::MAX)) as u32).unwrap_or(NonZeroU32::MIN);
    Rate::new(count, rate.window()).unwrap_or(rate)
}

/// The share of a burst low calls may use: at least one.
fn burst_share(burst: NonZeroU32, share: f64) -> NonZeroU32 {
    let scaled = (f64::from(burst.get()) * share).floor().max(1.0);
    NonZeroU32::new(scaled as u32).unwrap_or(NonZeroU32::MIN)
}

/// The cell for `rates` (the margin applied), and its low share's.
fn cells(
    rates: &[Rate],
    burst: Option<NonZeroU32>,
    margin: std::time::Duration,
    share: Option<f64>,
) -> (LimiterCell, Option<LimiterCell>) {
    let widened: Vec<Rate> = rates.iter().map(|rate| rate.widened(margin)).collect();
    let low = share.map(|share| {
        let shares: Vec<Rate> = widened.iter().map(|rate| share_of(*rate, share)).collect();
        LimiterCell::windows(&shares, burst.map(|burst| burst_share(burst, share)))
    });
    (LimiterCell::windows(&widened, burst), low)
}

impl Further {
    /// `rates` are every request window (the first is the scope's own,
    /// kept in its cell); `units` the credential's, on its own scope only.
    pub(super) fn new(
        rates: &[Rate],
        burst: Option<NonZeroU32>,
        units: &[UnitLimits],
        share: Option<f64>,
        margin: std::time::Duration,
    ) -> Self {
        let low = share
            .filter(|_| !rates.is_empty())
            .and_then(|_| cells(rates, burst, margin, share).1);
        Further {
            windows: rates.iter().skip(1).copied().collect(),
            units: units
                .iter()
                .map(|unit| {
                    let (cell, low) = cells(&unit.rates, unit.burst, margin, share);
                    Unit {
                        name: unit.name.clone(),
                        rates: unit.rates.clone(),
                        burst: unit.burst,
                        cell,
                        low,
                    }
                })
                .collect(),
            low,
            share,
        }
    }

    /// What `ticket` charged in each unit, by name.
    pub(crate) fn costs(&self, ticket: &Ticket) -> Vec<(Arc<str>, u64)> {
        ticket
            .units
            .iter()
            .filter_map(|(index, reservation, _)| {
                let unit = self.units.get(*index)?;
                Some((unit.name.clone(), reservation.amount()))
            })
            .collect()
    }
}

impl Further {
    pub(super) const fn none() -> Self {
        Further {
            windows: Vec::new(),
            units: Vec::new(),
            low: None,
            share: None,
        }
    }

    /// The further request windows, widened by `margin`, for the scope's cell.
    pub(crate) fn further(&self, margin: std::time::Duration) -> Vec<Rate> {
        self.windows
            .iter()
            .map(|rate| rate.widened(margin))
            .collect()
    }

    fn unit(&self, name: &str) -> Option<usize> {
        self.units.iter().position(|unit| &*unit.name == name)
    }

    /// Why `ask` can never be granted here, if it cannot: a cost larger
    /// than a window of its unit (or than the low share of one).
    pub(crate) fn never_fits(&self, ask: &Ask) -> Option<String> {
        for (name, cost) in &ask.costs {
            let Some(unit) = self.unit(name).and_then(|index| self.units.get(index)) else {
                continue;
            };
            if !unit.cell.fits(*cost) {
                return Some(format!(
                    "a cost of {cost} {name} can never fit: the unit allows at most {} at once",
                    unit.cell.capacity()
                ));
            }
            if ask.priority == Priority::Low
                && let Some(low) = &unit.low
                && !low.fits(*cost)
            {
                return Some(format!(
                    "a cost of {cost} {name} can never fit the low-priority share, at most {} at once",
                    low.capacity()
                ));
            }
        }
        None
    }

    /// The label of request window `index` (0: the rate in force).
    fn request_label(&self, index: usize, first: Option<Rate>) -> Option<String> {
        match index {
            0 => first.map(|rate| rate.to_string()),
            n => self.windows.get(n - 1).map(Rate::to_string),
        }
    }

    /// Reserves on `requests` (the scope's cell) and every budget `ask`
    /// touches, at one start no earlier than `not_before` and at most
    /// `max_wait` after `now`; otherwise charges nothing.
    pub(crate) fn reserve(
        &mut self,
        requests: &mut LimiterCell,
        first: Option<Rate>,
        now: Micros,
        not_before: Micros,
        max_wait: Micros,
        ask: &Ask,
    ) -> Result<Ticket, Deferred> {
        let low = ask.priority == Priority::Low;
        let costs: Vec<(usize, u64)> = ask
            .costs
            .iter()
            .filter(|(_, cost)| *cost > 0)
            .filter_map(|(name, cost)| Some((self.unit(name)?, *cost)))
            .collect();
        // Each cell's earliest is max(asked, a bound of its own): the latest
        // of them is a start every cell allows.
        let (mut at, binding) = requests.earliest_for(now, not_before, 1);
        let mut label = match binding {
            Binding::Window(index) => self.request_label(index, first),
            _ => None,
        };
        let mut by_share = false;
        let mut consider = |(when, binding): (Micros, Binding),
                            name: &dyn Fn(usize) -> Option<String>,
                            share: bool| {
            if when > at {
                at = when;
                label = match binding {
                    Binding::Window(index) => name(index),
                    _ => None,
                };
                by_share = share;
            }
        };
        if low && let Some(cell) = &mut self.low {
            let windows: Vec<Rate> = first.iter().chain(&self.windows).copied().collect();
            consider(
                cell.earliest_for(now, not_before, 1),
                &|index| windows.get(index).map(Rate::to_string),
                true,
            );
        }
        for &(index, cost) in &costs {
            let Some(unit) = self.units.get_mut(index) else {
                continue;
            };
            let name = label_for(&unit.name, &unit.rates);
            consider(unit.cell.earliest_for(now, not_before, cost), &name, false);
            if low && let Some(cell) = &mut unit.low {
                consider(cell.earliest_for(now, not_before, cost), &name, true);
            }
        }
        // Room may be left in front of the starts reserved ahead (their
        // estimates settled lower, or a call gave its slot back): a call
        // that fits there in every budget it touches starts as asked, and
        // no reservation moves (docs/configuration.md, priorities).
        let asked = not_before.max(now);
        if at > asked && self.fit_at(requests, now, asked, low, &costs) {
            at = asked;
            label = None;
            by_share = false;
        }
        if at.saturating_sub(now) > max_wait {
            return Err(Deferred {
                until: at,
                window: label,
                priority: by_share,
            });
        }
        let ticket = Ticket {
            requests: requests.charge_at(at, 1),
            low: match &mut self.low {
                Some(cell) if low => Some(cell.charge_at(at, 1)),
                _ => None,
            },
            units: costs
                .iter()
                .filter_map(|&(index, cost)| {
                    let unit = self.units.get_mut(index)?;
                    let share = match &mut unit.low {
                        Some(cell) if low => Some(cell.charge_at(at, cost)),
                        _ => None,
                    };
                    Some((index, unit.cell.charge_at(at, cost), share))
                })
                .collect(),
        };
        Ok(ticket)
    }

    /// True when a start at `at` fits the request cell and every budget
    /// the call's `costs` (and a low priority) touch.
    fn fit_at(
        &mut self,
        requests: &mut LimiterCell,
        now: Micros,
        at: Micros,
        low: bool,
        costs: &[(usize, u64)],
    ) -> bool {
        if !requests.fits_at(now, at, 1) {
            return false;
        }
        if low
            && let Some(cell) = &mut self.low
            && !cell.fits_at(now, at, 1)
        {
            return false;
        }
        costs.iter().all(|&(index, cost)| {
            self.units.get_mut(index).is_none_or(|unit| {
                unit.cell.fits_at(now, at, cost)
                    && (!low
                        || unit
                            .low
                            .as_mut()
                            .is_none_or(|cell| cell.fits_at(now, at, cost)))
            })
        })
    }

    /// True when giving back every one of `tickets` (all but their
    /// requests) is exact in every budget ([`LimiterCell::gives_back_exactly`]).
    pub(crate) fn give_back_exactly(&self, tickets: &[&Ticket]) -> bool {
        let lows: Vec<&Reservation> = tickets.iter().filter_map(|t| t.low.as_ref()).collect();
        self.low
            .as_ref()
            .is_none_or(|cell| cell.gives_back_exactly(&lows))
            && self.units.iter().enumerate().all(|(index, unit)| {
                let (spent, shares) = unit_reservations(tickets, index);
                unit.cell.gives_back_exactly(&spent)
                    && unit
                        .low
                        .as_ref()
                        .is_none_or(|cell| cell.gives_back_exactly(&shares))
            })
    }

    /// Gives back every one of `tickets` but their requests, each bucket's
    /// latest charge first.
    pub(crate) fn refund_all(&mut self, tickets: &[&Ticket]) {
        if let Some(cell) = &mut self.low {
            let lows: Vec<&Reservation> = tickets.iter().filter_map(|t| t.low.as_ref()).collect();
            cell.refund_all(&lows);
        }
        for (index, unit) in self.units.iter_mut().enumerate() {
            let (spent, shares) = unit_reservations(tickets, index);
            unit.cell.refund_all(&spent);
            if let Some(cell) = &mut unit.low {
                cell.refund_all(&shares);
            }
        }
    }

    /// Gives back everything `ticket` holds but its requests.
    pub(crate) fn refund(&mut self, ticket: &Ticket) {
        if let (Some(cell), Some(reservation)) = (&mut self.low, &ticket.low) {
            cell.refund(reservation);
        }
        for (index, reservation, share) in &ticket.units {
            if let Some(unit) = self.units.get_mut(*index) {
                unit.cell.refund(reservation);
                if let (Some(cell), Some(share)) = (&mut unit.low, share) {
                    cell.refund(share);
                }
            }
        }
    }

    /// True while no server block voided any unit's reservation.
    pub(crate) fn is_current(&self, ticket: &Ticket) -> bool {
        ticket.units.iter().all(|(index, reservation, _)| {
            self.units
                .get(*index)
                .is_none_or(|unit| unit.cell.is_current(reservation))
        })
    }

    /// The shared backend's view of `ask`'s unit costs: each window of
    /// every unit it spends (widened by `margin`), named for `scope`.
    pub(crate) fn shared_units(
        &self,
        scope: &str,
        ask: &Ask,
        margin: std::time::Duration,
    ) -> Vec<crate::shared::SharedWindow> {
        let mut windows = Vec::new();
        for (name, cost) in &ask.costs {
            let Some(unit) = self.unit(name).and_then(|index| self.units.get(index)) else {
                continue;
            };
            for (index, rate) in unit.rates.iter().enumerate() {
                windows.push(crate::shared::SharedWindow {
                    scope: scope.to_owned(),
                    unit: Some(name.to_string()),
                    index,
                    rate: rate.widened(margin),
                    cost: *cost,
                    low: false,
                    burst: if index == 0 { unit.burst } else { None },
                });
            }
        }
        windows
    }

    /// The shared backend's view of the low-priority share for a low call
    /// (`priorities.low`): the share of each request window in `requests`
    /// (the scope's, margin applied) and of each window of every unit `ask`
    /// spends, as the local low cells hold them, so that the low calls of
    /// every process together keep the share. Nothing for other calls.
    pub(crate) fn shared_low(
        &self,
        scope: &str,
        requests: &[Rate],
        burst: Option<NonZeroU32>,
        ask: &Ask,
        margin: std::time::Duration,
    ) -> Vec<crate::shared::SharedWindow> {
        let Some(share) = self.share.filter(|_| ask.priority == Priority::Low) else {
            return Vec::new();
        };
        let mut windows: Vec<_> = requests
            .iter()
            .enumerate()
            .map(|(index, rate)| crate::shared::SharedWindow {
                scope: scope.to_owned(),
                unit: None,
                index,
                rate: share_of(*rate, share),
                cost: 1,
                low: true,
                burst: if index == 0 { burst } else { None },
            })
            .collect();
        windows.extend(self.shared_units(scope, ask, margin));
        for window in &mut windows {
            window.burst = window.burst.map(|burst| burst_share(burst, share));
        }
        for window in windows.iter_mut().filter(|window| !window.low) {
            window.rate = share_of(window.rate, share);
            window.low = true;
        }
        windows
    }

    /// The true-up: a call started at `start` spent `actual` of `unit`
    /// where `estimate` was charged; the difference is refunded or charged
    /// at `start` in every window of the unit (and its low share, for a
    /// low call). False when the scope has no such unit.
    pub(crate) fn settle(
        &mut self,
        unit: &str,
        start: Micros,
        estimate: u64,
        actual: u64,
        priority: Priority,
    ) -> bool {
        let Some(index) = self.unit(unit) else {
            return false;
        };
        let delta = i64::try_from(actual)
            .unwrap_or(i64::MAX)
            .saturating_sub(i64::try_from(estimate).unwrap_or(i64::MAX));
        if let Some(unit) = self.units.get_mut(index) {
            unit.cell.adjust(start, delta);
            if priority == Priority::Low
                && let Some(cell) = &mut unit.low
            {
                cell.adjust(start, delta);
            }
        }
        true
    }

    /// The server said `remaining` of `unit` are left until `reset_at`;
    /// false when the scope has no such unit.
    pub(crate) fn sync(
        &mut self,
        unit: &str,
        remaining: u64,
        reset_at: Micros,
        now: Micros,
    ) -> bool {
        match self.unit(unit).and_then(|index| self.units.get_mut(index)) {
            Some(unit) => {
                unit.cell.sync(remaining, reset_at, now);
                true
            }
            None => false,
        }
    }

    /// True when the scope has a unit of this name.
    pub(crate) fn has_unit(&self, name: &str) -> bool {
        self.unit(name).is_some()
    }

    pub(crate) fn is_idle(&self, now: Micros) -> bool {
        self.low.as_ref().is_none_or(|cell| cell.is_idle(now))
            && self.units.iter().all(|unit| {
                unit.cell.is_idle(now) && unit.low.as_ref().is_none_or(|cell| cell.is_idle(now))
            })
    }

    /// Every window's status: the request windows (first the rate in force), then each unit's.
    pub(crate) fn status(
        &mut self,
        requests: &mut LimiterCell,
        first: Option<Rate>,
        now: Micros,
    ) -> (Vec<WindowStatus>, Vec<UnitStatus>) {
        let next = |cell: &mut LimiterCell, amount: u64| {
            let at = cell.earliest_for(now, now, amount).0;
            (at - now).div_ceil(1_000)
        };
        let next_request = next(requests, 1);
        // Aligned with the cell's windows: the first may have no rate.
        let rates = std::iter::once(first).chain(self.windows.iter().copied().map(Some));
        let windows = rates
            .zip(requests.usage(now))
            .filter_map(|(rate, usage)| {
                let (rate, WindowUsage { used, remaining }) = (rate?, usage?);
                Some(WindowStatus {
                    window: rate.to_string(),
                    used,
                    remaining,
                    next_free_ms: next_request,
                })
            })
            .collect();
        let units = self
            .units
            .iter_mut()
            .map(|unit| {
                let next_free_ms = next(&mut unit.cell, 1);
                let server = unit.cell.server_remaining(now);
                let windows = unit
                    .rates
                    .iter()
                    .zip(unit.cell.usage(now))
                    .filter_map(|(rate, usage)| {
                        let WindowUsage { used, remaining } = usage?;
                        Some(WindowStatus {
                            window: rate.to_string(),
                            used,
                            remaining,
                            next_free_ms,
                        })
                    })
                    .collect();
                UnitStatus {
                    unit: unit.name.to_string(),
                    windows,
                    server_remaining: server.map(|(remaining, _)| remaining),
                    server_reset_in_ms: server.map(|(_, reset)| (reset - now).div_ceil(1_000)),
                }
            })
            .collect();
        (windows, units)
    }

    /// The low share, as configured.
    pub(crate) fn share(&self) -> Option<f64> {
        self.share
    }
}

fn label_for<'a>(name: &'a str, rates: &'a [Rate]) -> impl Fn(usize) -> Option<String> + 'a {
    move |index| unit_label(name, rates.get(index).copied())
}

/// `"900 points/1m"`.
fn unit_label(name: &str, rate: Option<Rate>) -> Option<String> {
    let rate = rate?;
    let text = rate.to_string();
    let (count, window) = text.split_once('/')?;
    Some(format!("{count} {name}/{window}"))
}
