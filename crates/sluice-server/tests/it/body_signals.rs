//! Issue 15 through the sidecar's proxy: a credential marked
//! `body_signals = "graphql"` has its JSON 200s read (so a GraphQL throttle
//! is paced like a 429), while other credentials' 200s keep the fast path;
//! a Google 429 with the wait only in its body is paced by it.

use crate::support;

use std::time::Duration;

use sluice_fake::{BodyStyle, Config as FakeConfig, FakeApi, FakeServer, HeaderStyle, Limits};
use sluice_server::SidecarConfig;
use support::{Sidecar, env, state};

async fn fake(style: BodyStyle) -> FakeServer {
    let config = FakeConfig::new(Limits::new(1, Duration::from_millis(400)))
        .with_headers(HeaderStyle::None)
        .with_bodies(style);
    FakeServer::spawn(FakeApi::new(config).unwrap())
        .await
        .unwrap()
}

fn sidecar_config(base_url: &str, extra: &str) -> SidecarConfig {
    SidecarConfig::from_toml(
        &format!("[credentials.api]\nbase_url = \"{base_url}\"\n{extra}\n"),
        env,
    )
    .unwrap()
}

/// Two proxied GETs; returns what the client got and what the fake recorded.
async fn two_gets(style: BodyStyle, extra: &str) -> (Vec<u16>, Vec<(f64, u16)>) {
    let upstream = fake(style).await;
    let sidecar = Sidecar::spawn(state(sidecar_config(&upstream.url(), extra))).await;
    let client = reqwest::Client::new();
    let mut got = Vec::new();
    for _ in 0..2 {
        let response = client
            .get(format!("{}/proxy/api/graphql", sidecar.url))
            .send()
            .await
            .unwrap();
        got.push(response.status().as_u16());
        let _ = response.bytes().await.unwrap();
    }
    let seen = upstream
        .api()
        .requests()
        .iter()
        .map(|r| (r.t_ms, r.status))
        .collect();
    (got, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graphql_throttle_in_a_200_is_paced_when_the_credential_says_graphql() {
    let (got, seen) = two_gets(BodyStyle::GraphqlThrottled, "body_signals = \"graphql\"").await;
    assert_eq!(got, [200, 200]);
    let statuses: Vec<u16> = seen.iter().map(|(_, status)| *status).collect();
    // The throttled 200 was retried after its cost wait: one window on.
    assert_eq!(statuses, [200, 200, 200], "{seen:?}");
    assert!(seen[2].0 >= seen[0].0 + 395.0, "retried early: {seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_mark_a_200_is_a_200() {
    let (got, seen) = two_gets(BodyStyle::GraphqlThrottled, "").await;
    assert_eq!(got, [200, 200]);
    // Not read, not retried: the fast path passed the throttle through.
    assert_eq!(seen.len(), 2, "{seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_google_retry_delay_in_a_429_body_paces_the_retry() {
    let (got, seen) = two_gets(BodyStyle::GoogleRetryInfo, "").await;
    assert_eq!(got, [200, 200]);
    let statuses: Vec<u16> = seen.iter().map(|(_, status)| *status).collect();
    assert_eq!(statuses, [200, 429, 200], "{seen:?}");
    assert!(seen[2].0 >= seen[0].0 + 395.0, "retried early: {seen:?}");
}
