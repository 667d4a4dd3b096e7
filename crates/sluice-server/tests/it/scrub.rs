//! An upstream that echoes the key it was sent ("invalid api key sk-…", a
//! header, a JSON field, an event stream) never gets it to the client
//! (issue 19, item 5): every configured secret is `***` in `/v1/turns`
//! bodies and in proxy headers and bodies, streamed or not, across chunk
//! boundaries.

use crate::support;

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use http::{HeaderMap, Request, Response, StatusCode};
use serde_json::{Value, json};
use sluice_server::SidecarConfig;
use support::chunked::{Chunked, Script};
use support::{SECRET, Sidecar, config, env, results, router, send, state, turn};
use tokio::time::Instant;

/// An upstream that echoes the `authorization` header it got: in a 401's
/// JSON, in a 200's JSON, in a header, and in a plain-text body.
async fn echo_key() -> String {
    let upstream = Router::new().fallback(|request: Request<Body>| async move {
        let key = request
            .headers()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .trim_start_matches("Bearer ")
            .to_owned();
        let (status, body) = match request.uri().path() {
            "/api/v2/tickets/denied" => (
                StatusCode::UNAUTHORIZED,
                json!({"error": format!("invalid api key {key}")}).to_string(),
            ),
            "/text" => (StatusCode::OK, format!("your key is {key}, keep it safe")),
            _ => (
                StatusCode::OK,
                json!({"echo": {"key": key, "note": "fine"}}).to_string(),
            ),
        };
        Response::builder()
            .status(status)
            .header("content-type", "application/json")
            .header("x-echo-key", format!("key={key}"))
            .header("x-plain", "nothing to hide")
            .body(Body::from(body))
            .unwrap()
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, upstream).await });
    url
}

fn no_secret_in(headers: &HeaderMap, body: &[u8]) {
    for (name, value) in headers {
        assert!(
            !value
                .as_bytes()
                .windows(SECRET.len())
                .any(|w| w == SECRET.as_bytes()),
            "{name}: {value:?}"
        );
    }
    assert!(
        !body.windows(SECRET.len()).any(|w| w == SECRET.as_bytes()),
        "{}",
        String::from_utf8_lossy(body)
    );
}

#[tokio::test]
async fn turns_answers_never_carry_the_secret() {
    let url = echo_key().await;
    let router = router(config(&url, "", ""));
    let reply = send(
        &router,
        turn(&json!({"calls": [
            {"id": "a", "tool": "get_ticket", "args": {"id": "denied"}},
            {"id": "b", "tool": "get_ticket", "args": {"id": "7"}},
        ]})),
    )
    .await;
    no_secret_in(&reply.headers, &reply.body);
    let results = results(&reply);
    assert_eq!(results[0]["status"], "error");
    assert_eq!(
        results[0]["message"],
        "upstream answered 401 Unauthorized: {\"error\":\"invalid api key ***\"}"
    );
    assert_eq!(results[1]["status"], "ok");
    assert_eq!(
        results[1]["body"],
        json!({"echo": {"key": "***", "note": "fine"}})
    );
}

#[tokio::test]
async fn a_masked_body_is_sent_with_its_own_length() {
    let url = echo_key().await;
    let sidecar = Sidecar::spawn(state(config(&url, "", ""))).await;
    let response = reqwest::get(format!("{}/proxy/support/text", sidecar.url))
        .await
        .unwrap();
    let length: usize = response.headers()["content-length"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let body = response.bytes().await.unwrap();
    assert_eq!(&body[..], b"your key is ***, keep it safe");
    assert_eq!(length, body.len());
}

#[tokio::test]
async fn proxy_headers_and_whole_bodies_are_masked() {
    let url = echo_key().await;
    let router = router(config(&url, "", ""));
    let reply = send(
        &router,
        Request::get("/proxy/support/api/v2/tickets/denied")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    no_secret_in(&reply.headers, &reply.body);
    assert_eq!(reply.header("x-echo-key"), Some("key=***"));
    assert_eq!(reply.header("x-plain"), Some("nothing to hide"));
    assert_eq!(reply.json(), json!({"error": "invalid api key ***"}));

    let text = send(
        &router,
        Request::get("/proxy/support/text")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(text.text(), "your key is ***, keep it safe");

    // HEAD: the headers are masked, and there is no body to mask.
    let head = send(
        &router,
        Request::head("/proxy/support/x")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(head.header("x-echo-key"), Some("key=***"));
    assert!(head.body.is_empty());
}

#[tokio::test]
async fn a_secret_split_across_two_chunks_of_a_stream_is_masked() {
    let (left, right) = SECRET.split_at(9);
    let pieces = [
        "data: {\"n\":1}\n\n".to_owned(),
        format!("data: {{\"key\":\"{left}"),
        format!("{right}\"}}\n\n"),
        "data: {\"n\":3}\n\n".to_owned(),
    ];
    let pieces: Vec<&str> = pieces.iter().map(String::as_str).collect();
    let upstream = Chunked::spawn(Script::events(&pieces, Duration::from_millis(100))).await;
    let sidecar = Sidecar::spawn(state(config(&upstream.url, "", ""))).await;
    let mut response = reqwest::get(format!("{}/proxy/support/events", sidecar.url))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut seen: Vec<(Instant, Vec<u8>)> = Vec::new();
    while let Some(chunk) = response.chunk().await.unwrap() {
        seen.push((Instant::now(), chunk.to_vec()));
    }
    let all: Vec<u8> = seen.iter().flat_map(|(_, bytes)| bytes.clone()).collect();
    no_secret_in(&HeaderMap::new(), &all);
    assert_eq!(
        String::from_utf8(all).unwrap(),
        "data: {\"n\":1}\n\ndata: {\"key\":\"***\"}\n\ndata: {\"n\":3}\n\n"
    );
    // The first event did not wait for the rest; the secret's first half
    // waited only until the second half said what it was.
    let sent = &upstream.sent()[0];
    assert!(seen[0].0 < sent[1], "the first event was held back");
    assert_eq!(seen[0].1, b"data: {\"n\":1}\n\n");
}

#[tokio::test]
async fn without_a_secret_nothing_is_touched() {
    let url = echo_key().await;
    let config = SidecarConfig::from_toml(
        &format!("[credentials.support]\nbase_url = \"{url}\"\n"),
        env,
    )
    .unwrap();
    let router = router(config);
    // The upstream got no key, so it echoes an empty one; text that looks
    // like the support key (which is not configured here) passes as is.
    let reply = send(
        &router,
        Request::get("/proxy/support/text")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(reply.text(), "your key is , keep it safe");
    let reply = send(
        &router,
        turn(&json!({"calls": [{"id": "a", "tool": "nope", "args": {"k": SECRET}}]})),
    )
    .await;
    let value: Value = reply.json();
    assert_eq!(value["results"][0]["status"], "error");
}
