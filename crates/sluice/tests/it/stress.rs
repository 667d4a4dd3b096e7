//! A seeded stress test: thousands of calls with random responses,
//! latencies and deadlines, many turns at once. Exactly one outcome per
//! call, in order, none after its deadline; the rate and concurrency
//! promises hold on what the simulated server recorded.

use crate::support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use sluice::{Call, CredentialConfig, Defaults, Outcome, TransportError};
use support::*;
use tokio::time::Instant;

const RATE: &str = "20/1s";
const MAX_IN_FLIGHT: u32 = 6;

fn random_reply(rng: &mut StdRng, id: u64) -> Reply {
    let latency = rng.random_range(1..800);
    let body = format!("{{\"id\":{id}}}");
    match rng.random_range(0..100) {
        0..=69 => Reply {
            body,
            ..Reply::ok(latency)
        },
        70..=77 => {
            Reply::status(429).header("retry-after", format!("{:.1}", rng.random_range(0.0..3.0)))
        }
        78..=81 => Reply::status(429),
        82..=85 => Reply::status(503).latency_ms(latency),
        86..=88 => Reply::status(500).latency_ms(latency),
        89..=90 => Reply::status(404).latency_ms(latency),
        91..=92 => Reply {
            transport: Some(TransportError::connect("connection refused")),
            ..Reply::ok(1)
        },
        93..=94 => Reply {
            transport: Some(TransportError::other("connection reset")),
            ..Reply::ok(latency)
        },
        95..=96 => Reply {
            body,
            ..Reply::ok(latency)
        }
        .header("ratelimit-remaining", "0")
        .header("ratelimit-reset", "1"),
        // Garbage and absurd headers must change nothing dangerous.
        _ => Reply {
            body,
            ..Reply::ok(latency)
        }
        .header("retry-after", "-7")
        .header("ratelimit-reset", "99999999999999999999999999"),
    }
}

async fn run_seed(seed: u64) {
    let rng = Arc::new(Mutex::new(StdRng::seed_from_u64(seed)));
    let server_rng = rng.clone();
    let sim = Sim::new(move |_, request| {
        let id = request.payload["id"].as_u64().unwrap();
        random_reply(&mut server_rng.lock().unwrap(), id)
    });
    let credential = CredentialConfig::with_rate(RATE.parse().unwrap())
        .max_in_flight(MAX_IN_FLIGHT)
        .queue(12);
    let defaults = Defaults {
        backoff_base: Duration::from_millis(100),
        ..Defaults::default()
    };
    let gate = build_gate(config_with(credential, defaults), &sim);

    let mut turns = Vec::new();
    let mut expected = 0usize;
    for turn_index in 0..40u64 {
        let (calls, deadlines): (Vec<Call>, Vec<Duration>) = {
            let mut rng = rng.lock().unwrap();
            (0..rng.random_range(1..30u64))
                .map(|i| {
                    let id = turn_index * 1_000 + i;
                    // Some calls repeat an earlier read's arguments to exercise coalescing.
                    let args = if rng.random_bool(0.1) {
                        json!({"id": turn_index * 1_000})
                    } else {
                        json!({"id": id})
                    };
                    let tool = if rng.random_bool(0.7) {
                        "read"
                    } else {
                        "write"
                    };
                    let deadline = Duration::from_millis(rng.random_range(1..6_000));
                    (Call::new(tool, args).deadline(deadline), deadline)
                })
                .unzip()
        };
        expected += calls.len();
        let delay = Duration::from_millis(turn_index * 1_500);
        let turn = gate.turn();
        turns.push(tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let timed = calls.into_iter().zip(deadlines).map(|(call, deadline)| {
                let turn = turn.clone();
                let args = call.payload().clone();
                async move {
                    let started = Instant::now();
                    let outcome = turn.call(call).await;
                    (args, outcome, started.elapsed(), deadline)
                }
            });
            futures_util::future::join_all(timed).await
        }));
    }

    let mut seen = 0usize;
    let mut by_status = std::collections::BTreeMap::<String, usize>::new();
    for turn in turns {
        for (args, outcome, elapsed, deadline) in turn.await.unwrap() {
            seen += 1;
            let key = match &outcome {
                Outcome::RateLimited { reason, scope, .. } => {
                    format!("rate_limited/{}/{scope}", reason.as_str())
                }
                other => other.status().to_owned(),
            };
            *by_status.entry(key).or_default() += 1;
            // No outcome later than its deadline (the paused clock has no slack to hide in).
            assert!(
                elapsed <= deadline,
                "seed {seed}: {outcome:?} after {elapsed:?} > {deadline:?}"
            );
            // Each answer belongs to its own call: bodies echo the call's id.
            if let Outcome::Ok { body, .. } = &outcome {
                assert_eq!(body["id"], args["id"], "seed {seed}");
            }
        }
    }
    assert_eq!(seen, expected, "seed {seed}: one outcome per call");
    let starts = sim.starts_ms();
    assert!(
        starts.len() >= expected / 4,
        "seed {seed}: traffic flowed ({}): {by_status:?}",
        starts.len()
    );
    assert!(
        by_status.get("ok").copied().unwrap_or(0) >= expected / 5,
        "seed {seed}: {by_status:?}"
    );
    assert!(
        max_in_window(&starts, 1_000.0) <= 20,
        "seed {seed}: rate promise broken"
    );
    assert!(
        sim.peak_in_flight() <= MAX_IN_FLIGHT as usize,
        "seed {seed}: concurrency"
    );
    assert_eq!(
        gate.in_flight("key"),
        0,
        "seed {seed}: no permit left behind"
    );
    for status in gate.status() {
        assert_eq!(
            (status.in_flight, status.queued),
            (0, 0),
            "seed {seed}: {status:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn thousands_of_random_calls_keep_every_promise() {
    for seed in 0..8 {
        run_seed(seed).await;
    }
}
