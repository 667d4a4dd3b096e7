//! Back from a fallback spell: whether Redis kept its state (asked once),
//! the processes it counts, and the start a recovering call holds in the
//! local cells while it asks.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use super::handle::RedisBudget;
use crate::breaker::Permit;
use crate::credential::{Cred, CredState, Mode};
use crate::fallback::{self, Others};

impl RedisBudget {
    /// Back from a spell of local decisions, asks once Redis may be asked
    /// whether it kept its state: the name this process beat under before
    /// the spell is still in the credential's heartbeat set. If so, and
    /// every other process has reached Redis since the spell began, the
    /// spell ends once the worker has written the local starts back, and
    /// Redis alone decides again: its logs hold the shared starts and the
    /// local ones (`crate::beat`). Until then, or if not, the spell binds;
    /// while others are away their count is asked again. The name is
    /// looked for only once this process's own local starts are written,
    /// so that the others see it away until Redis holds them. The call
    /// that asks waits for the answer (at most the command timeout, and
    /// while Redis does not answer, one call a second).
    pub(super) async fn confirm_spell(&self, cred: &Cred) {
        // Set (under the lock) when a spell begins: until then a call in
        // shared mode pays one load here.
        if !cred.spell.load(Ordering::Relaxed) {
            return;
        }
        let check = {
            let mut state = cred.state.lock();
            if !state.fallback.spell.active() {
                state.beat.settled();
                cred.spell.store(false, Ordering::Relaxed);
                return;
            }
            if state.beat.kept() {
                end_once_written(cred, &mut state);
                return;
            }
            let now = Instant::now();
            if !state.beat.owes(now) {
                return;
            }
            let stale_probe = self.inner.config.timeout * 2;
            match self.inner.runner.permit(now, stale_probe) {
                Permit::Ask | Permit::Probe => {}
                Permit::AwaitProbe(_) | Permit::Refuse => return,
            }
            match state
                .beat
                .ask(self.inner.leases.process(), now, cred.unwritten.none())
            {
                Some(check) => check,
                None => return,
            }
        };
        // A call dropped while it asks leaves the check owed, not out.
        let mut out = CheckOut(Some(cred));
        let answer = self
            .inner
            .runner
            .run(|store, mut conn| {
                let check = &check;
                async move {
                    let found = match &check.old {
                        Some(old) => Some(store.beat_kept(&mut conn, &cred.name, old).await?),
                        None => None,
                    };
                    let quiet = store
                        .quiet_beats(&mut conn, &cred.name, check.quiet)
                        .await?;
                    Ok((found, quiet))
                }
            })
            .await
            .ok();
        out.0 = None;
        let mut state = cred.state.lock();
        if state.beat.answered(answer, Instant::now()) {
            end_once_written(cred, &mut state);
        }
    }
}

/// Redis kept its state through the spell: the spell ends once its log
/// holds this process's local starts too (the worker writes them as soon
/// as Redis answers). Before that, Redis would grant room they already
/// took, so a shared start still fits the local cells, and a later call
/// looks again.
fn end_once_written(cred: &Cred, state: &mut CredState) {
    if cred.unwritten.none() {
        tracing::debug!(credential = %cred.name, "Redis kept its state through the spell and holds its local starts; it decides alone again");
        state.fallback.spell.end();
    }
}

/// A spell's check out on a credential; dropped before its answer (the
/// call was), the check is owed again.
struct CheckOut<'a>(Option<&'a Cred>);

impl Drop for CheckOut<'_> {
    fn drop(&mut self) {
        if let Some(cred) = self.0 {
            cred.state.lock().beat.answered(None, Instant::now());
        }
    }
}

/// What Redis last said of the other processes, for
/// [`fallback::Fallback::hold_recovering`]: the processes it counts now
/// (none known while the credential is still in fallback: the count is
/// from before the outage, and the call about to ask Redis brings the new
/// one), how long a missing one is waited for, and whether one had not
/// reached Redis since this process's spell began (`crate::beat`).
pub(super) fn counted(state: &CredState, heartbeat: Duration) -> Others {
    let processes = match state.mode.0 {
        Mode::Fallback => 0,
        Mode::Shared => state.processes,
    };
    (processes, heartbeat, state.beat.others_away())
}

/// A start held in the fallback's cells (one in each window of the call)
/// while a recovering call asks Redis
/// ([`fallback::Fallback::hold_recovering`]): given back once the answer
/// came, or when the call is dropped before it.
pub(super) struct RecoveryHold<'a> {
    cred: &'a Cred,
    held: Option<fallback::HeldSpend>,
}

impl<'a> RecoveryHold<'a> {
    pub(super) fn new(cred: &'a Cred, held: fallback::HeldSpend) -> Self {
        RecoveryHold {
            cred,
            held: Some(held),
        }
    }

    pub(super) fn none(cred: &'a Cred) -> Self {
        RecoveryHold { cred, held: None }
    }
}

impl Drop for RecoveryHold<'_> {
    fn drop(&mut self) {
        if let Some(held) = self.held.take() {
            self.cred.state.lock().fallback.release(&held);
        }
    }
}
