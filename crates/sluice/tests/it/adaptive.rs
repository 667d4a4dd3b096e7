//! Adaptive limits, deterministic: the engine against the fake API
//! in-process on tokio's paused clock, with seeded randomness. Assertions
//! are on what the fake recorded.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use sluice::{
    Call, CredentialConfig, Defaults, Gate, GateConfig, Outcome, Reason, Reserve, ToolConfig,
};
use sluice_fake::{Config, FakeApi, HeaderStyle, Latency, Limits, Record};
use support::fake_executor::FakeExecutor;
use support::*;

const KEY: &str = "Bearer k";

fn fake(limit: u32, style: HeaderStyle) -> FakeApi {
    let config = Config::new(Limits::new(limit, Duration::from_secs(1)))
        .with_headers(style)
        .with_latency(Latency::Fixed(Duration::from_millis(50)));
    FakeApi::new(config).unwrap()
}

fn fake_gate(
    credential: CredentialConfig,
    defaults: Defaults,
    executor: &FakeExecutor,
) -> Gate<FakeExecutor> {
    let config = GateConfig::default()
        .defaults(defaults)
        .credential("key", credential)
        .tool("read", ToolConfig::read("key"));
    Gate::builder(config, executor.clone())
        .seed(11)
        .build()
        .unwrap()
}

fn call(n: u64) -> Call {
    Call::new("read", json!({ "q": format!("q{n}") }))
}

/// Offers `per_second` distinct calls a second for `seconds`, each with a
/// 3 s deadline; returns the outcomes.
async fn offer(
    gate: &Gate<FakeExecutor>,
    per_second: u64,
    seconds: u64,
    first: u64,
) -> Vec<Outcome> {
    let mut calls = tokio::task::JoinSet::new();
    let every = Duration::from_secs(1) / per_second as u32;
    for n in 0..per_second * seconds {
        let gate = gate.clone();
        calls.spawn(async move {
            gate.call(call(first + n).deadline(Duration::from_secs(3)))
                .await
        });
        tokio::time::sleep(every).await;
    }
    let mut outcomes = Vec::new();
    while let Some(outcome) = calls.join_next().await {
        outcomes.push(outcome.unwrap());
    }
    outcomes
}

/// Accepted requests per whole second of the fake's clock.
fn accepted_per_second(records: &[Record], seconds: usize) -> Vec<usize> {
    let mut per = vec![0; seconds + 1];
    for record in records.iter().filter(|r| r.status == 200) {
        if let Some(slot) = per.get_mut((record.t_ms / 1_000.0) as usize) {
            *slot += 1;
        }
    }
    per
}

fn throttled_share(records: &[Record], from_ms: f64, to_ms: f64) -> f64 {
    let window: Vec<_> = records
        .iter()
        .filter(|r| r.t_ms >= from_ms && r.t_ms < to_ms)
        .collect();
    window.iter().filter(|r| r.status == 429).count() as f64 / window.len().max(1) as f64
}

/// `rate = "auto"` finds a hidden limit of 20/s within 10 s, then stays
/// under it (under 2% throttled); when the limit halves it re-converges.
#[tokio::test(start_paused = true)]
async fn auto_rate_converges_and_reconverges() {
    let executor = FakeExecutor::new(fake(20, HeaderStyle::RetryAfter), KEY);
    let gate = fake_gate(
        CredentialConfig::default().auto_rate(),
        Defaults::default(),
        &executor,
    );

    offer(&gate, 40, 60, 0).await;
    let first = executor.api().requests();
    let per_second = accepted_per_second(&first, 60);
    let converged = per_second.iter().position(|&n| n >= 18).unwrap();
    assert!(
        converged < 10,
        "reached 90% of 20/s at {converged} s: {per_second:?}"
    );
    let share = throttled_share(&first, 10_000.0, 60_000.0);
    assert!(
        share < 0.02,
        "{:.2}% throttled after converging",
        share * 100.0
    );
    let steady: usize = per_second[10..60].iter().sum();
    assert!(
        steady as f64 / 50.0 >= 18.0,
        "average {:.1}/s of 20",
        steady as f64 / 50.0
    );

    // The limit halves (the same key, a fresh server at 10/s).
    executor.swap(fake(10, HeaderStyle::RetryAfter));
    offer(&gate, 40, 60, 1_000_000).await;
    let second = executor.api().requests();
    let per_second = accepted_per_second(&second, 60);
    let late: usize = per_second[15..60].iter().sum();
    assert!(
        late as f64 / 45.0 >= 9.0,
        "re-converged to {:.1}/s of 10: {per_second:?}",
        late as f64 / 45.0
    );
    let share = throttled_share(&second, 15_000.0, 60_000.0);
    assert!(
        share < 0.02,
        "{:.2}% throttled after re-converging",
        share * 100.0
    );
    let status = gate.status();
    let auto = status[0].auto_rate.as_ref().unwrap();
    assert!((8.0..=11.0).contains(&auto.rate), "{auto:?}");
}

