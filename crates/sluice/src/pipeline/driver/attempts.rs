//! Steps 2 to 8 of one call, attempt by attempt: admission, reservation,
//! the send, what the answer teaches, and the retry.

use std::time::Duration;

use tokio::time::Instant;

use crate::call::Completion;
use crate::engine::{Engine, TurnState};
use crate::executor::{Executor, Reply, Request};
use crate::limiter::{Micros, micros};
use crate::observe::{Event, WaitKind};
use crate::outcome::{Outcome, Reason};
use crate::pipeline::admit::admit;
use crate::pipeline::job::{Job, Keep};
use crate::pipeline::reserve::{self, AtOnce};
use crate::pipeline::shadow::Recorder;
use crate::pipeline::{classify, holds, learn};
use crate::scope::{AdmittedNow, Permit, Scope, ScopeRef};
use crate::stream::{BodyStream, StreamSlot};

/// Steps 2 to 8 for a call that is not answered by its turn, from `at`
/// (the call's reading of the clock), with the credential's own scope it
/// spent from.
pub(super) async fn execute<E: Executor>(
    engine: &Engine<E>,
    turn: &TurnState,
    job: &Job<'_, E::Payload>,
    shared: bool,
    (at, now): (Instant, Micros),
) -> (Completion, ScopeRef) {
    let primary = engine.primary(job.credential, now);
    let completion = attempts(engine, turn, job, shared, &primary, (at, now)).await;
    (completion, primary)
}

