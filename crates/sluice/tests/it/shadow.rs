//! Shadow mode (`enforce = false`, issue 20): every call is sent at once and
//! the server's answer comes back as is, while each decision enforcing
//! would have made is counted. Asserted on the simulated upstream's
//! recorded start times, on tokio's paused clock.

use crate::support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use sluice::scope::{ScopeStatus, ShadowStatus};
use sluice::{
    Call, CredentialConfig, Defaults, Event, Gate, Observer, Outcome, Reason, ShadowDecision,
};
use support::*;

fn read(n: usize) -> Call {
    Call::new("read", json!({ "n": n }))
}

/// No margin, so that waits are whole windows.
fn exact() -> Defaults {
    Defaults {
        window_margin: Duration::ZERO,
        ..Defaults::default()
    }
}

/// Records every shadow decision and every real wait the engine reports.
#[derive(Default)]
struct Seen {
    shadow: Mutex<Vec<(String, ShadowDecision, Duration)>>,
    waits: Mutex<Vec<Duration>>,
}

impl Observer for Seen {
    fn observe(&self, event: &Event<'_>) {
        match event {
            Event::Shadow {
                scope,
                decision,
                wait,
                ..
            } => self
                .shadow
                .lock()
                .unwrap()
                .push(((*scope).to_owned(), *decision, *wait)),
            Event::Wait { wait, .. } => self.waits.lock().unwrap().push(*wait),
            _ => {}
        }
    }
}

fn gate_with(credential: CredentialConfig, sim: &Arc<Sim>, seen: &Arc<Seen>) -> Gate<SimExecutor> {
    Gate::builder(config_with(credential, exact()), SimExecutor(sim.clone()))
        .seed(7)
        .observer(seen.clone())
        .build()
        .unwrap()
}

fn primary(gate: &Gate<SimExecutor>) -> ScopeStatus {
    gate.status()
        .into_iter()
        .find(|scope| scope.scope == "api_key")
        .unwrap()
}

fn rated(rate: &str) -> CredentialConfig {
    CredentialConfig::with_rate(rate.parse().unwrap())
        .max_in_flight(20)
        .queue(40)
}

/// Eight reads at once on `2/1s`: enforcing starts two per second and
/// defers what would wait past the 2 s inline threshold; shadow mode
/// sends all eight at once and counts exactly those waits and deferrals.
#[tokio::test(start_paused = true)]
async fn shadow_sends_at_once_and_counts_what_enforcing_does() {
    let enforced_sim = Sim::always_ok(100);
    let enforced_seen = Arc::new(Seen::default());
    let enforced = gate_with(rated("2/1s"), &enforced_sim, &enforced_seen);
    let outcomes = enforced.turn().run((0..8).map(read)).await;
    let deferred = outcomes
        .iter()
        .filter(|o| {
            matches!(
                o,
                Outcome::RateLimited {
                    reason: Reason::Throttled,
                    ..
                }
            )
        })
        .count();
    assert_eq!(deferred, 2);
    assert_eq!(
        enforced_sim.starts_ms(),
        [0.0, 0.0, 1_000.0, 1_000.0, 2_000.0, 2_000.0]
    );
    let enforced_waits = enforced_seen.waits.lock().unwrap().clone();

    let sim = Sim::always_ok(100);
    let seen = Arc::new(Seen::default());
    let shadow = gate_with(rated("2/1s").enforce(false), &sim, &seen);
    let outcomes = shadow.turn().run((0..8).map(read)).await;
    assert!(outcomes.iter().all(Outcome::is_ok), "{outcomes:?}");
    assert_eq!(sim.starts_ms(), [0.0; 8], "every call was sent at once");

    let status = primary(&shadow);
    let total_ms = enforced_waits.iter().map(Duration::as_millis).sum::<u128>() as u64;
    assert_eq!(
        status.shadow,
        ShadowStatus {
            would_wait: enforced_waits.len() as u64,
            would_wait_ms_total: total_ms,
            would_defer: deferred as u64,
            would_shed: 0,
        }
    );
    assert_eq!(status.shadow.would_wait_ms_total, 6_000);
    assert!(seen.waits.lock().unwrap().is_empty(), "nothing waited");
    let decisions: Vec<ShadowDecision> = seen.shadow.lock().unwrap().iter().map(|d| d.1).collect();
    assert_eq!(
        decisions
            .iter()
            .filter(|d| **d == ShadowDecision::Wait)
            .count(),
        4
    );
    assert_eq!(
        decisions
            .iter()
            .filter(|d| **d == ShadowDecision::Defer)
            .count(),
        2
    );
    // What really went out is counted apart from the model: 8 in a window of 2.
    assert_eq!(status.sent_in_window, 8);
    assert_eq!(status.sent_window_ms, 1_000);
    assert_eq!(status.sent_history.last(), Some(&8));
    assert_eq!(status.outcomes["ok"], 8);
    assert_eq!(primary(&enforced).shadow, ShadowStatus::default());
}

