//! Issue 14 on tokio's paused clock: several windows at once, limit
//! groups, costs in units with a true-up, and priorities — asserted on the
//! request start times the simulated upstream recorded, on both cell types
//! (the exact sliding window, and GCRA when `burst` is set).

use crate::support;

use std::time::Duration;

use serde_json::json;
use sluice::{
    Call, Cost, CredentialConfig, Defaults, GateConfig, GroupConfig, Outcome, Priority, Reason,
    Settle, ToolConfig, UnitConfig,
};
use support::*;

fn rate(text: &str) -> sluice::Rate {
    text.parse().unwrap()
}

/// No window margin, so that the times below are the exact windows.
fn exact() -> Defaults {
    Defaults {
        window_margin: Duration::ZERO,
        ..Defaults::default()
    }
}

fn gate_of(
    credential: CredentialConfig,
    tools: &[(&str, ToolConfig)],
    sim: &std::sync::Arc<Sim>,
) -> sluice::Gate<SimExecutor> {
    let mut config = GateConfig::default()
        .defaults(exact())
        .credential("key", credential);
    for (name, tool) in tools {
        config = config.tool(name, tool.clone());
    }
    build_gate(config, sim)
}

fn call(tool: &str, n: usize) -> Call {
    Call::new(tool, json!({ "n": n }))
}

fn window_of(outcome: &Outcome) -> Option<(&str, Reason, Option<&str>)> {
    match outcome {
        Outcome::RateLimited {
            scope,
            reason,
            window,
            ..
        } => Some((scope.as_str(), *reason, window.as_deref())),
        _ => None,
    }
}

