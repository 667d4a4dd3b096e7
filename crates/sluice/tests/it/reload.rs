//! `Gate::reload` (issue 53): a new configuration's limits apply to calls
//! that start after it, while what each window has spent, the calls in
//! flight and the calls waiting are kept; a configuration a reload cannot
//! apply is refused and the old limits hold. Asserted on the simulated
//! upstream's recorded start times, on tokio's paused clock.

use crate::support;

use std::time::Duration;

use futures_util::future::join_all;
use serde_json::json;
use sluice::{Call, CredentialConfig, Defaults, Gate, GateConfig};
use support::{Sim, SimExecutor, build_gate, config_with, max_in_window};

/// One credential `key` at `rate`, with room for every call of a test in
/// flight at once (so only the rate decides when they start).
fn config(rate: &str) -> GateConfig {
    let mut credential = CredentialConfig::with_rate(rate.parse().unwrap());
    credential.max_in_flight = Some(32);
    config_with(credential, Defaults::default())
}

/// Reloads `gate` with `config`, returning the gate new calls go to.
fn reload(gate: &Gate<SimExecutor>, config: GateConfig) -> Gate<SimExecutor> {
    let mut installed = None;
    gate.reload(config, |new| installed = Some(new)).unwrap();
    installed.unwrap()
}

/// `n` reads with distinct arguments at once (none joins another).
async fn burst(gate: &Gate<SimExecutor>, from: u32, n: u32) {
    let calls = (from..from + n).map(|i| gate.call(Call::new("read", json!({ "i": i }))));
    for outcome in join_all(calls).await {
        assert!(outcome.is_ok(), "{outcome:?}");
    }
}

