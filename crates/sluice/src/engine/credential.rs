//! A credential at run time: its resolved limits, its retry budget, and the scopes its tools are bound to.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use parking_lot::Mutex;

use crate::config::{Defaults, Limits};
use crate::retry::RetryBudget;
use crate::scope::Seats;

/// A credential at run time.
#[derive(Debug)]
pub(crate) struct Credential {
    pub(crate) name: Arc<str>,
    pub(crate) limits: Limits,
    pub(crate) retry: RetryBudget,
    /// Tool -> scopes the server reported on that tool's responses.
    pub(crate) bindings: Mutex<HashMap<Arc<str>, Vec<Arc<str>>>>,
    /// Whether any tool has a binding yet: until one does, a call's scopes
    /// are found without the bindings' lock.
    pub(crate) bound: AtomicBool,
    /// Calls sleeping until their start slot, by priority.
    pub(crate) seats: Seats,
    /// Whether a call may take the slots of waiting calls it outranks back
    /// into the cells: enforced, not shared (a shared grant is Redis's, not
    /// ours to give back), and no bucket (a bucket gives a slot back only
    /// while nothing was charged after it, so taking one could lose it for
    /// nothing).
    pub(crate) outranks: bool,
    /// Whether a call may give back the grants of waiting calls it
    /// outranks and ask for an earlier start: shared, enforced, and no
    /// bucket (the shared windows are exact logs, from which a grant comes
    /// back whole).
    pub(crate) outranks_shared: bool,
}

impl Credential {
    /// Whether a call may swap starts with waiting calls it outranks that
    /// spend exactly what it does, or take the start of one whose spend
    /// covers its own: whenever limits are enforced (neither gives back
    /// anything but the caller's own latest start, so buckets and shared
    /// grants allow them).
    pub(crate) fn swaps(&self) -> bool {
        self.limits.enforce
    }

    pub(crate) fn new(name: Arc<str>, limits: Limits, defaults: &Defaults) -> Self {
        let exact = limits.enforce
            && limits.burst.is_none()
            && limits.groups.values().all(|group| group.burst.is_none())
            && limits.units.iter().all(|unit| unit.burst.is_none());
        let (outranks, outranks_shared) = (exact && !limits.shared, exact && limits.shared);
        Credential {
            name,
            limits,
            retry: RetryBudget::new(
                defaults.retry_ratio,
                defaults.retry_floor,
                defaults.retry_window,
            ),
            bindings: Mutex::new(HashMap::new()),
            bound: AtomicBool::new(false),
            seats: Seats::default(),
            outranks,
            outranks_shared,
        }
    }
}
