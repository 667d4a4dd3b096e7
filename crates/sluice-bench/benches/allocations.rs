//! What a call allocates (issue 18), measured rather than pinned by a test
//! (a compiler's layout moves these figures). A call that sends runs its
//! steps in a box of about a kilobyte, made once the call is found to need
//! them; a read its turn has already answered needs none of them. Counted by
//! a global allocator that tallies every allocation of this process (one
//! call at a time on a current-thread runtime: nothing else allocates while
//! a call runs).
//!
//! `cargo bench -p sluice-bench --bench allocations`
#![allow(clippy::unwrap_used, missing_docs)]

use std::alloc::System;
use std::future::Future;

use serde_json::json;
use sluice::{Call, CredentialConfig, Gate, GateConfig, Outcome, ToolConfig};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

mod common;

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Bytes allocated while `call` runs, and its outcome (dropped after the
/// count, so that what it holds is not counted as freed).
async fn allocated_by(call: impl Future<Output = Outcome>) -> (usize, Outcome) {
    let region = Region::new(GLOBAL);
    let outcome = call.await;
    (region.change().bytes_allocated, outcome)
}

fn main() {
    let rt = common::runtime();
    rt.block_on(async {
        let config = GateConfig::default()
            .credential("k", CredentialConfig::with_rate("100/1s".parse().unwrap()))
            .tool("write", ToolConfig::write("k"))
            .tool("read", ToolConfig::read("k"));
        let gate = Gate::builder(config, common::no_op())
            .seed(1)
            .build()
            .unwrap();
        // The credential's scope is made by its first call, not counted.
        assert!(
            gate.call(Call::new("write", json!({"id": 0})))
                .await
                .is_ok()
        );

        // A write sends: its steps' box is among what it allocates.
        let call = Call::new("write", json!({"id": 1}));
        let (write, outcome) = allocated_by(gate.call(call)).await;
        assert!(outcome.is_ok(), "{outcome:?}");

        // The same read twice in one turn: the second is answered by the
        // turn, and allocates its key, not a box for the steps it skips.
        let turn = gate.turn();
        let first = turn.call(Call::new("read", json!({"id": 1}))).await;
        assert!(first.is_ok(), "{first:?}");
        let call = Call::new("read", json!({"id": 1}));
        let (cached, outcome) = allocated_by(turn.call(call)).await;
        assert!(outcome.is_ok(), "{outcome:?}");
        assert_eq!(turn.upstream_requests(), 1, "the second read was sent");

        println!("allocated by a write that sends: {write} bytes");
        println!("allocated by a read its turn answered: {cached} bytes");
    });
}
