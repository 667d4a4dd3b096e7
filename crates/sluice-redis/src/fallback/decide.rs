//! The fallback decision: a call this process cannot ask Redis about is decided in its credential's local cell.

use sluice::shared::{Decision, Hold, ReserveRequest};
use tokio::time::Instant;

use super::cells::{share, share_of};
use crate::credential::{Cred, Mode};
use crate::decision::{self, denied};
use crate::instant::since;

/// Decides locally at this process's share of the rate (`configured` is
/// `fallback_share`, else one over the processes last counted), in
/// `[not_before, latest]` on the call's first scope; `reason` says why
/// Redis was not asked.
pub(crate) fn decide(
    cred: &Cred,
    configured: Option<f64>,
    request: &ReserveRequest<'_>,
    parts: &[String],
    not_before: Instant,
    latest: Instant,
    reason: String,
) -> Decision {
    let now = Instant::now();
    let mut state = cred.state.lock();
    let share = share(configured, state.processes);
    let limit = request.limit.map(|limit| share_of(limit, share));
    tracing::debug!(credential = %cred.name, %reason, "deciding locally");
    if state.mode.0 == Mode::Shared {
        // Leased slots cannot be given back while Redis is away, and the
        // local cell would not count them: drop them (under-spending).
        state.pool.drain_all();
        state.fallback.take_over(&parts[0], limit);
        state.fallback.spends.take_over(share);
    }
    state.mode = (Mode::Fallback, Some(reason));
    match state
        .fallback
        .reserve(&parts[0], limit, now, not_before.max(now), latest)
    {
        Ok((start, id)) => {
            state.fallback.spent_at(share);
            state.decisions.fallback += 1;
            Decision::Granted {
                wait: since(start, now),
                grant: decision::fallback(id),
            }
        }
        Err(at) => {
            state.decisions.denied += 1;
            denied(request, 0, since(at, now), Hold::Rate)
        }
    }
}

/// [`decide`] for a call on several windows, groups or units: every window
/// it touches at this process's share, one start for all or nothing.
pub(crate) fn decide_windows(
    cred: &Cred,
    configured: Option<f64>,
    request: &ReserveRequest<'_>,
    parts: &[String],
    not_before: Instant,
    latest: Instant,
    reason: String,
) -> Decision {
    let now = Instant::now();
    let mut state = cred.state.lock();
    let share = share(configured, state.processes);
    tracing::debug!(credential = %cred.name, %reason, "deciding locally");
    if state.mode.0 == Mode::Shared {
        state.pool.drain_all();
        let limit = request.limit.map(|limit| share_of(limit, share));
        state.fallback.take_over(&parts[0], limit);
        state.fallback.spends.take_over(share);
    }
    state.mode = (Mode::Fallback, Some(reason));
    match state
        .fallback
        .spends
        .reserve(request.windows, share, now, not_before.max(now), latest)
    {
        Ok((start, id)) => {
            state.decisions.fallback += 1;
            Decision::Granted {
                wait: since(start, now),
                grant: decision::fallback_spend(id),
            }
        }
        Err(late) => {
            state.decisions.denied += 1;
            denied(
                request,
                scope_index(request, late.window),
                since(late.at, now),
                Hold::Rate,
            )
        }
    }
}

/// The index among the request's scopes of the scope window `window` belongs to.
pub(crate) fn scope_index(request: &ReserveRequest<'_>, window: usize) -> usize {
    request
        .windows
        .get(window)
        .and_then(|w| request.scopes.iter().position(|s| *s == w.scope))
        .unwrap_or(0)
}
