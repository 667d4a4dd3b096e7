//! Upstream bodies stream through the proxy (issue 18): each piece of an
//! event stream reaches the client before the upstream has written the
//! next, the call holds its concurrency permit until its body ends, reads
//! others may share are read whole, and request bodies are bounded and
//! sent again on a retry.

use crate::support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use bytes::Bytes;
use http::StatusCode;
use serde_json::Value;
use sluice_server::SidecarConfig;
use support::chunked::{Chunked, Script};
use support::{Echo, Sidecar, config, env, state};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

/// A sidecar with no secret on the credential (nothing to scrub).
fn plain(base_url: &str, credential: &str) -> SidecarConfig {
    SidecarConfig::from_toml(
        &format!("[credentials.support]\nbase_url = \"{base_url}\"\n{credential}\n"),
        env,
    )
    .unwrap()
}

/// GETs `url`, recording when each chunk of the body arrived and what it held.
async fn chunks(url: &str) -> (u16, Vec<(Instant, String)>) {
    let client = reqwest::Client::new();
    let mut response = client.get(url).send().await.unwrap();
    let status = response.status().as_u16();
    let mut seen = Vec::new();
    while let Some(chunk) = response.chunk().await.unwrap() {
        seen.push((Instant::now(), String::from_utf8_lossy(&chunk).into_owned()));
    }
    (status, seen)
}

/// When the piece holding `needle` arrived.
fn arrival(seen: &[(Instant, String)], needle: &str) -> Instant {
    seen.iter()
        .find(|(_, text)| text.contains(needle))
        .unwrap_or_else(|| panic!("{needle:?} never arrived: {seen:?}"))
        .0
}

async fn stream_through(config: SidecarConfig, upstream: &Chunked) {
    let sidecar = Sidecar::spawn(state(config)).await;
    let (status, seen) = chunks(&format!("{}/proxy/support/events", sidecar.url)).await;
    assert_eq!(status, 200);
    let all: String = seen.iter().map(|(_, text)| text.as_str()).collect();
    assert_eq!(all, "data: 0\n\ndata: 1\n\ndata: 2\n\n");
    let sent = &upstream.sent()[0];
    // Each event arrived before the upstream even wrote the next one: the
    // proxy passed it on, it did not wait for the body to end.
    for (i, next_sent) in sent.iter().enumerate().skip(1) {
        let got = arrival(&seen, &format!("data: {}", i - 1));
        assert!(
            got < *next_sent,
            "event {} arrived {:?} after event {i} was sent",
            i - 1,
            got - *next_sent
        );
    }
}

#[tokio::test]
async fn each_event_reaches_the_client_before_the_upstream_sends_the_next() {
    let upstream = Chunked::spawn(Script::events(
        &["data: 0\n\n", "data: 1\n\n", "data: 2\n\n"],
        Duration::from_millis(100),
    ))
    .await;
    stream_through(plain(&upstream.url, ""), &upstream).await;
}

#[tokio::test]
async fn events_stream_through_the_scrubber_too() {
    let upstream = Chunked::spawn(Script::events(
        &["data: 0\n\n", "data: 1\n\n", "data: 2\n\n"],
        Duration::from_millis(100),
    ))
    .await;
    // `config` signs with a secret, so every response passes the scrubber.
    stream_through(config(&upstream.url, "", ""), &upstream).await;
}

/// An event stream (three events 150 ms apart) through a sidecar whose
/// credential sets `limits`, with one client 50 ms into reading it.
struct StreamInFlight {
    upstream: Chunked,
    sidecar: Sidecar,
    url: String,
    first: tokio::task::JoinHandle<(u16, Vec<(Instant, String)>)>,
}

