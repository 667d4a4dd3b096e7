//! Progress while a call waits: `notifications/progress` to a client that sent a `progressToken`, so it does not time out a call sluice holds back.
//!
//! The engine reports every inline wait for a start slot or a backoff to
//! its observer, from inside the waiting call's task. Each gated call with
//! a progress token runs in a [`Watch`] scope (a task-local), so the
//! observer knows whose wait it is and tells that client: once when a wait
//! of more than [`MIN_WAIT`] begins, then every [`EVERY`] until it ends.
//!
//! A wait in the credential's admission queue (for a concurrency permit)
//! is not such an event: the watch itself notices a call that, [`MIN_WAIT`]
//! after it entered the gate, is neither sent nor in a reported wait, and
//! tells the client every [`EVERY`] while that lasts and calls are queued
//! on its credential or its tool's group, with the longer of the two
//! queues' drain estimates from the gate's status.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::json;
use serde_json::value::RawValue;
use sluice::scope::ScopeStatus;
use sluice::{Event, Executor, Gate, Observer, WaitKind};

use crate::jsonrpc;
use crate::outbox::Outbox;

/// Waits shorter than this are not worth a notification ("about a second").
pub(crate) const MIN_WAIT: Duration = Duration::from_secs(1);
/// How often a long wait is reported again.
pub(crate) const EVERY: Duration = Duration::from_secs(1);

tokio::task_local! {
    static WATCH: Arc<Watch>;
}

/// One call's progress channel to its client.
pub(crate) struct Watch {
    /// The client's `progressToken`, JSON as written.
    token: String,
    to_agent: Outbox,
    /// The last `progress` value sent (it must increase), and whether the
    /// call still runs: nothing is sent after its response.
    state: Mutex<(u64, bool)>,
    /// Where the call is: set by the observer and the executor.
    phase: Mutex<Phase>,
    /// The gate's status, the credential and the group (if the tool has
    /// one) whose admission queues the call may wait in.
    queue: (GateStatus, String, Option<String>),
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch")
            .field("token", &self.token)
            .field("phase", &self.phase)
            .finish_non_exhaustive()
    }
}

/// A gate's scopes as they stand (whatever its executor).
type GateStatus = Box<dyn Fn() -> Vec<ScopeStatus> + Send + Sync>;

/// How far a watched call has come.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// In the gate, before any reported wait: queued, if it takes long.
    Entered,
    /// The engine reported a wait (it has its own reminders), or the call
    /// was sent: no more queue reminders.
    Past,
}

/// Marks the current task's watched call as past the queue (a wait the
/// engine reports, or the call sent).
pub(crate) fn past_queue() {
    let _ = WATCH.try_with(|watch| *watch.phase.lock() = Phase::Past);
}

/// The `progressToken` of a request's `params._meta`, if it has one.
pub(crate) fn request_token(params: &RawValue) -> Option<&RawValue> {
    #[derive(serde::Deserialize)]
    struct Params<'a> {
        #[serde(borrow, rename = "_meta")]
        meta: Option<Meta<'a>>,
    }
    #[derive(serde::Deserialize)]
    struct Meta<'a> {
        #[serde(borrow, rename = "progressToken")]
        token: Option<&'a RawValue>,
    }
    let params: Params<'_> = serde_json::from_str(params.get()).ok()?;
    params.meta?.token
}

