//! This process's heartbeat on a credential, and what it tells after a
//! spell of local decisions: whether Redis kept its state.
//!
//! A process beats the credential's heartbeat set under a name. When a
//! spell begins (it falls back), it beats under a new name from then on,
//! and once Redis answers again it asks, once, whether the name from
//! before the spell is still in the set (removing it). If it is, this is
//! the Redis that held the process's shared starts before the spell: its
//! logs still hold them, and once the local starts are written back too
//! the spell need not bind. If not, Redis may have lost its logs
//! (restarted empty, or the process was away past its heartbeat), and
//! the spell binds as before: a shared start must also fit the local
//! cells (docs/shared-limiter.md, "Failure modes").
//!
//! Pure state; the check itself is [`crate::Store::beat_kept`].

use std::borrow::Cow;
use std::time::Duration;

use tokio::time::Instant;

/// After a check that failed (Redis still slow or away), the next waits
/// this long: while Redis does not answer, one call a second pays a
/// check's timeout, not every call.
const RETRY: Duration = Duration::from_secs(1);

/// The beat's name and the check it owes.
#[derive(Debug, Default)]
pub(crate) struct Beat {
    /// The current name's number (0: the process id alone).
    epoch: u64,
    /// The number of the name from before the spell, while its check is owed.
    before: Option<u64>,
    /// That check is out.
    asking: bool,
    /// No check before this (one failed).
    retry_at: Option<Instant>,
    /// A check found the name gone: the spell binds until it is over, also
    /// if a later check (of a name beaten after the loss) finds its own.
    lost: bool,
    /// A check found the name and none lost it: the spell ends once Redis
    /// holds this process's local starts too.
    kept: bool,
}

/// The heartbeat name of `process` in `epoch`.
fn name_of(process: &str, epoch: u64) -> Cow<'_, str> {
    if epoch == 0 {
        Cow::Borrowed(process)
    } else {
        Cow::Owned(format!("{process}~{epoch}"))
    }
}

impl Beat {
    /// The name `process` beats under now.
    pub(crate) fn name<'p>(&self, process: &'p str) -> Cow<'p, str> {
        name_of(process, self.epoch)
    }

    /// A spell begins: unless a check is already owed, beat under a new
    /// name from now on and owe a check of the old one.
    pub(crate) fn fall_back(&mut self) {
        self.kept = false;
        if self.before.is_none() {
            self.before = Some(self.epoch);
            self.epoch += 1;
        }
    }

    /// A check is owed at `now`, and none is out.
    pub(crate) fn owes(&self, now: Instant) -> bool {
        self.before.is_some() && !self.asking && self.retry_at.is_none_or(|at| now >= at)
    }

    /// The name to check, if a check is owed and none is out (it is out
    /// from now on).
    pub(crate) fn ask(&mut self, process: &str) -> Option<String> {
        if self.asking {
            return None;
        }
        let before = self.before?;
        self.asking = true;
        Some(name_of(process, before).into_owned())
    }

    /// The check's answer at `now` (`None`: it failed, and is owed again
    /// a moment later). True when Redis kept its state and no earlier
    /// check of this spell found otherwise: the spell may end.
    pub(crate) fn answered(&mut self, kept: Option<bool>, now: Instant) -> bool {
        self.asking = false;
        let Some(kept) = kept else {
            self.retry_at = Some(now + RETRY);
            return false;
        };
        self.retry_at = None;
        self.before = None;
        self.lost |= !kept;
        self.kept = kept && !self.lost;
        self.kept
    }

    /// The last check found Redis kept its state (and none found it lost
    /// since the spell began), and no spell began after it.
    pub(crate) fn kept(&self) -> bool {
        self.kept
    }

    /// No spell binds any more: nothing is owed, and the next spell starts
    /// afresh.
    pub(crate) fn settled(&mut self) {
        self.before = None;
        self.lost = false;
        self.kept = false;
        self.retry_at = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spell_beats_under_a_new_name_and_checks_the_old_one_once() {
        let now = Instant::now();
        let mut beat = Beat::default();
        assert_eq!(beat.name("p"), "p");
        assert_eq!(beat.ask("p"), None, "nothing owed");
        beat.fall_back();
        // A second switch within the spell keeps the name and the check.
        beat.fall_back();
        assert_eq!(beat.name("p"), "p~1");
        assert_eq!(beat.ask("p").as_deref(), Some("p"));
        assert_eq!(beat.ask("p"), None, "one check at a time");
        // It failed: owed again, a second later.
        assert!(!beat.answered(None, now));
        assert!(!beat.owes(now + Duration::from_millis(999)));
        assert!(beat.owes(now + RETRY));
        assert_eq!(beat.ask("p").as_deref(), Some("p"));
        assert!(beat.answered(Some(true), now));
        assert!(beat.kept());
        assert_eq!(beat.ask("p"), None, "answered");
        // Falling back again before the spell ended: a new check decides.
        beat.fall_back();
        assert!(!beat.kept());
        assert!(beat.owes(now));
        assert!(beat.answered(Some(true), now));
        beat.settled();
        assert!(!beat.kept());
        beat.fall_back();
        assert_eq!(beat.name("p"), "p~3");
        assert_eq!(beat.ask("p").as_deref(), Some("p~2"));
    }

    #[test]
    fn a_lost_state_binds_the_spell_to_its_end() {
        let now = Instant::now();
        let mut beat = Beat::default();
        beat.fall_back();
        assert_eq!(beat.ask("p").as_deref(), Some("p"));
        assert!(!beat.answered(Some(false), now));
        // Falling back again within the spell: the name beaten since the
        // loss is on the new Redis, and finding it says nothing of what
        // was lost.
        beat.fall_back();
        assert_eq!(beat.ask("p").as_deref(), Some("p~1"));
        assert!(!beat.answered(Some(true), now));
        // Once no spell binds, the next one may end early again.
        beat.settled();
        beat.fall_back();
        assert_eq!(beat.ask("p").as_deref(), Some("p~2"));
        assert!(beat.answered(Some(true), now));
    }
}