async fn a_stream_in_flight(limits: &str) -> StreamInFlight {
    let upstream = Chunked::spawn(Script::events(
        &["data: 0\n\n", "data: 1\n\n", "data: 2\n\n"],
        Duration::from_millis(150),
    ))
    .await;
    let sidecar = Sidecar::spawn(state(plain(&upstream.url, limits))).await;
    let url = format!("{}/proxy/support/events", sidecar.url);
    let first = tokio::spawn({
        let url = url.clone();
        async move { chunks(&url).await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    StreamInFlight {
        upstream,
        sidecar,
        url,
        first,
    }
}

#[tokio::test]
async fn a_stream_holds_its_permit_until_its_body_ends() {
    let StreamInFlight {
        upstream,
        sidecar,
        url,
        first,
    } = a_stream_in_flight("rate = \"100/1s\"\nmax_in_flight = 1\nqueue = 4").await;
    let status: Value = reqwest::get(format!("{}/v1/status", sidecar.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        status["credentials"][0]["in_flight"], 1,
        "the stream is in flight: {status}"
    );
    // max_in_flight = 1: the second request starts upstream only once the
    // first body has ended.
    let second = chunks(&url).await;
    let first = first.await.unwrap();
    assert_eq!((first.0, second.0), (200, 200));
    let arrived = upstream.arrived();
    let first_end = *upstream.sent()[0].last().unwrap();
    assert_eq!(arrived.len(), 2);
    assert!(
        arrived[1] >= first_end,
        "the second request started {:?} before the first body ended",
        first_end - arrived[1]
    );
    let status: Value = reqwest::get(format!("{}/v1/status", sidecar.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(status["credentials"][0]["in_flight"], 0, "{status}");
}

/// A stream's connection is its own until the stream ends: a request made
/// meanwhile, on the same thread, goes out at once on another connection,
/// not behind the stream; and a request after both still finds its way.
#[tokio::test]
async fn a_request_during_a_stream_is_not_held_behind_it() {
    let StreamInFlight {
        upstream,
        sidecar: _sidecar,
        url,
        first,
    } = a_stream_in_flight("").await;
    let second = chunks(&url).await;
    let first = first.await.unwrap();
    assert_eq!((first.0, second.0), (200, 200));
    let arrived = upstream.arrived();
    let first_end = *upstream.sent()[0].last().unwrap();
    assert!(
        arrived[1] < first_end,
        "the second request waited {:?} for the first stream to end",
        arrived[1] - first_end
    );
    let third = chunks(&url).await;
    assert_eq!(third.0, 200);
    assert_eq!(upstream.arrived().len(), 3);
}

#[tokio::test]
async fn a_long_answer_streams_past_a_mebibyte_and_arrives_whole() {
    // 3 MiB of JSON-ish text in 64 KiB chunks, no declared length.
    let piece: Vec<u8> = (0..65_536u32).map(|i| b'a' + (i % 26) as u8).collect();
    let mut script = Script::events(&[], Duration::ZERO);
    script.content_type = "application/json";
    script.pieces = vec![piece.clone(); 48];
    let upstream = Chunked::spawn(script).await;
    let sidecar = Sidecar::spawn(state(plain(&upstream.url, ""))).await;
    let body = reqwest::get(format!("{}/proxy/support/big", sidecar.url))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(body.len(), 48 * 65_536);
    assert!(body.chunks(65_536).all(|chunk| chunk == piece.as_slice()));
}

#[tokio::test]
async fn a_stream_cut_short_is_an_error_for_the_client_and_frees_its_permit() {
    let mut script = Script::events(&["data: 0\n\n", "data: 1\n\n"], Duration::from_millis(20));
    script.cut = true;
    let upstream = Chunked::spawn(script).await;
    let sidecar = Sidecar::spawn(state(plain(
        &upstream.url,
        "rate = \"100/1s\"\nmax_in_flight = 1",
    )))
    .await;
    let mut response = reqwest::get(format!("{}/proxy/support/events", sidecar.url))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut broke = false;
    for _ in 0..10 {
        match response.chunk().await {
            Ok(Some(_)) => {}
            Ok(None) => break,
            Err(_) => {
                broke = true;
                break;
            }
        }
    }
    assert!(broke, "the client must see the body break, not a clean end");
    let status: Value = reqwest::get(format!("{}/v1/status", sidecar.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(status["credentials"][0]["in_flight"], 0, "{status}");
}

#[tokio::test]
async fn reads_in_a_named_turn_are_shared_whole_and_event_streams_are_not() {
    let echo = Echo::spawn().await;
    let sidecar = Sidecar::spawn(state(plain(&echo.url, ""))).await;
    let client = reqwest::Client::new();
    let get = |accept: &'static str| {
        client
            .get(format!("{}/proxy/support/slow", sidecar.url))
            .header("x-sluice-turn-id", "turn-1")
            .header("accept", accept)
            .send()
    };
    // Joined in flight, then answered from the turn's cache: one request,
    // and every caller gets the whole body.
    let (a, b) = tokio::join!(get("application/json"), get("application/json"));
    let c = get("application/json").await.unwrap();
    let bodies = [
        a.unwrap().text().await.unwrap(),
        b.unwrap().text().await.unwrap(),
        c.text().await.unwrap(),
    ];
    assert_eq!(echo.seen().len(), 1, "one upstream request for three reads");
    for body in &bodies {
        let value: Value = serde_json::from_str(body).unwrap();
        assert_eq!(value["target"], "/slow", "{body}");
    }
    // An event stream is never shared: each asks the upstream itself.
    let (d, e) = tokio::join!(get("text/event-stream"), get("text/event-stream"));
    assert_eq!(
        (d.unwrap().status().as_u16(), e.unwrap().status().as_u16()),
        (200, 200)
    );
    assert_eq!(echo.seen().len(), 3);
}

#[tokio::test]
async fn a_retried_write_sends_its_body_again() {
    // The first answer is a 429, which means the server did not act: the
    // write is retried, and its body sent again.
    let bodies: Arc<Mutex<Vec<Bytes>>> = Arc::default();
    let record = bodies.clone();
    let upstream = Router::new().fallback(move |body: Bytes| {
        let record = record.clone();
        async move {
            let mut bodies = record.lock().unwrap();
            bodies.push(body);
            if bodies.len() == 1 {
                (
                    StatusCode::TOO_MANY_REQUESTS,
                    [("retry-after-ms", "50")],
                    "slow down",
                )
            } else {
                (StatusCode::OK, [("x-answer", "yes")], "done")
            }
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, upstream).await });
    let sidecar = Sidecar::spawn(state(plain(&url, ""))).await;
    let response = reqwest::Client::new()
        .post(format!("{}/proxy/support/tickets", sidecar.url))
        .body("{\"subject\":\"replayed\"}")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.text().await.unwrap(), "done");
    let bodies = bodies.lock().unwrap().clone();
    assert_eq!(bodies.len(), 2, "{bodies:?}");
    assert!(
        bodies
            .iter()
            .all(|body| body.as_ref() == b"{\"subject\":\"replayed\"}"),
        "{bodies:?}"
    );
}

#[tokio::test]
async fn a_request_body_that_does_not_arrive_within_its_deadline_is_408() {
    let echo = Echo::spawn().await;
    let sidecar = Sidecar::spawn(state(plain(&echo.url, ""))).await;
    let addr = sidecar.url.trim_start_matches("http://").to_owned();
    let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
    stream
        .write_all(
            b"POST /proxy/support/tickets HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\nx-sluice-deadline-ms: 300\r\n\r\nten bytes.",
        )
        .await
        .unwrap();
    let started = Instant::now();
    let mut answer = vec![0u8; 512];
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut answer))
        .await
        .expect("the sidecar answers before the client gives up")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer[..read]);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(started.elapsed() >= Duration::from_millis(250));
    assert!(echo.seen().is_empty(), "nothing went upstream");
}