/// [`execute`]'s steps, on the credential's own scope `primary`.
async fn attempts<E: Executor>(
    engine: &Engine<E>,
    turn: &TurnState,
    job: &Job<'_, E::Payload>,
    shared: bool,
    primary: &ScopeRef,
    (at, now): (Instant, Micros),
) -> Completion {
    let (mut at, mut now) = (at, now);
    let credential = job.credential;
    // Shadow mode (issue 20): every step below decides as usual, but its
    // refusals and waits are recorded instead of acted on.
    let shadow = !credential.limits.enforce;
    let mut recorder = Recorder::new(engine, job);

    // Step 2: scope state.
    let group = job.spend.group.as_deref();
    let mut scopes = engine.scopes_of(credential, primary, &job.call.tool, group, now);
    if let Some(outcome) = holds::held(&scopes, job, engine.defaults.inline_wait, now) {
        if !shadow {
            return outcome.into();
        }
        recorder.held(&scopes, &outcome);
    }
    // When step 2 found no quota spent: the first reservation, at that
    // same reading, need not look again (a retry, or a call that queued,
    // looks again).
    let mut checked = Some(now);
    // A cost no window can ever hold is an error, not a deferral no wait
    // could cure.
    if !shadow && let Some(message) = scopes.iter().find_map(|scope| scope.never_fits(&job.ask)) {
        return Outcome::error(None, format!("{message}; nothing was sent")).into();
    }

    // Steps 3 and 4: admission, then a concurrency permit: the group's
    // first (its own queue, so an exhausted group holds nothing of the
    // credential's while it waits), then the credential's.
    let group_scope: Option<ScopeRef> = group
        .and_then(|name| scopes.iter().find(|scope| *scope.name == *name))
        .cloned();
    let (mut group_permit, mut admitted) = if shadow {
        (None, recorder.admit(primary, now, at))
    } else if group_scope.is_none()
        && let Some(permit) = primary.admit_at_once()
    {
        // A free permit and nobody waiting: no queue to wait in, so none
        // of the waiting machinery.
        (None, AdmittedNow::Permit { permit })
    } else {
        let mut clock = (at, now);
        match admit(engine, job, primary, group_scope.as_deref(), &mut clock).await {
            Ok(permits) => {
                (at, now) = clock;
                permits
            }
            Err(outcome) => return outcome.into(),
        }
    };

    let mut attempt: u32 = 0;
    // Whether calls of higher priority took this one's slot: a deferral
    // after that is theirs, reason `priority`.
    let mut outranked = false;
    // Whether such a call took its slot in the last round: it queues again
    // behind it, with its permits given back.
    let mut requeue = false;
    loop {
        if std::mem::take(&mut requeue) {
            drop(admitted.take_permit());
            drop(group_permit.take());
            let mut clock = engine.clock();
            match admit(engine, job, primary, group_scope.as_deref(), &mut clock).await {
                Ok(permits) => (group_permit, admitted) = permits,
                Err(outcome) => return outcome.outranked().into(),
            }
            (at, now) = clock;
        }
        // Steps 5 to 7 in a block of their own: nothing they borrow is held
        // across step 8's waits, which keeps the call's future small.
        let (failed, received) = {
            // Step 5: a start slot, waiting inline if it is short and fits.
            let (sent, spent) = {
                let start = if shadow {
                    reserve::shadow_start(
                        engine,
                        turn,
                        primary,
                        &scopes,
                        job,
                        &mut recorder,
                        (at, now),
                    )
                    .map(Some)
                } else {
                    let fresh = checked.take() == Some(now);
                    match reserve::start_at_once(
                        engine,
                        turn,
                        primary,
                        &scopes,
                        job,
                        (at, now),
                        fresh,
                    ) {
                        Ok(AtOnce::Now(start)) => Ok(Some(start)),
                        // Boxed, as `admit`'s queues: only a call that waits
                        // for its start, or asks a shared budget, holds the
                        // state of doing so.
                        Ok(AtOnce::Later(later)) => {
                            Box::pin(reserve::start(
                                engine,
                                primary,
                                &scopes,
                                job,
                                (at, now),
                                later,
                            ))
                            .await
                        }
                        Err(outcome) => Err(outcome),
                    }
                };
                let start = match start {
                    Ok(Some(start)) => start,
                    Ok(None) => {
                        // A call of higher priority took the slot this one
                        // slept for. It queues again at the top of the loop,
                        // where nothing of this round is held across the wait.
                        outranked = true;
                        requeue = true;
                        continue;
                    }
                    Err(outcome) if outranked => return outcome.outranked().into(),
                    Err(outcome) => return outcome.into(),
                };
                // The start is spent here, in its own block, so that the
                // future holds it across no await.
                (start.at().1, start.commit())
            };

            // Step 6: send with the remaining deadline, at the time the start
            // holds (the call's reading, unless the reservation waited).
            recorder.sent();
            for scope in &scopes {
                scope.record_start(sent);
            }
            if attempt == 0 {
                credential.retry.record_request(sent);
            }
            let request = Request {
                tool: job.name.clone(),
                credential: credential.name.clone(),
                payload: job.call.payload.clone(),
                attempt,
                timeout: Duration::from_micros(job.remaining(sent)),
            };
            let result = {
                let _in_flight = primary.start_request();
                let _group_in_flight = group_scope.as_ref().map(|scope| scope.start_request());
                let send = std::pin::pin!(engine.executor.execute(request));
                job.deadline.bound(send).await
            };
            // The second reading a call needs: when its answer came.
            let received = engine.now();
            let latency = Duration::from_micros(received.saturating_sub(sent));

            // Step 7: learn from whatever came back.
            let failed = match result {
                None => {
                    observe_request(engine, job, None, latency);
                    return Outcome::timed_out(job.deadline.len(), true).into();
                }
                Some(Err(error)) => {
                    observe_request(engine, job, None, latency);
                    classify::transport(error, primary)
                }
                Some(Ok(Reply { response, stream })) => {
                    observe_request(engine, job, Some(response.status().as_u16()), latency);
                    let learned =
                        learn::response(engine, job, primary, &response, sent, received, latency);
                    if let Some(replan) = learn::settle(job, primary, &spent, &response) {
                        // Boxed: only a settle that waiting calls follow
                        // holds its state across the await.
                        Box::pin(replan).await;
                    }
                    // An answer only this call's caller reads, who takes the
                    // outcome alone, need not be kept; one whose body still
                    // streams is kept with what it holds.
                    let kept = shared || job.keep == Keep::Response || stream.is_some();
                    let blame = || learned.blamed(engine, job, primary, received);
                    match classify::response(response, &learned.signal, blame, kept) {
                        Ok(mut completion) => {
                            if let Some(mut stream) = stream {
                                if !shared {
                                    let group = group_scope
                                        .as_ref()
                                        .map(|scope| (scope, group_permit.take()));
                                    hold_while_streaming(
                                        &mut stream,
                                        primary,
                                        admitted.take_permit(),
                                        group,
                                    );
                                }
                                completion.stream = Some(StreamSlot::new(stream));
                            }
                            return completion;
                        }
                        Err(failed) => failed,
                    }
                }
            };
            (failed, received)
        };

        // Step 8: retry, or surface what happened. Shadow mode makes one
        // attempt: a retry is sluice's own pacing, and the server's answer
        // goes back as is (a 429 as the structured outcome). Decided in a
        // block of its own: nothing of the failure is held across the
        // waits below.
        let (concurrency, backoff) = {
            if shadow {
                return classify::give_up(engine, failed, None);
            }
            let may_retry = !failed.final_attempt && failed.kind.retryable(job.route.retry_safe());
            attempt += 1;
            if !may_retry || attempt >= engine.defaults.max_attempts {
                return classify::give_up(engine, failed, None);
            }
            if !credential.retry.try_retry(received) {
                return classify::give_up(engine, failed, Some(Reason::Budget));
            }
            let backoff = if failed.server_wait {
                None
            } else {
                let backoff = engine.backoff(attempt);
                if micros(backoff) >= job.remaining(received) {
                    return classify::give_up(engine, failed, None);
                }
                Some(backoff)
            };
            (failed.concurrency, backoff)
        };
        if let Some(backoff) = backoff {
            observe_backoff(engine, job, primary, attempt, backoff);
            tokio::time::sleep(backoff).await;
        }
        // A retry reads the clock afresh: the answer took time, and so
        // may the backoff.
        (at, now) = engine.clock();
        if concurrency {
            // Fewer at once: the retry waits for a permit under the
            // lowered cap, as a new call would.
            drop(admitted.take_permit());
            // Boxed, as `admit`'s queues: only a retry pays for its wait.
            match Box::pin(primary.admit(
                (now, at),
                engine.defaults.inline_wait,
                &job.deadline,
                job.ask.priority,
            ))
            .await
            {
                Ok(permit) => {
                    if permit.queued {
                        (at, now) = engine.clock();
                    }
                    admitted = AdmittedNow::Permit {
                        permit: permit.permit,
                    };
                }
                Err(outcome) => return outcome.into(),
            }
        }
        engine.observe(Event::Retry {
            credential: &credential.name,
            tool: &job.call.tool,
            attempt,
        });
        // Retries re-enter the bucket: the server's wait is in the cell now.
        scopes = engine.scopes_of(credential, primary, &job.call.tool, group, now);
    }
}