/// The starts at or after `from_ms`, relative to it.
fn starts_since(sim: &Sim, from_ms: f64) -> Vec<f64> {
    sim.starts_ms()
        .into_iter()
        .filter(|&t| t >= from_ms - 0.5)
        .map(|t| t - from_ms)
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_limit_raised_then_lowered_by_reload_applies_to_later_calls() {
    let sim = Sim::always_ok(5);
    let gate = build_gate(config("2/1s"), &sim);
    burst(&gate, 0, 4).await;
    let before = starts_since(&sim, 0.0);
    assert_eq!(max_in_window(&before, 1_000.0), 2, "2/1s: {before:?}");

    tokio::time::sleep(Duration::from_secs(10)).await;
    let raised = reload(&gate, config("10/1s"));
    let at = sim.since_origin_ms();
    burst(&raised, 100, 10).await;
    let after = starts_since(&sim, at);
    assert_eq!(after.len(), 10);
    assert!(
        after.iter().all(|&t| t < 1.0),
        "10/1s: all ten start at once: {after:?}"
    );

    tokio::time::sleep(Duration::from_secs(10)).await;
    let lowered = reload(&raised, config("1/1s"));
    let at = sim.since_origin_ms();
    burst(&lowered, 200, 2).await;
    let after = starts_since(&sim, at);
    assert_eq!(after.len(), 2);
    assert_eq!(max_in_window(&after, 1_000.0), 1, "1/1s: {after:?}");
}

/// 3/1s: three calls, a reload, three more. The window remembers the
/// first three, so the next three wait for it to roll: never more than
/// three starts in any rolling second. A restart would have forgotten them.
#[tokio::test(start_paused = true)]
async fn what_a_window_spent_survives_a_reload() {
    let sim = Sim::always_ok(5);
    let gate = build_gate(config("3/1s"), &sim);
    burst(&gate, 0, 3).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The same limit, another cap: a reload that changes something.
    let mut changed = CredentialConfig::with_rate("3/1s".parse().unwrap());
    changed.max_in_flight = Some(16);
    let reloaded = reload(&gate, config_with(changed, Defaults::default()));
    burst(&reloaded, 3, 3).await;
    let starts = sim.starts_ms();
    assert_eq!(starts.len(), 6);
    assert_eq!(max_in_window(&starts, 1_000.0), 3, "{starts:?}");
    assert!(
        starts[3..].iter().all(|&t| t >= 1_000.0 - 0.5),
        "the second three wait for the window: {starts:?}"
    );
}

/// A call already holding a reserved start when the reload comes keeps it
/// (it was reserved under the old limit); calls after the reload start
/// under the new one, around it.
#[tokio::test(start_paused = true)]
async fn a_waiting_call_keeps_its_start_across_a_reload() {
    let sim = Sim::always_ok(5);
    let gate = build_gate(config("1/1s"), &sim);
    let waiting = {
        let gate = gate.clone();
        tokio::spawn(async move { burst(&gate, 0, 2).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let reloaded = reload(&gate, config("10/1s"));
    burst(&reloaded, 10, 2).await;
    waiting.await.unwrap();
    let mut starts = sim.starts_ms();
    starts.sort_by(f64::total_cmp);
    let rounded: Vec<u64> = starts.iter().map(|t| (t / 100.0).round() as u64).collect();
    // 1/1s gave the two calls 0 s and (with the margin) about 1 s, and the
    // second keeps its start; the two new ones start at 0.1 s under 10/1s.
    assert_eq!(rounded, [0, 1, 1, 10], "{starts:?}");
}

#[tokio::test(start_paused = true)]
async fn a_reload_that_cannot_apply_is_refused_and_the_old_limit_holds() {
    let sim = Sim::always_ok(5);
    let gate = build_gate(config("2/1s"), &sim);
    let mut auto = CredentialConfig::with_rate("10/1s".parse().unwrap());
    auto.auto_concurrency = true;
    let mut installed = false;
    let refused = gate
        .reload(config_with(auto, Defaults::default()), |_| installed = true)
        .unwrap_err();
    assert_eq!(refused.field, "credentials.key.max_in_flight");
    assert!(!installed);
    let invalid = gate
        .reload(
            config("2/1s").tool("orphan", sluice::ToolConfig::read("nobody")),
            |_| installed = true,
        )
        .unwrap_err();
    assert!(invalid.field.starts_with("tools.orphan"), "{invalid}");
    assert!(!installed);
    burst(&gate, 0, 4).await;
    let starts = sim.starts_ms();
    assert_eq!(max_in_window(&starts, 1_000.0), 2, "still 2/1s: {starts:?}");
}

/// The engine's own view agrees: the reloaded gate's status shows the new
/// rate on the scope that kept its spend.
#[tokio::test(start_paused = true)]
async fn the_status_of_a_reloaded_scope_shows_the_new_rate() {
    let sim = Sim::always_ok(5);
    let gate = build_gate(config("2/1s"), &sim);
    burst(&gate, 0, 1).await;
    let reloaded = reload(&gate, config("7/1s"));
    let status = reloaded.status();
    assert_eq!(status.len(), 1, "one scope, shared by both gates");
    assert_eq!(status[0].rate.as_deref(), Some("7/1s"), "{:?}", status[0]);
    assert_eq!(status[0].max_in_flight, Some(32));
    assert_eq!(gate.status()[0].rate.as_deref(), Some("7/1s"));
}

/// Issue 53: a reload moves a live scope's queue bound, to an explicit
/// `queue` or to the default the new `inline_wait` gives, and the calls
/// already waiting past a lowered bound keep their places. One permit at
/// 100/1s: four calls, one running and three queued under `queue = 3`;
/// lowered to 1 while they wait, all four still answer, and a fifth is
/// shed at once. With `queue` unset, the bound follows `inline_wait`
/// (500 ms expected latency, one permit): 11 calls start within 5 s (one
/// every 500 ms, the first at once), so 10 wait; within 2 s, 5 and 4.
#[tokio::test(start_paused = true)]
async fn a_reload_moves_a_live_scopes_queue_bound_and_keeps_its_waiting_calls() {
    let sim = Sim::always_ok(100);
    let config = |queue: Option<u32>, inline_wait: u64| {
        let mut credential = CredentialConfig::with_rate("100/1s".parse().unwrap());
        credential.max_in_flight = Some(1);
        credential.queue = queue;
        let defaults = Defaults {
            inline_wait: Duration::from_secs(inline_wait),
            ..Defaults::default()
        };
        config_with(credential, defaults)
    };
    let queue_limit = |gate: &Gate<SimExecutor>| {
        gate.status()
            .into_iter()
            .find(|status| status.scope == "api_key")
            .and_then(|status| status.queue_limit)
    };
    let call = |i: u32| Call::new("read", json!({ "i": i }));
    let gate = build_gate(config(Some(3), 5), &sim);
    let waiting = join_all((0..4).map(|i| gate.call(call(i))));
    let lowered = async {
        tokio::time::sleep(Duration::from_millis(10)).await;
        let lowered = reload(&gate, config(Some(1), 5));
        assert_eq!(queue_limit(&lowered), Some(1));
        let shed = lowered.call(call(4)).await;
        assert_eq!(shed.status(), "rate_limited", "{shed:?}");
        lowered
    };
    let (outcomes, lowered) = tokio::join!(waiting, lowered);
    assert!(outcomes.iter().all(|o| o.is_ok()), "{outcomes:?}");
    assert_eq!(sim.count(), 4, "the four waiting calls sent, the fifth not");

    let defaulted = reload(&lowered, config(None, 5));
    assert_eq!(queue_limit(&defaulted), Some(10));
    let shorter = reload(&defaulted, config(None, 2));
    assert_eq!(queue_limit(&shorter), Some(4));
    // One running and four waiting; the sixth and seventh are shed.
    let outcomes = join_all((10..17).map(|i| shorter.call(call(i)))).await;
    let ok = outcomes.iter().filter(|o| o.is_ok()).count();
    assert_eq!(ok, 5, "{outcomes:?}");
}
