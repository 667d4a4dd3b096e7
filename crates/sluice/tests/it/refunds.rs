//! What a call reserves and does not send is given back: the start slot's
//! guard refunds it on every path, a caller dropping the call included.

use crate::support;

use std::time::Duration;

use serde_json::json;
use sluice::{Call, Defaults};
use support::*;

fn write(n: usize) -> Call {
    Call::new("write", json!({ "n": n }))
}

#[tokio::test(start_paused = true)]
async fn a_call_dropped_while_it_waits_inline_gives_its_slot_back() {
    let sim = Sim::always_ok(10);
    let gate = build_gate(config("1/1s"), &sim);
    assert!(gate.call(write(1)).await.is_ok());
    // The second call's slot is a window later; its caller gives up first.
    let dropped = tokio::time::timeout(Duration::from_millis(500), gate.call(write(2))).await;
    assert!(dropped.is_err(), "the caller stopped waiting");
    // The third call takes the slot the second left, not the one after it.
    assert!(gate.call(write(3)).await.is_ok());
    let starts = sim.starts_ms();
    assert_eq!(starts.len(), 2, "{starts:?}");
    // 1/1s with the default 20 ms window margin.
    assert!((starts[1] - 1_020.0).abs() < 1e-6, "{starts:?}");
}

#[tokio::test(start_paused = true)]
async fn a_deferred_call_leaves_the_turn_budget_and_the_slot_untouched() {
    let sim = Sim::always_ok(10);
    let defaults = Defaults {
        turn_budget: Some(2),
        ..Defaults::default()
    };
    let gate = build_gate(
        config_with(
            sluice::CredentialConfig::with_rate("1/10s".parse().unwrap()),
            defaults,
        ),
        &sim,
    );
    let turn = gate.turn();
    assert!(turn.call(write(1)).await.is_ok());
    // No slot within the inline wait: deferred, and nothing of it is kept.
    let deferred = turn.call(write(2)).await;
    assert_eq!(deferred.status(), "rate_limited", "{deferred:?}");
    assert_eq!(turn.upstream_requests(), 1);
    tokio::time::sleep(Duration::from_secs(10)).await;
    // The slot a window after the first is still free, and the turn can pay for it.
    assert!(turn.call(write(3)).await.is_ok());
    assert_eq!(turn.upstream_requests(), 2);
    let starts = sim.starts_ms();
    assert_eq!(starts.len(), 2, "{starts:?}");
    assert!((starts[1] - 10_020.0).abs() < 1e-6, "{starts:?}");
}
