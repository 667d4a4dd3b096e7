//! A waiting call asking for an earlier start than the one it holds
//! (issue 50: a true-up below the estimate freed room in front of it).

use sluice::shared::{Decision, Grant, Hold, ReserveRequest};
use tokio::time::Instant;

use crate::credential::Mode;
use crate::decision::denied;
use crate::keys::part;
use crate::windows::{Asked, Spends};

use super::handle::RedisBudget;

impl RedisBudget {
    /// `request` from a caller holding `held`. A spend of several windows
    /// in shared mode is placed by Redis with `held`'s start left out of
    /// every window (and kept: the caller gives back the start it does not
    /// use), so that its own start is not what keeps it from moving.
    /// Anything else is denied: in fallback, while recovering from it, or
    /// with a hold in force the caller keeps what it holds. Nothing is
    /// leased and no denial is mirrored: it is an offer, not a need.
    pub(super) async fn move_earlier(&self, request: ReserveRequest<'_>, held: &Grant) -> Decision {
        let keep = |request: &ReserveRequest<'_>| denied(request, 0, request.max_wait, Hold::Rate);
        let Some(moving) = Spends::member(held) else {
            return keep(&request);
        };
        if request.windows.is_empty() || request.scopes.is_empty() {
            return keep(&request);
        }
        let cred = self.inner.credentials.get(request.credential);
        let parts: Vec<String> = request.scopes.iter().map(|s| part(s)).collect();
        let beat = {
            let now = Instant::now();
            let mut state = cred.state.lock();
            state.holds.prune(now);
            if state.mode.0 != Mode::Shared
                || state.fallback.spell.active()
                || state.holds.quota(&parts, now).is_some()
                || state.holds.blocked(&parts, now).is_some()
            {
                return keep(&request);
            }
            state.beat.name(self.inner.leases.process())
        };
        let asked = self
            .inner
            .spends
            .reserve(
                &self.inner.runner,
                (&request, Some(moving)),
                (request.not_before, request.max_wait),
                None,
                (&beat, &cred.clock),
            )
            .await;
        let decision = match asked {
            Asked::Decided(decision, told) => {
                cred.state.lock().told(&told);
                decision
            }
            Asked::Leased(decision) => decision,
            Asked::Again | Asked::Fallback(_) => return keep(&request),
        };
        // As any shared start: the fallback counts it if Redis goes.
        cred.state
            .lock()
            .count_spend(request.windows, &decision, (false, None), Instant::now());
        decision
    }
}