/// A body still arriving ([`BodyStream`]) keeps the call's permit and its
/// request in flight until its reader is done with it.
fn hold_while_streaming(
    stream: &mut BodyStream,
    primary: &ScopeRef,
    permit: Option<Permit<'_>>,
    group: Option<(&ScopeRef, Option<Permit<'_>>)>,
) {
    let held = Scope::hold(primary, permit);
    // The group's permit and in-flight count are held as long.
    let held = match group {
        Some((scope, permit)) => held.with(Scope::hold(scope, permit)),
        None => held,
    };
    stream.hold(held);
}

fn observe_request<E, P>(
    engine: &Engine<E>,
    job: &Job<'_, P>,
    status: Option<u16>,
    latency: Duration,
) {
    engine.observe(Event::Request {
        credential: &job.credential.name,
        tool: &job.call.tool,
        status,
        latency,
    });
}

fn observe_backoff<E, P>(
    engine: &Engine<E>,
    job: &Job<'_, P>,
    primary: &Scope,
    attempt: u32,
    backoff: Duration,
) {
    engine.observe(Event::Wait {
        credential: &job.credential.name,
        scope: &primary.name,
        wait: backoff,
        kind: WaitKind::Backoff,
    });
    tracing::debug!(
        attempt,
        backoff_ms = backoff.as_millis() as u64,
        "backing off before a retry"
    );
}
