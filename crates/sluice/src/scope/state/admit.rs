//! Steps 3 and 4 on a scope: a concurrency permit, now or after a wait in the queue, and the drain estimate a deferred call is told.

use std::time::Duration;

use tokio::time::Instant;

use super::scope::Scope;
use crate::config::Priority;
use crate::deadline::Deadline;
use crate::limiter::{Micros, micros};
use crate::outcome::{Outcome, Reason};
use crate::scope::admission::{Admission, AdmittedNow, Permit, Refused};
use crate::scope::drain_estimate;

/// A concurrency permit from [`Scope::admit`] (none when the scope caps
/// nothing).
pub(crate) struct Admitted<'a> {
    pub(crate) permit: Option<Permit<'a>>,
    /// The call waited in the queue for it: the time it read before is
    /// stale.
    pub(crate) queued: bool,
}

impl<'a> Admitted<'a> {
    pub(super) fn now(permit: Option<Permit<'a>>) -> Self {
        Admitted {
            permit,
            queued: false,
        }
    }
}

impl Scope {
    /// Waits for a concurrency permit in the bounded queue. A full queue, or
    /// a queue that cannot drain within what is left of `deadline`, sheds at
    /// once with the drain estimate, as does one that would wait longer
    /// than `inline`; a permit that does not come by `deadline` times out.
    /// `now` and `at` are the caller's one reading of the clock;
    /// [`Admitted::queued`] says whether it went stale here.
    pub(crate) async fn admit(
        &self,
        (now, at): (Micros, Instant),
        inline: Duration,
        deadline: &Deadline,
        priority: Priority,
    ) -> Result<Admitted<'_>, Outcome> {
        let Some(admission) = self.admission() else {
            return Ok(Admitted::now(None));
        };
        if let Some(permit) = admission.try_admit() {
            return Ok(Admitted::now(Some(permit)));
        }
        let estimate = |ahead| self.drain_estimate(admission, ahead, now);
        match admission
            .admit_as(priority, deadline, (at, inline), estimate)
            .await
        {
            Ok(permit) => Ok(Admitted {
                permit: Some(permit),
                queued: true,
            }),
            Err((Refused::Shed { running }, drain)) => Err(Outcome::rate_limited(
                &self.name,
                Reason::Shed,
                drain,
                Some(running),
            )),
            Err((Refused::Later, wait)) => {
                let window = self.state().limit.enforced().map(|rate| rate.to_string());
                Err(
                    Outcome::rate_limited(&self.name, Reason::Throttled, wait, None)
                        .in_window(window),
                )
            }
            Err((Refused::TimedOut, _)) => Err(Outcome::timed_out(deadline.len(), false)),
        }
    }

    /// [`Scope::admit`] when it needs no wait: `Some(None)` when the scope
    /// caps nothing, `Some(permit)` when one is free and nobody waits,
    /// `None` when the call would have to queue.
    pub(crate) fn admit_at_once(&self) -> Option<Option<Permit<'_>>> {
        match self.admission() {
            None => Some(None),
            Some(admission) => admission.try_admit().map(Some),
        }
    }

    /// True when the scope caps concurrency and every permit is out: a
    /// new call would queue.
    pub(crate) fn permits_exhausted(&self) -> bool {
        self.admission()
            .is_some_and(|admission| admission.running() >= admission.cap() as usize)
    }

    /// Shadow mode's admission (issue 20): what [`Scope::admit`] would do,
    /// decided at once. A permit when one is free; else the call counts as
    /// queued while it runs without one, and the decision is a wait (the
    /// queue's drain estimate) or a shed — the queue is full, or cannot
    /// drain within the deadline.
    pub(crate) fn admit_now(
        &self,
        now: Micros,
        at: Instant,
        deadline: &Deadline,
    ) -> AdmittedNow<'_> {
        let Some(admission) = self.admission() else {
            return AdmittedNow::Permit { permit: None };
        };
        let estimate = |ahead| self.drain_estimate(admission, ahead, now);
        match admission.admit_now(deadline, at, estimate) {
            Ok(Ok(permit)) => AdmittedNow::Permit {
                permit: Some(permit),
            },
            Ok(Err((queued, wait))) => AdmittedNow::Wait {
                _queued: queued,
                wait,
            },
            Err(wait) => AdmittedNow::Shed { wait },
        }
    }

    /// When a start would be free for a call with `ahead` calls in line
    /// before it: the rate's next starts and the permits, together.
    pub(super) fn drain_estimate(
        &self,
        admission: &Admission,
        ahead: usize,
        now: Micros,
    ) -> Duration {
        let calls = ahead.saturating_add(1);
        let slots: Vec<Duration> = {
            let state = self.state();
            let interval = state
                .limit
                .enforced()
                .map_or(0, |rate| micros(rate.interval()));
            if state.limit.shared {
                // The shared budget keeps the windows; locally, only the spacing.
                (0..calls)
                    .map(|i| {
                        let i = u64::try_from(i).unwrap_or(u64::MAX);
                        Duration::from_micros(interval.saturating_mul(i))
                    })
                    .collect()
            } else {
                state
                    .cell
                    .next_starts(now, calls, interval)
                    .into_iter()
                    .map(|start| Duration::from_micros(start.saturating_sub(now)))
                    .collect()
            }
        };
        drain_estimate(&slots, admission.cap(), admission.running(), self.latency())
    }
}
