//! Step 9: the outcome counted on its scope and reported.

use tokio::time::Instant;

use crate::call::{Call, Completion};
use crate::engine::{Credential, Engine};
use crate::executor::Executor;
use crate::observe::Event;
use crate::scope::ScopeRef;

/// Step 9: the outcome is counted on the scope it names, else on `scope`
/// (the credential's own, when the call holds it), and reported. A call
/// that found no credential is counted on no scope.
pub(super) fn finish<E: Executor>(
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
            elapsed: engine.clock().0.saturating_duration_since(started),
        });
    }
    completion
}