/// One permit and a queue of one: enforcing runs one, queues one and
/// sheds the third; shadow mode runs all three at once and counts a wait
/// and a shed.
#[tokio::test(start_paused = true)]
async fn shadow_counts_queue_waits_and_sheds_without_holding_anyone() {
    let sim = Sim::always_ok(500);
    let seen = Arc::new(Seen::default());
    let credential = CredentialConfig::default()
        .max_in_flight(1)
        .queue(1)
        .enforce(false);
    let gate = gate_with(credential, &sim, &seen);
    let outcomes = gate.turn().run((0..3).map(read)).await;
    assert!(outcomes.iter().all(Outcome::is_ok), "{outcomes:?}");
    assert_eq!(sim.starts_ms(), [0.0; 3]);
    assert_eq!(sim.peak_in_flight(), 3);
    let status = primary(&gate);
    assert_eq!(status.shadow.would_wait, 1);
    assert_eq!(status.shadow.would_shed, 1);
    assert!(status.shadow.would_wait_ms_total > 0, "{:?}", status.shadow);
    assert_eq!(status.peak_in_flight, 3);
    assert_eq!(status.queued, 0, "nobody is left in the queue");
}

/// A server's 429 still comes back as the structured outcome, after one
/// attempt; the block it sets is a deferral for the next call, which is
/// sent all the same.
#[tokio::test(start_paused = true)]
async fn a_servers_429_is_answered_as_usual_and_the_block_is_recorded() {
    let sim = Sim::new(|n, _| {
        if n == 1 {
            Reply::status(429).header("retry-after", "5")
        } else {
            Reply::ok(10)
        }
    });
    let seen = Arc::new(Seen::default());
    let gate = gate_with(rated("10/1s").enforce(false), &sim, &seen);
    let first = gate.call(read(1)).await;
    match &first {
        Outcome::RateLimited {
            reason: Reason::Throttled,
            retry_after_ms,
            ..
        } => assert_eq!(*retry_after_ms, 5_000),
        other => panic!("{other:?}"),
    }
    assert_eq!(sim.count(), 1, "no retry in shadow mode");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let second = gate.call(read(2)).await;
    assert!(second.is_ok(), "{second:?}");
    assert_eq!(sim.starts_ms(), [0.0, 100.0]);
    let status = primary(&gate);
    assert_eq!(status.shadow.would_defer, 1);
    assert_eq!(status.blocked_for_ms, Some(4_890));
    let decisions = seen.shadow.lock().unwrap().clone();
    assert_eq!(
        decisions,
        [(
            "api_key".to_owned(),
            ShadowDecision::Defer,
            Duration::from_millis(4_900)
        )]
    );
}

/// Coalescing and the turn cache stay on: identical reads send one request.
#[tokio::test(start_paused = true)]
async fn coalescing_stays_on() {
    let sim = Sim::always_ok(50);
    let seen = Arc::new(Seen::default());
    let gate = gate_with(rated("1/1s").enforce(false), &sim, &seen);
    let turn = gate.turn();
    let outcomes = turn.run((0..4).map(|_| read(1))).await;
    assert!(outcomes.iter().all(Outcome::is_ok));
    assert!(turn.call(read(1)).await.is_ok());
    assert_eq!(sim.count(), 1);
    assert_eq!(primary(&gate).shadow, ShadowStatus::default());
}

