//! A batch from the agent: its elements are handled one by one and their responses go back as one array.

use std::sync::Arc;

use parking_lot::Mutex;

use crate::jsonrpc;
use crate::outbox::Outbox;

/// Collects the responses to one agent batch (JSON-RPC 2.0 §6: one array
/// holding a response per request, none for notifications, nothing at all
/// when there is none to send).
#[derive(Debug)]
pub(crate) struct Batch {
    to_agent: Outbox,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    replies: Vec<Vec<u8>>,
    awaited: usize,
    sealed: bool,
    sent: bool,
}

impl Batch {
    pub(crate) fn new(to_agent: Outbox) -> Arc<Self> {
        Arc::new(Batch {
            to_agent,
            state: Mutex::new(State::default()),
        })
    }

    /// One more response will come.
    pub(crate) fn expect(&self) {
        self.state.lock().awaited += 1;
    }

    /// An awaited response came.
    pub(crate) fn reply(&self, message: Vec<u8>) {
        let mut state = self.state.lock();
        state.awaited = state.awaited.saturating_sub(1);
        state.replies.push(message);
        self.flush(&mut state);
    }

    /// A response known at once (an element that is not a request object).
    pub(crate) fn answer_now(&self, message: Vec<u8>) {
        self.state.lock().replies.push(message);
    }

    /// An awaited response will not come (its request was cancelled).
    pub(crate) fn forgo(&self) {
        let mut state = self.state.lock();
        state.awaited = state.awaited.saturating_sub(1);
        self.flush(&mut state);
    }

    /// Every element has been handled: send once all responses are in.
    pub(crate) fn seal(&self) {
        let mut state = self.state.lock();
        state.sealed = true;
        self.flush(&mut state);
    }

    fn flush(&self, state: &mut State) {
        if state.sealed && state.awaited == 0 && !state.sent {
            state.sent = true;
            if !state.replies.is_empty() {
                self.to_agent.send(jsonrpc::batch(&state.replies));
            }
        }
    }
}
