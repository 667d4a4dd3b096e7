//! `POST /v1/turns` against the fake API: the article's timing test, shedding,
//! single-flight across requests, deadlines, and calls refused without sending.
//! Every claim is checked against what the fake recorded.

use crate::support;

use std::time::Duration;

use http::StatusCode;
use serde_json::{Value, json};
use sluice_fake::{Latency, Limits, Reply as Scripted, RetryAfter, Rule};
use support::{Echo, Sidecar, config, fake, ms, open_fake, results, router, send, state, turn};

fn search(id: &str, query: &str) -> Value {
    json!({"id": id, "tool": "search_tickets", "args": {"query": query}})
}

/// The article's test: the fake allows 3 requests per 200 ms and says
/// Retry-After 0.2 s; five distinct calls in one turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn article_fanout_respects_the_window() {
    let server = fake(
        Limits::new(3, ms(200)),
        RetryAfter::Fixed(ms(200)),
        Latency::Zero,
    )
    .await;
    let router = router(config(&server.url(), "rate = \"3/200ms\"", ""));
    let calls: Vec<Value> = ["a", "b", "c", "d", "e"]
        .iter()
        .enumerate()
        .map(|(i, q)| search(&format!("c{i}"), q))
        .collect();
    let reply = send(&router, turn(&json!({ "calls": calls }))).await;
    let results = results(&reply);

    let records = server.api().requests();
    let starts: Vec<f64> = records.iter().map(|r| r.t_ms).collect();
    // Requests 4 and 5 must not start before the window elapses.
    assert!(starts[3] - starts[2] >= 200.0, "{starts:?}");
    assert!(starts[4] - starts[2] >= 200.0, "{starts:?}");
    // Nothing exploded into retries: exactly one request per logical call.
    assert_eq!(starts.len(), 5, "{records:?}");
    assert_eq!(server.api().stats().throttled, 0);
    // Short inline waits stayed invisible to the model; results in call order.
    let ids: Vec<&str> = results.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["c0", "c1", "c2", "c3", "c4"]);
    for result in &results {
        assert_eq!(result["status"], "ok", "{result}");
        assert_eq!(result["http_status"], 200);
    }
    // The upstream JSON body is embedded as JSON, and the argument went
    // into the query percent-encoded.
    assert_eq!(results[0]["body"]["path"], "/api/v2/search.json?query=a");
}

/// Same turn_id, two HTTP requests over a real socket at the same time:
/// one upstream request, both answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_flight_spans_requests_sharing_a_turn_id() {
    let server = fake(
        Limits::new(100, Duration::from_secs(1)),
        RetryAfter::Auto,
        Latency::Fixed(ms(150)),
    )
    .await;
    let sidecar = Sidecar::spawn(state(config(&server.url(), "", ""))).await;
    let client = reqwest::Client::new();
    let post = |id: &str| {
        client
            .post(format!("{}/v1/turns", sidecar.url))
            .json(&json!({"turn_id": "turn-42", "calls": [search(id, "refund")]}))
            .send()
    };
    let (a, b) = tokio::join!(post("first"), post("second"));
    let a: Value = a.unwrap().json().await.unwrap();
    let b: Value = b.unwrap().json().await.unwrap();
    assert_eq!(a["results"][0]["status"], "ok", "{a}");
    assert_eq!(b["results"][0]["status"], "ok", "{b}");
    assert_eq!(a["results"][0]["id"], "first");
    assert_eq!(b["results"][0]["id"], "second");
    assert_eq!(a["results"][0]["body"], b["results"][0]["body"]);
    assert_eq!(server.api().requests().len(), 1);

    // Within the cache TTL the same turn answers again without sending;
    // another turn (or none) sends its own request.
    let again: Value = post("third").await.unwrap().json().await.unwrap();
    assert_eq!(again["results"][0]["status"], "ok");
    assert_eq!(server.api().requests().len(), 1);
    let other = client
        .post(format!("{}/v1/turns", sidecar.url))
        .json(&json!({"turn_id": "turn-43", "calls": [search("x", "refund")]}))
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 200);
    assert_eq!(server.api().requests().len(), 2);
}

/// Identical reads in one request are one upstream request too.
#[tokio::test]
async fn identical_reads_in_one_request_coalesce() {
    let server = open_fake().await;
    let router = router(config(&server.url(), "", ""));
    let body = json!({"calls": [
        {"id": "a", "tool": "search_tickets", "args": {"query": "x", "page": 1}},
        {"id": "b", "tool": "search_tickets", "args": {"page": 1, "query": "x"}},
        {"id": "c", "tool": "search_tickets", "args": {"query": "y"}},
    ]});
    let results = results(&send(&router, turn(&body)).await);
    assert!(results.iter().all(|r| r["status"] == "ok"), "{results:?}");
    assert_eq!(server.api().requests().len(), 2);
}

