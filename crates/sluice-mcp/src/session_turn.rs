//! The session's current engine turn: MCP has no model step, so the proxy
//! draws one from the traffic, a burst of tool calls ending once the
//! session has been idle for the read cache's TTL.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use sluice::{Executor, Gate, Turn};
use tokio::time::Instant;

use crate::live::LiveGate;

/// The session's current engine [`Turn`], and when to start the next.
///
/// MCP has no notion of a model step, so the proxy draws one from what it
/// sees: a turn lasts while tool calls keep coming, and a call that arrives
/// when none is in progress and the last one ended at least
/// `turn_cache_ttl` ago starts a new one. Single-flight and the read cache
/// therefore behave exactly as in one session-long turn (every cached
/// answer is older than the TTL when a turn ends), while `turn_budget`
/// counts the requests of one burst, roughly one model step, and memory is
/// released between bursts. A reload (`live.rs`) starts a new turn too,
/// on the gate it put in force.
#[derive(Debug)]
pub(crate) struct SessionTurn<E> {
    live: Arc<LiveGate<E>>,
    idle_after: Duration,
    state: Mutex<State<E>>,
}

#[derive(Debug)]
struct State<E> {
    turn: Turn<E>,
    /// The generation of the gate `turn` is of.
    generation: u64,
    /// Calls in progress.
    active: usize,
    /// When the last call ended.
    idle_since: Instant,
}

/// A call's membership of the current turn; leaving on drop (cancelled calls included).
#[derive(Debug)]
pub(crate) struct Membership<E> {
    pub(crate) turn: Turn<E>,
    session: Arc<SessionTurn<E>>,
}

impl<E: Executor + Clone> SessionTurn<E> {
    pub(crate) fn new(live: Arc<LiveGate<E>>) -> Arc<Self> {
        let (gate, generation) = live.gate();
        // `[defaults]`'s TTL, which a reload does not change.
        let idle_after = gate.defaults().turn_cache_ttl;
        let turn = gate.turn();
        Arc::new(SessionTurn {
            live,
            idle_after,
            state: Mutex::new(State {
                turn,
                generation,
                active: 0,
                idle_since: Instant::now(),
            }),
        })
    }

    /// The gate in force, which the session's new calls spend.
    pub(crate) fn gate(&self) -> Gate<E> {
        self.live.gate().0
    }

    /// Joins the current turn, or starts a new one after an idle gap or
    /// on the gate a reload put in force.
    pub(crate) fn enter(self: &Arc<Self>) -> Membership<E> {
        let (gate, generation) = self.live.gate();
        let mut state = self.state.lock();
        let idle = state.active == 0 && state.idle_since.elapsed() >= self.idle_after;
        if idle || state.generation != generation {
            state.turn = gate.turn();
            state.generation = generation;
        }
        state.active += 1;
        Membership {
            turn: state.turn.clone(),
            session: self.clone(),
        }
    }
}

impl<E> Drop for Membership<E> {
    fn drop(&mut self) {
        let mut state = self.session.state.lock();
        state.active = state.active.saturating_sub(1);
        if state.active == 0 {
            state.idle_since = Instant::now();
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use serde_json::json;
    use sluice::{Call, CredentialConfig, GateConfig, ToolConfig, executor_fn};

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_turn_ends_after_an_idle_ttl() {
        let config = GateConfig::default()
            .credential("c", CredentialConfig::default())
            .tool("t", ToolConfig::read("c"));
        let executor =
            executor_fn(|_| async { Ok(http::Response::new(Bytes::from_static(b"{}"))) });
        let gate = Gate::builder(config.clone(), executor)
            .seed(1)
            .build()
            .unwrap();
        let session = SessionTurn::new(LiveGate::new(gate, config));
        let read = || Call::new("t", json!({"q": 1}));

        let first = session.enter();
        first.turn.call(read()).await;
        assert_eq!(first.turn.upstream_requests(), 1);
        drop(first);

        // Within the TTL: the same turn, the cached answer.
        tokio::time::advance(Duration::from_secs(1)).await;
        let again = session.enter();
        assert!(again.turn.complete(read()).await.coalesced);
        assert_eq!(again.turn.upstream_requests(), 1);

        // While a call is in progress the turn goes on, however long.
        tokio::time::advance(Duration::from_secs(10)).await;
        let during = session.enter();
        assert_eq!(during.turn.upstream_requests(), 1);
        drop(during);
        drop(again);

        // Idle for the TTL: a new turn.
        tokio::time::advance(Duration::from_secs(3)).await;
        let next = session.enter();
        assert_eq!(next.turn.upstream_requests(), 0);
    }
}
