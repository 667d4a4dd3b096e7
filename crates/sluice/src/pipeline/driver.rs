//! Steps 1 to 9 of DESIGN.md for one call, in order; each step's rules live in the file it calls.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use futures_util::future::Either;
use tokio::time::Instant;
use tracing::Instrument;

use super::job::{Job, Keep};
use super::reserve::{self, AtOnce};
use super::shadow::Recorder;
use super::{classify, holds, learn, price};
use crate::call::{Call, Completion};
use crate::coalesce::FlightRef;
use crate::config::Priority;
use crate::deadline::Deadline;
use crate::engine::{Credential, Engine, Routed, TurnState};
use crate::executor::{Executor, Payload, Request, Streaming};
use crate::limiter::{Micros, micros};
use crate::observe::{Event, WaitKind};
use crate::outcome::{Outcome, Reason};
use crate::scope::{AdmittedNow, Permit, Scope, ScopeRef};

/// Runs one call of `turn` to its outcome: never fails, never outlives the deadline.
///
/// What needs no await (a call refused before it starts, a read its turn
/// has answered) completes here; the rest runs in a box of its own. Every
/// caller moves the future it awaits, a copy of every byte: the steps'
/// future is a kilobyte or more (with the executor's own inside it), this
/// one holds the call and a pointer.
///
/// Not an `async fn`, which would keep a second copy of the call.
#[allow(clippy::manual_async_fn)] // its doc says why
pub(crate) fn complete<'c, E: Executor>(
    engine: &'c Engine<E>,
    turn: &'c TurnState,
    call: Call<E::Payload>,
    keep: Keep,
) -> impl Future<Output = Completion> + use<'c, E> {
    async move {
        // Each box is allocated before its future is made, so the future
        // is made in place: `Box::pin` of a future copies it from the
        // stack, every byte. A read's box holds its flight; any other
        // call's holds only its steps, which keeps it in the allocator's
        // small sizes. Made in a block, so that nothing it binds is kept
        // across the await.
        let steps = {
            let (begun, key) = match begin(engine, turn, &call, keep) {
                Ok(begun) => begun,
                Err(completion) => return completion,
            };
            match key {
                Some(key) => {
                    let slot = Box::new_uninit();
                    Either::Left(Box::into_pin(Box::write(
                        slot,
                        read(engine, turn, begun, key),
                    )))
                }
                None => {
                    let slot = Box::new_uninit();
                    Either::Right(Box::into_pin(Box::write(slot, send(engine, turn, begun))))
                }
            }
        };
        steps.await
    }
}

/// A call that must await something: its job and the call's reading of
/// the clock.
struct Begun<'a, P> {
    job: Job<'a, P>,
    started: Instant,
    now: Micros,
}

/// The call's route, deadline and read key (for a read), at its one
/// reading of the clock; its completion when that is all it needs.
fn begin<'a, E: Executor>(
    engine: &'a Engine<E>,
    turn: &TurnState,
    call: &'a Call<E::Payload>,
    keep: Keep,
) -> Result<(Begun<'a, E::Payload>, Option<String>), Completion> {
    // The call's one reading of the clock: every step until the send reads
    // it from here, and reads again only after an await that waited.
    let started = crate::clock::now();
    let Routed {
        name,
        route,
        credential,
        spend,
    } = match engine.route(call) {
        Ok(found) => found,
        Err(outcome) => return Err(finish(engine, call, None, None, outcome.into(), started)),
    };
    // Step 9 for a call completed here.
    let done = |completion: Completion, scope: Option<ScopeRef>| {
        Err(finish(
            engine,
            call,
            Some(credential),
            scope,
            completion,
            started,
        ))
    };
    let len = call
        .deadline
        .or(route.deadline)
        .unwrap_or(engine.defaults.deadline);
    let deadline = match Deadline::new(started, len) {
        Ok(deadline) => deadline,
        Err(error) => {
            let outcome = Outcome::error(None, format!("deadline: {error}"));
            return done(outcome.into(), None);
        }
    };
    // The call's reading in engine microseconds: what every step compares.
    let now = engine.micros_at(started);
    if deadline.len().is_zero() {
        // Nothing can be sent; a cost that cannot be priced is still the
        // error it is for any call.
        let outcome = price::ask(spend, call)
            .err()
            .unwrap_or_else(|| Outcome::timed_out(deadline.len(), false));
        return done(outcome.into(), None);
    }
    // Step 1: coalesce reads.
    let key = if route.read {
        call.payload.coalesce_key()
    } else {
        None
    };
    // Answered by the turn already: no pricing, no flight to join, no
    // timer, no span. A call that brings its own spend is priced first, as
    // the flight would (its cost may not be the tool's); identical
    // arguments of a tool price alike.
    if let Some(key) = &key
        && call.spend.is_none()
        && let Some((completion, scope)) = turn.flights.answered(FlightRef(&call.tool, key), now)
    {
        return done(completion, scope);
    }
    let ask = match price::ask(spend, call) {
        Ok(ask) => ask,
        Err(outcome) => return done(outcome.into(), None),
    };
    let job = Job {
        call,
        name,
        route,
        credential,
        deadline,
        ends: now.saturating_add(crate::limiter::micros(deadline.len())),
        spend,
        ask,
        keep,
    };
    Ok((Begun { job, started, now }, key))
}

