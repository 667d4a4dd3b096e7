//! What a call allocates on the paths that do not wait, counted by the
//! global allocator (issue 18: no allocation a pool or a borrow avoids).
//! Counts do not depend on the machine or its load, so they are asserted;
//! the time these paths take is the `gate` bench's.
//!
//! The binary holds one test: the allocator is global, and a second test
//! running beside it would be counted too.

use std::alloc::System;

use bytes::Bytes;
use serde_json::json;
use sluice::{Call, Completion, CredentialConfig, Gate, GateConfig, ToolConfig, Turn, executor_fn};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Allocations made while `call` is answered (the completion's own drop
/// is not counted: the caller keeps it), and its completion.
async fn allocations_of<E>(turn: &Turn<E>, call: Call) -> (usize, Completion)
where
    E: sluice::Executor<Payload = serde_json::Value>,
{
    let region = Region::new(GLOBAL);
    let completion = turn.complete(call).await;
    (region.change().allocations, completion)
}

#[tokio::test(flavor = "current_thread")]
async fn a_read_the_turn_has_answered_allocates_nothing_of_its_own() {
    let config = GateConfig::default()
        .credential(
            "k",
            CredentialConfig::with_rate("1000/1s".parse().unwrap()).max_in_flight(10),
        )
        .tool("read", ToolConfig::read("k"));
    let executor =
        executor_fn(|_request| async { Ok(http::Response::new(Bytes::from_static(b"{}"))) });
    let gate = Gate::builder(config, executor).seed(1).build().unwrap();
    let turn = gate.turn();
    let args = || json!({"q": "rust", "page": 2, "filters": ["open", "bug"]});

    // The first read is sent, and its flight keeps an owned key.
    let (sent, first) = allocations_of(&turn, Call::new("read", args())).await;
    assert!(first.outcome.is_ok() && !first.coalesced);
    assert!(sent > 0, "a sent read allocates its flight and its request");

    // The same arguments again: the turn's cache answers, with no key, no
    // flight and no timer made for it.
    for _ in 0..3 {
        let (answered, again) = allocations_of(&turn, Call::new("read", args())).await;
        assert!(again.outcome.is_ok() && again.coalesced);
        assert_eq!(answered, 0, "a read answered by the turn's cache allocated");
    }

    // A key longer than the scratch buffer keeps is looked up the same way,
    // and found; the buffer it grew is let go.
    let long = || json!({"q": "x".repeat(10_000)});
    let (_, first) = allocations_of(&turn, Call::new("read", long())).await;
    assert!(first.outcome.is_ok() && !first.coalesced);
    let (_, again) = allocations_of(&turn, Call::new("read", long())).await;
    assert!(again.outcome.is_ok() && again.coalesced);
    // ... and the short key's look-up allocates again only for the buffer.
    let (answered, again) = allocations_of(&turn, Call::new("read", args())).await;
    assert!(again.coalesced);
    assert!(
        answered <= 1,
        "{answered} allocations after the buffer was let go"
    );
    let _ = gate;
}
