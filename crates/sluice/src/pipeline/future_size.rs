//! The size of a call's future (issue 18). Whoever awaits a call moves its
//! future at least once, a copy of every byte on every call: at 3,560
//! bytes against 2,808, a non-waiting write ran 5,710 instructions
//! against 5,563 (docs/PERFORMANCE.md). What only a waiting call reaches
//! (a queue, a start later than now, a shared budget, a retry's backoff)
//! lives in a box of its own, allocated only when it happens, and the
//! attempt's steps borrow nothing across a retry's waits. The steps
//! themselves run in a box made once a call is found to need them, so the
//! future a caller moves holds the call, its turn when it has one of its
//! own, and a pointer; a read its turn has answered allocates no box at
//! all. A write's box holds no flight, and
//! fits glibc's per-thread cache of small blocks (1,032 bytes): at 2,576
//! bytes it came from the allocator's slower bins on every call.

use bytes::Bytes;
use serde_json::json;

use super::driver::steps_size;
use crate::engine::{Engine, TurnState};
use crate::executor::Executor;
use crate::{Call, CredentialConfig, Gate, GateConfig, ToolConfig, executor_fn};

/// Bytes a call's future may take with an executor whose own future is
/// empty: 352 in a test build when this was written (2,808 with the steps
/// inline, 3,560 before that); the margin lets a compiler's layout move a
/// little without the test failing on it.
const MOST: usize = 512;

/// A credential with a write and a read on it, and an executor whose own
/// future is empty.
fn parts() -> (GateConfig, impl Executor<Payload = serde_json::Value>) {
    let executor =
        executor_fn(|_request| async { Ok(http::Response::new(Bytes::from_static(b"{}"))) });
    let config = GateConfig::default()
        .credential("k", CredentialConfig::with_rate("100/1s".parse().unwrap()))
        .tool("write", ToolConfig::write("k"))
        .tool("read", ToolConfig::read("k"));
    (config, executor)
}

#[tokio::test]
async fn a_calls_future_holds_no_steps_inline() {
    let (config, executor) = parts();
    let gate = Gate::builder(config, executor).seed(1).build().unwrap();
    let call = gate.call(Call::new("write", json!({"id": 1})));
    let alone = std::mem::size_of_val(&call);
    assert!(alone <= MOST, "a call's future takes {alone} bytes");
    // The future still runs the call.
    assert!(call.await.is_ok());
    let turn = gate.turn();
    let in_turn = std::mem::size_of_val(&turn.call(Call::new("write", json!({"id": 2}))));
    assert!(
        in_turn <= MOST,
        "a turn's call's future takes {in_turn} bytes"
    );
}

/// Bytes a write's steps may take in their box: 992 in a test build
/// when this was written (2,576 with a read's flight beside them), the
/// most glibc's per-thread cache holds being 1,032.
const MOST_STEPS: usize = 1_032;

#[tokio::test]
async fn a_writes_steps_fit_the_allocators_small_blocks() {
    let (config, executor) = parts();
    let engine = Engine::new(config, executor, None, None, None).unwrap();
    let turn = TurnState::single(&engine.defaults);
    let write = steps_size(&engine, &turn, &Call::new("write", json!({"id": 1}))).unwrap();
    assert!(write <= MOST_STEPS, "a write's steps take {write} bytes");
    // A read's box holds its flight as well: larger, and a read's own.
    let read = steps_size(&engine, &turn, &Call::new("read", json!({"id": 1}))).unwrap();
    assert!(
        read > write,
        "a read's steps take {read} bytes, a write's {write}"
    );
}
