//! Issue 13: no deadline or duration the library API takes can make a call
//! panic. A call's deadline past the bound is answered with an error naming
//! it, sending nothing; a configured one is refused when the gate is built.

use crate::support;

use std::time::Duration;

use serde_json::json;
use sluice::{Call, Deadline, Defaults, Outcome, Route, ToolConfig};
use support::*;

fn error_message(outcome: &Outcome) -> &str {
    match outcome {
        Outcome::Error {
            http_status: None,
            message,
        } => message,
        other => panic!("expected an error outcome, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_call_with_the_longest_duration_gets_an_error_and_sends_nothing() {
    let sim = Sim::always_ok(10);
    let gate = build_gate(config("10/1s"), &sim);
    let outcomes = gate
        .turn()
        .run([
            Call::new("read", json!({"n": 1})).deadline(Duration::MAX),
            Call::new("write", json!({"n": 2}))
                .deadline(Deadline::MAX_LEN + Duration::from_secs(1)),
            Call::new("read", json!({"n": 3})).deadline(Deadline::MAX_LEN),
        ])
        .await;
    assert_eq!(
        error_message(&outcomes[0]),
        "deadline: 18446744073709551615 s exceeds the longest allowed, 7 days"
    );
    assert_eq!(
        error_message(&outcomes[1]),
        "deadline: 604801 s exceeds the longest allowed, 7 days"
    );
    assert!(outcomes[2].is_ok(), "a week is allowed: {:?}", outcomes[2]);
    assert_eq!(sim.count(), 1, "only the call within the bound was sent");
    assert_eq!(sim.records()[0].args, json!({"n": 3}));
}

#[tokio::test(start_paused = true)]
async fn a_routed_call_whose_route_deadline_is_too_long_gets_an_error() {
    let sim = Sim::always_ok(10);
    let gate = build_gate(config("10/1s"), &sim);
    let route = Route {
        credential: "key".to_owned(),
        read: true,
        idempotent: true,
        deadline: Some(Duration::MAX),
    };
    let outcome = gate.call(Call::routed("proxy", route, json!({}))).await;
    assert!(
        error_message(&outcome).starts_with("deadline: "),
        "{outcome:?}"
    );
    assert_eq!(sim.count(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_tool_deadline_past_the_bound_is_a_build_error_naming_it() {
    let sim = Sim::always_ok(10);
    let config = config("10/1s").tool("read", ToolConfig::read("key").deadline(Duration::MAX));
    let error = sluice::Gate::builder(config, SimExecutor(sim.clone()))
        .build()
        .unwrap_err();
    assert_eq!(error.field, "tools.read.deadline");
    assert_eq!(
        error.to_string(),
        "tools.read.deadline: 18446744073709551615 s exceeds the longest allowed, 7 days"
    );
}

#[tokio::test(start_paused = true)]
async fn a_huge_default_deadline_is_a_build_error_naming_it() {
    let sim = Sim::always_ok(10);
    let defaults = Defaults {
        // `deadline = "300000000000y"` in a config file, as the issue reproduced it.
        deadline: Duration::from_secs(300_000_000_000 * 365 * 24 * 3600),
        ..Defaults::default()
    };
    let config = config("10/1s").defaults(defaults);
    let error = sluice::Gate::builder(config, SimExecutor(sim.clone()))
        .build()
        .unwrap_err();
    assert_eq!(error.field, "defaults.deadline");
    assert!(
        error
            .message
            .ends_with("exceeds the longest allowed, 7 days"),
        "{error}"
    );
}

/// A zero deadline sends nothing: the call times out at once, a read its
/// turn has already answered included (the cached answer is not waited
/// for, it is never given past a deadline); a cost that cannot be priced
/// is still the error naming its argument (issue 18 moved the turn's
/// cache ahead of pricing, and kept this order).
#[tokio::test(start_paused = true)]
async fn a_zero_deadline_times_out_sending_nothing_unless_the_cost_is_bad() {
    use sluice::{Cost, CredentialConfig, GateConfig, UnitConfig};
    let sim = Sim::always_ok(10);
    let tokens = UnitConfig::with_rate("1000/1s".parse().unwrap());
    let credential = CredentialConfig::with_rate("10/1s".parse().unwrap()).unit("tokens", tokens);
    let config = GateConfig::default()
        .credential("key", credential)
        .tool("read", ToolConfig::read("key"))
        .tool(
            "priced",
            ToolConfig::read("key").cost("tokens", Cost::Argument("max_tokens".into())),
        );
    let gate = build_gate(config, &sim);
    let turn = gate.turn();
    assert!(turn.call(Call::new("read", json!({"n": 1}))).await.is_ok());
    assert_eq!(sim.count(), 1);
    let zero = Duration::ZERO;
    let outcomes = turn
        .run([
            Call::new("read", json!({"n": 1})).deadline(zero),
            Call::new("read", json!({"n": 2})).deadline(zero),
            Call::new("priced", json!({})).deadline(zero),
        ])
        .await;
    for outcome in &outcomes[..2] {
        assert!(
            matches!(outcome, Outcome::TimedOut { after_ms: 0, .. }),
            "{outcome:?}"
        );
    }
    assert!(
        error_message(&outcomes[2]).contains("\"max_tokens\""),
        "{:?}",
        outcomes[2]
    );
    assert_eq!(sim.count(), 1, "nothing more was sent");
}