/// A stated policy lower than the configured rate is adopted from the
/// first response: no request beyond it, and no 429.
#[tokio::test(start_paused = true)]
async fn learned_policy_overrides_a_too_high_configured_rate() {
    let executor = FakeExecutor::new(fake(10, HeaderStyle::Ietf), KEY);
    let credential = CredentialConfig::with_rate("100/1s".parse().unwrap()).max_in_flight(50);
    let gate = fake_gate(credential, Defaults::default(), &executor);

    assert!(gate.call(call(0)).await.is_ok());
    let status = gate.status();
    let learned = status.iter().find(|s| s.learned_rate.is_some()).unwrap();
    assert_eq!(
        learned.learned_rate.as_deref(),
        Some("10/1s"),
        "{learned:?}"
    );

    let outcomes = gate.turn().run((1..30).map(call)).await;
    assert!(outcomes.iter().all(|o| o.status() != "error"));
    let records = executor.api().requests();
    let starts: Vec<f64> = records.iter().map(|r| r.t_ms).collect();
    assert!(max_in_window(&starts, 1_000.0) <= 10, "{starts:?}");
    assert!(records.iter().all(|r| r.status == 200), "nothing throttled");
    assert!(
        records.len() >= 20,
        "calls kept flowing at the learned rate: {}",
        records.len()
    );

    // learn = false keeps the configured rate: the fake then throttles.
    let executor = FakeExecutor::new(fake(10, HeaderStyle::Ietf), KEY);
    let credential = CredentialConfig::with_rate("100/1s".parse().unwrap())
        .max_in_flight(50)
        .learn(false);
    let gate = fake_gate(
        credential,
        Defaults {
            max_attempts: 1,
            ..Defaults::default()
        },
        &executor,
    );
    gate.call(call(0)).await;
    gate.turn().run((1..30).map(call)).await;
    assert!(executor.api().requests().iter().any(|r| r.status == 429));
}

/// `max_in_flight = "auto"`: the cap follows rate x latency up and down.
#[tokio::test(start_paused = true)]
async fn concurrency_cap_follows_latency() {
    let slow = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = slow.clone();
    let sim = Sim::new(move |_, _| {
        Reply::ok(if flag.load(std::sync::atomic::Ordering::SeqCst) {
            500
        } else {
            100
        })
    });
    let credential = CredentialConfig::with_rate("20/1s".parse().unwrap())
        .auto_concurrency()
        .max_in_flight(16);
    let gate = build_gate(config_with(credential, Defaults::default()), &sim);
    let cap = |gate: &Gate<SimExecutor>| gate.status()[0].max_in_flight.unwrap();

    let drive = |gate: Gate<SimExecutor>, first: usize| async move {
        for wave in 0..20 {
            let calls = (0..4).map(|i| Call::new("read", json!({ "n": first + wave * 10 + i })));
            gate.turn().run(calls).await;
        }
    };
    drive(gate.clone(), 0).await;
    // 20/s x 100 ms = 2 in flight.
    assert_eq!(cap(&gate), 2);
    assert!(sim.peak_in_flight() <= 4);

    slow.store(true, std::sync::atomic::Ordering::SeqCst);
    drive(gate.clone(), 1_000).await;
    // 20/s x 500 ms = 10 in flight.
    assert_eq!(cap(&gate), 10);

    slow.store(false, std::sync::atomic::Ordering::SeqCst);
    drive(gate.clone(), 2_000).await;
    assert_eq!(cap(&gate), 2);
    assert!(gate.status()[0].max_in_flight_auto);
}