/// Several windows hold at once, on both cell types: waves of calls over
/// 25 s never start more than 3 in any second nor 5 in any 10 s, and a
/// call the long window defers is told so.
#[tokio::test(start_paused = true)]
async fn every_window_holds_at_once_on_every_cell_type() {
    for burst in [None, Some(3)] {
        let sim = Sim::always_ok(10);
        let mut credential = CredentialConfig::with_rate(rate("3/1s"))
            .window(rate("5/10s"))
            .max_in_flight(20)
            .queue(50);
        if let Some(burst) = burst {
            credential = credential.burst(burst);
        }
        let gate = gate_of(credential, &[("read", ToolConfig::read("key"))], &sim);
        let mut deferred = Vec::new();
        for wave in 0..25 {
            let outcomes = gate
                .turn()
                .run((0..4).map(|i| call("read", wave * 10 + i)))
                .await;
            deferred.extend(
                outcomes
                    .iter()
                    .filter_map(window_of)
                    .map(|(s, r, w)| (s.to_owned(), r, w.map(str::to_owned))),
            );
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let starts = sim.starts_ms();
        assert!(starts.len() >= 10, "{burst:?}: {starts:?}");
        // GCRA: at most burst + rate x W in a rolling second.
        let per_second = if burst.is_some() { 6 } else { 3 };
        assert!(
            max_in_window(&starts, 1_000.0) <= per_second,
            "{burst:?}: {starts:?}"
        );
        assert!(
            max_in_window(&starts, 10_000.0) <= 5,
            "{burst:?}: {starts:?}"
        );
        assert!(
            deferred.contains(&(
                "api_key".to_owned(),
                Reason::Throttled,
                Some("5/10s".to_owned())
            )),
            "{burst:?}: {deferred:?}"
        );
    }
}

/// A reservation is all or nothing: the wait returned is the longest of
/// every window, and a deferral charges no window.
#[tokio::test(start_paused = true)]
async fn a_deferred_call_charges_no_window() {
    let sim = Sim::always_ok(0);
    let credential = CredentialConfig::with_rate(rate("2/1s")).window(rate("3/1m"));
    let gate = gate_of(credential, &[("read", ToolConfig::read("key"))], &sim);
    let outcomes = gate.turn().run((0..3).map(|i| call("read", i))).await;
    // Two now, the third a second later (inline); the fourth would need
    // the minute window: deferred with that wait, charging nothing.
    assert!(outcomes.iter().all(Outcome::is_ok));
    assert_eq!(sim.starts_ms(), [0.0, 0.0, 1_000.0]);
    let outcome = gate.turn().call(call("read", 9)).await;
    let Outcome::RateLimited {
        retry_after_ms,
        window,
        ..
    } = &outcome
    else {
        panic!("{outcome:?}");
    };
    assert_eq!(window.as_deref(), Some("3/1m"));
    assert_eq!(*retry_after_ms, 59_000);
    tokio::time::sleep(Duration::from_millis(59_000)).await;
    assert!(gate.turn().call(call("read", 10)).await.is_ok());
    assert_eq!(sim.starts_ms(), [0.0, 0.0, 1_000.0, 60_000.0]);
}

fn grouped(burst: Option<u32>) -> CredentialConfig {
    let mut group = GroupConfig::with_rate(rate("2/10s")).max_in_flight(1);
    // Room for calls that reach the window: the default queue holds only
    // what can start within the inline wait (one call here, issue 50).
    group.queue = Some(4);
    if let Some(burst) = burst {
        group = group.burst(burst);
    }
    CredentialConfig::with_rate(rate("20/1s"))
        .max_in_flight(10)
        .group("search", group)
}

fn group_tools() -> Vec<(&'static str, ToolConfig)> {
    vec![
        ("search", ToolConfig::read("key").group("search")),
        ("get", ToolConfig::read("key")),
    ]
}

/// A group is a scope of its own: its window and semaphore hold, the
/// credential's too, and an exhausted group never stalls tools outside it.
#[tokio::test(start_paused = true)]
async fn an_exhausted_group_never_stalls_tools_outside_it() {
    for burst in [None, Some(2)] {
        let sim = Sim::always_ok(100);
        let gate = gate_of(grouped(burst), &group_tools(), &sim);
        let turn = gate.turn();
        let calls = (0..8)
            .map(|i| call("search", i))
            .chain((0..6).map(|i| call("get", 100 + i)));
        let outcomes = turn.run(calls).await;
        let records = sim.records();
        let search: Vec<f64> = records
            .iter()
            .filter(|r| r.tool == "search")
            .map(|r| r.t_ms)
            .collect();
        let get: Vec<f64> = records
            .iter()
            .filter(|r| r.tool == "get")
            .map(|r| r.t_ms)
            .collect();
        assert_eq!(get, [0.0; 6], "{burst:?}: the other tool started at once");
        assert_eq!(search, [0.0, 100.0], "{burst:?}");
        // One search in flight at a time (100 ms each).
        for pair in search.windows(2) {
            assert!(pair[1] - pair[0] >= 100.0 - 1e-6, "{burst:?}: {search:?}");
        }
        let deferred: Vec<_> = outcomes.iter().filter_map(window_of).collect();
        assert!(!deferred.is_empty(), "{burst:?}");
        assert!(
            deferred.iter().all(|(scope, _, _)| *scope == "search"),
            "{burst:?}: {deferred:?}"
        );
        assert!(
            deferred
                .iter()
                .any(|(_, _, window)| *window == Some("2/10s")),
            "{burst:?}: {deferred:?}"
        );
    }
}

/// A scope the server reports maps onto the configured group of that
/// name: GitHub's `x-ratelimit-resource: search` with nothing remaining
/// blocks the group, not the credential.
#[tokio::test(start_paused = true)]
async fn a_reported_scope_maps_onto_its_group() {
    let sim = Sim::new(|_, request| {
        if &*request.tool == "search" {
            Reply::ok(0)
                .header("x-ratelimit-resource", "search")
                .header("x-ratelimit-limit", "30")
                .header("x-ratelimit-remaining", "0")
                .header("x-ratelimit-reset", "60")
        } else {
            Reply::ok(0)
        }
    });
    let gate = gate_of(grouped(None), &group_tools(), &sim);
    assert!(gate.turn().call(call("search", 1)).await.is_ok());
    let blocked = gate.turn().call(call("search", 2)).await;
    assert_eq!(
        window_of(&blocked).map(|w| w.0),
        Some("search"),
        "{blocked:?}"
    );
    assert!(gate.turn().call(call("get", 3)).await.is_ok());
    assert_eq!(sim.count(), 2);
    let scopes: Vec<String> = gate.status().into_iter().map(|s| s.scope).collect();
    assert_eq!(scopes, ["api_key", "search"]);
}

fn tokens(burst: Option<u32>) -> CredentialConfig {
    let mut unit = UnitConfig::with_rate(rate("100/1s"));
    unit.burst = burst;
    CredentialConfig::with_rate(rate("50/1s"))
        .max_in_flight(20)
        .unit("tokens", unit)
}

fn chat() -> ToolConfig {
    ToolConfig::write("key").cost("tokens", Cost::Argument("max_tokens".into()))
}

/// An upstream that answers after `latency_ms` that the call used its
/// `used` argument, and the chat tool settling its tokens from that.
fn settling(latency_ms: u64) -> (std::sync::Arc<Sim>, ToolConfig) {
    let sim = Sim::new(move |_, request| {
        let used = request.payload["used"].as_u64().unwrap();
        Reply {
            body: json!({"usage": {"total_tokens": used}}).to_string(),
            ..Reply::ok(latency_ms)
        }
    });
    let tool = chat().settle("tokens", Settle::Pointer("/usage/total_tokens".into()));
    (sim, tool)
}

fn ask(n: usize, max_tokens: u64) -> Call {
    Call::new("chat", json!({ "n": n, "max_tokens": max_tokens }))
}

/// Tokens spent in any second stay within the unit's window, on both
/// cell types; each call spends its own cost.
#[tokio::test(start_paused = true)]
async fn costs_hold_the_unit_window_on_every_cell_type() {
    for burst in [None, Some(100)] {
        let sim = Sim::always_ok(10);
        let gate = gate_of(tokens(burst), &[("chat", chat())], &sim);
        for wave in 0..6 {
            gate.turn()
                .run((0..4).map(|i| ask(wave * 10 + i, 30 + 5 * i as u64)))
                .await;
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let records = sim.records();
        assert!(records.len() >= 8, "{burst:?}: {}", records.len());
        for (i, first) in records.iter().enumerate() {
            let spent: u64 = records[i..]
                .iter()
                .take_while(|r| r.t_ms - first.t_ms < 1_000.0 - 1e-6)
                .map(|r| r.args["max_tokens"].as_u64().unwrap())
                .sum();
            // GCRA: at most burst + rate x W.
            let bound = if burst.is_some() { 200 } else { 100 };
            assert!(
                spent <= bound,
                "{burst:?}: {spent} tokens in the second from {}",
                first.t_ms
            );
        }
    }
}

/// A cost from a bad argument is an error naming it; a cost that can
/// never fit is an error, never a `rate_limited`; neither sends anything.
#[tokio::test(start_paused = true)]
async fn bad_or_impossible_costs_are_errors_and_send_nothing() {
    let sim = Sim::always_ok(0);
    let gate = gate_of(tokens(None), &[("chat", chat())], &sim);
    let missing = gate.turn().call(Call::new("chat", json!({}))).await;
    let negative = gate
        .turn()
        .call(Call::new("chat", json!({"max_tokens": -5})))
        .await;
    let huge = gate.turn().call(ask(1, 101)).await;
    for outcome in [&missing, &negative] {
        let Outcome::Error { message, .. } = outcome else {
            panic!("{outcome:?}");
        };
        assert!(message.contains("\"max_tokens\""), "{message}");
    }
    let Outcome::Error { message, .. } = &huge else {
        panic!("{huge:?}");
    };
    assert!(message.contains("can never fit"), "{message}");
    assert_eq!(sim.count(), 0);
    // A fixed cost too large for the unit is refused at load.
    let config = GateConfig::default().credential("key", tokens(None)).tool(
        "chat",
        ToolConfig::write("key").cost("tokens", Cost::Fixed(500)),
    );
    assert_eq!(
        config.validate().unwrap_err().field,
        "tools.chat.cost.tokens"
    );
}

/// The true-up: estimated 60 tokens, the answer says 10, so the 50 left
/// over are given back at the call's start and the next call fits at
/// once; an over-spend (90 for an estimate of 30) is charged there, and
/// the next call waits for it to leave the window.
#[tokio::test(start_paused = true)]
async fn settle_refunds_and_charges_at_the_start() {
    let (sim, tool) = settling(0);
    let gate = gate_of(tokens(None), &[("chat", tool)], &sim);
    let turn = gate.turn();
    let spend =
        |estimate: u64, used: u64| Call::new("chat", json!({"max_tokens": estimate, "used": used}));
    // Refund: 60 estimated, 10 used; without the true-up 60 more would not fit.
    assert!(turn.call(spend(60, 10)).await.is_ok());
    assert!(turn.call(spend(60, 60)).await.is_ok());
    assert_eq!(sim.starts_ms(), [0.0, 0.0]);
    // 70 spent at 0: 30 estimated and 90 used go through now (the window
    // holds 100: 70 + 30), then the over-spend puts 130 at 0 ...
    assert!(turn.call(spend(30, 90)).await.is_ok());
    // ... so even 1 more must wait for the second to pass.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let next = gate.turn().call(spend(1, 1)).await;
    assert!(next.is_ok(), "{next:?}");
    assert_eq!(sim.starts_ms(), [0.0, 0.0, 0.0, 1_000.0]);
}

/// Room a settled call leaves goes first to the calls already waiting
/// (issue 50): A (60, uses 10) starts at 0, B (60) must wait for A's
/// estimate to leave the window at 1 s; once A settles at 100 ms, B
/// re-books there, and C (30), arriving at 200 ms, still fits at once.
#[tokio::test(start_paused = true)]
async fn room_a_true_up_leaves_goes_first_to_the_calls_waiting() {
    let (sim, tool) = settling(100);
    let gate = std::sync::Arc::new(gate_of(tokens(None), &[("chat", tool)], &sim));
    let spend = |name: &str, estimate: u64, used: u64| {
        Call::new(
            "chat",
            json!({"name": name, "max_tokens": estimate, "used": used}),
        )
    };
    let a = tokio::spawn({
        let gate = gate.clone();
        async move { gate.turn().call(spend("a", 60, 10)).await }
    });
    tokio::time::sleep(Duration::from_millis(1)).await;
    let b = tokio::spawn({
        let gate = gate.clone();
        async move { gate.turn().call(spend("b", 60, 60)).await }
    });
    tokio::time::sleep(Duration::from_millis(199)).await;
    let c = gate.turn().call(spend("c", 30, 30)).await;
    assert!(c.is_ok(), "{c:?}");
    assert!(a.await.unwrap().is_ok());
    assert!(b.await.unwrap().is_ok());
    let mut starts: Vec<(String, f64)> = sim
        .records()
        .iter()
        .map(|r| (r.args["name"].as_str().unwrap().to_owned(), r.t_ms))
        .collect();
    starts.sort_by(|x, y| x.1.total_cmp(&y.1));
    assert_eq!(
        starts,
        [
            ("a".to_owned(), 0.0),
            ("b".to_owned(), 100.0),
            ("c".to_owned(), 200.0)
        ]
    );
}

/// The true-up on a token bucket (GCRA, `burst` set): the refund moves
/// the bucket back, the over-spend forward, both from the call's start.
#[tokio::test(start_paused = true)]
async fn settle_refunds_and_charges_on_a_bucket() {
    let (sim, tool) = settling(0);
    let gate = gate_of(tokens(Some(100)), &[("chat", tool)], &sim);
    let turn = gate.turn();
    let spend =
        |estimate: u64, used: u64| Call::new("chat", json!({"max_tokens": estimate, "used": used}));
    // 100 a second, 100 at once: one unit per 10 ms. 60 charged, 10 used:
    // the bucket is 100 ms deep, and 60 more fit at once (without the
    // refund they would wait 200 ms).
    assert!(turn.call(spend(60, 10)).await.is_ok());
    assert!(turn.call(spend(60, 60)).await.is_ok());
    // 30 more fit; 90 used puts the bucket 1.6 s deep, so one more
    // unit waits until 1.6 s - 0.99 s.
    assert!(turn.call(spend(30, 90)).await.is_ok());
    assert!(gate.turn().call(spend(1, 1)).await.is_ok());
    assert_eq!(sim.starts_ms(), [0.0, 0.0, 0.0, 610.0]);
}

/// A credential's new fields are checked where they are built, naming
/// the field; a shared credential takes several windows, groups, units,
/// the low share and a burst beside them (the shared backend spends them
/// all).
#[test]
fn budget_fields_name_their_field() {
    let base = || CredentialConfig::with_rate(rate("10/1s"));
    let cases = [
        (
            base().group("search", GroupConfig::default()),
            "credentials.key.groups.search.rate",
        ),
        (
            base().group(
                "search",
                GroupConfig::with_rate(rate("1/1s")).max_in_flight(0),
            ),
            "credentials.key.groups.search.max_in_flight",
        ),
        (
            base().unit("tokens", UnitConfig::default()),
            "credentials.key.units.tokens.rate",
        ),
        (base().low_share(0.0), "credentials.key.priorities.low"),
    ];
    for (credential, field) in cases {
        let config = GateConfig::default().credential("key", credential);
        assert_eq!(config.validate().unwrap_err().field, field);
    }
    let shared = base()
        .window(rate("100/1h"))
        .group("search", GroupConfig::with_rate(rate("1/1s")))
        .unit("tokens", UnitConfig::with_rate(rate("500/1m")))
        .low_share(0.5)
        .burst(3)
        .shared(true);
    let config = GateConfig::default().credential("key", shared);
    assert!(config.validate().is_ok());
    let unknown = GateConfig::default()
        .credential("key", base())
        .tool("t", ToolConfig::read("key").group("nope"));
    assert_eq!(unknown.validate().unwrap_err().field, "tools.t.group");
}

/// An unreadable settle value keeps the estimate.
#[tokio::test(start_paused = true)]
async fn an_unreadable_settle_keeps_the_estimate() {
    let sim = Sim::always_ok(0);
    let tool = chat().settle("tokens", Settle::Header("x-usage".into()));
    let gate = gate_of(tokens(None), &[("chat", tool)], &sim);
    assert!(gate.turn().call(ask(1, 80)).await.is_ok());
    assert!(gate.turn().call(ask(2, 80)).await.is_ok());
    assert_eq!(sim.starts_ms(), [0.0, 1_000.0]);
}

/// A unit's server signal syncs it: OpenAI says no tokens remain for 3 s,
/// so the next call waits for that, not for the window.
#[tokio::test(start_paused = true)]
async fn a_server_signal_in_a_unit_syncs_it() {
    let sim = Sim::new(|_, _| {
        Reply::ok(0)
            .header("x-ratelimit-limit-tokens", "100")
            .header("x-ratelimit-remaining-tokens", "0")
            .header("x-ratelimit-reset-tokens", "1.5s")
    });
    let gate = gate_of(tokens(None), &[("chat", chat())], &sim);
    assert!(gate.turn().call(ask(1, 10)).await.is_ok());
    assert!(gate.turn().call(ask(2, 10)).await.is_ok());
    assert_eq!(sim.starts_ms(), [0.0, 1_500.0]);
    // No scope named `tokens` was made: it is the unit.
    let status = gate.status();
    assert_eq!(status.len(), 1);
    assert_eq!(status[0].units[0].unit, "tokens");
}

/// `priorities.low = "50%"`: low calls start at most half of every
/// window; past that they are deferred with reason `priority` and an
/// honest wait, while high calls still go through at once. On both cell
/// types.
#[tokio::test(start_paused = true)]
async fn the_low_share_defers_low_calls_and_not_high_ones() {
    for burst in [None, Some(10)] {
        let sim = Sim::always_ok(0);
        let mut credential = CredentialConfig::with_rate(rate("10/10s"))
            .low_share(0.5)
            .max_in_flight(20);
        if let Some(burst) = burst {
            credential = credential.burst(burst);
        }
        let tools = [
            ("agent", ToolConfig::read("key").priority(Priority::Low)),
            ("prod", ToolConfig::read("key")),
        ];
        // A short inline wait: the bucket's share refills one call per 2 s.
        let defaults = Defaults {
            inline_wait: Duration::from_millis(500),
            ..exact()
        };
        let config = GateConfig::default()
            .defaults(defaults)
            .credential("key", credential)
            .tool("agent", tools[0].1.clone())
            .tool("prod", tools[1].1.clone());
        let gate = build_gate(config, &sim);
        let low = gate.turn().run((0..8).map(|i| call("agent", i))).await;
        let high = gate
            .turn()
            .run((0..5).map(|i| call("prod", 100 + i).priority(Priority::High)))
            .await;
        assert!(high.iter().all(Outcome::is_ok), "{burst:?}: {high:?}");
        let records = sim.records();
        let agent = records.iter().filter(|r| r.tool == "agent").count();
        assert_eq!(agent, 5, "{burst:?}: half of the window");
        assert!(max_in_window(&sim.starts_ms(), 10_000.0) <= 10, "{burst:?}");
        let deferred: Vec<_> = low.iter().filter_map(window_of).collect();
        assert_eq!(deferred.len(), 3, "{burst:?}: {low:?}");
        assert!(
            deferred
                .iter()
                .all(|(_, reason, _)| *reason == Reason::Priority)
        );
        // Honest: the wait given is when a low call may start again.
        let Outcome::RateLimited { retry_after_ms, .. } = &low[5] else {
            panic!("{:?}", low[5]);
        };
        tokio::time::sleep(Duration::from_millis(*retry_after_ms)).await;
        assert!(
            gate.turn().call(call("agent", 50)).await.is_ok(),
            "{burst:?}"
        );
    }
}

/// Waiting callers are served highest priority first: with one request
/// in flight at a time, high calls queued after low ones start first.
#[tokio::test(start_paused = true)]
async fn waiting_callers_are_served_by_priority() {
    let sim = Sim::always_ok(100);
    let credential = CredentialConfig::with_rate(rate("100/1s"))
        .max_in_flight(1)
        .queue(20);
    let tools = [("read", ToolConfig::write("key"))];
    let gate = gate_of(credential, &tools, &sim);
    let turn = gate.turn();
    let mut calls = vec![call("read", 0)];
    calls.extend((1..4).map(|i| call("read", i).priority(Priority::Low)));
    calls.extend((4..7).map(|i| call("read", i).priority(Priority::High)));
    let outcomes = turn.run(calls).await;
    assert!(outcomes.iter().all(Outcome::is_ok));
    let order: Vec<u64> = sim
        .records()
        .iter()
        .map(|r| r.args["n"].as_u64().unwrap())
        .collect();
    // Call 0 takes the permit; 1 is the head before the others arrive.
    assert_eq!(order, [0, 1, 4, 5, 6, 2, 3]);
}

/// Callers waiting for a rate slot are served by priority too: at 1/1s,
/// low calls B and C hold the slots at 1 s and 2 s; a high call H at
/// 100 ms takes B's slot, and B and C reserve again behind it in their
/// order. A normal call N at 200 ms outranks only the low ones. The same
/// on a bucket (`burst`), which cannot take a slot back: there H, which
/// spends what B and C spend, swaps starts with them (B moves to 2 s, C
/// to H's own 3 s). The same again with a low share, where the low calls
/// spend their share besides, so that no swap fits: on the bucket H
/// takes B's start (and B's charge, which covers its own), gives its own
/// back, and B asks again behind it.
#[tokio::test(start_paused = true)]
async fn waiting_callers_are_served_by_priority_for_rate_slots_too() {
    for (burst, share) in [
        (None, None),
        (Some(1), None),
        (None, Some(0.5)),
        (Some(1), Some(0.5)),
    ] {
        let mut credential = CredentialConfig::with_rate(rate("1/1s")).max_in_flight(10);
        if let Some(burst) = burst {
            credential = credential.burst(burst);
        }
        if let Some(share) = share {
            credential = credential.low_share(share);
        }
        let calls = [
            (Priority::Low, 0),
            (Priority::Low, 1),
            (Priority::Low, 2),
            (Priority::High, 100),
            (Priority::Normal, 200),
        ];
        assert_eq!(
            starts_by_priority(credential, &calls).await,
            [
                (0, 0.0),
                (3, 1_000.0),
                (4, 2_000.0),
                (1, 3_000.0),
                (2, 4_000.0),
            ],
            "{burst:?} {share:?}"
        );
    }
}

/// On a bucket, a high call costing less than a waiting low call takes
/// that call's start: tokens 10/1s with a burst of 10, low calls A, B, C
/// of 10 tokens each start at 0, 1 s and 2 s; a high call H of 5 tokens at
/// 100 ms takes B's start (1 s), and B asks again behind C (3 s). A high
/// call costing more than every waiting call (15 tokens) fits in no start
/// of theirs: as their starts and its own (3.5 s) are the bucket's last
/// charges, it gives them all back, reserves again from B's (the bucket
/// has its 15 at 1.5 s), and B and C ask again behind it (2.5 s, 3.5 s).
#[tokio::test(start_paused = true)]
async fn a_high_call_takes_the_start_of_a_waiting_call_that_costs_more() {
    let credential = || {
        let mut unit = UnitConfig::with_rate(rate("10/1s"));
        unit.burst = Some(20);
        CredentialConfig::with_rate(rate("100/1s"))
            .max_in_flight(10)
            .unit("tokens", unit)
    };
    let calls = |high: u64| {
        [
            (ask(0, 20).priority(Priority::Low), 0),
            (ask(1, 10).priority(Priority::Low), 1),
            (ask(2, 10).priority(Priority::Low), 2),
            (ask(3, high).priority(Priority::High), 100),
        ]
    };
    assert_eq!(
        starts_of(credential(), ("chat", chat()), calls(5)).await,
        [(0, 0.0), (3, 1_000.0), (2, 2_000.0), (1, 3_000.0)]
    );
    assert_eq!(
        starts_of(credential(), ("chat", chat()), calls(15)).await,
        [(0, 0.0), (3, 1_500.0), (1, 2_500.0), (2, 3_500.0)]
    );
}

/// The same when the waiting low calls hold every concurrency permit: a
/// high call takes the slot (and so the permit) of the first of them, and
/// the low calls queue again behind it in their order.
#[tokio::test(start_paused = true)]
async fn a_high_call_is_not_kept_out_by_low_calls_sleeping_on_every_permit() {
    let credential = CredentialConfig::with_rate(rate("1/1s"))
        .max_in_flight(2)
        .queue(10);
    // 0 starts at once; 1 and 2 then sleep for 1 s and 2 s on both permits.
    let calls = [
        (Priority::Low, 0),
        (Priority::Low, 20),
        (Priority::Low, 21),
        (Priority::High, 100),
    ];
    assert_eq!(
        starts_by_priority(credential, &calls).await,
        [(0, 0.0), (3, 1_000.0), (1, 2_000.0), (2, 3_000.0)]
    );
}

/// A call whose slot a higher one took, and which then cannot wait for
/// the next within its inline wait, is deferred with reason `priority`:
/// at 1/1s with a 1.5 s inline wait, low call 1 holds the slot at 1 s;
/// the high call at 100 ms takes it (its own next, 2 s, is past its
/// inline wait too), and call 1's next (2 s) is then 1.9 s off. The same
/// on a bucket, where the high call reserves the 2 s start for the call it
/// moves, which gives it back.
#[tokio::test(start_paused = true)]
async fn a_call_displaced_by_a_higher_one_is_deferred_for_priority() {
    for burst in [None, Some(1)] {
        displaced_for_priority(burst).await;
    }
}

async fn displaced_for_priority(burst: Option<u32>) {
    let mut credential = CredentialConfig::with_rate(rate("1/1s")).max_in_flight(10);
    if let Some(burst) = burst {
        credential = credential.burst(burst);
    }
    let sim = Sim::always_ok(10);
    let config = GateConfig::default()
        .defaults(Defaults {
            window_margin: Duration::ZERO,
            inline_wait: Duration::from_millis(1_500),
            ..Defaults::default()
        })
        .credential("key", credential)
        .tool("read", ToolConfig::write("key"));
    let gate = std::sync::Arc::new(build_gate(config, &sim));
    let spawn = |n: usize, priority: Priority, after_ms: u64| {
        let gate = gate.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(after_ms)).await;
            gate.turn().call(call("read", n).priority(priority)).await
        })
    };
    let (first, low, high) = (
        spawn(0, Priority::Low, 0),
        spawn(1, Priority::Low, 1),
        spawn(2, Priority::High, 100),
    );
    assert!(first.await.unwrap().is_ok());
    assert!(high.await.unwrap().is_ok());
    let low = low.await.unwrap();
    assert_eq!(
        window_of(&low).map(|(scope, reason, _)| (scope, reason)),
        Some(("api_key", Reason::Priority)),
        "{low:?}"
    );
    let Outcome::RateLimited { retry_after_ms, .. } = low else {
        panic!("{low:?}");
    };
    assert_eq!(retry_after_ms, 1_900, "{burst:?}");
    // The start it gave back is the next call's: 2 s, not 3 s.
    tokio::time::sleep_until(tokio::time::Instant::now() + Duration::from_millis(900)).await;
    assert!(gate.turn().call(call("read", 3)).await.is_ok(), "{burst:?}");
    assert_eq!(
        sim.starts_by_n(),
        [(0, 0.0), (2, 1_000.0), (3, 2_000.0)],
        "{burst:?}"
    );
}

