//! Issue 15: rejections stated in bodies act like a 429 with that wait, on
//! tokio's paused clock, asserted on the simulated server's recorded starts.

use crate::support;

use serde_json::json;
use sluice::signal::BodySignals;
use sluice::{Call, CredentialConfig, Defaults, Outcome, Reason};
use support::{Reply, Sim, build_gate, config_with};

fn credential() -> CredentialConfig {
    CredentialConfig::with_rate("100/1s".parse().unwrap())
}

fn call(n: u32) -> Call {
    Call::new("read", json!({ "n": n }))
}

fn body(mut reply: Reply, body: &str) -> Reply {
    reply.body = body.to_owned();
    reply
}

const RETRY_INFO: &str = r#"{"error":{"code":429,"status":"RESOURCE_EXHAUSTED","message":"Resource has been exhausted",
  "details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"1.500s"}]}}"#;

const THROTTLED: &str = r#"{"errors":[{"message":"Throttled","extensions":{"code":"THROTTLED"}}],
  "extensions":{"cost":{"requestedQueryCost":101,"actualQueryCost":null,
  "throttleStatus":{"maximumAvailable":1000.0,"currentlyAvailable":1,"restoreRate":50.0}}}}"#;

#[tokio::test(start_paused = true)]
async fn a_google_retry_delay_paces_the_retry() {
    let sim = Sim::new(|n, _| match n {
        1 => body(Reply::status(429), RETRY_INFO),
        _ => Reply::ok(10),
    });
    let gate = build_gate(config_with(credential(), Defaults::default()), &sim);
    let outcome = gate.call(call(1)).await;
    assert!(outcome.is_ok(), "{outcome:?}");
    let starts = sim.starts_ms();
    assert_eq!(starts.len(), 2);
    assert!(starts[1] >= 1_500.0, "retried early: {starts:?}");
    assert!(starts[1] < 1_600.0, "{starts:?}");
}

