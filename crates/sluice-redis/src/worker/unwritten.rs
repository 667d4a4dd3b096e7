//! A credential's local starts the worker has not written to Redis yet,
//! counted so that a spell does not end before Redis holds them.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A credential's local starts not yet in Redis's log: each counts from
/// the moment it is handed to the worker until it is written, counts
/// nowhere any more, or is dropped (a full queue, the cap on kept starts).
#[derive(Debug, Default)]
pub(crate) struct Unwritten(Arc<AtomicUsize>);

impl Unwritten {
    /// Redis's log holds every local start of the credential (or none is
    /// left to write).
    pub(crate) fn none(&self) -> bool {
        self.0.load(Ordering::Acquire) == 0
    }

    /// One more, counted until the returned value is dropped.
    pub(crate) fn one(&self) -> Pending {
        self.0.fetch_add(1, Ordering::AcqRel);
        Pending(self.0.clone())
    }
}

/// One start counted in [`Unwritten`] while it lives.
#[derive(Debug)]
pub(crate) struct Pending(Arc<AtomicUsize>);

impl Drop for Pending {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}
