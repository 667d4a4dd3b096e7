//! How often one call reads the engine's clock (issue 18): once at entry,
//! once when the answer comes, and again only after a step that waited.
//! Counted by the crate's test build of the clock ([`crate::clock::reads`]).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::json;

use crate::clock::reads;
use crate::{Call, CredentialConfig, Event, Gate, GateConfig, Observer, ToolConfig, executor_fn};

fn config() -> GateConfig {
    let limits = CredentialConfig::with_rate("100/1s".parse().unwrap())
        .max_in_flight(8)
        .queue(8);
    GateConfig::default()
        .credential("k", limits)
        .tool("write", ToolConfig::write("k"))
        .tool("read", ToolConfig::read("k"))
}

fn gate() -> Gate<impl crate::Executor<Payload = serde_json::Value>> {
    gate_with(None)
}

fn gate_with(
    observer: Option<Arc<dyn Observer>>,
) -> Gate<impl crate::Executor<Payload = serde_json::Value>> {
    let executor =
        executor_fn(|_request| async { Ok(http::Response::new(Bytes::from_static(b"{}"))) });
    let builder = Gate::builder(config(), executor).seed(1);
    let builder = match observer {
        Some(observer) => builder.observer(observer),
        None => builder,
    };
    builder.build().unwrap()
}

/// Reads of the clock while `call` runs on `gate`.
async fn reads_of<E: crate::Executor<Payload = serde_json::Value>>(
    gate: &Gate<E>,
    tool: &str,
) -> u64 {
    let before = reads();
    let outcome = gate.call(Call::new(tool, json!({"id": 1}))).await;
    assert!(outcome.is_ok(), "{outcome:?}");
    reads() - before
}

#[tokio::test(start_paused = true)]
async fn a_write_that_does_not_wait_reads_the_clock_at_entry_and_at_the_answer() {
    let gate = gate();
    // The first call creates the credential's scope; every one after it
    // reads the clock exactly twice.
    reads_of(&gate, "write").await;
    for _ in 0..3 {
        assert_eq!(reads_of(&gate, "write").await, 2);
    }
}

#[tokio::test(start_paused = true)]
async fn a_read_in_its_own_turn_also_stamps_its_cached_answer() {
    let gate = gate();
    reads_of(&gate, "read").await;
    // Entry, the answer, and the time the turn caches it at.
    assert_eq!(reads_of(&gate, "read").await, 3);
}

#[tokio::test(start_paused = true)]
async fn an_observed_call_reads_the_clock_once_more_for_its_elapsed_time() {
    struct Elapsed;
    impl Observer for Elapsed {
        fn observe(&self, _event: &Event<'_>) {}
    }
    let gate = gate_with(Some(Arc::new(Elapsed)));
    reads_of(&gate, "write").await;
    assert_eq!(reads_of(&gate, "write").await, 3);
}

#[tokio::test(start_paused = true)]
async fn a_call_that_waits_for_its_start_is_sent_with_what_is_left_after_the_wait() {
    // A burst of one at 100/s: the second call waits 10 ms inline for its
    // slot, and its request's timeout is what the deadline has left then.
    let config = GateConfig::default()
        .credential(
            "k",
            CredentialConfig::with_rate("100/1s".parse().unwrap()).burst(1),
        )
        .tool("write", ToolConfig::write("k"));
    let timeouts = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let log = timeouts.clone();
    let executor = executor_fn(move |request| {
        log.lock().push(request.timeout);
        async { Ok(http::Response::new(Bytes::from_static(b"{}"))) }
    });
    let gate = Gate::builder(config, executor).seed(1).build().unwrap();
    let deadline = gate.defaults().deadline;
    for _ in 0..2 {
        let outcome = gate.call(Call::new("write", json!({}))).await;
        assert!(outcome.is_ok(), "{outcome:?}");
    }
    let timeouts = timeouts.lock();
    assert_eq!(timeouts.len(), 2);
    assert_eq!(timeouts[0], deadline);
    assert!(
        timeouts[1] <= deadline - Duration::from_millis(10),
        "{:?} of {deadline:?}",
        timeouts[1]
    );
}
