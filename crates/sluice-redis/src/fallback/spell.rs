//! A fallback spell: how long a process back in shared mode still holds
//! to the share it decided locally at.
//!
//! Pure state with `now` passed in.

use std::time::Duration;

use tokio::time::Instant;

/// The last spell of local decisions: until when its local starts still
/// count, the share it spent at, and how many processes there were when
/// it began.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Spell {
    /// One window after the last local start (Redis's log may not hold
    /// them yet); `None`: no spell.
    until: Option<Instant>,
    /// The share the spell spent at: it holds while the spell lasts, also
    /// when a Redis back from a restart counts fewer processes for a while.
    share: Option<f64>,
    /// The processes this one knew of when the spell began.
    processes: u32,
    /// The longest window a local start counted in.
    window: Duration,
    /// Redis counted fewer processes than the spell began with, and then
    /// (at this instant plus a window) all of them again.
    missing: Option<Option<Instant>>,
}

/// What Redis last said of the other processes, for [`Spell::binds`]: how
/// many it counts (0: not known), how long a missing one is waited for,
/// and whether one had not reached Redis since the spell began, at the
/// last look (`crate::beat`: Redis's logs may not hold its local starts).
pub(crate) type Others = (u32, Duration, bool);

impl Spell {
    /// A spell begins (or goes on) while Redis counted `processes`, this
    /// one included.
    pub(crate) fn begin(&mut self, processes: u32) {
        self.processes = if self.until.is_none() {
            processes
        } else {
            self.processes.max(processes)
        };
    }

    /// A spell was begun and has not been found over.
    pub(crate) fn active(&self) -> bool {
        self.until.is_some()
    }

    /// Ends the spell: Redis kept what it held before, and its log holds
    /// (or is being sent) the local starts.
    pub(crate) fn end(&mut self) {
        *self = Spell::default();
    }

    /// A local decision at `at` counts for `window`.
    pub(crate) fn hold(&mut self, at: Instant, window: Duration) {
        let until = at + window;
        self.until = Some(self.until.map_or(until, |u| u.max(until)));
        self.window = self.window.max(window);
    }

    /// A local start was granted at `share`.
    pub(crate) fn spent_at(&mut self, share: f64) {
        self.share = Some(share);
    }

    /// The share to hold while the spell lasts: its own, else `current`.
    /// Redis restarted empty counts fewer processes in its heartbeat for a
    /// while (one, for the first to ask); the local starts of the spell
    /// were made at the spell's share, and a larger share would let the
    /// process spend its fallback starts and a full shared window's in one
    /// window.
    pub(crate) fn share_in_force(&self, current: f64) -> f64 {
        self.share.map_or(current, |spell| spell.min(current))
    }

    /// Redis counted `processes` at `now`: once some were missing, the
    /// first count with all of them again starts the spell's last window.
    pub(crate) fn counted(&mut self, processes: u32, now: Instant) {
        if self.until.is_none() {
            return;
        }
        if processes < self.processes {
            self.missing.get_or_insert(None);
        } else if let Some(back @ None) = &mut self.missing {
            *back = Some(now + self.window);
        }
    }

    /// True while the spell binds a process back in shared mode: while
    /// another process has not reached Redis since the spell began (its
    /// local starts are not in Redis's logs); within
    /// a window of its last local start; while Redis counts fewer
    /// processes than the spell began with (`processes` now: the missing
    /// ones may still decide locally, and Redis knows none of their
    /// starts), but for at most `missing` past that window; and, when some
    /// were missing, for a window after Redis counts them all again (their
    /// last local starts reach Redis's log only as they come back). Once it
    /// binds no more the spell is forgotten.
    pub(crate) fn binds(&mut self, now: Instant, (processes, missing, away): Others) -> bool {
        let Some(until) = self.until else {
            return false;
        };
        if away {
            return true;
        }
        // 0: not known (still in fallback, the count is from before).
        if processes > 0 {
            self.counted(processes, now);
        }
        if now < until {
            return true;
        }
        if processes < self.processes {
            if now < until + missing {
                return true;
            }
        } else if let Some(Some(settled)) = self.missing
            && now < settled
        {
            return true;
        }
        *self = Spell::default();
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spell_binds_for_a_window_and_while_processes_are_missing() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut spell = Spell::default();
        assert!(!spell.binds(t0, (1, 5 * s, false)));
        spell.begin(3);
        spell.hold(t0, s);
        spell.spent_at(1.0 / 3.0);
        assert_eq!(spell.share_in_force(1.0), 1.0 / 3.0);
        // Within the window, whatever Redis counts.
        assert!(spell.binds(t0, (3, 5 * s, false)));
        // Past it, while Redis counts one of three, up to `missing` more.
        assert!(spell.binds(t0 + 5 * s, (1, 5 * s, false)));
        assert!(!spell.binds(t0 + 6 * s, (1, 5 * s, false)));
        // Forgotten: the share is the current one again.
        assert_eq!(spell.share_in_force(1.0), 1.0);
        // Once all are counted again, a window more: the last local starts
        // of those just back reach Redis as they come back.
        spell.begin(2);
        spell.hold(t0 + 6 * s, s);
        assert!(spell.binds(t0 + 7 * s, (1, 5 * s, false)));
        assert!(spell.binds(t0 + 7 * s, (2, 5 * s, false)));
        assert!(spell.binds(t0 + 8 * s - s / 2, (2, 5 * s, false)));
        assert!(!spell.binds(t0 + 8 * s, (2, 5 * s, false)));
        // None missing: the spell ends a window after its last local start.
        spell.begin(2);
        spell.hold(t0 + 8 * s, s);
        assert!(spell.binds(t0 + 8 * s, (2, 5 * s, false)));
        assert!(!spell.binds(t0 + 9 * s, (2, 5 * s, false)));
    }

    #[test]
    fn the_last_window_starts_when_redis_counts_them_all() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut spell = Spell::default();
        spell.begin(3);
        spell.hold(t0, s);
        // Back first, then the others, as Redis's answers say.
        spell.counted(1, t0 + 2 * s);
        spell.counted(3, t0 + 3 * s);
        // A decision later finds the last window already under way.
        assert!(spell.binds(t0 + 3 * s + s / 2, (3, 5 * s, false)));
        assert!(!spell.binds(t0 + 4 * s, (3, 5 * s, false)));
        // Answers without a spell change nothing.
        spell.counted(1, t0 + 5 * s);
        assert_eq!(spell, Spell::default());
    }

    #[test]
    fn a_count_not_known_yet_is_not_a_missing_process() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut spell = Spell::default();
        // One slow command: the spell began with all three counted.
        spell.begin(3);
        spell.hold(t0, s);
        // The next call, still in fallback, does not know the count.
        assert!(spell.binds(t0 + s / 2, (0, 5 * s, false)));
        spell.counted(3, t0 + s / 2);
        // Nobody was missing: the spell ends a window after its last
        // local start, not a window after the count came.
        assert!(!spell.binds(t0 + s, (3, 5 * s, false)));
    }
}
