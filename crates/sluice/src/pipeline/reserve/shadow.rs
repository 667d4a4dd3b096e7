//! Step 5 in shadow mode (issue 20): decided as enforcing would, never
//! waited for.

use std::time::Duration;

use tokio::time::Instant;

use super::guards::{Local, Start, TurnRequest};
use super::slots::{next_slot, reserve_all};
use crate::engine::{Engine, TurnState};
use crate::executor::Executor;
use crate::limiter::{Micros, micros};
use crate::observe::ShadowDecision;
use crate::outcome::Outcome;
use crate::pipeline::job::Job;
use crate::pipeline::shadow::Recorder;
use crate::scope::{Scope, ScopeRef, Slots};

/// Shadow mode's step 5 (issue 20): the same reservation, decided and
/// never waited for. A slot within the inline wait is charged where
/// enforcing would have started the call, so the cells go on modelling
/// enforcement, and its wait is recorded; no slot in time is a deferral,
/// charging nothing; a spent turn budget is a deferral too. The shared
/// budget is not asked: shadow decisions spend none of it.
pub(in crate::pipeline) fn shadow_start<'a, E: Executor>(
    engine: &'a Engine<E>,
    turn: &'a TurnState,
    primary: &Scope,
    scopes: &[ScopeRef],
    job: &Job<'a, E::Payload>,
    recorder: &mut Recorder<'_, '_, E, E::Payload>,
    (at, now): (Instant, Micros),
) -> Result<Start<'a>, Outcome> {
    let request = TurnRequest::spend(turn).unwrap_or_else(|| {
        recorder.refuse(primary, ShadowDecision::Defer, next_slot(engine, primary));
        TurnRequest { turn: None }
    });
    let remaining = job.remaining(now);
    if remaining == 0 {
        return Err(Outcome::timed_out(job.deadline.len(), false));
    }
    let max_wait = micros(engine.defaults.inline_wait).min(remaining - 1);
    let local = match reserve_all(scopes, now, now, max_wait, job) {
        Ok(local) => {
            let start = local.start().unwrap_or(now);
            if start > now {
                // The scope the common start waits for.
                let binding = local
                    .held
                    .iter()
                    .map(|(scope, _)| scope)
                    .find(|scope| scope.blocked_until(now).is_some())
                    .or_else(|| scopes.first());
                if let Some(binding) = binding {
                    recorder.wait(binding, Duration::from_micros(start - now));
                }
            }
            local
        }
        Err((scope, deferred)) => {
            let wait = Duration::from_micros(deferred.until.saturating_sub(now));
            recorder.refuse(scope, ShadowDecision::Defer, wait);
            Local { held: Slots::new() }
        }
    };
    Ok(Start {
        request,
        local,
        shared: None,
        at: (at, now),
    })
}
