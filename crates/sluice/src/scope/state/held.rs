//! A request counted in flight on a scope, and a permit held past its call.

use std::sync::atomic::{AtomicU32, Ordering};

use super::scope::Scope;
use crate::scope::ScopeRef;
use crate::scope::admission::Permit;

impl Scope {
    /// Counts a request in flight until the guard drops.
    pub(crate) fn start_request(&self) -> InFlight<'_> {
        let now_in_flight = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        // A read first: the peak is rarely passed, and a locked
        // read-modify-write on every request is not free.
        if now_in_flight > self.peak_in_flight.load(Ordering::Relaxed) {
            self.peak_in_flight
                .fetch_max(now_in_flight, Ordering::SeqCst);
        }
        InFlight(&self.in_flight)
    }

    /// Keeps a call's permit and its request counted in flight past the
    /// call, until the guard drops: its response's body is still streaming.
    pub(crate) fn hold(scope: &ScopeRef, permit: Option<Permit<'_>>) -> Held {
        let permit = permit.map(Permit::detach).is_some();
        std::mem::forget(scope.start_request());
        Held {
            scope: scope.clone(),
            permit,
            also: None,
        }
    }

    /// Requests in flight now.
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst) as usize
    }
}

/// A request in flight on a scope.
#[derive(Debug)]
pub(crate) struct InFlight<'a>(&'a AtomicU32);

/// A finished call's permit and in-flight count, owned (see [`Scope::hold`]).
#[derive(Debug)]
pub(crate) struct Held {
    scope: ScopeRef,
    permit: bool,
    /// The call's group's hold, released with this one.
    also: Option<Box<Held>>,
}

impl Held {
    /// Holds `other` (the group's permit) as long as this.
    pub(crate) fn with(mut self, other: Held) -> Held {
        self.also = Some(Box::new(other));
        self
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.scope.in_flight.fetch_sub(1, Ordering::SeqCst);
        if self.permit
            && let Some(admission) = self.scope.admission()
        {
            admission.release_detached();
        }
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}