/// max_in_flight 1 and queue 1: of four slow calls, one runs, one waits,
/// two are shed at once with an honest wait, and only two requests are sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_sheds_without_sending() {
    let server = fake(
        Limits::new(100, Duration::from_secs(1)),
        RetryAfter::Auto,
        Latency::Fixed(ms(300)),
    )
    .await;
    let router = router(config(&server.url(), "max_in_flight = 1\nqueue = 1", ""));
    let calls: Vec<Value> = (0..4)
        .map(|i| search(&format!("c{i}"), &format!("q{i}")))
        .collect();
    let results = results(&send(&router, turn(&json!({ "calls": calls }))).await);
    let statuses: Vec<&str> = results
        .iter()
        .map(|r| r["status"].as_str().unwrap())
        .collect();
    assert_eq!(
        statuses.iter().filter(|s| **s == "ok").count(),
        2,
        "{results:?}"
    );
    let shed: Vec<&Value> = results
        .iter()
        .filter(|r| r["status"] == "rate_limited")
        .collect();
    assert_eq!(shed.len(), 2, "{results:?}");
    for result in shed {
        assert_eq!(result["reason"], "shed");
        assert!(result["retry_after_ms"].as_u64().unwrap() >= 1);
        assert!(
            result["hint"]
                .as_str()
                .unwrap()
                .contains("waiting on this key")
        );
    }
    let records = server.api().requests();
    assert_eq!(records.len(), 2);
    assert!(records.iter().all(|r| r.in_flight <= 1), "{records:?}");
}

/// A scope the server blocked for longer than a call's deadline: the call
/// is deferred at once and nothing is sent; a call that can afford the wait
/// waits inline and succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_scope_beyond_the_deadline_sends_nothing() {
    let server = open_fake().await;
    server.api().script(Rule::next(
        Scripted::new(StatusCode::TOO_MANY_REQUESTS).header(
            http::header::RETRY_AFTER,
            http::HeaderValue::from_static("1"),
        ),
    ));
    // The server's 1 s wait is inline (under 2 s) for calls that can afford it.
    let router = router(config(&server.url(), "", ""));

    // The first call is told 429 + 1 s: it fits its 10 s deadline, so it
    // waits inline and its retry succeeds.
    let first = json!({"calls": [{"id": "a", "tool": "search_tickets", "args": {"query": "a"}, "deadline_ms": 10_000}]});
    let sent = tokio::spawn({
        let router = router.clone();
        async move { send(&router, turn(&first)).await }
    });
    // Meanwhile, a call whose deadline is shorter than the block.
    tokio::time::sleep(ms(100)).await;
    let hurried = json!({"calls": [{"id": "b", "tool": "search_tickets", "args": {"query": "b"}, "deadline_ms": 300}]});
    let started = tokio::time::Instant::now();
    let hurried = results(&send(&router, turn(&hurried)).await);
    assert!(
        started.elapsed() < ms(250),
        "deferred at once, not slept on"
    );
    assert_eq!(hurried[0]["status"], "rate_limited", "{hurried:?}");
    assert_eq!(hurried[0]["reason"], "throttled");
    let wait = hurried[0]["retry_after_ms"].as_u64().unwrap();
    assert!((500..=1_000).contains(&wait), "{wait}");

    let first = results(&sent.await.unwrap());
    assert_eq!(first[0]["status"], "ok", "{first:?}");
    let records = server.api().requests();
    // The 429, then the retry after the wait; nothing for the hurried call.
    assert_eq!(records.len(), 2, "{records:?}");
    assert!(records[1].t_ms - records[0].t_ms >= 1_000.0, "{records:?}");
    assert!(
        records.iter().all(|r| r.path.contains("query=a")),
        "{records:?}"
    );
}

/// A server wait longer than the inline threshold defers every call on the
/// scope without sending until it ends.
#[tokio::test]
async fn a_long_server_wait_defers_the_scope() {
    let server = open_fake().await;
    server.api().script(Rule::next(
        Scripted::new(StatusCode::TOO_MANY_REQUESTS).header(
            http::header::RETRY_AFTER,
            http::HeaderValue::from_static("30"),
        ),
    ));
    let router = router(config(&server.url(), "", ""));
    for query in ["a", "b", "c"] {
        let results = results(&send(&router, turn(&json!({"calls": [search("x", query)]}))).await);
        assert_eq!(results[0]["status"], "rate_limited", "{results:?}");
        let wait = results[0]["retry_after_ms"].as_u64().unwrap();
        assert!((29_000..=30_000).contains(&wait), "{wait}");
    }
    assert_eq!(server.api().requests().len(), 1);
}

