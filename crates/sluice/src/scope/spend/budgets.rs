//! A scope's budgets beyond its first request window: none, or a block of
//! them ([`Further`]).

use std::num::NonZeroU32;

use super::ask::{Ask, Deferred, Ticket};
use super::further::Further;
use crate::Rate;
use crate::config::UnitLimits;
use crate::limiter::{Binding, LimiterCell, Micros};

/// A scope's budgets besides its first request window (which the scope's
/// `Limit` may move): the further request windows, the units, the low share.
///
/// Most scopes have none of them, and an idle scope should stay small
/// (issue 18): then there is no block at all, and each method answers as
/// an empty [`Further`] would. Reading goes through `Deref`, changing
/// through [`Budgets::change`].
#[derive(Debug)]
pub(crate) struct Budgets(Option<Box<Further>>);

/// No further budget: what [`Budgets`] reads as when it has none.
static NONE: Further = Further::none();

impl std::ops::Deref for Budgets {
    type Target = Further;

    fn deref(&self) -> &Further {
        self.0.as_deref().unwrap_or(&NONE)
    }
}

impl Budgets {
    /// The budgets `further` holds: no block when that is nothing.
    pub(super) fn of(further: Further) -> Self {
        let any = !further.windows.is_empty()
            || !further.units.is_empty()
            || further.low.is_some()
            || further.share.is_some();
        Budgets(any.then(|| Box::new(further)))
    }

    /// `rates` are every request window (the first is the scope's own,
    /// kept in its cell); `units` the credential's, on its own scope only.
    pub(crate) fn new(
        rates: &[Rate],
        burst: Option<NonZeroU32>,
        units: &[UnitLimits],
        share: Option<f64>,
        margin: std::time::Duration,
    ) -> Self {
        Budgets::of(Further::new(rates, burst, units, share, margin))
    }

    /// No budgets beyond one request window.
    pub(crate) fn none() -> Self {
        Budgets(None)
    }

    /// Reserves on `requests` (the scope's cell) and every budget `ask`
    /// touches, at one start no earlier than `not_before` and at most
    /// `max_wait` after `now`; otherwise charges nothing. A scope with no
    /// further budget (most) spends its one request cell directly.
    pub(crate) fn reserve(
        &mut self,
        requests: &mut LimiterCell,
        first: Option<Rate>,
        (now, not_before, max_wait): (Micros, Micros, Micros),
        ask: &Ask,
    ) -> Result<Ticket, Deferred> {
        match self.0.as_deref_mut() {
            Some(further) => further.reserve(requests, first, now, not_before, max_wait, ask),
            None => requests_only(requests, first, now, not_before, max_wait),
        }
    }

    /// `act` on the budgets, to change them; on an empty set when there
    /// are none, which nothing can change. That set holds no allocation,
    /// and no method adds one to it (they only charge and refund the cells
    /// it holds), so it is not dropped: nothing runs for it on a call
    /// without budgets.
    pub(crate) fn change<R>(&mut self, act: impl FnOnce(&mut Further) -> R) -> R {
        match self.0.as_deref_mut() {
            Some(further) => act(further),
            None => act(&mut std::mem::ManuallyDrop::new(Further::none())),
        }
    }
}

