//! How a call enters: its route, its turn's answer or flight, and the box
//! its steps run in.

use tokio::time::Instant;
use tracing::Instrument;

use super::attempts::execute;
use super::finish::finish;
use crate::call::{Call, Completion};
use crate::coalesce::FlightRef;
use crate::deadline::Deadline;
use crate::engine::{Engine, Routed, TurnState};
use crate::executor::{Executor, Payload};
use crate::limiter::Micros;
use crate::outcome::Outcome;
use crate::pipeline::job::{Job, Keep};
use crate::pipeline::price;
use crate::scope::ScopeRef;

/// A call that must await something: its job and the call's reading of
/// the clock.
pub(super) struct Begun<'a, P> {
    job: Job<'a, P>,
    started: Instant,
    now: Micros,
}

/// The call's route, deadline and read key (for a read), at its one
/// reading of the clock; its completion when that is all it needs.
pub(super) fn begin<'a, E: Executor>(
    engine: &'a Engine<E>,
    turn: &TurnState,
    call: &'a Call<E::Payload>,
    keep: Keep,
) -> Result<(Begun<'a, E::Payload>, Option<String>), Completion> {
    // The call's one reading of the clock: every step until the send reads
    // it from here, and reads again only after an await that waited.
    let started = engine.clock().0;
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
pub(super) async fn read<E: Executor>(
    engine: &Engine<E>,
    turn: &TurnState,
    begun: Begun<'_, E::Payload>,
    key: String,
) -> Completion {
    let job = &begun.job;
    let (started, now) = (begun.started, begun.now);
    let work = std::pin::pin!(async {
        let run = move |(at, now)| async move {
            let (completion, scope) = execute(engine, turn, job, true, (at, now)).await;
            (completion, Some(scope))
        };
        let key = (job.name.clone(), key);
        let flight = std::pin::pin!(
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

/// Steps 2 to 9 for a call that is not a read: nothing joins it, so it
/// may keep its permit while its body streams.
pub(super) async fn send<E: Executor>(
    engine: &Engine<E>,
    turn: &TurnState,
    begun: Begun<'_, E::Payload>,
) -> Completion {
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

/// The bytes of the box `call`'s steps would run in, without running
/// them; `None` when [`begin`] completes the call.
pub(crate) fn steps_size<E: Executor>(
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
pub(super) fn span<P>(job: &Job<'_, P>) -> tracing::Span {
    tracing::debug_span!("call", tool = %job.call.tool, credential = %job.credential.name)
}