/// Steps 1 to 9 for a read [`begin`] did not complete: it leads its
/// flight, or joins the one under way.
///
/// This and [`send`] are not `async fn`s, which would keep a copy of the
/// call's job beside the one the future holds.
#[allow(clippy::manual_async_fn)] // its doc says why
fn read<'c, E: Executor>(
    engine: &'c Engine<E>,
    turn: &'c TurnState,
    begun: Begun<'c, E::Payload>,
    key: String,
) -> impl Future<Output = Completion> {
    async move {
        let job = &begun.job;
        let (started, now) = (begun.started, begun.now);
        let work = std::pin::pin!(async {
            let run = move |(at, now)| async move {
                let (completion, scope) = execute(engine, turn, job, true, (at, now)).await;
                (completion, Some(scope))
            };
            let key = (job.name.clone(), key);
            let flight =
                std::pin::pin!(
                    turn.flights
                        .run(key, (started, now), || engine.clock(), run)
                );
            // A joined call keeps its own deadline.
            match job.deadline.bound(flight).await {
                Some(answer) => answer,
                None => (Outcome::timed_out(job.deadline.len(), true).into(), None),
            }
        });
        // The credential's own scope comes back with the answer: the
        // outcome is counted on it without a second look-up.
        let (completion, primary) = work.instrument(span(job)).await;
        finish(
            engine,
            job.call,
            Some(job.credential),
            primary,
            completion,
            started,
        )
    }
}

/// Steps 2 to 9 for a call that is not a read: nothing joins it, so it
/// may keep its permit while its body streams.
#[allow(clippy::manual_async_fn)] // its doc says why
fn send<'c, E: Executor>(
    engine: &'c Engine<E>,
    turn: &'c TurnState,
    begun: Begun<'c, E::Payload>,
) -> impl Future<Output = Completion> {
    async move {
        let job = &begun.job;
        // Pinned where it is made: moved into the span's wrapper, the steps'
        // future was copied whole, a few kilobytes for the sidecar's.
        let steps = std::pin::pin!(execute(
            engine,
            turn,
            job,
            false,
            (begun.started, begun.now)
        ));
        let (completion, primary) = steps.instrument(span(job)).await;
        finish(
            engine,
            job.call,
            Some(job.credential),
            Some(primary),
            completion,
            begun.started,
        )
    }
}

/// The bytes of the box `call`'s steps would run in, without running
/// them; `None` when [`begin`] completes the call.
#[cfg(test)]
pub(super) fn steps_size<E: Executor>(
    engine: &Engine<E>,
    turn: &TurnState,
    call: &Call<E::Payload>,
) -> Option<usize> {
    let (begun, key) = begin(engine, turn, call, Keep::Outcome).ok()?;
    Some(match key {
        Some(key) => std::mem::size_of_val(&read(engine, turn, begun, key)),
        None => std::mem::size_of_val(&send(engine, turn, begun)),
    })
}

/// The span a call's steps run in.
fn span<P>(job: &Job<'_, P>) -> tracing::Span {
    tracing::debug_span!("call", tool = %job.call.tool, credential = %job.credential.name)
}

