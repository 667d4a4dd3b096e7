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
//! Redis keeping its state says nothing of the other processes, though.
//! One that fell back too may still be deciding locally (a failover: the
//! new master answers some processes before others' breakers close), and
//! Redis's logs do not hold its local starts yet: a process that went
//! back to Redis alone would spend that room a second time. So the check
//! also counts the names in the set that have not beaten since this
//! process's spell began ([`crate::Store::quiet_beats`]), and while there
//! are any the spell binds and the count is asked again every
//! [`RECHECK`]. A process that is back writes its local starts before it
//! checks, so its old name leaves the set only once Redis holds them; an
//! idle or gone process's name leaves it within a heartbeat window.
//!
//! Pure state; the checks themselves are [`crate::Store::beat_kept`] and
//! [`crate::Store::quiet_beats`].

use std::borrow::Cow;
use std::time::Duration;

use tokio::time::Instant;

/// After a check that failed (Redis still slow or away), the next waits
/// this long: while Redis does not answer, one call a second pays a
/// check's timeout, not every call.
const RETRY: Duration = Duration::from_secs(1);

/// While other processes have not come back, their count is asked again
/// this often.
const RECHECK: Duration = Duration::from_millis(200);

/// The beat's name and the check it owes.
#[derive(Debug, Default)]
pub(crate) struct Beat {
    /// The current name's number (0: the process id alone).
    epoch: u64,
    /// The number of the name from before the spell, while its check is owed.
    before: Option<u64>,
    /// When the spell began: a name that has not beaten since is away.
    fell: Option<Instant>,
    /// That check is out.
    asking: bool,
    /// No check before this (one failed).
    retry_at: Option<Instant>,
    /// A check found the name gone: the spell binds until it is over, also
    /// if a later check (of a name beaten after the loss) finds its own.
    lost: bool,
    /// A check found the name and none lost it, and no other process was
    /// away: the spell ends once Redis holds this process's local starts
    /// too.
    kept: bool,
    /// The last check counted names that have not beaten since the spell
    /// began: the spell binds, and the count is owed again.
    others_away: bool,
}

