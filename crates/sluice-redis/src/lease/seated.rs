//! This process's callers holding a slot of one request window until its
//! time, seated by priority (issue 14): a caller of higher priority that
//! gets a later slot of the same window takes the earliest of theirs, and
//! they move one slot later each ([`sluice::priority_seats`]). Nothing goes back to
//! Redis for it: the slots change hands, each still starting exactly at the
//! time the shared log charged it at.

use std::sync::Arc;
use std::time::Duration;

use sluice::Priority;
use sluice::priority_seats::{Seated, Seats, Stood};
use tokio::time::Instant;

use super::{PoolKey, hold_until};
use crate::credential::Cred;
use crate::instant::beyond;
use crate::store::SlotToken;
use crate::worker::Jobs;

/// A credential's callers holding slots until their time.
pub(crate) type Waiting = Seats<Instant, Slot>;

/// A slot a caller holds until its time.
pub(crate) struct Slot {
    pub(crate) token: SlotToken,
    /// When it was obtained: a block announced after that voids it.
    pub(crate) obtained: Instant,
    key: PoolKey,
    jobs: Jobs,
    cred: Arc<Cred>,
}

impl Slot {
    pub(crate) fn new(
        token: SlotToken,
        obtained: Instant,
        key: &PoolKey,
        jobs: &Jobs,
        cred: &Arc<Cred>,
    ) -> Self {
        Slot {
            token,
            obtained,
            key: key.clone(),
            jobs: jobs.clone(),
            cred: cred.clone(),
        }
    }
}

impl Seated for Slot {
    /// Slots of the same scope's same limit are one spend.
    fn same_spend(&self, other: &Slot) -> bool {
        self.key == other.key
    }

    fn give_back(self) {
        // Room comes back: what Redis said is free no longer holds.
        self.cred.state.lock().busy_until = None;
        self.jobs.refund(&self.cred.name, vec![self.token]);
    }
}

/// How holding a slot ended.
pub(crate) enum SlotEnd {
    /// Its time came with no hold voiding it: start now.
    Ready(SlotToken),
    /// A hold voided it before its time, or its caller woke too late after
    /// it ([`hold_until`]); it went back.
    Voided,
    /// A caller of higher priority moved it to this start, past `latest`;
    /// it went back.
    Moved(Instant),
    /// Its own slot lies past `latest`, and no swap gave it an earlier
    /// one; it went back.
    Late(Instant),
}

/// Holds `slot`, for `at`, until its time: first taking the earliest slot
/// of the callers it outranks, then seated at `priority`, so that callers
/// of higher priority take it first. A start past `latest` (its own, or
/// one it was moved to) is given back, and so is a slot whose caller woke
/// more than `late` after its time ([`hold_until`]).
pub(crate) async fn hold_by_priority(
    cred: &Cred,
    parts: &[String],
    (priority, late): (Priority, Duration),
    (at, slot): (Instant, Slot),
    latest: Instant,
) -> SlotEnd {
    let mut slot = slot;
    let at = if at > Instant::now() {
        cred.waiting.swap(priority, at, &mut slot)
    } else {
        at
    };
    if beyond(at, latest, Instant::now()) {
        slot.give_back();
        return SlotEnd::Late(at);
    }
    if priority == Priority::High {
        // Nobody outranks it: no seat.
        return if hold_until(cred, parts, (at, late), slot.obtained).await {
            SlotEnd::Ready(slot.token)
        } else {
            slot.give_back();
            SlotEnd::Voided
        };
    }
    // Dropped on every return below but `Ready`: what it holds goes back.
    let sitting = cred.waiting.sit(priority, at, slot);
    loop {
        let Some((at, obtained)) = sitting.look(|slot| slot.obtained) else {
            return SlotEnd::Voided;
        };
        if beyond(at, latest, Instant::now()) {
            return SlotEnd::Moved(at);
        }
        let kept = tokio::select! {
            kept = hold_until(cred, parts, (at, late), obtained) => kept,
            () = sitting.changed() => continue,
        };
        if !kept {
            return SlotEnd::Voided;
        }
        match sitting.stand(Instant::now()) {
            Stood::Ready(slot) => return SlotEnd::Ready(slot.token),
            // This backend's seats are never re-planned (the engine's are).
            Stood::Later(_) | Stood::Replan(_) => {}
            Stood::Taken => return SlotEnd::Voided,
        }
    }
}