/// Steps 2 to 8 for a call that is not answered by its turn, from `at`
/// (the call's reading of the clock), with the credential's own scope it
/// spent from.
///
/// Not an `async fn`, which would keep a copy of its arguments beside the
/// ones its future holds.
#[allow(clippy::manual_async_fn)] // its doc says why
fn execute<'e, E: Executor>(
    engine: &'e Engine<E>,
    turn: &'e TurnState,
    job: &'e Job<'_, E::Payload>,
    shared: bool,
    (at, now): (Instant, Micros),
) -> impl Future<Output = (Completion, ScopeRef)> {
    async move {
        let primary = engine.primary(job.credential, now);
        let completion = attempts(engine, turn, job, shared, &primary, (at, now)).await;
        (completion, primary)
    }
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
                Some(Ok(response)) => {
                    observe_request(engine, job, Some(response.status().as_u16()), latency);
                    let learned =
                        learn::response(engine, job, primary, &response, sent, received, latency);
                    learn::settle(job, primary, &spent, &response);
                    // An answer only this call's caller reads, who takes the
                    // outcome alone, need not be kept; one whose body still
                    // streams is kept with what it holds.
                    let kept = shared
                        || job.keep == Keep::Response
                        || response.extensions().get::<Streaming>().is_some();
                    let blame = || learned.blamed(engine, job, primary, received);
                    match classify::response(response, &learned.signal, blame, kept) {
                        Ok(completion) => {
                            if !shared {
                                let group = group_scope
                                    .as_ref()
                                    .map(|scope| (scope, group_permit.take()));
                                hold_while_streaming(
                                    &completion,
                                    primary,
                                    admitted.take_permit(),
                                    group,
                                );
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
            match Box::pin(primary.admit(now, at, &job.deadline, job.ask.priority)).await {
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

/// Steps 3 and 4, enforced: a concurrency permit from the tool's group
/// (its own queue, so an exhausted group holds nothing of the credential's
/// while it waits), then the credential's. A call that finds every permit
/// of the credential out takes the slot of one waiting call it outranks,
/// which gives its permit back and queues again behind it. `clock` is the
/// call's reading, read again after a wait in a queue.
///
/// Boxed: only a call that queues pays for the queue's state, and the
/// fast path's future stays small (`future_size.rs`).
fn admit<'s, E: Executor>(
    engine: &Engine<E>,
    job: &Job<'_, E::Payload>,
    primary: &'s Scope,
    group: Option<&'s Scope>,
    clock: &mut (Instant, Micros),
) -> Pin<Box<impl Future<Output = Admitted<'s>>>> {
    Box::pin(queue(engine, job, primary, group, clock))
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
                .admit(clock.1, clock.0, &job.deadline, priority)
                .await?;
            if admitted.queued {
                *clock = engine.clock();
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
        .admit(clock.1, clock.0, &job.deadline, priority)
        .await?;
    if admitted.queued {
        *clock = engine.clock();
    }
    Ok((
        group_permit,
        AdmittedNow::Permit {
            permit: admitted.permit,
        },
    ))
}

/// A response whose body is still arriving ([`Streaming`]) keeps the
/// call's permit and its request in flight until the body's reader is done.
fn hold_while_streaming(
    completion: &Completion,
    primary: &ScopeRef,
    permit: Option<Permit<'_>>,
    group: Option<(&ScopeRef, Option<Permit<'_>>)>,
) {
    if let Some(marker) = completion
        .response
        .as_ref()
        .and_then(|response| response.extensions().get::<Streaming>())
    {
        let held = Scope::hold(primary, permit);
        // The group's permit and in-flight count are held as long.
        let held = match group {
            Some((scope, permit)) => held.with(Scope::hold(scope, permit)),
            None => held,
        };
        marker.park(held);
    }
}

/// Step 9: the outcome is counted on the scope it names, else on `scope`
/// (the credential's own, when the call holds it), and reported. A call
/// that found no credential is counted on no scope.
fn finish<E: Executor>(
    engine: &Engine<E>,
    call: &Call<E::Payload>,
    credential: Option<&Credential>,
    scope: Option<ScopeRef>,
    completion: Completion,
    started: Instant,
) -> Completion {
    if let Some(credential) = credential
        && let Some(scope) = engine.decided_on(credential, &completion.outcome, scope)
    {
        scope.record_outcome(&completion.outcome);
    }
    tracing::debug!(tool = %call.tool, status = completion.outcome.status(), coalesced = completion.coalesced, "outcome");
    // The clock is read for the call's time only when someone observes it.
    if engine.observed() {
        engine.observe(Event::Outcome {
            credential: credential.map_or("", |credential| &credential.name),
            tool: &call.tool,
            outcome: &completion.outcome,
            coalesced: completion.coalesced,
            elapsed: crate::clock::now().saturating_duration_since(started),
        });
    }
    completion
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
