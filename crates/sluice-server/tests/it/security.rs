//! The sidecar's protections: the bearer token, the body limit, and secrets
//! that appear in no response of any endpoint.

use crate::support;

use axum::body::Body;
use bytes::Bytes;
use http::{Request, StatusCode};
use serde_json::json;
use sluice_fake::{Latency, Limits, Reply as Scripted, RetryAfter, Rule};
use support::{Echo, SECRET, TOKEN, config, fake, get, ms, router, send, turn};

fn with_token(request: Request<Body>, token: &str) -> Request<Body> {
    let (mut parts, body) = request.into_parts();
    parts
        .headers
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    Request::from_parts(parts, body)
}

#[tokio::test]
async fn the_token_guards_every_endpoint_but_healthz() {
    let echo = Echo::spawn().await;
    let router = router(config(
        &echo.url,
        "",
        "[server]\nauth_token_env = \"SLUICE_TOKEN\"",
    ));
    let turn_body = json!({"calls": [{"id": "a", "tool": "get_ticket", "args": {"id": 1}}]});
    let requests = || {
        vec![
            get("/v1/status"),
            get("/metrics"),
            turn(&turn_body),
            get("/proxy/support/items"),
            get("/no/such/path"),
            Request::delete("/v1/status").body(Body::empty()).unwrap(),
        ]
    };
    let mut refusals = Vec::new();
    for request in requests() {
        refusals.push(send(&router, request).await);
    }
    for request in requests() {
        refusals.push(send(&router, with_token(request, "wrong-token")).await);
    }
    for request in requests() {
        // A prefix of the right token is still wrong.
        refusals.push(send(&router, with_token(request, &TOKEN[..10])).await);
    }
    let first = &refusals[0];
    for reply in &refusals {
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
        assert_eq!(reply.body, first.body, "every refusal looks the same");
        assert_eq!(reply.header("www-authenticate"), Some("Bearer"));
    }
    assert!(echo.seen().is_empty());

    assert_eq!(send(&router, get("/healthz")).await.status, StatusCode::OK);
    let status = send(&router, with_token(get("/v1/status"), TOKEN)).await;
    assert_eq!(status.status, StatusCode::OK);
    let lowercase = Request::get("/v1/status")
        .header("authorization", format!("bearer {TOKEN}"))
        .body(Body::empty())
        .unwrap();
    assert_eq!(send(&router, lowercase).await.status, StatusCode::OK);
    let lowercase = Request::get("/v1/status")
        .header("authorization", format!("bearer {TOKEN}"))
        .body(Body::empty())
        .unwrap();
    assert_eq!(send(&router, lowercase).await.status, StatusCode::OK);
    let results = send(&router, with_token(turn(&turn_body), TOKEN)).await;
    assert_eq!(results.json()["results"][0]["status"], "ok");
    let proxied = send(&router, with_token(get("/proxy/support/items"), TOKEN)).await;
    assert_eq!(proxied.status, StatusCode::OK);
    let missing = send(&router, with_token(get("/no/such/path"), TOKEN)).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);

    // The sidecar's token never travels upstream; the credential's secret does.
    let seen = echo.seen();
    assert_eq!(seen.len(), 2);
    for request in seen {
        assert_eq!(
            request.headers["authorization"],
            format!("Bearer {SECRET}").as_str()
        );
    }
}

#[tokio::test]
async fn bodies_over_max_body_are_413() {
    let echo = Echo::spawn().await;
    let router = router(config(&echo.url, "", "[server]\nmax_body = \"1KiB\""));
    let big = "x".repeat(2_048);

    // Declared too large: refused before reading.
    let declared = Request::post("/v1/turns")
        .header("content-length", "2048")
        .body(Body::from(big.clone()))
        .unwrap();
    let reply = send(&router, declared).await;
    assert_eq!(reply.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(reply.json()["error"].as_str().unwrap().contains("max_body"));

    // Chunked, no length: cut off at the limit while reading.
    let chunks: Vec<Result<Bytes, std::io::Error>> =
        (0..8).map(|_| Ok(Bytes::from(vec![b'x'; 256]))).collect();
    let chunked = Request::post("/proxy/support/items")
        .body(Body::from_stream(futures_util::stream::iter(chunks)))
        .unwrap();
    let reply = send(&router, chunked).await;
    assert_eq!(reply.status, StatusCode::PAYLOAD_TOO_LARGE);
    let declared = Request::post("/proxy/support/items")
        .header("content-length", "2048")
        .body(Body::from(big))
        .unwrap();
    assert_eq!(
        send(&router, declared).await.status,
        StatusCode::PAYLOAD_TOO_LARGE
    );
    assert!(echo.seen().is_empty());

    // At the limit is fine.
    let fits = Request::post("/proxy/support/items")
        .body(Body::from("y".repeat(1_024)))
        .unwrap();
    assert_eq!(send(&router, fits).await.status, StatusCode::OK);
    assert_eq!(echo.seen()[0].body.len(), 1_024);
}

/// Every endpoint, every kind of answer (ok, upstream error, throttled,
/// timed out, transport failure, refusals): the secret is in none of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_appear_in_no_response() {
    let server = fake(
        Limits::new(100, std::time::Duration::from_secs(1)),
        RetryAfter::Auto,
        Latency::Fixed(ms(50)),
    )
    .await;
    server.api().script(Rule::path_prefix(
        "/api/v2/tickets/404",
        // In flight long enough that the fourth call finds every permit taken.
        Scripted::new(StatusCode::NOT_FOUND)
            .body("no such ticket")
            .latency(ms(50)),
    ));
    let dead = "http://127.0.0.1:1";
    let extra = format!(
        "[credentials.down]\nbase_url = \"{dead}\"\nsecret_env = \"SUPPORT_API_KEY\"\n\n[tools.down]\ncredential = \"down\"\npath = \"/x\"\n"
    );
    let router = router(config(
        &server.url(),
        "max_in_flight = 3\nqueue = 0",
        &extra,
    ));
    let body = json!({"calls": [
        {"id": "ok", "tool": "get_ticket", "args": {"id": 1}},
        {"id": "missing", "tool": "get_ticket", "args": {"id": "404"}},
        {"id": "slow", "tool": "search_tickets", "args": {"query": "q"}, "deadline_ms": 10},
        {"id": "shed", "tool": "get_ticket", "args": {"id": 2}},
        {"id": "down", "tool": "down"},
        {"id": "unknown", "tool": "nope"},
    ]});
    let mut replies = vec![send(&router, turn(&body)).await];
    let statuses: Vec<String> = replies[0].json()["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        statuses,
        ["ok", "error", "timed_out", "rate_limited", "error", "error"],
        "{}",
        replies[0].text()
    );
    assert!(replies[0].text().contains("no such ticket"));
    for request in [
        get("/proxy/support/api/v2/tickets/1"),
        get("/proxy/down/x"),
        get("/proxy/support/../x"),
        get("/v1/status"),
        get("/metrics"),
        get("/healthz"),
        get("/nope"),
    ] {
        replies.push(send(&router, request).await);
    }
    assert_eq!(
        replies[2].status,
        StatusCode::BAD_GATEWAY,
        "{}",
        replies[2].text()
    );
    for reply in &replies {
        let text = format!("{:?} {}", reply.headers, reply.text());
        assert!(!text.contains(SECRET), "{text}");
        assert!(!text.contains("sk-test"), "{text}");
    }
}
