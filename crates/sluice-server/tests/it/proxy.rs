//! `ANY /proxy/{credential}/{*path}`: forwarding as is, the secret swapped in,
//! only the base URL contacted, and sluice's own 429 / 504 answers.

use crate::support;

use std::time::Duration;

use axum::body::Body;
use http::{Request, StatusCode};
use serde_json::Value;
use sluice_fake::{Latency, Limits, Reply as Scripted, RetryAfter, Rule};
use support::{Echo, SECRET, config, fake, ms, router, send};

fn proxy_get(path: &str) -> Request<Body> {
    Request::get(path).body(Body::empty()).unwrap()
}

#[tokio::test]
async fn forwards_as_is_with_the_secret_swapped_in() {
    let echo = Echo::spawn().await;
    let router = router(config(&echo.url, "", ""));
    let request = Request::post("/proxy/support/api/v2/tickets?draft=1")
        .header("authorization", "Bearer agent-supplied-key")
        .header("content-type", "application/json")
        .header("x-request-id", "r-1")
        .header("x-sluice-deadline-ms", "5000")
        .header("connection", "x-private")
        .header("x-private", "hop")
        .header("proxy-authorization", "Basic Zm9vOmJhcg==")
        .body(Body::from(r#"{"subject":"hi"}"#))
        .unwrap();
    let reply = send(&router, request).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    assert_eq!(reply.header("x-upstream"), Some("echo"));
    assert_eq!(reply.header("x-sluice-outcome"), Some("ok"));
    assert_eq!(reply.header("connection"), None);
    let body = reply.json();
    assert_eq!(body["method"], "POST");
    assert_eq!(body["target"], "/api/v2/tickets?draft=1");
    assert_eq!(body["body"], r#"{"subject":"hi"}"#);

    let seen = echo.seen();
    assert_eq!(seen.len(), 1);
    let headers = &seen[0].headers;
    assert_eq!(
        headers["authorization"],
        format!("Bearer {SECRET}").as_str()
    );
    assert_eq!(headers.get_all("authorization").iter().count(), 1);
    assert_eq!(headers["content-type"], "application/json");
    assert_eq!(headers["x-request-id"], "r-1");
    for dropped in ["x-sluice-deadline-ms", "x-private", "proxy-authorization"] {
        assert!(!headers.contains_key(dropped), "{dropped} was forwarded");
    }
    let host = echo.url.trim_start_matches("http://");
    assert_eq!(headers["host"], host);
    // What the client did not say, the sidecar says for it...
    let agent = headers["user-agent"].to_str().unwrap();
    assert!(agent.starts_with("sluice/"), "{agent}");
    assert_eq!(headers["accept"], "*/*");
    // ...and what it said is kept, once.
    let request = Request::get("/proxy/support/items")
        .header("user-agent", "agent/1")
        .header("accept", "application/json")
        .body(Body::empty())
        .unwrap();
    assert_eq!(send(&router, request).await.status, StatusCode::OK);
    let seen = echo.seen();
    let headers = &seen[1].headers;
    for (name, value) in [("user-agent", "agent/1"), ("accept", "application/json")] {
        let sent: Vec<_> = headers.get_all(name).iter().collect();
        assert_eq!(sent, [value], "{name}");
    }
}

#[tokio::test]
async fn a_custom_auth_header_replaces_the_clients() {
    let echo = Echo::spawn().await;
    let router = router(config(
        &echo.url,
        "auth_header = \"x-api-key\"\nauth_prefix = \"\"",
        "",
    ));
    let request = Request::get("/proxy/support/items")
        .header("x-api-key", "agent-key")
        .header("authorization", "Bearer agent-token")
        .body(Body::empty())
        .unwrap();
    assert_eq!(send(&router, request).await.status, StatusCode::OK);
    let seen = echo.seen();
    assert_eq!(seen[0].headers["x-api-key"], SECRET);
    assert!(!seen[0].headers.contains_key("authorization"));
}

#[tokio::test]
async fn paths_join_below_the_base_path() {
    let echo = Echo::spawn().await;
    let router = router(config(&format!("{}/base/", echo.url), "", ""));
    let reply = send(&router, proxy_get("/proxy/support/v1/items/a%20b?x=%26")).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.json()["target"], "/base/v1/items/a%20b?x=%26");
    let reply = send(&router, proxy_get("/proxy/support")).await;
    assert_eq!(reply.json()["target"], "/base/");
}

#[tokio::test]
async fn upstream_answers_come_back_as_they_are() {
    let echo = Echo::spawn().await;
    let router = router(config(&echo.url, "", ""));

    // A write is not retried: the 500 comes back once, as is.
    let failed = Request::post("/proxy/support/fail")
        .body(Body::empty())
        .unwrap();
    let reply = send(&router, failed).await;
    assert_eq!(reply.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(reply.text(), r#"{"error":"boom"}"#);
    assert_eq!(reply.header("x-sluice-outcome"), Some("error"));
    assert_eq!(echo.seen().len(), 1);

    let text = send(&router, proxy_get("/proxy/support/text")).await;
    assert_eq!(text.status, StatusCode::OK);
    assert_eq!(text.header("content-type"), Some("text/plain"));
    assert_eq!(text.text(), "plain words");

    let head = Request::head("/proxy/support/text")
        .body(Body::empty())
        .unwrap();
    let head = send(&router, head).await;
    assert_eq!(head.status, StatusCode::OK);
    assert!(head.body.is_empty());
    assert_eq!(echo.seen().last().unwrap().method, "HEAD");
}

#[tokio::test]
async fn redirects_are_returned_not_followed() {
    let echo = Echo::spawn().await;
    let router = router(config(&echo.url, "", ""));
    let reply = send(&router, proxy_get("/proxy/support/redirect")).await;
    assert_eq!(reply.status, StatusCode::FOUND);
    assert_eq!(
        reply.header("location"),
        Some("http://127.0.0.1:1/elsewhere")
    );
    assert_eq!(echo.seen().len(), 1);
}

#[tokio::test]
async fn climbing_paths_are_400_before_anything_is_sent() {
    let echo = Echo::spawn().await;
    let router = router(config(&format!("{}/api/", echo.url), "", ""));
    for path in [
        "/proxy/support/../admin",
        "/proxy/support/a/../../admin",
        "/proxy/support/%2e%2e/admin",
        "/proxy/support/%2E%2e/admin",
        "/proxy/support/.%2E/admin",
        "/proxy/support/a%2f..%2fadmin",
        "/proxy/support/%252e%252e/admin",
        "/proxy/support/a%5c..%5cadmin",
        "/proxy/support/..;/admin",
        "/proxy/support/..",
    ] {
        let reply = send(&router, proxy_get(path)).await;
        assert_eq!(
            reply.status,
            StatusCode::BAD_REQUEST,
            "{path}: {}",
            reply.text()
        );
        assert!(reply.json()["error"].as_str().unwrap().contains(".."));
    }
    assert!(echo.seen().is_empty(), "{:?}", echo.seen());
}

#[tokio::test]
async fn nothing_in_a_path_reaches_another_host_or_injects_a_header() {
    let echo = Echo::spawn().await;
    let router = router(config(&echo.url, "", ""));
    for path in [
        "/proxy/support//evil.example/x",
        "/proxy/support/http://evil.example/x",
        "/proxy/support/@evil.example/x",
        "/proxy/support/a%0d%0aX-Injected:%201",
    ] {
        let reply = send(&router, proxy_get(path)).await;
        assert_eq!(reply.status, StatusCode::OK, "{path}");
    }
    let seen = echo.seen();
    assert_eq!(seen.len(), 4);
    assert!(seen.iter().all(|s| !s.headers.contains_key("x-injected")));
    assert_eq!(seen[3].target, "/a%0d%0aX-Injected:%201");
}

#[tokio::test]
async fn unknown_credentials_are_404() {
    let echo = Echo::spawn().await;
    let router = router(config(&echo.url, "", ""));
    let reply = send(&router, proxy_get("/proxy/billing/items")).await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
    assert_eq!(reply.json()["error"], "unknown credential \"billing\"");
    assert!(echo.seen().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_answers_429_with_the_wait() {
    let echo = Echo::spawn().await;
    let router = router(config(&echo.url, "max_in_flight = 1\nqueue = 0", ""));
    let (a, b, c) = tokio::join!(
        send(&router, proxy_get("/proxy/support/slow?n=1")),
        send(&router, proxy_get("/proxy/support/slow?n=2")),
        send(&router, proxy_get("/proxy/support/slow?n=3")),
    );
    let replies = [a, b, c];
    let ok = replies
        .iter()
        .filter(|r| r.status == StatusCode::OK)
        .count();
    assert_eq!(ok, 1);
    for reply in replies.iter().filter(|r| r.status != StatusCode::OK) {
        assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(reply.header("x-sluice-reason"), Some("shed"));
        assert_eq!(reply.header("x-sluice-outcome"), Some("rate_limited"));
        let wait_ms: u64 = reply.header("retry-after-ms").unwrap().parse().unwrap();
        let seconds: u64 = reply.header("retry-after").unwrap().parse().unwrap();
        assert!(wait_ms >= 1);
        assert_eq!(seconds, wait_ms.div_ceil(1_000).max(1));
        let body = reply.json();
        assert_eq!(body["status"], "rate_limited");
        assert_eq!(body["reason"], "shed");
        assert_eq!(body["retry_after_ms"].as_u64(), Some(wait_ms));
    }
    assert_eq!(echo.seen().len(), 1);
}

#[tokio::test]
async fn a_server_block_answers_429_without_sending_again() {
    let server = fake(
        Limits::new(100, Duration::from_secs(1)),
        RetryAfter::Auto,
        Latency::Zero,
    )
    .await;
    server.api().script(Rule::next(
        Scripted::new(StatusCode::TOO_MANY_REQUESTS).header(
            http::header::RETRY_AFTER,
            http::HeaderValue::from_static("30"),
        ),
    ));
    let router = router(config(&server.url(), "", ""));
    for _ in 0..2 {
        let reply = send(&router, proxy_get("/proxy/support/api/items")).await;
        assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(reply.header("x-sluice-reason"), Some("throttled"));
        assert_eq!(reply.header("retry-after"), Some("30"));
        let wait_ms: u64 = reply.header("retry-after-ms").unwrap().parse().unwrap();
        assert!((29_000..=30_000).contains(&wait_ms), "{wait_ms}");
        assert_eq!(reply.json()["scope"], "api_key");
    }
    assert_eq!(server.api().requests().len(), 1);
}

#[tokio::test]
async fn the_deadline_header_bounds_the_call_with_504() {
    let echo = Echo::spawn().await;
    let router = router(config(&echo.url, "", ""));
    let request = Request::get("/proxy/support/slow")
        .header("x-sluice-deadline-ms", "100")
        .body(Body::empty())
        .unwrap();
    let started = tokio::time::Instant::now();
    let reply = send(&router, request).await;
    assert!(started.elapsed() < ms(280), "{:?}", started.elapsed());
    assert_eq!(reply.status, StatusCode::GATEWAY_TIMEOUT);
    let body = reply.json();
    assert_eq!(body["status"], "timed_out");
    assert_eq!(body["after_ms"], 100);

    for bad in ["0", "soon", "-5"] {
        let request = Request::get("/proxy/support/x")
            .header("x-sluice-deadline-ms", bad)
            .body(Body::empty())
            .unwrap();
        let reply = send(&router, request).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{bad}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_sharing_a_turn_header_coalesce() {
    let echo = Echo::spawn().await;
    let router = router(config(&echo.url, "", ""));
    let get = |turn: Option<&str>, accept: &str| {
        let mut request = Request::get("/proxy/support/slow?q=1").header("accept", accept);
        if let Some(turn) = turn {
            request = request.header("x-sluice-turn-id", turn);
        }
        request.body(Body::empty()).unwrap()
    };
    let (a, b) = tokio::join!(
        send(&router, get(Some("t1"), "application/json")),
        send(&router, get(Some("t1"), "application/json")),
    );
    assert_eq!((a.status, b.status), (StatusCode::OK, StatusCode::OK));
    assert_eq!(a.body, b.body);
    assert_eq!(echo.seen().len(), 1);

    // Another representation, or no shared turn: a request of its own.
    send(&router, get(Some("t1"), "text/csv")).await;
    assert_eq!(echo.seen().len(), 2);
    let (c, d) = tokio::join!(
        send(&router, get(None, "application/json")),
        send(&router, get(None, "application/json")),
    );
    assert_eq!((c.status, d.status), (StatusCode::OK, StatusCode::OK));
    assert_eq!(echo.seen().len(), 4);

    // Writes never coalesce.
    let post = || {
        Request::post("/proxy/support/slow")
            .header("x-sluice-turn-id", "t1")
            .body(Body::empty())
            .unwrap()
    };
    tokio::join!(send(&router, post()), send(&router, post()));
    assert_eq!(echo.seen().len(), 6);
    let body: Value = a.json();
    assert_eq!(body["target"], "/slow?q=1");
}

/// Issue 13: a deadline header longer than the longest allowed duration (a
/// week) is a 400 naming the header, and nothing is sent; a week is served.
#[tokio::test]
async fn deadline_headers_longer_than_a_week_are_refused_without_sending() {
    let echo = Echo::spawn().await;
    let router = router(config(&echo.url, "", ""));
    let with_deadline = |value: &str| {
        Request::get("/proxy/support/x")
            .header("x-sluice-deadline-ms", value)
            .body(Body::empty())
            .unwrap()
    };
    for huge in ["18446744073709551615", "1000000000000000", "604800001"] {
        let reply = send(&router, with_deadline(huge)).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{huge}");
        assert_eq!(
            reply.json()["error"],
            "x-sluice-deadline-ms: must be at most 604800000 milliseconds (the longest allowed duration)"
        );
    }
    // Past u64: not a number of milliseconds at all.
    let reply = send(&router, with_deadline("99999999999999999999999")).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert!(echo.seen().is_empty(), "{:?}", echo.seen());

    let reply = send(&router, with_deadline("604800000")).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    assert_eq!(echo.seen().len(), 1);
}