/// Unknown tools, missing or malformed arguments and bad deadlines are that
/// call's error, named; the other calls run; nothing is sent for them.
#[tokio::test]
async fn bad_calls_are_their_own_errors_and_send_nothing() {
    let server = open_fake().await;
    let router = router(config(&server.url(), "", ""));
    let body = json!({"calls": [
        {"id": "unknown", "tool": "drop_tables", "args": {}},
        {"id": "missing", "tool": "search_tickets", "args": {"q": "typo"}},
        {"id": "null", "tool": "get_ticket", "args": {"id": null}},
        {"id": "dots", "tool": "get_ticket", "args": {"id": ".."}},
        {"id": "array", "tool": "search_tickets", "args": ["refund"]},
        {"id": "zero", "tool": "search_tickets", "args": {"query": "x"}, "deadline_ms": 0},
        {"id": "fine", "tool": "get_ticket", "args": {"id": 7}},
    ]});
    let results = results(&send(&router, turn(&body)).await);
    let message = |i: usize| results[i]["message"].as_str().unwrap().to_owned();
    for result in &results[..6] {
        assert_eq!(result["status"], "error", "{result}");
        assert!(result.get("http_status").is_none(), "{result}");
    }
    assert_eq!(message(0), "unknown tool \"drop_tables\"");
    assert_eq!(message(1), "search_tickets: missing argument \"query\"");
    assert_eq!(message(2), "get_ticket: missing argument \"id\"");
    assert!(message(3).contains("\"id\""), "{}", message(3));
    assert_eq!(message(4), "search_tickets: args must be a JSON object");
    assert!(message(5).contains("deadline_ms"), "{}", message(5));
    assert_eq!(results[6]["status"], "ok");
    assert_eq!(results[6]["body"]["path"], "/api/v2/tickets/7");
    assert_eq!(server.api().requests().len(), 1);
}

/// Arguments are percent-encoded: CR/LF, `&`, `/`, `?`, `#` and `..` in an
/// argument cannot add a header, a parameter or a path segment.
#[tokio::test]
async fn arguments_cannot_inject_into_the_request() {
    let echo = Echo::spawn().await;
    let router = router(config(&echo.url, "", ""));
    let body = json!({"calls": [
        {"id": "q", "tool": "search_tickets", "args": {"query": "a&admin=1\r\nX-Injected: yes#frag"}},
        {"id": "p", "tool": "get_ticket", "args": {"id": "../../admin?x=1"}},
        {"id": "extra", "tool": "get_ticket", "args": {"id": "5", "note": "a b&c=d"}},
    ]});
    let results = results(&send(&router, turn(&body)).await);
    assert_eq!(results[0]["status"], "ok", "{results:?}");
    assert_eq!(results[2]["status"], "ok", "{results:?}");
    // `../` encodes to `..%2F`, which a server that decodes `%2F` would
    // still read as a climb: refused, nothing sent.
    assert_eq!(results[1]["status"], "error", "{results:?}");
    assert!(results[1]["message"].as_str().unwrap().contains("base URL"));
    let seen = echo.seen();
    let mut targets: Vec<&str> = seen.iter().map(|s| s.target.as_str()).collect();
    targets.sort_unstable();
    assert_eq!(
        targets,
        [
            "/api/v2/search.json?query=a%26admin%3D1%0D%0AX-Injected%3A%20yes%23frag",
            "/api/v2/tickets/5?note=a%20b%26c%3Dd",
        ]
    );
    assert!(seen.iter().all(|s| !s.headers.contains_key("x-injected")));
}

/// A write's leftover arguments go as a JSON body; the secret is injected;
/// a text body comes back as a string; an upstream error keeps its status.
#[tokio::test]
async fn writes_send_json_bodies_and_results_embed_what_came_back() {
    let echo = Echo::spawn().await;
    let extra = r#"
[tools.read_text]
credential = "support"
path = "/text"

[tools.broken]
credential = "support"
path = "/fail"
"#;
    let router = router(config(&echo.url, "", extra));
    let body = json!({"calls": [
        {"id": "w", "tool": "create_ticket", "args": {"subject": "Late delivery", "priority": 2}},
        {"id": "t", "tool": "read_text"},
        {"id": "f", "tool": "broken", "args": {}},
    ]});
    let results = results(&send(&router, turn(&body)).await);
    assert_eq!(results[0]["status"], "ok");
    assert_eq!(results[0]["body"]["method"], "POST");
    let sent: Value = serde_json::from_str(results[0]["body"]["body"].as_str().unwrap()).unwrap();
    assert_eq!(sent, json!({"subject": "Late delivery", "priority": 2}));
    assert_eq!(results[1]["body"], "plain words");
    assert_eq!(results[2]["status"], "error");
    assert_eq!(results[2]["http_status"], 500);

    let seen = echo.seen();
    let write = seen.iter().find(|s| s.method == "POST").unwrap();
    assert_eq!(write.headers["content-type"], "application/json");
    let auth = format!("Bearer {}", support::SECRET);
    assert!(
        seen.iter()
            .all(|s| s.headers["authorization"] == auth.as_str())
    );
    // The write was not retried; the read of /fail was (5xx on a read).
    assert_eq!(seen.iter().filter(|s| s.method == "POST").count(), 1);
    assert!(seen.iter().filter(|s| s.target == "/fail").count() >= 2);
}

