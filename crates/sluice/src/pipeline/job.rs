//! One call's fixed facts, resolved once before any step runs.

use std::sync::Arc;

use crate::call::{Call, Route};
use crate::config::Spend;
use crate::deadline::Deadline;
use crate::engine::Credential;
use crate::limiter::Micros;
use crate::scope::Ask;

/// What the caller takes from a call's completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Keep {
    /// The outcome alone: an answer nothing else shares need not be kept.
    Outcome,
    /// The outcome and the upstream response ([`crate::Turn::complete`]).
    Response,
}

/// A call with its route, its credential, its deadline, and what it spends.
pub(super) struct Job<'a, P> {
    pub(super) call: &'a Call<P>,
    /// The name its requests carry (see [`crate::engine::Routed`]).
    pub(super) name: &'a Arc<str>,
    pub(super) route: &'a Route,
    pub(super) credential: &'a Credential,
    pub(super) deadline: Deadline,
    /// When the deadline runs out, in engine microseconds (never after
    /// the deadline's instant): what steps compare with their reading of
    /// the clock, with no instant arithmetic.
    pub(super) ends: Micros,
    /// Its tool's group, costs and settles (empty for a plain call).
    pub(super) spend: &'a Spend,
    /// Its priority and priced costs.
    pub(super) ask: Ask,
    /// What its caller takes.
    pub(super) keep: Keep,
}

impl<P> Job<'_, P> {
    /// Microseconds left of the deadline at `now`; zero once it has passed.
    pub(super) fn remaining(&self, now: Micros) -> Micros {
        self.ends.saturating_sub(now)
    }
}