#[tokio::test(start_paused = true)]
async fn a_graphql_throttle_in_a_200_waits_for_its_points() {
    let reply = || body(Reply::ok(10), THROTTLED).header("content-type", "application/json");
    let sim = Sim::new(move |n, _| if n == 1 { reply() } else { Reply::ok(10) });
    let graphql = credential().body_signals(BodySignals::Graphql);
    let gate = build_gate(config_with(graphql, Defaults::default()), &sim);
    let outcome = gate.call(call(1)).await;
    assert!(outcome.is_ok(), "{outcome:?}");
    let starts = sim.starts_ms();
    // (101 - 1) points at 50 a second: two seconds, within the inline wait.
    assert_eq!(starts.len(), 2);
    assert!(starts[1] >= 2_000.0, "retried early: {starts:?}");

    // A credential not marked GraphQL keeps the fast path: the 200 is a 200.
    let sim = Sim::new(move |_, _| reply());
    let gate = build_gate(config_with(credential(), Defaults::default()), &sim);
    assert!(gate.call(call(1)).await.is_ok());
    assert_eq!(sim.count(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_github_secondary_limit_defers_for_a_minute() {
    let secondary = r#"{"message":"You have exceeded a secondary rate limit. Please wait a few minutes before you try again."}"#;
    let sim = Sim::new(move |_, _| body(Reply::status(403), secondary));
    let gate = build_gate(config_with(credential(), Defaults::default()), &sim);
    let outcome = gate.call(call(1)).await;
    let Outcome::RateLimited {
        reason,
        retry_after_ms,
        ..
    } = &outcome
    else {
        panic!("{outcome:?}")
    };
    assert_eq!(*reason, Reason::Throttled);
    assert!((59_000..=60_000).contains(retry_after_ms), "{outcome:?}");
    // The scope is held: the next call sends nothing.
    let again = gate.call(call(2)).await;
    assert_eq!(again.status(), "rate_limited", "{again:?}");
    assert_eq!(sim.count(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_quota_reason_is_quota_exhausted() {
    let spent =
        r#"{"error":{"errors":[{"domain":"youtube.quota","reason":"quotaExceeded"}],"code":403}}"#;
    let sim = Sim::new(move |_, _| body(Reply::status(403), spent));
    let gate = build_gate(config_with(credential(), Defaults::default()), &sim);
    let outcome = gate.call(call(1)).await;
    assert_eq!(outcome.status(), "quota_exhausted", "{outcome:?}");
    let again = gate.call(call(2)).await;
    assert_eq!(again.status(), "quota_exhausted", "{again:?}");
    assert_eq!(sim.count(), 1);
    assert!(gate.status()[0].quota_exhausted);
}

#[tokio::test(start_paused = true)]
async fn an_overloaded_529_is_retried_not_failed() {
    let overloaded =
        r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
    let sim = Sim::new(move |n, _| match n {
        1 => body(Reply::status(529), overloaded),
        _ => Reply::ok(10),
    });
    let gate = build_gate(config_with(credential(), Defaults::default()), &sim);
    let outcome = gate.call(call(1)).await;
    assert!(outcome.is_ok(), "{outcome:?}");
    assert_eq!(sim.count(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_concurrency_rejection_lowers_the_cap_not_the_rate() {
    const SERVER_ALLOWS: usize = 2;
    let sim = Sim::new_with_in_flight(move |in_flight| {
        if in_flight > SERVER_ALLOWS {
            body(
                Reply::status(429).latency_ms(5),
                r#"{"error":"Too many concurrent requests for this user"}"#,
            )
        } else {
            Reply::ok(100)
        }
    });
    let mut limits = credential();
    limits.max_in_flight = Some(6);
    let gate = build_gate(config_with(limits, Defaults::default()), &sim);
    let turn = gate.turn();
    let outcomes = turn.run((0..6).map(call)).await;
    for outcome in &outcomes {
        assert!(outcome.is_ok(), "{outcome:?}");
    }
    let status = &gate.status()[0];
    assert!(status.max_in_flight_lowered, "{status:?}");
    // Lowered below what ran, then one step of additive recovery.
    assert!(
        status.max_in_flight.unwrap() <= SERVER_ALLOWS as u32 + 1,
        "{status:?}"
    );
    // Not a rate penalty: the scope is not blocked.
    assert_eq!(status.blocked_for_ms, None);
    // The first wave's four extra requests were refused; after that only
    // the recovery's probe above the server's limit may be.
    let records = sim.records();
    let rejected = records
        .iter()
        .filter(|r| r.in_flight > SERVER_ALLOWS)
        .count();
    assert_eq!(records.len() - rejected, 6);
    assert!((4..=5).contains(&rejected), "{records:?}");
    let late = &records[6..];
    assert!(
        late.iter().all(|r| r.in_flight <= SERVER_ALLOWS + 1),
        "{records:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_graphql_cost_wait_binds_to_the_credentials_points_unit() {
    let reply = || body(Reply::ok(10), THROTTLED).header("content-type", "application/json");
    let sim = Sim::new(move |n, _| if n == 1 { reply() } else { Reply::ok(10) });
    let graphql = credential().body_signals(BodySignals::Graphql).unit(
        "points",
        sluice::UnitConfig::with_rate("1000/1s".parse().unwrap()),
    );
    let gate = build_gate(config_with(graphql, Defaults::default()), &sim);
    // Watch the unit while the call waits for its retry.
    let watcher = {
        let gate = gate.clone();
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            gate.status()
        })
    };
    assert!(gate.call(call(1)).await.is_ok());
    let status = watcher.await.unwrap();
    let points = status[0]
        .units
        .iter()
        .find(|unit| unit.unit == "points")
        .expect("the credential's unit");
    // The server's count: 1 point available, room for 101 in about 2 s.
    assert_eq!(points.server_remaining, Some(1), "{points:?}");
    let reset = points.server_reset_in_ms.unwrap();
    // Answered at 10 ms, looked at 100 ms: 2 s from the answer.
    assert_eq!(reset, 1_910, "{points:?}");
    let starts = sim.starts_ms();
    assert!(starts[1] >= 2_000.0, "retried early: {starts:?}");
}