/// Malformed requests are 400s with a JSON error naming the problem.
#[tokio::test]
async fn malformed_requests_are_400_with_a_named_problem() {
    let server = open_fake().await;
    let router = router(config(&server.url(), "", ""));
    let raw = |body: &str| {
        http::Request::post("/v1/turns")
            .header("content-type", "application/json")
            .body(axum::body::Body::from(body.to_owned()))
            .unwrap()
    };
    let cases: Vec<(http::Request<axum::body::Body>, &str)> = vec![
        (raw("{\"calls\": ["), "malformed JSON"),
        (raw("{\"calls\": []} trailing"), "malformed JSON"),
        (raw("[]"), "malformed JSON"),
        (
            turn(&json!({"calls": []})),
            "calls: the list of calls is empty",
        ),
        (turn(&json!({})), "missing field `calls`"),
        (
            turn(&json!({"calls": [search("a", "x"), search("b", "y"), search("a", "z")]})),
            "calls[2].id: duplicate call id \"a\"",
        ),
        (
            turn(&json!({"calls": [{"id": "a", "tool": "t", "deadline": 5}]})),
            "calls[0].deadline: unknown field `deadline`",
        ),
        (
            turn(&json!({"calls": [{"id": "a", "tool": "t", "deadline_ms": "soon"}]})),
            "calls[0].deadline_ms: invalid type",
        ),
        (
            turn(&json!({"calls": [{"tool": "t"}]})),
            "calls[0]: missing field `id`",
        ),
        (
            turn(&json!({"turn_id": "", "calls": [search("a", "x")]})),
            "turn_id: must be",
        ),
    ];
    for (request, expected) in cases {
        let reply = send(&router, request).await;
        assert_eq!(
            reply.status,
            StatusCode::BAD_REQUEST,
            "{expected}: {}",
            reply.text()
        );
        let error = reply.json()["error"].as_str().unwrap().to_owned();
        assert!(error.starts_with(expected), "{expected:?} vs {error:?}");
    }
    assert_eq!(server.api().requests().len(), 0);
}

/// Issue 13: a `deadline_ms` longer than the longest allowed duration (a
/// week) is that call's error, naming the field, and reaches neither the
/// engine nor the upstream; a week itself, and a sidecar whose configured
/// deadlines are a week, answer normally.
#[tokio::test]
async fn deadlines_longer_than_a_week_are_refused_without_sending() {
    let server = open_fake().await;
    let week = "[defaults]\ndeadline = \"7d\"\n";
    let router = router(config(&server.url(), "", week));
    let body = json!({"calls": [
        {"id": "max", "tool": "search_tickets", "args": {"query": "a"}, "deadline_ms": u64::MAX},
        {"id": "eon", "tool": "search_tickets", "args": {"query": "b"}, "deadline_ms": 1_000_000_000_000_000_u64},
        {"id": "over", "tool": "search_tickets", "args": {"query": "c"}, "deadline_ms": 604_800_001},
        {"id": "week", "tool": "search_tickets", "args": {"query": "d"}, "deadline_ms": 604_800_000},
        {"id": "default", "tool": "search_tickets", "args": {"query": "e"}},
    ]});
    let results = results(&send(&router, turn(&body)).await);
    for result in &results[..3] {
        assert_eq!(result["status"], "error", "{result}");
        assert_eq!(
            result["message"],
            "search_tickets: deadline_ms must be at most 604800000 (the longest allowed duration)"
        );
    }
    assert_eq!(results[3]["status"], "ok", "{}", results[3]);
    assert_eq!(results[4]["status"], "ok", "{}", results[4]);
    let mut sent: Vec<String> = server
        .api()
        .requests()
        .iter()
        .map(|request| request.path.clone())
        .collect();
    sent.sort_unstable();
    assert_eq!(
        sent,
        ["/api/v2/search.json?query=d", "/api/v2/search.json?query=e"]
    );
}
