//! What a turn is over MCP: one burst of tool calls, ending once the session has been idle for the read cache's TTL.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluice::{Executor, Gate, Turn};
use tokio::time::Instant;

/// The session's current turn.
///
/// MCP has no notion of a model step, so the proxy draws one from what it
/// sees: a turn lasts while tool calls keep coming, and a call that arrives
/// when none is in progress and the last one ended at least
/// `turn_cache_ttl` ago starts a new one. Single-flight and the read cache
/// therefore behave exactly as in one session-long turn (every cached
/// answer is older than the TTL when a turn ends), while `turn_budget`
/// counts the requests of one burst, roughly one model step, and memory is
/// released between bursts.
#[derive(Debug)]
pub(crate) struct Turns<E> {
    gate: Gate<E>,
    idle_after: Duration,
    state: Mutex<State<E>>,
}

#[derive(Debug)]
struct State<E> {
    turn: Turn<E>,
    /// Calls in progress.
    active: usize,
    /// When the last call ended.
    idle_since: Instant,
}

/// A call's membership of the current turn; leaving on drop (cancelled calls included).
#[derive(Debug)]
pub(crate) struct Entered<E> {
    pub(crate) turn: Turn<E>,
    turns: Arc<Turns<E>>,
}

impl<E: Executor> Turns<E> {
    pub(crate) fn new(gate: Gate<E>) -> Arc<Self> {
        let idle_after = gate.defaults().turn_cache_ttl;
        let turn = gate.turn();
        Arc::new(Turns {
            gate,
            idle_after,
            state: Mutex::new(State {
                turn,
                active: 0,
                idle_since: Instant::now(),
            }),
        })
    }

    /// Joins the current turn, or starts a new one after an idle gap.
    pub(crate) fn enter(self: &Arc<Self>) -> Entered<E> {
        let mut state = self.lock();
        if state.active == 0 && state.idle_since.elapsed() >= self.idle_after {
            state.turn = self.gate.turn();
        }
        state.active += 1;
        Entered {
            turn: state.turn.clone(),
            turns: self.clone(),
        }
    }
}

impl<E> Turns<E> {
    fn lock(&self) -> std::sync::MutexGuard<'_, State<E>> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl<E> Drop for Entered<E> {
    fn drop(&mut self) {
        let mut state = self.turns.lock();
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
        let gate = Gate::builder(config, executor).seed(1).build().unwrap();
        let turns = Turns::new(gate);
        let read = || Call::new("t", json!({"q": 1}));

        let first = turns.enter();
        first.turn.call(read()).await;
        assert_eq!(first.turn.upstream_requests(), 1);
        drop(first);

        // Within the TTL: the same turn, the cached answer.
        tokio::time::advance(Duration::from_secs(1)).await;
        let again = turns.enter();
        assert!(again.turn.complete(read()).await.shared);
        assert_eq!(again.turn.upstream_requests(), 1);

        // While a call is in progress the turn goes on, however long.
        tokio::time::advance(Duration::from_secs(10)).await;
        let during = turns.enter();
        assert_eq!(during.turn.upstream_requests(), 1);
        drop(during);
        drop(again);

        // Idle for the TTL: a new turn.
        tokio::time::advance(Duration::from_secs(3)).await;
        let next = turns.enter();
        assert_eq!(next.turn.upstream_requests(), 0);
    }
}