/// A spent quota would answer `quota_exhausted` without sending: in
/// shadow mode it is a deferral, and the call is sent.
#[tokio::test(start_paused = true)]
async fn a_spent_quota_is_a_deferral() {
    let sim = Sim::new(|n, _| {
        if n == 1 {
            // A wait longer than quota_after (5 min) marks the quota spent.
            Reply::status(429).header("retry-after", "3600")
        } else {
            Reply::ok(10)
        }
    });
    let seen = Arc::new(Seen::default());
    let gate = gate_with(rated("10/1s").enforce(false), &sim, &seen);
    let first = gate.call(read(1)).await;
    assert_eq!(first.status(), "rate_limited", "{first:?}");
    let second = gate.call(read(2)).await;
    assert!(second.is_ok(), "{second:?}");
    assert_eq!(sim.count(), 2);
    let status = primary(&gate);
    assert!(status.quota_exhausted);
    assert_eq!(status.shadow.would_defer, 1);
}

/// A turn over its request budget would be deferred; in shadow it is sent.
#[tokio::test(start_paused = true)]
async fn a_spent_turn_budget_is_a_deferral() {
    let sim = Sim::always_ok(10);
    let seen = Arc::new(Seen::default());
    let defaults = Defaults {
        turn_budget: Some(2),
        ..exact()
    };
    let config = config_with(rated("100/1s").enforce(false), defaults);
    let gate = Gate::builder(config, SimExecutor(sim.clone()))
        .seed(7)
        .observer(seen.clone())
        .build()
        .unwrap();
    let outcomes = gate.turn().run((0..3).map(read)).await;
    assert!(outcomes.iter().all(Outcome::is_ok), "{outcomes:?}");
    assert_eq!(sim.count(), 3);
    assert_eq!(primary(&gate).shadow.would_defer, 1);
}

/// `GateConfig::shadow_all` is the `--shadow` trial run: every credential records only.
#[tokio::test(start_paused = true)]
async fn shadow_all_puts_every_credential_in_shadow_mode() {
    let sim = Sim::always_ok(10);
    let config = config_with(rated("1/1s"), exact()).shadow_all();
    assert!(config.credentials.values().all(|c| !c.enforce));
    let gate = build_gate(config, &sim);
    let outcomes = gate.turn().run((0..5).map(read)).await;
    assert!(outcomes.iter().all(Outcome::is_ok));
    assert_eq!(sim.starts_ms(), [0.0; 5]);
    let shadow = primary(&gate).shadow;
    assert_eq!((shadow.would_wait, shadow.would_defer), (2, 2));
}

/// One decision per call: a call that would have queued and then waited
/// for a slot is one wait (of both), and one that would have queued and
/// then been deferred is a deferral only.
#[tokio::test(start_paused = true)]
async fn one_decision_per_call() {
    let sim = Sim::always_ok(100);
    let seen = Arc::new(Seen::default());
    let credential = CredentialConfig::with_rate("1/1s".parse().unwrap())
        .max_in_flight(1)
        .queue(8)
        .enforce(false);
    let gate = gate_with(credential, &sim, &seen);
    let outcomes = gate.turn().run((0..4).map(read)).await;
    assert!(outcomes.iter().all(Outcome::is_ok));
    assert_eq!(sim.starts_ms(), [0.0; 4]);
    let decisions = seen.shadow.lock().unwrap().clone();
    let kinds: Vec<ShadowDecision> = decisions.iter().map(|d| d.1).collect();
    assert_eq!(
        kinds,
        [
            ShadowDecision::Wait,
            ShadowDecision::Wait,
            ShadowDecision::Defer
        ]
    );
    // Each wait is the queue's estimate plus the slot's wait (1 s, then 2 s).
    assert!(decisions[0].2 > Duration::from_secs(1), "{decisions:?}");
    assert!(decisions[1].2 > Duration::from_secs(2), "{decisions:?}");
    let status = primary(&gate).shadow;
    assert_eq!((status.would_wait, status.would_defer), (2, 1));
}
