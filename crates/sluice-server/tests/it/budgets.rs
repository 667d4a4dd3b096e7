//! Issue 14 through the sidecar: `priority` per call in `/v1/turns`,
//! `x-sluice-priority` on the proxy, costs read from a call's arguments,
//! and `/v1/status` showing every window and unit. Every claim is checked
//! against what the fake recorded.

use crate::support;

use std::time::Duration;

use axum::body::Body;
use http::{Request, StatusCode};
use serde_json::{Value, json};
use sluice_fake::{Latency, Limits, RetryAfter};
use support::{config, fake, get, results, router, send, turn};

const LOW_HALF: &str = r#"rate = "4/10s"
[credentials.support.priorities]
low = "50%"
"#;

fn search(id: &str, query: &str, priority: &str) -> Value {
    json!({"id": id, "tool": "search_tickets", "args": {"query": query}, "priority": priority})
}

async fn open() -> sluice_fake::FakeServer {
    fake(
        Limits::new(100, Duration::from_secs(1)),
        RetryAfter::Auto,
        Latency::Zero,
    )
    .await
}

/// Low calls get half of the window, then `rate_limited` with reason
/// `priority` naming the window; high calls still go through.
#[tokio::test]
async fn turns_take_a_priority_per_call() {
    let server = open().await;
    let router = router(config(&server.url(), LOW_HALF, ""));
    let low: Vec<Value> = (0..4)
        .map(|i| search(&format!("l{i}"), &format!("q{i}"), "low"))
        .collect();
    let low = results(&send(&router, turn(&json!({ "calls": low }))).await);
    let statuses: Vec<&str> = low.iter().map(|r| r["status"].as_str().unwrap()).collect();
    assert_eq!(
        statuses,
        ["ok", "ok", "rate_limited", "rate_limited"],
        "{low:?}"
    );
    assert_eq!(low[2]["reason"], "priority");
    assert_eq!(low[2]["window"], "4/10s");
    assert!(
        low[2]["retry_after_ms"].as_u64().unwrap() > 9_000,
        "{low:?}"
    );
    let high: Vec<Value> = (0..2)
        .map(|i| search(&format!("h{i}"), &format!("p{i}"), "high"))
        .collect();
    let high = results(&send(&router, turn(&json!({ "calls": high }))).await);
    assert!(high.iter().all(|r| r["status"] == "ok"), "{high:?}");
    assert_eq!(server.api().requests().len(), 4);
    // A priority that is none of the three is the request's 400.
    let bad = send(
        &router,
        turn(&json!({"calls": [search("x", "y", "urgent")]})),
    )
    .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST, "{}", bad.text());
    assert!(bad.text().contains("priority"), "{}", bad.text());
    assert_eq!(server.api().requests().len(), 4);
}

fn proxied(priority: &str) -> Request<Body> {
    Request::get("/proxy/support/api/v2/tickets")
        .header("x-sluice-priority", priority)
        .body(Body::empty())
        .unwrap()
}

/// The proxy takes `x-sluice-priority`.
#[tokio::test]
async fn the_proxy_takes_a_priority_header() {
    let server = open().await;
    let router = router(config(&server.url(), LOW_HALF, ""));
    for _ in 0..2 {
        assert_eq!(send(&router, proxied("low")).await.status, StatusCode::OK);
    }
    let deferred = send(&router, proxied("low")).await;
    assert_eq!(deferred.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(deferred.header("x-sluice-reason"), Some("priority"));
    assert_eq!(deferred.json()["window"], "4/10s");
    assert_eq!(send(&router, proxied("high")).await.status, StatusCode::OK);
    let bad = send(&router, proxied("soon")).await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert!(bad.text().contains("x-sluice-priority"), "{}", bad.text());
    assert_eq!(server.api().requests().len(), 3);
}

const TOKENS: &str = r#"rate = "10/1s"
[credentials.support.units.tokens]
rate = "100/1m"
"#;

const CHAT: &str = r#"
[tools.chat]
credential = "support"
method = "POST"
path = "/v1/chat"
cost = { tokens = "{max_tokens}" }
"#;

fn chat(id: &str, max_tokens: Value) -> Value {
    json!({"id": id, "tool": "chat", "args": {"max_tokens": max_tokens}})
}

/// A cost read from the call's arguments: spent from the unit, shown in
/// `/v1/status`; a bad argument is an `error` naming it, nothing sent.
#[tokio::test]
async fn costs_come_from_the_arguments() {
    let server = open().await;
    let router = router(config(&server.url(), TOKENS, CHAT));
    let calls =
        json!({"calls": [chat("a", json!(60)), chat("b", json!(-1)), chat("c", json!(60))]});
    let answered = results(&send(&router, turn(&calls)).await);
    assert_eq!(answered[0]["status"], "ok", "{answered:?}");
    assert_eq!(answered[1]["status"], "error");
    assert!(
        answered[1]["message"]
            .as_str()
            .unwrap()
            .contains("\"max_tokens\"")
    );
    // 60 + 60 do not fit 100 a minute: deferred, naming the unit's window.
    assert_eq!(answered[2]["status"], "rate_limited", "{answered:?}");
    assert_eq!(answered[2]["window"], "100 tokens/1m");
    assert_eq!(server.api().requests().len(), 1);
    let status = send(&router, get("/v1/status")).await.json();
    let text = status.to_string();
    let scope = &status["credentials"][0]["scopes"][0];
    assert_eq!(scope["units"][0]["unit"], "tokens", "{text}");
    assert_eq!(scope["units"][0]["windows"][0]["used"], 60, "{text}");
    assert_eq!(scope["windows"][0]["window"], "10/1s", "{text}");
}
