//! Issue 15 end to end over loopback: the fake API answers in the body
//! shapes of real APIs, and its recorded request times show that sluice
//! waited as told, sent nothing early, and told the model `rate_limited`.

use crate::support;

use std::time::Duration;

use serde_json::json;
use sluice::signal::BodySignals;
use sluice::{Call, CredentialConfig, Gate, GateConfig, Outcome, ToolConfig};
use sluice_fake::{BodyStyle, Config, FakeApi, FakeServer, HeaderStyle, Latency, Limits};
use support::http_executor::HttpExecutor;

/// Scheduling slack on a loaded machine for "no earlier than".
const SLACK_MS: f64 = 5.0;

fn gate(server: &FakeServer, credential: CredentialConfig) -> Gate<HttpExecutor> {
    let config = GateConfig::default()
        .credential("api", credential)
        .tool("items", ToolConfig::read("api"));
    Gate::builder(config, HttpExecutor::new(&server.url(), "Bearer k"))
        .seed(15)
        .build()
        .unwrap()
}

async fn fake(config: Config) -> FakeServer {
    FakeServer::spawn(FakeApi::new(config).unwrap())
        .await
        .unwrap()
}

fn call(q: &str) -> Call {
    Call::new("items", json!({ "q": q }))
}

/// Two calls on a server allowing one per 400 ms: the second is refused
/// with the wait stated only in the body, and its retry starts no earlier.
async fn paced_by_the_body(style: BodyStyle, credential: CredentialConfig, refused_status: u16) {
    let config = Config::new(Limits::new(1, Duration::from_millis(400)))
        .with_headers(HeaderStyle::None)
        .with_bodies(style);
    let server = fake(config).await;
    let gate = gate(&server, credential);
    for q in ["a", "b"] {
        let outcome = gate.call(call(q)).await;
        assert!(outcome.is_ok(), "{style:?}: {outcome:?}");
    }
    let records = server.api().requests();
    let statuses: Vec<u16> = records.iter().map(|r| r.status).collect();
    assert_eq!(statuses, [200, refused_status, 200], "{style:?}");
    // The refusal stated the time left in the first request's window; the
    // retry waited for it: it starts a window after the first.
    let (first, retry) = (records[0].t_ms, records[2].t_ms);
    assert!(retry >= first + 400.0 - SLACK_MS, "{style:?}: {records:?}");
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_google_retry_delay_in_the_body_paces_the_retry() {
    paced_by_the_body(BodyStyle::GoogleRetryInfo, CredentialConfig::default(), 429).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graphql_throttled_200_paces_the_retry() {
    let graphql = CredentialConfig::default().body_signals(BodySignals::Graphql);
    paced_by_the_body(BodyStyle::GraphqlThrottled, graphql, 200).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_github_secondary_403_is_rate_limited_for_a_minute() {
    let config = Config::new(Limits::new(1, Duration::from_secs(1)))
        .with_headers(HeaderStyle::None)
        .with_bodies(BodyStyle::GithubSecondary);
    let server = fake(config).await;
    let gate = gate(&server, CredentialConfig::default());
    assert!(gate.call(call("a")).await.is_ok());
    for q in ["b", "c"] {
        let outcome = gate.call(call(q)).await;
        let Outcome::RateLimited { retry_after_ms, .. } = &outcome else {
            panic!("told the model {outcome:?}, not rate_limited")
        };
        assert!((55_000..=60_000).contains(retry_after_ms), "{outcome:?}");
    }
    // The second call's 403 held the key: the third sent nothing.
    let statuses: Vec<u16> = server.api().requests().iter().map(|r| r.status).collect();
    assert_eq!(statuses, [200, 403]);
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrency_429_lowers_in_flight_and_every_call_succeeds() {
    let config = Config::new(Limits::new(1_000, Duration::from_secs(1)).with_max_in_flight(2))
        .with_headers(HeaderStyle::None)
        .with_latency(Latency::Fixed(Duration::from_millis(100)))
        .with_bodies(BodyStyle::Concurrency);
    let server = fake(config).await;
    let credential = CredentialConfig {
        max_in_flight: Some(6),
        ..CredentialConfig::default()
    };
    let gate = gate(&server, credential);
    let turn = gate.turn();
    let outcomes = turn.run((0..6).map(|i| call(&i.to_string()))).await;
    for outcome in &outcomes {
        assert!(outcome.is_ok(), "{outcome:?}");
    }
    let status = &gate.status()[0];
    assert!(status.max_in_flight_lowered, "{status:?}");
    assert!(status.max_in_flight.unwrap() < 6, "{status:?}");
    assert_eq!(status.blocked_for_ms, None, "not a rate penalty");
    let records = server.api().requests();
    let served: Vec<_> = records.iter().filter(|r| r.status == 200).collect();
    assert_eq!(served.len(), 6);
    // Once the first refusals were answered, sluice kept to what the server
    // takes, give or take the one probe of additive recovery.
    let refused = records.iter().filter(|r| r.status == 429).count();
    assert!((1..=6).contains(&refused), "{records:?}");
    assert!(served.iter().all(|r| r.in_flight <= 2), "{records:?}");
    server.shutdown().await.unwrap();
}
