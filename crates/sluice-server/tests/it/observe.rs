//! `GET /v1/status`, `GET /metrics` and `GET /healthz`: what operators see.

use crate::support;

use std::time::Duration;

use http::StatusCode;
use serde_json::{Value, json};
use sluice_fake::{Latency, Limits, Reply as Scripted, RetryAfter, Rule};
use support::{SECRET, config, fake, get, ms, router, send, turn};

fn search(id: &str, query: &str) -> Value {
    json!({"id": id, "tool": "search_tickets", "args": {"query": query}})
}

#[tokio::test]
async fn healthz_and_unknown_paths() {
    let server = fake(Limits::default(), RetryAfter::Auto, Latency::Zero).await;
    let router = router(config(&server.url(), "", ""));
    let health = send(&router, get("/healthz")).await;
    assert_eq!(health.status, StatusCode::OK);
    assert_eq!(health.json(), json!({"status": "ok"}));
    let missing = send(&router, get("/v2/turns")).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert_eq!(missing.json()["error"], "no such endpoint");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_credentials_scopes_and_tools_never_secrets() {
    let server = fake(
        Limits::new(100, Duration::from_secs(1)),
        RetryAfter::Auto,
        Latency::Fixed(ms(200)),
    )
    .await;
    let router = router(config(
        &server.url(),
        "rate = \"50/1s\"\nmax_in_flight = 1\nqueue = 0",
        "",
    ));
    // Before any call: the credential, no scopes yet.
    let before = send(&router, get("/v1/status")).await.json();
    assert_eq!(before["credentials"][0]["name"], "support");
    assert_eq!(before["credentials"][0]["scopes"], json!([]));

    let calls = json!({"turn_id": "t", "calls": [search("a", "a"), search("b", "b")]});
    let slow = tokio::spawn({
        let router = router.clone();
        async move { send(&router, turn(&calls)).await }
    });
    tokio::time::sleep(ms(80)).await;
    let during = send(&router, get("/v1/status")).await;
    assert_eq!(during.status, StatusCode::OK);
    let status = during.json();
    let credential = &status["credentials"][0];
    assert_eq!(credential["in_flight"], 1);
    let scope = &credential["scopes"][0];
    assert_eq!(scope["scope"], "api_key");
    assert_eq!(scope["in_flight"], 1);
    assert_eq!(scope["max_in_flight"], 1);
    assert_eq!(status["open_turns"], 1);
    slow.await.unwrap();

    let after = send(&router, get("/v1/status")).await;
    let text = after.text();
    assert!(!text.contains(SECRET), "{text}");
    let status = after.json();
    let credential = &status["credentials"][0];
    assert_eq!(credential["base_url"], format!("{}/", server.url()));
    assert_eq!(credential["auth_header"], "authorization");
    assert_eq!(credential["has_secret"], true);
    assert_eq!(credential["secret_env"], "SUPPORT_API_KEY");
    assert_eq!(credential["rate"], "50/1s");
    assert_eq!(credential["shared"], false);
    assert_eq!(credential["auto_rate"], false);
    assert_eq!(status["window_margin_ms"], 20);
    let scope = &credential["scopes"][0];
    assert_eq!(scope["rate"], "50/1s", "shown as configured");
    assert_eq!(scope["outcomes"]["ok"], 1);
    assert_eq!(scope["outcomes"]["rate_limited"], 1);
    assert_eq!(scope["in_flight"], 0);
    let tools = status["tools"].as_array().unwrap();
    let search = tools
        .iter()
        .find(|t| t["name"] == "search_tickets")
        .unwrap();
    assert_eq!(search["method"], "GET");
    assert_eq!(search["path"], "/api/v2/search.json?query={query}");
    assert_eq!(search["read"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_calls_requests_waits_sheds_retries_and_quotas() {
    let server = fake(
        Limits::new(100, Duration::from_secs(1)),
        RetryAfter::Auto,
        Latency::Fixed(ms(100)),
    )
    .await;
    let extra = r#"
[credentials.quota]
base_url = "BASE"
rate = "100/1s"

[tools.daily]
credential = "quota"
path = "/daily"
"#
    .replace("BASE", &server.url());
    let router = router(config(
        &server.url(),
        "rate = \"2/200ms\"\nmax_in_flight = 2\nqueue = 1",
        &extra,
    ));
    // A 503 first: the read is retried.
    server.api().script(Rule::path_prefix(
        "/api/v2/tickets/1",
        Scripted::new(StatusCode::SERVICE_UNAVAILABLE),
    ));
    // A wait beyond quota_after (5 min): the scope's quota is spent.
    server.api().script(Rule::path_prefix(
        "/daily",
        Scripted::new(StatusCode::TOO_MANY_REQUESTS).header(
            http::header::RETRY_AFTER,
            http::HeaderValue::from_static("3600"),
        ),
    ));
    // Two run, one waits in the queue (and for a start slot), one is shed,
    // and a repeat of the first joins it.
    let calls = json!({"calls": [
        search("a", "a"), search("b", "b"), search("c", "c"), search("d", "d"), search("e", "a"),
    ]});
    let first = send(&router, turn(&calls)).await;
    assert_eq!(first.status, StatusCode::OK);
    let retried = json!({"calls": [{"id": "retry", "tool": "get_ticket", "args": {"id": 1}}]});
    let retried = send(&router, turn(&retried)).await.json();
    assert_eq!(retried["results"][0]["status"], "ok", "{retried}");
    let quota = json!({"calls": [{"id": "q", "tool": "daily"}, {"id": "x", "tool": "nope"}]});
    let second = send(&router, turn(&quota)).await.json();
    assert_eq!(
        second["results"][0]["status"], "quota_exhausted",
        "{second}"
    );

    let reply = send(&router, get("/metrics")).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(
        reply.header("content-type"),
        Some("application/openmetrics-text; version=1.0.0; charset=utf-8")
    );
    let text = reply.text();
    assert!(!text.contains(SECRET));
    for expected in [
        r#"sluice_calls_total{credential="support",tool="search_tickets",outcome="ok",reason=""}"#,
        r#"sluice_calls_total{credential="support",tool="search_tickets",outcome="rate_limited",reason="shed"}"#,
        r#"sluice_calls_total{credential="quota",tool="daily",outcome="quota_exhausted",reason=""} 1"#,
        r#"sluice_calls_total{credential="",tool="unknown",outcome="error",reason=""} 1"#,
        r#"sluice_upstream_requests_total{credential="support",status="200"}"#,
        r#"sluice_upstream_requests_total{credential="support",status="503"} 1"#,
        r#"sluice_wait_seconds_count{credential="support",kind="rate"}"#,
        r#"sluice_shed_calls_total{credential="support"}"#,
        r#"sluice_retries_total{credential="support",tool="get_ticket"} 1"#,
        r#"sluice_coalesced_calls_total{credential="support",tool="search_tickets"} 1"#,
        r#"sluice_quota_exhaustions_total{credential="quota",scope="api_key"} 1"#,
        r#"sluice_quota_exhausted{credential="quota",scope="api_key"} 1"#,
        r#"sluice_in_flight{credential="support",scope="api_key"} 0"#,
        r#"sluice_queued{credential="support",scope="api_key"} 0"#,
        r#"sluice_upstream_latency_seconds_bucket{le="#,
    ] {
        assert!(text.contains(expected), "missing {expected}\n{text}");
    }
}
