//! The fake served over HTTP on 127.0.0.1:0 and called with reqwest.

use crate::support;

use std::time::Duration;

use sluice_fake::{Config, FakeApi, FakeServer, Limits, Stats};
use support::ms;

async fn serve(config: Config) -> (FakeServer, reqwest::Client) {
    let server = FakeServer::spawn(FakeApi::new(config).unwrap())
        .await
        .unwrap();
    // Loopback only: no proxy from the environment may get in between.
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    (server, client)
}

#[tokio::test]
async fn answers_200_then_429_with_json_bodies() {
    let (server, client) = serve(Config::new(Limits::new(2, Duration::from_secs(60)))).await;
    assert!(server.addr().ip().is_loopback());
    let url = format!("{}/api/v2/search.json?query=a", server.url());
    for seq in 1..=2 {
        let response = client.get(&url).send().await.unwrap();
        assert_eq!(response.status(), 200);
        assert!(response.headers().contains_key("date"));
        let body: serde_json::Value = response.json().await.unwrap();
        assert_eq!(
            body,
            serde_json::json!({"path": "/api/v2/search.json?query=a", "seq": seq})
        );
    }
    let response = client.get(&url).send().await.unwrap();
    assert_eq!(response.status(), 429);
    let retry_after: u64 = response.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((59..=60).contains(&retry_after), "{retry_after}");
    assert!(response.headers().contains_key("retry-after-ms"));
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body, serde_json::json!({"error": "rate limited"}));
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn stats_and_reset_endpoints() {
    let (server, client) = serve(Config::new(Limits::new(1, Duration::from_secs(60)))).await;
    let base = server.url();
    client.get(format!("{base}/a")).send().await.unwrap();
    client
        .post(format!("{base}/b?c=d"))
        .body("ignored")
        .send()
        .await
        .unwrap();

    let stats: Stats = client
        .get(format!("{base}/_fake/stats"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!((stats.total, stats.throttled), (2, 1));
    let first = &stats.requests[0];
    let second = &stats.requests[1];
    assert_eq!((first.method.as_str(), first.path.as_str()), ("GET", "/a"));
    assert_eq!(
        (second.method.as_str(), second.path.as_str()),
        ("POST", "/b?c=d")
    );
    assert_eq!((first.status, second.status), (200, 429));
    assert!(first.t_ms <= second.t_ms);
    assert_eq!(first.in_flight, 1);
    assert_eq!(stats.requests, server.api().requests());

    // The raw document has exactly the documented fields.
    let raw: serde_json::Value = client
        .get(format!("{base}/_fake/stats"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut fields: Vec<&str> = raw["requests"][0]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    fields.sort_unstable();
    assert_eq!(
        fields,
        [
            "end_ms",
            "in_flight",
            "key",
            "method",
            "path",
            "resource",
            "status",
            "t_ms"
        ]
    );

    let reset = client
        .post(format!("{base}/_fake/reset"))
        .send()
        .await
        .unwrap();
    assert_eq!(reset.status(), 200);
    assert!(server.api().requests().is_empty());
    // The limiter was reset too: the key may send again at once.
    let again = client.get(format!("{base}/a")).send().await.unwrap();
    assert_eq!(again.status(), 200);
    let unknown = client
        .get(format!("{base}/_fake/nope"))
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), 404);
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn keys_come_from_authorization_then_x_api_key() {
    let (server, client) = serve(Config::new(Limits::new(1, Duration::from_secs(60)))).await;
    let url = format!("{}/items", server.url());
    let send = |request: reqwest::RequestBuilder| async move {
        request.send().await.unwrap().status().as_u16()
    };
    assert_eq!(
        send(client.get(&url).header("authorization", "Bearer a")).await,
        200
    );
    assert_eq!(send(client.get(&url).header("x-api-key", "b")).await, 200);
    assert_eq!(send(client.get(&url)).await, 200);
    // Authorization wins over x-api-key: this is key "Bearer a" again.
    let both = client
        .get(&url)
        .header("authorization", "Bearer a")
        .header("x-api-key", "c");
    assert_eq!(send(both).await, 429);
    assert_eq!(send(client.get(&url).header("x-api-key", "b")).await, 429);
    assert_eq!(send(client.get(&url)).await, 429);
    assert_eq!(send(client.get(&url).header("x-api-key", "c")).await, 200);

    let keys: Vec<String> = server
        .api()
        .requests()
        .into_iter()
        .map(|record| record.key)
        .collect();
    assert_eq!(
        keys,
        [
            "Bearer a",
            "b",
            "anonymous",
            "Bearer a",
            "b",
            "anonymous",
            "c"
        ]
    );
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn latency_delays_the_answer_and_is_recorded() {
    let config = Config::new(Limits::new(10, Duration::from_secs(1)))
        .with_latency(sluice_fake::Latency::Fixed(ms(50)));
    let (server, client) = serve(config).await;
    let started = std::time::Instant::now();
    let response = client
        .get(format!("{}/slow", server.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(started.elapsed() >= ms(50));
    let record = &server.api().requests()[0];
    // Both are f64 milliseconds from one origin: equal up to rounding.
    assert!(
        (record.end_ms - record.t_ms - 50.0).abs() < 1e-6,
        "{record:?}"
    );
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn shutdown_closes_the_listener() {
    let (server, client) = serve(Config::default()).await;
    let url = server.url();
    assert_eq!(client.get(&url).send().await.unwrap().status(), 200);
    server.shutdown().await.unwrap();
    let fresh = reqwest::Client::builder().no_proxy().build().unwrap();
    assert!(fresh.get(&url).send().await.is_err());
}

#[tokio::test]
async fn over_http_the_charge_comes_from_the_body_and_usage_comes_back() {
    let limits = Limits::new(100, Duration::from_secs(60))
        .with_tokens(1, 1000)
        .with_tokens_from("/max_tokens".parse().unwrap())
        .with_usage(25, 25);
    let (server, client) = serve(Config::new(limits)).await;
    let url = format!("{}/v1/chat/completions", server.url());
    let response = client
        .post(&url)
        .json(&serde_json::json!({"max_tokens": 400}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["usage"]["total_tokens"], 100);
    let stats: Stats = client
        .get(format!("{}/_fake/stats", server.url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(stats.requests[0].tokens, Some(100));
    server.shutdown().await.unwrap();
}
