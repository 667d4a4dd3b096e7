//! Steps 3 and 4, enforced: a call's concurrency permits, from its tool's
//! group and then its credential, queueing for them when they are out.

use std::future::Future;
use std::pin::Pin;

use tokio::time::Instant;

use crate::config::Priority;
use crate::engine::Engine;
use crate::executor::Executor;
use crate::limiter::Micros;
use crate::observe::{Event, WaitKind};
use crate::outcome::Outcome;
use crate::pipeline::job::Job;
use crate::scope::{AdmittedNow, Permit, Scope};

/// Steps 3 and 4, enforced: a concurrency permit from the tool's group
/// (its own queue, so an exhausted group holds nothing of the credential's
/// while it waits), then the credential's. A call that finds every permit
/// of the credential out takes the slot of one waiting call it outranks,
/// which gives its permit back and queues again behind it. `clock` is the
/// call's reading, read again after a wait in a queue.
///
/// Boxed: only a call that queues pays for the queue's state, and the
/// fast path's future stays small (sluice-bench's `future_size` bench reports it).
pub(super) fn admit<'s, E: Executor>(
    engine: &Engine<E>,
    job: &Job<'_, E::Payload>,
    primary: &'s Scope,
    group: Option<&'s Scope>,
    clock: &mut (Instant, Micros),
) -> Pin<Box<impl Future<Output = Admitted<'s>>>> {
    Box::pin(queue(engine, job, primary, group, clock))
}

/// A call that waited in `scope`'s queue reads the clock again, and the
/// wait is reported (a trace tells why a call was slow).
fn queued<E: Executor>(
    engine: &Engine<E>,
    job: &Job<'_, E::Payload>,
    scope: &Scope,
    clock: &mut (Instant, Micros),
) {
    let since = clock.0;
    *clock = engine.clock();
    engine.observe(Event::Wait {
        credential: &job.credential.name,
        scope: &scope.name,
        wait: clock.0.saturating_duration_since(since),
        kind: WaitKind::Admission,
    });
}

/// What [`admit`] gives a call: the group's permit, if it has a group,
/// and the credential's; or the outcome that refused it.
type Admitted<'s> = Result<(Option<Permit<'s>>, AdmittedNow<'s>), Outcome>;

/// [`admit`]'s steps.
async fn queue<'s, E: Executor>(
    engine: &Engine<E>,
    job: &Job<'_, E::Payload>,
    primary: &'s Scope,
    group: Option<&'s Scope>,
    clock: &mut (Instant, Micros),
) -> Admitted<'s> {
    let priority = job.ask.priority;
    let group_permit = match group {
        Some(scope) => {
            let admitted = scope
                .admit(
                    (clock.1, clock.0),
                    engine.defaults.inline_wait,
                    &job.deadline,
                    priority,
                )
                .await?;
            if admitted.queued {
                queued(engine, job, scope, clock);
            }
            admitted.permit
        }
        None => None,
    };
    let credential = job.credential;
    if credential.outranks && priority > Priority::Low && primary.permits_exhausted() {
        credential.seats.outrank_one(priority);
    }
    let admitted = primary
        .admit(
            (clock.1, clock.0),
            engine.defaults.inline_wait,
            &job.deadline,
            priority,
        )
        .await?;
    if admitted.queued {
        queued(engine, job, primary, clock);
    }
    Ok((
        group_permit,
        AdmittedNow::Permit {
            permit: admitted.permit,
        },
    ))
}
