//! A [`Turn`]: the calls of one model step, with their single-flight, read cache and request budget.

use std::sync::Arc;

use futures_util::future::join_all;

use crate::call::{Call, Completion};
use crate::engine::{Engine, TurnState};
use crate::executor::Executor;
use crate::outcome::Outcome;
use crate::pipeline::{self, Keep};

/// The calls of one model step. Cheap to clone; clones share the turn.
#[derive(Debug)]
pub struct Turn<E> {
    engine: Arc<Engine<E>>,
    state: Arc<TurnState>,
}

impl<E> Clone for Turn<E> {
    fn clone(&self) -> Self {
        Turn {
            engine: self.engine.clone(),
            state: self.state.clone(),
        }
    }
}

impl<E: Executor> Turn<E> {
    pub(crate) fn new(engine: Arc<Engine<E>>) -> Self {
        let state = Arc::new(TurnState::new(&engine.defaults));
        Turn { engine, state }
    }

    /// Runs a batch of calls concurrently: exactly one outcome per call, in order.
    pub async fn run(&self, calls: impl IntoIterator<Item = Call<E::Payload>>) -> Vec<Outcome> {
        join_all(calls.into_iter().map(|call| self.call(call))).await
    }

    /// Runs one call in this turn.
    pub async fn call(&self, call: Call<E::Payload>) -> Outcome {
        let keep = Keep::Outcome;
        pipeline::complete(&self.engine, &self.state, call, keep)
            .await
            .outcome
    }

    /// Runs one call and keeps the upstream response alongside the outcome.
    pub async fn complete(&self, call: Call<E::Payload>) -> Completion {
        pipeline::complete(&self.engine, &self.state, call, Keep::Response).await
    }

    /// Upstream requests this turn has caused so far.
    pub fn upstream_requests(&self) -> u32 {
        self.state.requests()
    }
}