/// [`Further::reserve`] for a scope whose only budget is its request cell
/// (its one window, the rate in force `first`): the same start, without
/// the bookkeeping of budgets it does not have.
fn requests_only(
    requests: &mut LimiterCell,
    first: Option<Rate>,
    now: Micros,
    not_before: Micros,
    max_wait: Micros,
) -> Result<Ticket, Deferred> {
    let (mut at, mut binding) = requests.earliest_for(now, not_before, 1);
    // Room may be left in front of the starts reserved ahead.
    let asked = not_before.max(now);
    if at > asked && requests.fits_at(now, asked, 1) {
        (at, binding) = (asked, Binding::Free);
    }
    if at.saturating_sub(now) > max_wait {
        return Err(Deferred {
            until: at,
            window: match binding {
                Binding::Window(0) => first.map(|rate| rate.to_string()),
                _ => None,
            },
            priority: false,
        });
    }
    Ok(Ticket {
        requests: requests.charge_at(at, 1),
        low: None,
        units: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use std::sync::Arc;

    use super::*;
    use crate::config::Priority;

    fn rates(texts: &[&str]) -> Vec<Rate> {
        texts.iter().map(|text| text.parse().unwrap()).collect()
    }

    #[test]
    fn only_budgets_beyond_one_window_take_a_block() {
        let margin = std::time::Duration::ZERO;
        let one = rates(&["10/1s"]);
        assert!(Budgets::new(&one, None, &[], None, margin).0.is_none());
        assert!(Budgets::none().0.is_none());
        let two = rates(&["10/1s", "100/1m"]);
        assert!(Budgets::new(&two, None, &[], None, margin).0.is_some());
        assert!(Budgets::new(&one, None, &[], Some(0.5), margin).0.is_some());
    }

    #[test]
    fn no_further_budget_spends_the_request_window_alone() {
        let mut budgets = Budgets::none();
        let rate = rates(&["2/1s"])[0];
        let mut cell = LimiterCell::new(rate, None);
        let ask = Ask {
            priority: Priority::Low,
            costs: vec![(Arc::from("tokens"), 5)],
        };
        let first = budgets
            .change(|b| b.reserve(&mut cell, Some(rate), 0, 0, 0, &ask))
            .unwrap();
        assert_eq!(
            (first.start(), first.units.len(), first.low.is_none()),
            (0, 0, true)
        );
        budgets
            .change(|b| b.reserve(&mut cell, Some(rate), 0, 0, 0, &ask))
            .unwrap();
        let Err(deferred) = budgets.change(|b| b.reserve(&mut cell, Some(rate), 0, 0, 0, &ask))
        else {
            panic!("a third start fitted a window of two");
        };
        assert_eq!(deferred.until, 1_000_000);
        assert_eq!(deferred.window.as_deref(), Some("2/1s"));
        assert!(!budgets.change(|b| b.settle("tokens", 0, 5, 9, Priority::Low)));
        assert!(!budgets.change(|b| b.sync("tokens", 0, 10, 0)));
        assert!(budgets.is_idle(0) && budgets.never_fits(&ask).is_none());
        budgets.change(|b| b.refund(&first));
        cell.refund(&first.requests);
        assert_eq!(cell.earliest(0), 0);
    }

    /// One step of the property below: a reservation (time forward,
    /// not-before ahead, the wait allowed), a refund of the latest start
    /// held, or the server's word (a penalty, or a remaining count).
    #[derive(Debug, Clone)]
    enum Step {
        Reserve {
            advance: Micros,
            ahead: Micros,
            max_wait: Micros,
        },
        Refund,
        Penalize(Micros),
        Sync(u64, Micros),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            6 => (0..400_000u64, 0..300_000u64, 0..2_000_000u64).prop_map(
                |(advance, ahead, max_wait)| Step::Reserve { advance, ahead, max_wait }
            ),
            1 => Just(Step::Refund),
            1 => (0..3_000_000u64).prop_map(Step::Penalize),
            1 => (0..3u64, 0..2_000_000u64).prop_map(|(left, reset)| Step::Sync(left, reset)),
        ]
    }

    proptest! {
        /// Issue 18: a scope with no further budget reserves on its cell
        /// directly. It decides every start exactly as the budgets' general
        /// reservation does with nothing in them: the same starts, the
        /// same deferrals naming the same window, on an exact window and
        /// on a bucket alike.
        #[test]
        fn the_direct_start_is_the_general_one_without_budgets(
            rate in prop_oneof![Just("5/1s"), Just("2/100ms"), Just("30/1m")],
            burst in prop_oneof![Just(None), Just(Some(3u32))],
            steps in proptest::collection::vec(step(), 1..60),
        ) {
            let rate: Rate = rate.parse().unwrap();
            let burst = burst.and_then(std::num::NonZeroU32::new);
            let (mut direct, mut general) = (LimiterCell::new(rate, burst), LimiterCell::new(rate, burst));
            let mut budgets = Budgets::none();
            let ask = Ask::default();
            let mut now = 0;
            let mut held = Vec::new();
            for step in steps {
                match step {
                    Step::Reserve { advance, ahead, max_wait } => {
                        now += advance;
                        let when = (now, now + ahead, max_wait);
                        let mine = budgets.reserve(&mut direct, Some(rate), when, &ask);
                        let theirs = std::mem::ManuallyDrop::new(Further::none())
                            .reserve(&mut general, Some(rate), now, now + ahead, max_wait, &ask);
                        match (mine, theirs) {
                            (Ok(mine), Ok(theirs)) => {
                                prop_assert_eq!(mine.start(), theirs.start());
                                held.push((mine, theirs));
                            }
                            (Err(mine), Err(theirs)) => prop_assert_eq!(mine, theirs),
                            (mine, theirs) => prop_assert!(false, "{mine:?} against {theirs:?}"),
                        }
                    }
                    Step::Refund => {
                        if let Some((mine, theirs)) = held.pop() {
                            direct.refund(&mine.requests);
                            general.refund(&theirs.requests);
                        }
                    }
                    Step::Penalize(wait) => {
                        direct.penalize(now + wait, now);
                        general.penalize(now + wait, now);
                    }
                    Step::Sync(left, reset) => {
                        direct.sync(left, now + reset, now);
                        general.sync(left, now + reset, now);
                    }
                }
            }
        }
    }
}
