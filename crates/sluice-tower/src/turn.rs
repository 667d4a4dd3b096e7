//! [`Turn`]: the tag that puts requests in one engine turn (a model step), so identical reads among them send one request.

use sluice::Gate;

use crate::call::Dispatch;

/// The calls of one model step. Put a clone in each request's extensions
/// (`request.extensions_mut().insert(turn.clone())`, or reqwest-middleware's
/// `with_extension`) and identical reads among them send one request, and
/// a repeat within the cache's TTL none.
#[derive(Debug, Clone)]
pub struct Turn(sluice::Turn<Dispatch>);

impl Turn {
    pub(crate) fn new(turn: sluice::Turn<Dispatch>) -> Self {
        Turn(turn)
    }

    /// The engine's turn of the request carrying `extensions`, else a new
    /// turn of its own.
    pub(crate) fn of(
        extensions: &http::Extensions,
        gate: &Gate<Dispatch>,
    ) -> sluice::Turn<Dispatch> {
        match extensions.get::<Turn>() {
            Some(turn) => turn.0.clone(),
            None => gate.turn(),
        }
    }

    /// Upstream requests this turn has caused so far.
    pub fn upstream_requests(&self) -> u32 {
        self.0.upstream_requests()
    }
}
