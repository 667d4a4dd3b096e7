//! The size of a call's future and of the box its steps run in (issue 18),
//! measured rather than pinned by a test (a compiler's layout moves them).
//! Whoever awaits a call moves its future at least once, a copy of every
//! byte on every call; what only a waiting call reaches lives in a box of
//! its own, and the steps run in a box made once a call is found to need
//! them. A write's box should fit glibc's per-thread cache of small blocks
//! (1,032 bytes); a read's holds its flight as well.
//!
//! `cargo bench -p sluice-bench --bench future_size`
#![allow(clippy::unwrap_used, missing_docs)]

use serde_json::json;
use sluice::{Call, CredentialConfig, Gate, GateConfig, ToolConfig};

mod common;

fn main() {
    let rt = common::runtime();
    rt.block_on(async {
        let config = GateConfig::default()
            .credential("k", CredentialConfig::with_rate("100/1s".parse().unwrap()))
            .tool("write", ToolConfig::write("k"))
            .tool("read", ToolConfig::read("k"));
        // An executor whose own future is empty.
        let gate = Gate::builder(config, common::no_op())
            .seed(1)
            .build()
            .unwrap();
        let call = gate.call(Call::new("write", json!({"id": 1})));
        let alone = std::mem::size_of_val(&call);
        // The future still runs the call.
        assert!(call.await.is_ok());
        let turn = gate.turn();
        let in_turn = std::mem::size_of_val(&turn.call(Call::new("write", json!({"id": 2}))));
        let write = gate.steps_bytes(&Call::new("write", json!({"id": 1})));
        let read = gate.steps_bytes(&Call::new("read", json!({"id": 1})));
        println!("a call's future: {alone} bytes; a turn's call's: {in_turn} bytes");
        println!(
            "a write's steps box: {} bytes; a read's: {} bytes",
            write.unwrap_or(0),
            read.unwrap_or(0)
        );
        // A rate fits in a tool's config beside its niche: 16 bytes when
        // this was written.
        println!(
            "an optional rate: {} bytes",
            std::mem::size_of::<Option<sluice::Rate>>()
        );
    });
}
