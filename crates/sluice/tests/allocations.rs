//! What a call allocates (issue 18). A call that sends runs its steps in a
//! box of about a kilobyte, made once the call is found to need them; a read
//! its turn has already answered needs none of them, and allocates no such
//! box. Counted by a global allocator that tallies every allocation of this
//! test binary (one test, on a current-thread runtime: nothing else
//! allocates while a call runs).
#![allow(clippy::unwrap_used, missing_docs)]

use std::alloc::System;

use bytes::Bytes;
use serde_json::json;
use sluice::{Call, CredentialConfig, Gate, GateConfig, Outcome, ToolConfig, executor_fn};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Bytes allocated while `call` runs, and its outcome (dropped after the
/// count, so that what it holds is not counted as freed).
async fn allocated_by(call: impl std::future::Future<Output = Outcome>) -> (usize, Outcome) {
    let region = Region::new(GLOBAL);
    let outcome = call.await;
    (region.change().bytes_allocated, outcome)
}

#[tokio::test(start_paused = true)]
async fn a_read_its_turn_answered_allocates_no_box_for_the_steps_it_skips() {
    let executor = executor_fn(|_request| async {
        Ok(http::Response::new(Bytes::from_static(b"{\"ok\":true}")))
    });
    let config = GateConfig::default()
        .credential("k", CredentialConfig::with_rate("100/1s".parse().unwrap()))
        .tool("write", ToolConfig::write("k"))
        .tool("read", ToolConfig::read("k"));
    let gate = Gate::builder(config, executor).seed(1).build().unwrap();
    // The credential's scope is made by its first call, not counted.
    assert!(
        gate.call(Call::new("write", json!({"id": 0})))
            .await
            .is_ok()
    );

    // A write sends: its steps' box (992 bytes in a test build when this
    // was written) is among what it allocates, 1,296 bytes, so the count
    // sees a box when there is one.
    let call = Call::new("write", json!({"id": 1}));
    let (write, outcome) = allocated_by(gate.call(call)).await;
    assert!(outcome.is_ok(), "{outcome:?}");
    assert!(write >= 1_024, "a write allocated {write} bytes: no box?");

    // The same read twice in one turn: the second is answered by the turn,
    // and allocates its key (64 bytes when this was written), not a box.
    let turn = gate.turn();
    let first = turn.call(Call::new("read", json!({"id": 1}))).await;
    assert!(first.is_ok(), "{first:?}");
    let call = Call::new("read", json!({"id": 1}));
    let (cached, outcome) = allocated_by(turn.call(call)).await;
    assert!(outcome.is_ok(), "{outcome:?}");
    assert_eq!(turn.upstream_requests(), 1, "the second read was sent");
    assert!(
        cached < 512,
        "a read its turn answered allocated {cached} bytes"
    );
}
