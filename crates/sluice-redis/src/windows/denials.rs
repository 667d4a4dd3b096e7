//! Denials Redis gave a spend moments ago: nothing spending at least a
//! cost in a budget starts before a time. A call that cannot wait that
//! long is told so without a round trip (as a one-window lease's busy
//! floor does).

use parking_lot::Mutex;
use tokio::time::Instant;

use crate::spend::Budget;

/// The remembered denials of this process's spends.
#[derive(Debug, Default)]
pub(super) struct Denials(Mutex<Vec<Denial>>);

/// One remembered denial.
#[derive(Debug, Clone)]
struct Denial {
    credential: String,
    budget: String,
    cost: u64,
    until: Instant,
}

impl Denials {
    /// A remembered denial that outlasts `latest` for one of `budgets`:
    /// the budget's position among them and the start it allows.
    pub(super) fn known(
        &self,
        credential: &str,
        budgets: &[Budget],
        now: Instant,
        latest: Instant,
    ) -> Option<(usize, Instant)> {
        let mut denials = self.0.lock();
        denials.retain(|d| d.until > now);
        budgets.iter().enumerate().find_map(|(index, budget)| {
            denials
                .iter()
                .find(|d| {
                    d.credential == credential
                        && d.budget == budget.name
                        && d.cost <= budget.cost
                        && d.until > latest
                })
                .map(|d| (index, d.until))
        })
    }

    /// Remembers Redis's denial on `budget`: nothing spending its cost there before `until`.
    pub(super) fn remember(&self, credential: &str, budget: &Budget, until: Instant) {
        let mut denials = self.0.lock();
        denials.retain(|d| !(d.credential == credential && d.budget == budget.name));
        denials.push(Denial {
            credential: credential.to_owned(),
            budget: budget.name.clone(),
            cost: budget.cost,
            until,
        });
    }

    /// Room was given back on `credential` (a refund, a settle below the
    /// estimate): what was remembered may start earlier now.
    pub(super) fn forget(&self, credential: &str) {
        self.0.lock().retain(|d| d.credential != credential);
    }
}
