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

/// Issue 50: a call that leaves before its start (its caller gave up) frees
/// that start for the calls waiting behind it, which move earlier, on an
/// exact window and on a bucket alike. Six writes wait inline; the third's
/// caller stops waiting at 500 ms.
/// - `2/1s`: starts 0, 0, (1.02), 1.02, 2.04, 2.04. Before the re-plan the
///   fifth kept 2.04 s; now it takes the third's 1.02 s.
/// - `10/1s`, `burst = 1` (one start every 102 ms, the window margin
///   included): the third's 204 ms goes back with the later calls' starts,
///   which move up one each; before, the bucket forwent a start with others
///   charged after it, and the rest kept 306, 408 and 510 ms.
#[tokio::test(start_paused = true)]
async fn a_call_that_leaves_before_its_start_moves_the_calls_behind_it_earlier() {
    let cases: [(&str, Option<u32>, u64, &[f64]); 2] = [
        ("2/1s", None, 500, &[0.0, 0.0, 1_020.0, 1_020.0, 2_040.0]),
        ("10/1s", Some(1), 150, &[0.0, 102.0, 204.0, 306.0, 408.0]),
    ];
    for (rate, burst, gives_up_ms, expected) in cases {
        let sim = Sim::always_ok(10);
        let mut credential = sluice::CredentialConfig::with_rate(rate.parse().unwrap())
            .max_in_flight(20)
            .queue(20);
        if let Some(burst) = burst {
            credential = credential.burst(burst);
        }
        let defaults = Defaults {
            inline_wait: Duration::from_secs(3),
            ..Defaults::default()
        };
        let gate = build_gate(config_with(credential, defaults), &sim);
        let calls = (0..6).map(|n| {
            let gate = &gate;
            async move {
                let call = gate.call(write(n));
                if n == 2 {
                    let gave_up =
                        tokio::time::timeout(Duration::from_millis(gives_up_ms), call).await;
                    assert!(gave_up.is_err(), "{rate}: the third call's caller gave up");
                } else {
                    assert!(call.await.is_ok(), "{rate}: call {n}");
                }
            }
        });
        futures_util::future::join_all(calls).await;
        assert_eq!(sim.starts_ms(), expected, "{rate}: {:?}", sim.starts_by_n());
    }
}