impl Watch {
    /// A watch for the call whose `params` are these, if it asked for
    /// progress; the call spends `credential` (and its `group`) on `gate`,
    /// whose queues it may wait in.
    pub(crate) fn of<E: Executor + 'static>(
        params: &RawValue,
        to_agent: &Outbox,
        gate: &Gate<E>,
        credential: &str,
        group: Option<&str>,
    ) -> Option<Arc<Watch>> {
        let token = request_token(params)?.get().to_owned();
        Some(Arc::new(Watch {
            token,
            to_agent: to_agent.clone(),
            state: Mutex::new((0, true)),
            phase: Mutex::new(Phase::Entered),
            queue: (
                Box::new({
                    let gate = gate.clone();
                    move || gate.status()
                }),
                credential.to_owned(),
                group.map(str::to_owned),
            ),
        }))
    }

    /// Runs `work` with this watch as its task's.
    pub(crate) async fn run<F: Future>(watch: Option<Arc<Watch>>, work: F) -> F::Output {
        match watch {
            None => work.await,
            Some(watch) => {
                let reminders = tokio::spawn(watch.clone().queue_reminders());
                let output = WATCH.scope(watch.clone(), work).await;
                watch.close();
                reminders.abort();
                output
            }
        }
    }

    /// Tells the client, every [`EVERY`] from [`MIN_WAIT`] on, that the call
    /// still waits in the queue, until it gets past it or ends.
    async fn queue_reminders(self: Arc<Self>) {
        tokio::time::sleep(MIN_WAIT).await;
        loop {
            if *self.phase.lock() != Phase::Entered {
                return;
            }
            let (status, credential, group) = &self.queue;
            // The group's queue comes first, then the credential's: the
            // longer of the two is what is left.
            let estimate = status()
                .iter()
                .filter(|s| {
                    s.credential == *credential
                        && (s.scope == sluice::signal::DEFAULT_SCOPE
                            || group.as_deref() == Some(s.scope.as_str()))
                })
                .filter_map(status_wait)
                .max();
            // Nothing queued on the credential or the group: the call is not
            // in a queue (it may be joined to an identical read in flight); say nothing.
            if let Some(wait) = estimate {
                let ms = wait.as_millis();
                if !self.send(format!(
                    "waiting in sluice's queue for a free slot, about {ms} ms"
                )) {
                    return;
                }
            }
            tokio::time::sleep(EVERY).await;
        }
    }

    /// The call is done: no more notifications.
    fn close(&self) {
        self.state.lock().1 = false;
    }

    /// Sends one notification of a wait with `left` to go, unless the
    /// call is done; false if it is.
    fn notify(&self, left: Duration) -> bool {
        let ms = left.as_millis();
        self.send(format!("waiting for a rate-limit slot, about {ms} ms"))
    }

    /// Sends one notification unless the call is done; false if it is.
    fn send(&self, message: String) -> bool {
        let mut state = self.state.lock();
        if !state.1 {
            return false;
        }
        state.0 += 1;
        let params = json!({
            "progress": state.0,
            "message": message,
        });
        // The token is spliced in as the client wrote it (a string or a number).
        let mut params = params.to_string();
        params.insert_str(1, &format!(r#""progressToken":{},"#, self.token));
        // Sent under the lock, so no notification can follow the response.
        self.to_agent
            .send(jsonrpc::notification("notifications/progress", &params));
        true
    }
}

/// The gate's observer: turns a watched call's long waits into notifications.
#[derive(Debug, Default)]
pub(crate) struct ProgressObserver;

impl Observer for ProgressObserver {
    fn observe(&self, event: &Event<'_>) {
        // A queue's wait is reported once it is over: nothing to announce.
        let Event::Wait { wait, kind, .. } = event else {
            return;
        };
        if *kind == WaitKind::Admission {
            return;
        }
        // Past the queue, short wait or not: this wait is the engine's to report.
        past_queue();
        if *wait <= MIN_WAIT {
            return;
        }
        let Ok(watch) = WATCH.try_with(Arc::clone) else {
            return;
        };
        let wait = *wait;
        if !watch.notify(wait) {
            return;
        }
        // Reminders while the wait lasts; the first one is at once above.
        tokio::spawn(async move {
            let started = tokio::time::Instant::now();
            loop {
                tokio::time::sleep(EVERY).await;
                let left = wait.saturating_sub(started.elapsed());
                if left < EVERY || !watch.notify(left) {
                    return;
                }
            }
        });
    }
}

/// About how long the calls queued on a scope need to get a permit:
/// `max_in_flight` of them at a time, one smoothed latency per wave
/// (the engine's drain estimate, less its rate term, which a rate wait
/// reports on its own). `None` when nothing is queued or there is no cap.
/// `queued` counts the call itself.
fn queue_wait(queued: usize, max_in_flight: Option<u32>, latency_ms: f64) -> Option<Duration> {
    let cap = max_in_flight.filter(|cap| *cap > 0)?;
    if queued == 0 || !latency_ms.is_finite() || latency_ms <= 0.0 {
        return None;
    }
    let waves = u32::try_from(queued.div_ceil(cap as usize)).unwrap_or(u32::MAX);
    Some(Duration::from_secs_f64(latency_ms.min(1e9) / 1000.0).saturating_mul(waves))
}

/// [`queue_wait`] of a scope's status.
fn status_wait(status: &ScopeStatus) -> Option<Duration> {
    queue_wait(status.queued, status.max_in_flight, status.latency_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_drains_max_in_flight_calls_per_latency() {
        assert_eq!(queue_wait(0, Some(2), 500.0), None);
        assert_eq!(queue_wait(3, Some(2), 500.0), Some(Duration::from_secs(1)));
        assert_eq!(queue_wait(4, Some(2), 500.0), Some(Duration::from_secs(1)));
        assert_eq!(queue_wait(3, None, 500.0), None);
        assert_eq!(queue_wait(3, Some(2), f64::NAN), None);
    }
}
