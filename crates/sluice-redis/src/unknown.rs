//! Reservations whose answer never came: unknowns, settled by their id before anything is spent for them.
//!
//! A reservation that timed out may have been charged in Redis (its answer
//! lost or late) or not (still queued, or never arrived). It is neither a
//! grant nor a failure until it is settled: [`settle`] voids it by its id
//! (`lua/void.lua` removes what it logged and marks the id, so that a late
//! arrival charges nothing). Settled, its caller asks Redis again under a
//! new id; not settled (Redis does not answer that either), the worker
//! keeps the void and sends it once Redis answers again, and only then
//! does the caller decide locally. Either way the call starts on one
//! decision only, and Redis's log keeps no start that nobody made.

use crate::Error;
use crate::runner::Runner;
use crate::store::Void;
use crate::worker::Jobs;

/// Whether a failed reservation may have run in Redis: the command went
/// out and no answer came back (a timeout, a connection lost under it).
/// An error Redis answered with, or one raised before sending, charged
/// nothing.
pub(crate) fn may_have_run(error: &Error) -> bool {
    matches!(error, Error::Timeout(_) | Error::Connection(_))
}

/// Settles `void` now: true once Redis answered (nothing stays charged
/// for the reservation, and it never will be). Otherwise the worker keeps
/// it, to send once Redis answers again, and this says false.
pub(crate) async fn settle(runner: &Runner, jobs: &Jobs, void: Void) -> bool {
    let done = runner
        .run(|store, mut conn| {
            let void = &void;
            async move { store.void(&mut conn, void).await }
        })
        .await;
    match done {
        Ok(_) => true,
        Err(error) => {
            tracing::debug!(%error, "a reservation that timed out is not settled yet");
            jobs.void(void);
            false
        }
    }
}
