//! The metrics a scrape shows after the engine's events.

use std::time::Duration;

use sluice::scope::ScopeStatus;
use sluice::{Event, Observer, Outcome, Reason, WaitKind};

use super::*;

/// A real scope's status (its fields belong to the engine).
async fn live_scope() -> ScopeStatus {
    use bytes::Bytes;
    use sluice::{Call, CredentialConfig, Gate, GateConfig, ToolConfig, executor_fn};
    let config = GateConfig::default()
        .credential("support", CredentialConfig::default())
        .tool("search", ToolConfig::read("support"));
    let executor =
        executor_fn(|_request| async { Ok(http::Response::new(Bytes::from_static(b"{}"))) });
    let gate = Gate::builder(config, executor).seed(1).build().unwrap();
    gate.call(Call::new("search", serde_json::json!({}))).await;
    gate.status().remove(0)
}

#[tokio::test]
async fn counts_events_and_sets_gauges_at_scrape() {
    let metrics = Metrics::new();
    let shed = Outcome::rate_limited("api_key", Reason::Shed, Duration::from_millis(5), Some(1));
    metrics.observe(&Event::Outcome {
        credential: "support",
        tool: "search",
        outcome: &shed,
        coalesced: false,
        elapsed: Duration::ZERO,
    });
    metrics.observe(&Event::Request {
        credential: "support",
        tool: "search",
        status: Some(429),
        latency: Duration::from_millis(3),
    });
    metrics.observe(&Event::Wait {
        credential: "support",
        scope: "api_key",
        wait: Duration::from_millis(150),
        kind: WaitKind::Rate,
    });
    let mut scope = live_scope().await;
    scope.in_flight = 2;
    scope.queued = 3;
    scope.blocked_for_ms = Some(1500);
    let window = |used, remaining| sluice::scope::WindowStatus {
        window: "10/1s".to_owned(),
        used,
        remaining,
        next_free_ms: 250,
    };
    scope.windows = vec![window(4, 6)];
    scope.units = vec![sluice::scope::UnitStatus {
        unit: "tokens".to_owned(),
        windows: vec![window(7, 3)],
        server_remaining: None,
        server_reset_in_ms: None,
    }];
    let text = metrics.encode(&[scope], None);
    for line in [
        r#"sluice_calls_total{credential="support",tool="search",outcome="rate_limited",reason="shed"} 1"#,
        r#"sluice_shed_calls_total{credential="support"} 1"#,
        r#"sluice_upstream_requests_total{credential="support",status="429"} 1"#,
        r#"sluice_wait_seconds_count{credential="support",kind="rate"} 1"#,
        r#"sluice_in_flight{credential="support",scope="api_key"} 2"#,
        r#"sluice_queued{credential="support",scope="api_key"} 3"#,
        r#"sluice_blocked_seconds{credential="support",scope="api_key"} 1.5"#,
        r#"sluice_window_used{credential="support",scope="api_key",unit="requests",window="10/1s"} 4"#,
        r#"sluice_window_remaining{credential="support",scope="api_key",unit="tokens",window="10/1s"} 3"#,
        r#"sluice_window_next_free_seconds{credential="support",scope="api_key",unit="requests",window="10/1s"} 0.25"#,
    ] {
        assert!(text.contains(line), "{line}\n{text}");
    }
    // A scope that is gone disappears from the gauges.
    let text = metrics.encode(&[], None);
    assert!(!text.contains("sluice_in_flight{"), "{text}");
}