/// `reserve = 3`: sluice stops when the server's remaining falls to 3, so
/// 3 of every window are left to the key's other users.
#[tokio::test(start_paused = true)]
async fn reserve_leaves_headroom_in_every_window() {
    let executor = FakeExecutor::new(fake(10, HeaderStyle::Ietf), KEY);
    let credential = CredentialConfig::default()
        .max_in_flight(1)
        .learn(false)
        .reserve(Reserve::Requests(3));
    let gate = fake_gate(credential, Defaults::default(), &executor);
    offer(&gate, 20, 10, 0).await;
    let records = executor.api().requests();
    let starts: Vec<f64> = records.iter().map(|r| r.t_ms).collect();
    assert!(records.iter().all(|r| r.status == 200));
    assert!(
        starts.len() >= 50,
        "sluice kept spending its part: {}",
        starts.len()
    );
    assert!(
        max_in_window(&starts, 1_000.0) <= 7,
        "left 3 of 10 in every window: {starts:?}"
    );
}

/// A turn may cause at most `turn_budget` upstream requests.
#[tokio::test(start_paused = true)]
async fn turn_budget_stops_a_runaway_turn() {
    let sim = Sim::always_ok(10);
    let defaults = Defaults {
        turn_budget: Some(5),
        ..Defaults::default()
    };
    let gate = build_gate(
        config_with(
            CredentialConfig::with_rate("100/1s".parse().unwrap()),
            defaults,
        ),
        &sim,
    );
    let turn = gate.turn();
    let outcomes = turn
        .run((0..12).map(|n| Call::new("read", json!({ "n": n }))))
        .await;
    assert_eq!(sim.count(), 5);
    let stopped: Vec<_> = outcomes
        .iter()
        .filter(|o| {
            matches!(
                o,
                Outcome::RateLimited {
                    reason: Reason::TurnBudget,
                    ..
                }
            )
        })
        .collect();
    assert_eq!(stopped.len(), 7);
    let Outcome::RateLimited { hint, .. } = stopped[0] else {
        unreachable!()
    };
    assert!(hint.contains("stop fanning out"), "{hint}");
    // Cached reads cost nothing; a new turn has its own budget.
    assert!(
        turn.call(Call::new("read", json!({ "n": 0 })))
            .await
            .is_ok()
    );
    assert!(
        gate.turn()
            .call(Call::new("read", json!({ "n": 99 })))
            .await
            .is_ok()
    );
    assert_eq!(sim.count(), 6);
}

/// Slow start grows the rate with every answer, and the calls that sleep
/// on starts reserved under the slower rate reserve again when it rises:
/// eight calls at once against a hidden 20/s start four at once (the
/// initial 4/s) while the other four sleep on starts a second out; once
/// those four are answered (50 ms) the rate is 8/s, and the sleeping calls
/// reserve again and start at once, instead of sleeping until the first
/// second has passed.
#[tokio::test(start_paused = true)]
async fn slow_start_does_not_keep_the_starts_of_the_slower_rate() {
    let executor = FakeExecutor::new(fake(20, HeaderStyle::RetryAfter), KEY);
    let gate = fake_gate(
        CredentialConfig::default().auto_rate().max_in_flight(20),
        Defaults::default(),
        &executor,
    );
    let outcomes = gate.turn().run((0..8).map(call)).await;
    assert!(outcomes.iter().all(Outcome::is_ok), "{outcomes:?}");
    let starts: Vec<f64> = executor.api().requests().iter().map(|r| r.t_ms).collect();
    let early = starts.iter().filter(|&&t| t < 200.0).count();
    assert_eq!(early, 8, "started in the first 200 ms: {starts:?}");
}

/// Against a hidden 20/s, offered 60/s, the first second takes nearly the
/// whole limit, and the ramp throttles at most two requests.
#[tokio::test(start_paused = true)]
async fn slow_start_reaches_the_limit_within_the_first_second() {
    let executor = FakeExecutor::new(fake(20, HeaderStyle::RetryAfter), KEY);
    let gate = fake_gate(
        CredentialConfig::default().auto_rate(),
        Defaults::default(),
        &executor,
    );
    offer(&gate, 60, 3, 0).await;
    let records = executor.api().requests();
    let per_second = accepted_per_second(&records, 3);
    assert!(per_second[0] >= 15, "{per_second:?}");
    let throttled = records.iter().filter(|r| r.status == 429).count();
    assert!(throttled <= 2, "{throttled} throttled: {per_second:?}");
}
