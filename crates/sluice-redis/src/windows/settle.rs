//! A spend's true-up (issue 14): sent in the background, or awaited when
//! calls wait for the room it frees (issue 50).

use std::future::Future;
use std::sync::Arc;

use super::{Spends, spawn, spawned};
use crate::runner::Runner;
use crate::spend::{Bucket, Granted, is_unit};

impl Spends {
    /// Trues `member`'s cost in `unit` up from `estimate` to `actual`, in
    /// the background.
    pub(crate) fn settle(
        self: &Arc<Self>,
        runner: &Arc<Runner>,
        member: &str,
        unit: &str,
        (estimate, actual): (u64, u64),
    ) {
        if let Some(settling) = self.settling(runner, member, unit, estimate, actual) {
            spawn(settling);
        }
    }

    /// [`Spends::settle`], resolving once Redis has the true-up (or could
    /// not be reached), so that a call asking after it sees the room. The
    /// true-up runs on its own: a caller that stops waiting does not stop
    /// it.
    pub(crate) async fn settle_now(
        self: &Arc<Self>,
        runner: &Arc<Runner>,
        member: &str,
        unit: &str,
        (estimate, actual): (u64, u64),
    ) {
        if let Some(settling) = self.settling(runner, member, unit, estimate, actual) {
            spawned(settling).await;
        }
    }

    /// The true-up of `member`, to run; `None` when it is not held here or
    /// charged nothing in `unit` at `estimate`. A denial remembered while
    /// it was on its way is forgotten once it lands as well: it may have
    /// been answered before the room came back.
    fn settling(
        self: &Arc<Self>,
        runner: &Arc<Runner>,
        member: &str,
        unit: &str,
        estimate: u64,
        actual: u64,
    ) -> Option<impl Future<Output = ()> + Send + 'static> {
        let (credential, budgets, granted) = {
            let mut held = self.held.lock();
            let entry = held.get_mut(member)?;
            let mut charged = Vec::new();
            // The buckets among them, renumbered to `charged`.
            let mut buckets = Vec::new();
            for (index, budget) in entry.budgets.iter_mut().enumerate() {
                // The unit's windows, and its low share's for a low call.
                if is_unit(&budget.name, unit) && budget.cost == estimate {
                    if let Some(bucket) = entry.granted.buckets.iter().find(|b| b.budget == index) {
                        buckets.push(Bucket {
                            budget: charged.len(),
                            ..*bucket
                        });
                    }
                    charged.push(budget.clone());
                    budget.cost = actual;
                }
            }
            let granted = Granted {
                start: entry.granted.start,
                buckets,
            };
            (entry.credential.clone(), charged, granted)
        };
        if budgets.is_empty() {
            return None;
        }
        if actual < estimate {
            self.denials.forget(&credential);
        }
        let (this, runner, member) = (self.clone(), runner.clone(), member.to_owned());
        let spends = self.clone();
        Some(async move {
            let keys = runner.store().keys(&credential);
            let done = runner
                .run(|_, mut conn| async move {
                    this.scripts
                        .settle_buckets(&mut conn, &keys, &budgets, &member, &granted, actual)
                        .await
                })
                .await;
            if let Err(error) = done {
                tracing::debug!(%error, "could not settle a spend in Redis; the estimate stays");
            }
            if actual < estimate {
                spends.denials.forget(&credential);
            }
        })
    }
}
