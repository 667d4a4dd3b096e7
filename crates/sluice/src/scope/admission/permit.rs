//! Shadow mode's at-once decision, and a held place in the queue.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use super::bounds::Permit;

/// Shadow mode's admission, decided at once: see `Scope::admit_now`.
#[derive(Debug)]
pub(crate) enum AdmittedNow<'a> {
    /// A permit was free (`None`: the scope has no admission).
    Permit {
        /// Held while the call runs.
        permit: Option<Permit<'a>>,
    },
    /// Enforcing would have queued the call for about this long; it
    /// counts as queued while it runs.
    Wait {
        /// Held while the call runs.
        _queued: Queued<'a>,
        wait: Duration,
    },
    /// Enforcing would have shed it, telling it to come back after this.
    Shed { wait: Duration },
}

impl<'a> AdmittedNow<'a> {
    /// The permit, if one was taken, for a call whose body goes on streaming.
    pub(crate) fn take_permit(&mut self) -> Option<Permit<'a>> {
        match self {
            AdmittedNow::Permit { permit } => permit.take(),
            _ => None,
        }
    }
}

/// A place in the queue, given back when the call leaves it (with a
/// permit, shed, timed out, or cancelled by its caller).
pub(super) struct QueueSlot<'a>(pub(super) &'a AtomicU32);

/// A place in the queue held by a shadow-mode call that runs without a
/// permit; given back when it drops.
#[derive(Debug)]
pub(crate) struct Queued<'a> {
    pub(super) _slot: QueueSlot<'a>,
}

impl std::fmt::Debug for QueueSlot<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("QueueSlot")
    }
}

impl Drop for QueueSlot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}