/// Call `n` of `calls` (its priority, and when it comes, in ms) on one
/// gate over `credential` (no window margin, a 10 s inline wait); every
/// call must succeed, at most `max_in_flight` at once. The recorded start
/// of each, by `n`, in start order.
async fn starts_by_priority(
    credential: CredentialConfig,
    calls: &[(Priority, u64)],
) -> Vec<(u64, f64)> {
    let calls = (0..)
        .zip(calls)
        .map(|(n, &(priority, after_ms))| (call("read", n).priority(priority), after_ms));
    starts_of(credential, ("read", ToolConfig::write("key")), calls).await
}

/// Each call (on tool `tool`, named as the call names it) at its time in
/// ms, on one gate over `credential`, as [`starts_by_priority`] runs them.
async fn starts_of(
    credential: CredentialConfig,
    (name, tool): (&str, ToolConfig),
    calls: impl IntoIterator<Item = (Call, u64)>,
) -> Vec<(u64, f64)> {
    let sim = Sim::always_ok(10);
    let cap = credential.max_in_flight;
    let config = GateConfig::default()
        .defaults(Defaults {
            window_margin: Duration::ZERO,
            inline_wait: Duration::from_secs(10),
            ..Defaults::default()
        })
        .credential("key", credential)
        .tool(name, tool);
    let gate = std::sync::Arc::new(build_gate(config, &sim));
    let tasks: Vec<_> = calls
        .into_iter()
        .map(|(call, after_ms)| {
            let gate = gate.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(after_ms)).await;
                gate.turn().call(call).await
            })
        })
        .collect();
    for task in tasks {
        let outcome = task.await.unwrap();
        assert!(outcome.is_ok(), "{outcome:?}");
    }
    if let Some(cap) = cap {
        assert!(sim.peak_in_flight() <= cap as usize);
    }
    sim.starts_by_n()
}

/// `/v1/status` material: every window and unit with used and remaining.
#[tokio::test(start_paused = true)]
async fn status_shows_every_window_and_unit() {
    let sim = Sim::always_ok(0);
    let credential = tokens(None).window(rate("500/1h"));
    let gate = gate_of(credential, &[("chat", chat())], &sim);
    assert!(gate.turn().call(ask(1, 40)).await.is_ok());
    let status = gate.status();
    let windows: Vec<(String, u64, u64)> = status[0]
        .windows
        .iter()
        .map(|w| (w.window.clone(), w.used, w.remaining))
        .collect();
    assert_eq!(
        windows,
        [("50/1s".to_owned(), 1, 49), ("500/1h".to_owned(), 1, 499)]
    );
    let unit = &status[0].units[0];
    assert_eq!((unit.windows[0].used, unit.windows[0].remaining), (40, 60));
}
