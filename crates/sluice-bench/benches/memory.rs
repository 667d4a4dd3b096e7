//! The memory an idle scope takes: every byte the engine allocates, and does
//! not free, while a million credentials are each called once (each call
//! creates its credential's scope), counted by a global allocator that
//! tallies every allocation and free. Unlike the resident set size, this
//! counts neither the allocator's slack nor pages touched earlier.
//!
//! `cargo bench -p sluice-bench --bench memory`
#![allow(clippy::unwrap_used, missing_docs)]

use std::alloc::System;
use std::hint::black_box;

use sluice::{Gate, GateConfig};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

mod common;

use common::{no_op, roomy, routed, scopes};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

fn main() {
    let rt = common::runtime();
    let scopes = scopes();
    let config = (0..scopes).fold(GateConfig::default(), |config, i| {
        config.credential(&format!("k{i}"), roomy())
    });
    let gate = rt.block_on(async { Gate::builder(config, no_op()).seed(1).build().unwrap() });
    // Every call's own allocations are freed when its outcome is dropped;
    // what stays is the scope, its place in the registry and the ring.
    let region = Region::new(GLOBAL);
    rt.block_on(async {
        for i in 0..scopes {
            black_box(gate.call(routed(i)).await);
        }
    });
    let change = region.change();
    // stats_alloc counts a realloc's growth in `bytes_allocated` (and a
    // shrink in `bytes_deallocated`) as well as in `bytes_reallocated`:
    // adding the latter counted every growth twice.
    let kept = change.bytes_allocated as i128 - change.bytes_deallocated as i128;
    let blocks = change.allocations as i128 - change.deallocations as i128;
    println!(
        "allocated per idle scope: {} bytes in {:.1} blocks ({scopes} scopes)",
        kept / scopes as i128,
        blocks as f64 / scopes as f64
    );
    black_box(&gate);
}
