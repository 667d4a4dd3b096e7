//! `GET /ui` and `GET /v1/events` (issue 20): the page is served whole and
//! self-contained, behind the bearer token; the feed is live and ends
//! when the sidecar shuts down.

use crate::support;

use std::time::{Duration, Instant};

use axum::body::Body;
use http::{Request, StatusCode};
use serde_json::{Value, json};
use support::{Sidecar, TOKEN, config, get, open_fake, router, send, state};

fn bearer(path: &str, token: &str) -> Request<Body> {
    Request::get(path)
        .header("authorization", format!("Bearer {token}"))
        .body(Body::empty())
        .unwrap()
}

#[tokio::test]
async fn the_page_is_served_self_contained() {
    let server = open_fake().await;
    let router = router(config(&server.url(), "", ""));
    let page = send(&router, get("/ui")).await;
    assert_eq!(page.status, StatusCode::OK);
    assert_eq!(
        page.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    let policy = page.header("content-security-policy").unwrap();
    assert!(policy.starts_with("default-src 'none'"), "{policy}");
    assert!(policy.contains("connect-src 'self'"), "{policy}");
    assert_eq!(page.header("referrer-policy"), Some("no-referrer"));
    assert!(page.body.len() <= 100 * 1024);
    assert_eq!(page.body, sluice_ui::PAGE.as_bytes());
}

#[tokio::test]
async fn the_page_and_its_feed_are_behind_the_token() {
    let server = open_fake().await;
    let router = router(config(
        &server.url(),
        "",
        "[server]\nauth_token_env = \"SLUICE_TOKEN\"",
    ));
    let refused = send(&router, get("/v1/status")).await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
    for request in [
        get("/ui"),
        get("/ui?token=wrong"),
        get(&format!("/ui?token={}", &TOKEN[..10])),
        // Only the page takes the token from its query.
        get(&format!("/v1/events?token={TOKEN}")),
        get(&format!("/v1/status?token={TOKEN}")),
        get(&format!("/ui/?token={TOKEN}")),
        Request::post(format!("/ui?token={TOKEN}"))
            .body(Body::empty())
            .unwrap(),
    ] {
        let reply = send(&router, request).await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
        assert_eq!(reply.body, refused.body, "every refusal looks the same");
        assert_eq!(reply.header("www-authenticate"), Some("Bearer"));
    }
    let by_query = send(&router, get(&format!("/ui?token={TOKEN}"))).await;
    assert_eq!(by_query.status, StatusCode::OK);
    assert_eq!(by_query.body, sluice_ui::PAGE.as_bytes());
    let by_header = send(&router, bearer("/ui", TOKEN)).await;
    assert_eq!(by_header.status, StatusCode::OK);
    // A wrong header is not rescued by a right query.
    let both = send(&router, bearer(&format!("/ui?token={TOKEN}"), "wrong")).await;
    assert_eq!(both.status, StatusCode::UNAUTHORIZED);
}

/// Reads SSE `status` events from a live sidecar until `n` have arrived.
async fn events(url: &str, n: usize) -> Vec<(Duration, Value)> {
    let mut response = reqwest::Client::new()
        .get(format!("{url}/v1/events"))
        .header("authorization", format!("Bearer {TOKEN}"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    let start = Instant::now();
    let mut buffer = String::new();
    let mut seen = Vec::new();
    while seen.len() < n {
        let chunk = response.chunk().await.unwrap().unwrap();
        buffer.push_str(std::str::from_utf8(&chunk).unwrap());
        while let Some(end) = buffer.find("\n\n") {
            let frame: String = buffer.drain(..end + 2).collect();
            if let Some(data) = frame
                .strip_prefix("event: status\ndata: ")
                .map(str::trim_end)
            {
                seen.push((start.elapsed(), serde_json::from_str(data).unwrap()));
            }
        }
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_feed_is_live_and_carries_what_the_page_shows() {
    let server = open_fake().await;
    let config = config(
        &server.url(),
        "rate = \"5/1s\"\nmax_in_flight = 8\nenforce = false",
        "[server]\nauth_token_env = \"SLUICE_TOKEN\"",
    );
    let sidecar = Sidecar::spawn(state(config)).await;
    let calls: Vec<Value> = (0..7)
        .map(|i| json!({"id": format!("c{i}"), "tool": "search_tickets", "args": {"query": i}}))
        .collect();
    let answer = reqwest::Client::new()
        .post(format!("{}/v1/turns", sidecar.url))
        .header("authorization", format!("Bearer {TOKEN}"))
        .json(&json!({ "calls": calls }))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), StatusCode::OK);

    let seen = events(&sidecar.url, 3).await;
    // At least once a second: three snapshots within about one second.
    assert!(seen[2].0 < Duration::from_millis(1_500), "{:?}", seen[2].0);
    let credential = &seen[2].1["credentials"][0];
    assert_eq!(credential["name"], "support");
    assert_eq!(credential["mode"], "shadow");
    assert_eq!(credential["rate"], "5/1s");
    let scope = &credential["scopes"][0];
    assert_eq!(scope["scope"], "api_key");
    assert_eq!(scope["outcomes"]["ok"], 7);
    // The window's last minute: seven requests in it at the end of some second.
    let history = scope["sent_history"].as_array().unwrap();
    assert_eq!(history.len(), 60);
    assert_eq!(
        history.iter().filter_map(Value::as_u64).max(),
        Some(7),
        "{history:?}"
    );
    assert_eq!(
        seen[0].1["credentials"][0]["scopes"][0]["sent_in_window"],
        7
    );
    assert_eq!(scope["shadow"]["would_wait"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_feed_does_not_hold_up_the_shutdown() {
    let server = open_fake().await;
    let mut sidecar = Sidecar::spawn(state(config(&server.url(), "", ""))).await;
    let mut response = reqwest::get(format!("{}/v1/events", sidecar.url))
        .await
        .unwrap();
    assert!(response.chunk().await.unwrap().is_some());
    let start = Instant::now();
    sidecar.stop();
    let served = sidecar.task.take().unwrap();
    tokio::time::timeout(Duration::from_secs(10), served)
        .await
        .expect("the shutdown finished without waiting out the grace period")
        .unwrap()
        .unwrap();
    assert!(start.elapsed() < Duration::from_secs(5));
    // The stream ended rather than being cut.
    while response.chunk().await.unwrap().is_some() {}
}