/// A check to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Check {
    /// The name from before the spell, to look for (and remove); `None`
    /// once that was answered, when only the others are counted.
    pub(crate) old: Option<String>,
    /// How long a name must not have beaten to be away: since the spell
    /// began.
    pub(crate) quiet: Duration,
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

    /// A spell begins at `now`: unless a check is already owed, beat
    /// under a new name from now on and owe a check of the old one.
    pub(crate) fn fall_back(&mut self, now: Instant) {
        self.kept = false;
        self.fell.get_or_insert(now);
        if self.before.is_none() {
            self.before = Some(self.epoch);
            self.epoch += 1;
        }
    }

    /// A check is owed at `now`, and none is out.
    pub(crate) fn owes(&self, now: Instant) -> bool {
        (self.before.is_some() || self.others_away)
            && !self.asking
            && self.retry_at.is_none_or(|at| now >= at)
    }

    /// The check to send at `now`, if one is owed and none is out (it is
    /// out from now on). The old name is asked for only once this
    /// process's local starts are `written` (until then the others must
    /// see it away); a check without it still counts the others, and
    /// serves as the breaker's probe.
    pub(crate) fn ask(&mut self, process: &str, now: Instant, written: bool) -> Option<Check> {
        if self.asking || (self.before.is_none() && !self.others_away) {
            return None;
        }
        self.asking = true;
        Some(Check {
            old: self
                .before
                .filter(|_| written)
                .map(|before| name_of(process, before).into_owned()),
            quiet: self.fell.map_or(Duration::ZERO, |fell| now - fell),
        })
    }

    /// The check's answer at `now`: whether the old name was found (when
    /// it was asked), and how many names were quiet (`None`: it failed,
    /// and is owed again a moment later). True when Redis kept its state,
    /// no earlier check of this spell found otherwise, and every other
    /// process is back: the spell may end.
    pub(crate) fn answered(&mut self, answer: Option<(Option<bool>, u64)>, now: Instant) -> bool {
        self.asking = false;
        let Some((found, quiet)) = answer else {
            self.retry_at = Some(now + RETRY);
            return false;
        };
        if let Some(found) = found {
            self.before = None;
            self.lost |= !found;
        }
        // A lost state binds the spell to its end whoever is back.
        self.others_away = !self.lost && quiet > 0;
        let owed = self.before.is_some() || self.others_away;
        self.retry_at = owed.then(|| now + RECHECK);
        self.kept = !owed && !self.lost;
        self.kept
    }

    /// The last check found Redis kept its state (and none found it lost
    /// since the spell began), every other process back, and no spell
    /// began after it.
    pub(crate) fn kept(&self) -> bool {
        self.kept
    }

    /// The last check counted processes that have not come back.
    pub(crate) fn others_away(&self) -> bool {
        self.others_away
    }

    /// No spell binds any more: nothing is owed, and the next spell starts
    /// afresh.
    pub(crate) fn settled(&mut self) {
        self.before = None;
        self.fell = None;
        self.lost = false;
        self.kept = false;
        self.others_away = false;
        self.retry_at = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The old name a check asks for, if it asks for one.
    fn old(check: Option<Check>) -> Option<String> {
        check.and_then(|check| check.old)
    }

    #[test]
    fn a_spell_beats_under_a_new_name_and_checks_the_old_one_once() {
        let now = Instant::now();
        let mut beat = Beat::default();
        assert_eq!(beat.name("p"), "p");
        assert_eq!(beat.ask("p", now, true), None, "nothing owed");
        beat.fall_back(now);
        // A second switch within the spell keeps the name and the check.
        beat.fall_back(now);
        assert_eq!(beat.name("p"), "p~1");
        assert_eq!(old(beat.ask("p", now, true)).as_deref(), Some("p"));
        assert_eq!(beat.ask("p", now, true), None, "one check at a time");
        // It failed: owed again, a second later.
        assert!(!beat.answered(None, now));
        assert!(!beat.owes(now + Duration::from_millis(999)));
        assert!(beat.owes(now + RETRY));
        assert_eq!(old(beat.ask("p", now, true)).as_deref(), Some("p"));
        assert!(beat.answered(Some((Some(true), 0)), now));
        assert!(beat.kept());
        assert_eq!(beat.ask("p", now, true), None, "answered");
        // Falling back again before the spell ended: a new check decides.
        beat.fall_back(now);
        assert!(!beat.kept());
        assert!(beat.owes(now));
        assert!(beat.answered(Some((Some(true), 0)), now));
        beat.settled();
        assert!(!beat.kept());
        beat.fall_back(now);
        assert_eq!(beat.name("p"), "p~3");
        assert_eq!(old(beat.ask("p", now, true)).as_deref(), Some("p~2"));
    }

    #[test]
    fn a_lost_state_binds_the_spell_to_its_end() {
        let now = Instant::now();
        let mut beat = Beat::default();
        beat.fall_back(now);
        assert_eq!(old(beat.ask("p", now, true)).as_deref(), Some("p"));
        assert!(!beat.answered(Some((Some(false), 0)), now));
        // Falling back again within the spell: the name beaten since the
        // loss is on the new Redis, and finding it says nothing of what
        // was lost.
        beat.fall_back(now);
        assert_eq!(old(beat.ask("p", now, true)).as_deref(), Some("p~1"));
        assert!(!beat.answered(Some((Some(true), 0)), now));
        // Quiet names do not matter then: no count is owed.
        beat.fall_back(now);
        assert!(!beat.answered(Some((Some(true), 2)), now));
        assert!(!beat.others_away());
        assert!(!beat.owes(now + RECHECK));
        // Once no spell binds, the next one may end early again.
        beat.settled();
        beat.fall_back(now);
        assert_eq!(old(beat.ask("p", now, true)).as_deref(), Some("p~3"));
        assert!(beat.answered(Some((Some(true), 0)), now));
    }

    /// A failover: this process is back on a Redis that kept its state,
    /// but another has not beaten since the spell began. The spell holds
    /// until a later count finds every other process back.
    #[test]
    fn a_kept_state_ends_the_spell_only_once_the_others_are_back() {
        let fell = Instant::now();
        let back = fell + Duration::from_millis(2_500);
        let mut beat = Beat::default();
        beat.fall_back(fell);
        let check = beat.ask("p", back, true).expect("owed");
        assert_eq!(check.old.as_deref(), Some("p"));
        assert_eq!(
            check.quiet,
            Duration::from_millis(2_500),
            "since the spell began"
        );
        assert!(!beat.answered(Some((Some(true), 1)), back));
        assert!(beat.others_away() && !beat.kept());
        // Counted again a moment later, without the old name.
        assert!(!beat.owes(back + RECHECK / 2));
        assert!(beat.owes(back + RECHECK));
        let again = beat.ask("p", back + RECHECK, true).expect("owed");
        assert_eq!(again.old, None);
        assert_eq!(again.quiet, Duration::from_millis(2_700));
        assert!(beat.answered(Some((None, 0)), back + RECHECK));
        assert!(beat.kept() && !beat.others_away());
        assert!(!beat.owes(back + RECHECK * 2), "nothing more owed");
    }

    /// Until its local starts are written, a process back counts the
    /// others (its probe) but leaves its old name in the set for them to
    /// see it away; the name is asked for once they are written.
    #[test]
    fn the_old_name_is_asked_for_once_the_local_starts_are_written() {
        let now = Instant::now();
        let mut beat = Beat::default();
        beat.fall_back(now);
        let check = beat.ask("p", now, false).expect("owed");
        assert_eq!(check.old, None);
        assert!(!beat.answered(Some((None, 0)), now));
        assert!(!beat.owes(now), "asked again a moment later");
        assert!(beat.owes(now + RECHECK));
        let check = beat.ask("p", now + RECHECK, true).expect("owed");
        assert_eq!(check.old.as_deref(), Some("p"));
        assert!(beat.answered(Some((Some(true), 0)), now + RECHECK));
    }
}
