//! DESIGN.md's invariants 1-10, each on tokio's paused clock against a
//! simulated upstream that records every request it receives.

use crate::support;

use std::time::Duration;

use serde_json::json;
use sluice::{Call, CredentialConfig, Defaults, Outcome, Reason};
use support::*;
use tokio::time::Instant;

fn read(n: usize) -> Call {
    Call::new("read", json!({ "n": n }))
}

fn write(n: usize) -> Call {
    Call::new("write", json!({ "n": n }))
}

/// Invariant 1: on a sliding window, starts in any window W are at most N,
/// across waves of calls and retries of 429s.
#[tokio::test(start_paused = true)]
async fn inv1_rate_sliding_window_holds_in_every_window() {
    let sim = Sim::new(|n, _| {
        if n % 7 == 0 {
            Reply::status(429).header("retry-after", "0.3")
        } else {
            Reply::ok(50)
        }
    });
    let gate = build_gate(config("5/1s"), &sim);
    for wave in 0..6 {
        let turn = gate.turn();
        let calls = (0..12).map(|i| read(wave * 100 + i));
        let outcomes = turn.run(calls).await;
        assert_eq!(outcomes.len(), 12);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let starts = sim.starts_ms();
    assert!(
        starts.len() > 20,
        "enough traffic to test: {}",
        starts.len()
    );
    assert!(max_in_window(&starts, 1_000.0) <= 5, "{starts:?}");
}

/// Invariant 1 with `burst`: GCRA allows at most burst + rate x W.
#[tokio::test(start_paused = true)]
async fn inv1_rate_gcra_holds_burst_plus_rate() {
    let sim = Sim::always_ok(10);
    let credential = CredentialConfig::with_rate("10/1s".parse().unwrap())
        .burst(4)
        .max_in_flight(50)
        .queue(100);
    let gate = build_gate(config_with(credential, Defaults::default()), &sim);
    let turn = gate.turn();
    let outcomes = turn.run((0..40).map(read)).await;
    assert_eq!(outcomes.len(), 40);
    let starts = sim.starts_ms();
    // A burst of 4 at once, then one per 100 ms.
    assert_eq!(starts.iter().filter(|t| **t == 0.0).count(), 4);
    assert!(max_in_window(&starts, 1_000.0) <= 14, "{starts:?}");
    // The inline threshold (2 s) bounds how many could wait: 4 + 20 at most.
    assert!(starts.len() <= 25);
}

/// Invariant 2: in-flight requests never exceed max_in_flight.
#[tokio::test(start_paused = true)]
async fn inv2_concurrency_never_exceeds_max_in_flight() {
    let sim = Sim::always_ok(300);
    let credential = CredentialConfig::with_rate("100/1s".parse().unwrap())
        .max_in_flight(3)
        .queue(50);
    // Room to wait for every permit inline: a queue that cannot drain
    // within the inline wait defers its calls at once (issue 50).
    let defaults = Defaults {
        inline_wait: Duration::from_secs(10),
        ..Defaults::default()
    };
    let gate = build_gate(config_with(credential, defaults), &sim);
    let outcomes = gate.turn().run((0..20).map(read)).await;
    assert!(outcomes.iter().all(Outcome::is_ok));
    assert_eq!(sim.count(), 20);
    assert_eq!(sim.peak_in_flight(), 3);
    assert_eq!(gate.in_flight("key"), 0, "no permit is left behind");
}

/// Invariant 3: the queue is bounded; a call arriving at a full queue is
/// shed at once, sends nothing, and is told an honest wait.
#[tokio::test(start_paused = true)]
async fn inv3_full_queue_sheds_at_once_and_sends_nothing() {
    let sim = Sim::always_ok(1_000);
    let credential = CredentialConfig::with_rate("100/1s".parse().unwrap())
        .max_in_flight(1)
        .queue(2)
        .expected_latency(Duration::from_secs(1));
    let gate = build_gate(config_with(credential, Defaults::default()), &sim);
    let turn = gate.turn();
    let started = Instant::now();
    let shed_at = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let calls = (0..10).map(|i| {
        let turn = turn.clone();
        let shed_at = shed_at.clone();
        async move {
            let outcome = turn.call(write(i)).await;
            if matches!(
                outcome,
                Outcome::RateLimited {
                    reason: Reason::Shed,
                    ..
                }
            ) {
                shed_at.lock().unwrap().push(started.elapsed());
            }
            outcome
        }
    });
    let outcomes = futures_util::future::join_all(calls).await;
    let shed: Vec<_> = outcomes
        .iter()
        .filter(|o| {
            matches!(
                o,
                Outcome::RateLimited {
                    reason: Reason::Shed,
                    ..
                }
            )
        })
        .collect();
    assert_eq!(shed.len(), 7, "{outcomes:?}");
    assert_eq!(sim.count(), 3, "shed calls send nothing");
    assert!(
        shed_at.lock().unwrap().iter().all(|t| t.is_zero()),
        "shed at once"
    );
    for (position, outcome) in shed.into_iter().enumerate() {
        let wait = outcome.retry_after().unwrap();
        // Two queued ahead, the calls shed before it, and itself, one at a
        // time, one second each: the waits grow with position (issue 50).
        assert_eq!(
            wait,
            Duration::from_secs(3 + position as u64),
            "{outcome:?}"
        );
        let Outcome::RateLimited { hint, .. } = outcome else {
            unreachable!()
        };
        assert!(hint.contains("while 1 call is running;"), "{hint}");
    }
}

/// Invariant 4: no outcome later than the deadline; no wait started that
/// the deadline cannot pay for.
#[tokio::test(start_paused = true)]
async fn inv4_deadlines_bound_every_outcome() {
    let sim = Sim::always_ok(5_000);
    let gate = build_gate(config("1/1s"), &sim);
    let started = Instant::now();
    let outcome = gate
        .call(read(1).deadline(Duration::from_millis(800)))
        .await;
    assert_eq!(started.elapsed(), Duration::from_millis(800));
    assert_eq!(
        outcome,
        Outcome::timed_out(Duration::from_millis(800), true)
    );

    // The next slot is 1 s away (the first request took it): a 500 ms
    // deadline cannot pay for the wait, so it is not started.
    let started = Instant::now();
    let outcome = gate
        .call(read(2).deadline(Duration::from_millis(150)))
        .await;
    assert!(started.elapsed().is_zero(), "did not sleep");
    assert!(
        matches!(
            outcome,
            Outcome::RateLimited {
                reason: Reason::Throttled,
                ..
            }
        ),
        "{outcome:?}"
    );
    assert_eq!(sim.count(), 1);
}

/// Invariant 5: once the server blocks a scope until U, nothing starts before U.
#[tokio::test(start_paused = true)]
async fn inv5_server_block_is_obeyed_by_every_call() {
    let sim = Sim::new(|n, _| {
        if n == 1 {
            Reply::status(429).header("retry-after", "1.5")
        } else {
            Reply::ok(20)
        }
    });
    let gate = build_gate(config("100/1s"), &sim);
    let first = gate.turn().run((0..1).map(read)).await;
    assert!(first[0].is_ok(), "retried inline after 1.5 s: {first:?}");
    let outcomes = gate.turn().run((10..15).map(read)).await;
    assert!(outcomes.iter().all(Outcome::is_ok));
    let starts = sim.starts_ms();
    assert_eq!(starts[0], 0.0);
    assert!(starts[1..].iter().all(|t| *t >= 1_500.0), "{starts:?}");
}

/// Invariant 6: one request per call unless the response was retryable;
/// attempts per call and retries per credential are bounded.
#[tokio::test(start_paused = true)]
async fn inv6_requests_per_call_are_bounded() {
    // A non-idempotent write that gets a 500 is not repeated.
    let sim = Sim::new(|_, _| Reply::status(500));
    let gate = build_gate(config("100/1s"), &sim);
    let outcome = gate.call(write(1)).await;
    assert_eq!(outcome.status(), "error");
    assert_eq!(sim.count(), 1);

    // A read that keeps getting 503 stops after max_attempts.
    let sim = Sim::new(|_, _| Reply::status(503));
    let defaults = Defaults {
        max_attempts: 3,
        ..Defaults::default()
    };
    let gate = build_gate(
        config_with(
            CredentialConfig::with_rate("100/1s".parse().unwrap()),
            defaults,
        ),
        &sim,
    );
    let outcome = gate.call(read(1)).await;
    assert_eq!(
        outcome,
        Outcome::error(
            Some(503),
            "upstream answered 503 Service Unavailable: {\"ok\":true}"
        )
    );
    assert_eq!(sim.count(), 3);

    // The retry budget caps retries across the credential: 30 failing
    // reads may retry at most floor (2) + 20% of 30 requests = 8 times.
    let sim = Sim::new(|_, _| Reply::status(502));
    let defaults = Defaults {
        retry_floor: 2,
        max_attempts: 4,
        ..Defaults::default()
    };
    let credential = CredentialConfig::with_rate("1000/1s".parse().unwrap()).max_in_flight(100);
    let gate = build_gate(config_with(credential, defaults), &sim);
    let outcomes = gate.turn().run((0..30).map(read)).await;
    assert!(outcomes.iter().all(|o| o.status() == "error"));
    assert_eq!(sim.count(), 30 + 8);
}

/// Invariant 7: waits up to the inline threshold are invisible; longer ones
/// surface as rate_limited with retry_after_ms.
#[tokio::test(start_paused = true)]
async fn inv7_short_waits_are_invisible_long_ones_surface() {
    let sim = Sim::always_ok(10);
    let credential = CredentialConfig::with_rate("2/1s".parse().unwrap()).max_in_flight(2);
    let gate = build_gate(config_with(credential, Defaults::default()), &sim);
    let outcomes = gate.turn().run((0..6).map(read)).await;
    // Slots a window (plus its 20 ms margin) apart: the first four wait
    // within the 2 s threshold and are answered; the last two could not
    // start before 2.04 s, so they surface at once (issue 50), told at
    // least that wait.
    assert!(outcomes[..4].iter().all(Outcome::is_ok), "{outcomes:?}");
    for outcome in &outcomes[4..] {
        assert_eq!(outcome.status(), "rate_limited", "{outcome:?}");
        assert!(outcome.retry_after().unwrap() >= Duration::from_millis(2_040));
    }
    assert_eq!(sim.starts_ms(), [0.0, 0.0, 1_020.0, 1_020.0]);

    let sim = Sim::always_ok(10);
    let gate = build_gate(config("1/5s"), &sim);
    let outcomes = gate.turn().run((0..2).map(read)).await;
    assert!(outcomes[0].is_ok());
    // Its slot is at 5 s plus the 20 ms window margin, past the inline
    // wait: it is deferred at once, at 0 s, not after waiting for the
    // first call's permit (issue 50).
    assert_eq!(
        outcomes[1].retry_after(),
        Some(Duration::from_millis(5_020)),
        "{:?}",
        outcomes[1]
    );
    assert_eq!(sim.count(), 1);
}

/// Invariant 8: concurrent identical reads send one request; the turn's
/// cache answers a repeat within its TTL; writes are never coalesced.
#[tokio::test(start_paused = true)]
async fn inv8_identical_reads_send_one_request() {
    let sim = Sim::always_ok(200);
    let gate = build_gate(config("100/1s"), &sim);
    let turn = gate.turn();
    let same = || Call::new("read", json!({"q": "refund", "page": 1}));
    let reordered = || {
        Call::new(
            "read",
            serde_json::from_str(r#"{ "page" : 1, "q" : "refund" }"#).unwrap(),
        )
    };
    let outcomes = turn
        .run(vec![same(), reordered(), same(), same(), same()])
        .await;
    assert!(outcomes.iter().all(Outcome::is_ok));
    assert_eq!(sim.count(), 1);
    // One answer, shared by every call it answers rather than copied.
    let first = ok_body(&outcomes[0]);
    assert!(
        outcomes
            .iter()
            .all(|o| std::ptr::eq(ok_body(o).value(), first.value()))
    );

    tokio::time::sleep(Duration::from_secs(2)).await;
    let cached = turn.call(same()).await;
    assert_eq!(sim.count(), 1, "the cache answers within its TTL");
    assert!(
        std::ptr::eq(ok_body(&cached).value(), first.value()),
        "the cache shares its answer"
    );

    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(turn.call(same()).await.is_ok());
    assert_eq!(sim.count(), 2, "after the TTL it asks again");

    assert!(gate.turn().call(same()).await.is_ok());
    assert_eq!(sim.count(), 3, "another turn has its own cache");

    let writes = turn
        .run(vec![
            Call::new("write", json!({"a": 1})),
            Call::new("write", json!({"a": 1})),
        ])
        .await;
    assert!(writes.iter().all(Outcome::is_ok));
    assert_eq!(sim.count(), 5, "writes are never coalesced");
}

fn ok_body(outcome: &Outcome) -> &sluice::Body {
    match outcome {
        Outcome::Ok { body, .. } => body,
        other => panic!("{other:?}"),
    }
}

/// Invariant 9: exactly one outcome per call, in call order.
#[tokio::test(start_paused = true)]
async fn inv9_one_outcome_per_call_in_order() {
    let sim = Sim::new(|_, request| {
        let n = request.payload["n"].as_u64().unwrap();
        // Later calls answer sooner, so completion order is reversed.
        Reply {
            body: format!("{{\"n\":{n}}}"),
            ..Reply::ok(500 - n * 10)
        }
    });
    let gate = build_gate(config("100/1s"), &sim);
    let outcomes = gate.turn().run((0..20).map(read)).await;
    assert_eq!(outcomes.len(), 20);
    for (n, outcome) in outcomes.iter().enumerate() {
        let Outcome::Ok { body, .. } = outcome else {
            panic!("{outcome:?}")
        };
        assert_eq!(body["n"], n);
    }
}

/// Invariant 10: a wait beyond quota_after, or a spent daily policy,
/// exhausts the scope: calls return quota_exhausted without sending.
#[tokio::test(start_paused = true)]
async fn inv10_spent_quota_stops_sending_until_reset() {
    let sim = Sim::new(|n, _| {
        if n == 1 {
            Reply::status(429).header("retry-after", "3600")
        } else {
            Reply::ok(10)
        }
    });
    let gate = build_gate(config("100/1s"), &sim);
    let first = gate.call(read(1)).await;
    assert!(
        matches!(&first, Outcome::QuotaExhausted { scope, .. } if scope == "api_key"),
        "{first:?}"
    );
    for i in 2..6 {
        let outcome = gate.call(read(i)).await;
        assert_eq!(outcome.status(), "quota_exhausted");
    }
    assert_eq!(sim.count(), 1);
    let status = gate.status();
    assert!(
        status
            .iter()
            .any(|s| s.scope == "api_key" && s.quota_exhausted)
    );

    tokio::time::sleep(Duration::from_secs(3601)).await;
    assert!(gate.call(read(9)).await.is_ok(), "the quota resets");
    assert_eq!(sim.count(), 2);

    // A daily policy with nothing left is a quota too, in its own scope.
    let sim = Sim::new(|_, _| {
        Reply::ok(10)
            .header("ratelimit-policy", r#""daily";q=1000;w=86400"#)
            .header("ratelimit", r#""daily";r=0;t=43200"#)
    });
    let gate = build_gate(config("100/1s"), &sim);
    assert!(gate.call(read(1)).await.is_ok());
    let outcome = gate.call(read(2)).await;
    assert!(
        matches!(&outcome, Outcome::QuotaExhausted { scope, retry_after_ms, .. } if scope == "daily" && *retry_after_ms == 43_200_000),
        "{outcome:?}"
    );
    assert_eq!(sim.count(), 1);
}

/// Invariant 7 under a trickle of short server waits: a penalty voids the
/// reservations waiting for it, and the calls re-reserve; a few milliseconds
/// of waiting, however often repeated, stay below the model's view.
/// (Found by the sidecar soak: after 8 voided reservations a call was
/// deferred with a wait of a few milliseconds.)
#[tokio::test(start_paused = true)]
async fn inv7_a_trickle_of_tiny_server_waits_stays_invisible() {
    let sim = Sim::new(|n, _| {
        if n % 10 == 0 {
            Reply::status(429).header("retry-after-ms", "3")
        } else {
            Reply::ok(5)
        }
    });
    // The latency the upstream has (5 ms): with the default 500 ms
    // expected, the queue's drain estimate would put the last hundred
    // calls past the inline wait before any answer corrected it, and defer
    // them at once (issue 50), which is not what this test is about.
    let credential = CredentialConfig::with_rate("1000/1s".parse().unwrap())
        .max_in_flight(100)
        .queue(1_000)
        .expected_latency(Duration::from_millis(5));
    let gate = build_gate(config_with(credential, Defaults::default()), &sim);
    let outcomes = gate.turn().run((0..400).map(write)).await;
    let deferred: Vec<_> = outcomes.iter().filter(|o| o.status() != "ok").collect();
    assert!(
        deferred.is_empty(),
        "{} deferred, e.g. {:?}",
        deferred.len(),
        deferred.first()
    );
    assert!(sim.count() >= 400);
}
