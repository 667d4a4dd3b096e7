//! Steps 1 to 9 of DESIGN.md for one call, in order; each step's rules live in the file it calls.
//!
//! Here a call enters (its route, its turn's answer or flight, the box its
//! steps run in) and is finished (step 9); `attempts` runs steps 2 to 8.

mod attempts;

use std::future::Future;

use futures_util::future::Either;
use tokio::time::Instant;
use tracing::Instrument;

use self::attempts::execute;
use crate::call::{Call, Completion};
use crate::coalesce::FlightRef;
use crate::deadline::Deadline;
use crate::engine::{Credential, Engine, Routed, TurnState};
use crate::executor::{Executor, Payload};
use crate::limiter::Micros;
use crate::observe::Event;
use crate::outcome::Outcome;
use crate::pipeline::job::{Job, Keep};
use crate::pipeline::price;
use crate::scope::ScopeRef;

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
