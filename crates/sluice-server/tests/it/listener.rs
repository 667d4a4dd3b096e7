//! The listener's limits (issue 19, item 6): an idle connection is closed
//! after `idle_timeout`, a request head that takes longer than
//! `header_read_timeout` is cut off, a connection in use is left alone,
//! and at `max_connections` idle keep-alive connections make room.

use crate::support;

use std::time::Duration;

use sluice_server::SidecarConfig;
use support::{Echo, Sidecar, env, state};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

fn limited(base_url: &str, server: &str) -> SidecarConfig {
    SidecarConfig::from_toml(
        &format!("[server]\n{server}\n[credentials.support]\nbase_url = \"{base_url}\"\n"),
        env,
    )
    .unwrap()
}

async fn connect(sidecar: &Sidecar) -> TcpStream {
    TcpStream::connect(sidecar.url.trim_start_matches("http://"))
        .await
        .unwrap()
}

/// Waits for the server to close `stream`; returns how long that took.
async fn closed(stream: &mut TcpStream, within: Duration) -> Duration {
    let started = Instant::now();
    let mut buf = [0u8; 1024];
    loop {
        match tokio::time::timeout(within, stream.read(&mut buf)).await {
            Err(_) => panic!("still open after {within:?}"),
            Ok(Ok(0) | Err(_)) => return started.elapsed(),
            Ok(Ok(_)) => {}
        }
    }
}

/// One keep-alive GET on `stream`, read to the end of its (small) answer.
async fn get(stream: &mut TcpStream, path: &str) -> String {
    stream
        .write_all(format!("GET {path} HTTP/1.1\r\nhost: sidecar\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
            .await
            .expect("an answer")
            .unwrap();
        assert!(n > 0, "closed mid-answer");
        answer.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&answer);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length: usize = head
                .lines()
                .find_map(|line| line.strip_prefix("content-length: "))
                .and_then(|n| n.trim().parse().ok())
                .unwrap_or(0);
            if body.len() >= length {
                return text.into_owned();
            }
        }
    }
}

#[tokio::test]
async fn an_idle_connection_is_closed_after_the_idle_timeout() {
    let echo = Echo::spawn().await;
    let sidecar = Sidecar::spawn(state(limited(
        &echo.url,
        "idle_timeout = \"300ms\"\nheader_read_timeout = \"5s\"",
    )))
    .await;
    // Never a byte.
    let mut silent = connect(&sidecar).await;
    let took = closed(&mut silent, Duration::from_secs(5)).await;
    assert!(took >= Duration::from_millis(250), "{took:?}");
    // Idle after a request, too.
    let mut used = connect(&sidecar).await;
    assert!(get(&mut used, "/healthz").await.starts_with("HTTP/1.1 200"));
    let took = closed(&mut used, Duration::from_secs(5)).await;
    assert!(took >= Duration::from_millis(250), "{took:?}");
}

#[tokio::test]
async fn a_head_sent_a_byte_at_a_time_is_cut_off() {
    let echo = Echo::spawn().await;
    let sidecar = Sidecar::spawn(state(limited(
        &echo.url,
        "idle_timeout = \"30s\"\nheader_read_timeout = \"400ms\"",
    )))
    .await;
    let mut slow = connect(&sidecar).await;
    let started = Instant::now();
    let head = b"GET /healthz HTTP/1.1\r\nhost: sidecar\r\nx-padding: aaaaaaaaaaaaaaaaaaaaaa";
    let mut cut = false;
    for byte in head {
        if slow.write_all(&[*byte]).await.is_err() {
            cut = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        if started.elapsed() > Duration::from_secs(5) {
            break;
        }
    }
    let took = if cut {
        started.elapsed()
    } else {
        started.elapsed() + closed(&mut slow, Duration::from_secs(5)).await
    };
    // Cut off near the header timeout, long before the idle one.
    assert!(
        took >= Duration::from_millis(350) && took < Duration::from_secs(10),
        "{took:?}"
    );
}

#[tokio::test]
async fn a_connection_in_use_stays_open_across_the_idle_timeout() {
    let echo = Echo::spawn().await;
    let sidecar = Sidecar::spawn(state(limited(
        &echo.url,
        "idle_timeout = \"400ms\"\nheader_read_timeout = \"300ms\"",
    )))
    .await;
    let mut stream = connect(&sidecar).await;
    // Ten requests 150 ms apart: 1.5 s on one connection, never idle 400 ms.
    for _ in 0..10 {
        assert!(
            get(&mut stream, "/healthz")
                .await
                .starts_with("HTTP/1.1 200")
        );
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    // A request that takes longer than both timeouts is not cut off either.
    let answer = get(&mut stream, "/proxy/support/slow").await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

#[tokio::test]
async fn at_the_connection_limit_idle_connections_make_room() {
    let echo = Echo::spawn().await;
    let sidecar = Sidecar::spawn(state(limited(
        &echo.url,
        "max_connections = 3\nidle_timeout = \"60s\"",
    )))
    .await;
    let mut idle = Vec::new();
    for _ in 0..3 {
        let mut stream = connect(&sidecar).await;
        assert!(
            get(&mut stream, "/healthz")
                .await
                .starts_with("HTTP/1.1 200")
        );
        idle.push(stream);
    }
    // A fourth client is served: an idle keep-alive connection was closed for it.
    let started = Instant::now();
    let mut fourth = connect(&sidecar).await;
    assert!(
        get(&mut fourth, "/healthz")
            .await
            .starts_with("HTTP/1.1 200")
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    let mut open = 0;
    for stream in &mut idle {
        let mut buf = [0u8; 16];
        match tokio::time::timeout(Duration::from_millis(200), stream.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => {}
            _ => open += 1,
        }
    }
    assert!(open < 3, "no idle connection was closed to make room");
}

/// The listener answers `/proxy/...` without the router (its hot path):
/// the token, the body limit and the answers are the router's all the same.
#[tokio::test]
async fn the_proxy_on_a_socket_answers_as_the_router_does() {
    let echo = Echo::spawn().await;
    let config = SidecarConfig::from_toml(
        &format!(
            "[server]\nauth_token_env = \"SLUICE_TOKEN\"\nmax_body = \"1KiB\"\n[credentials.support]\nbase_url = \"{}\"\n",
            echo.url
        ),
        env,
    )
    .unwrap();
    let router = support::router(config.clone());
    let sidecar = Sidecar::spawn(state(config)).await;
    let client = reqwest::Client::new();
    let token = format!("Bearer {}", support::TOKEN);
    let cases: Vec<(&str, &str, Option<&str>, usize)> = vec![
        ("GET", "/proxy/support/items", None, 0),
        ("GET", "/proxy/support/items", Some("Bearer wrong"), 0),
        ("GET", "/proxy/support/items?q=1", Some(&token), 0),
        ("POST", "/proxy/support/items", Some(&token), 2_048),
        ("POST", "/proxy/support/items", Some(&token), 16),
        ("GET", "/proxy/nobody/items", Some(&token), 0),
        // (A climbing path is not here: the client's URL parser resolves it first.)
        ("GET", "/proxy/support/a%2Fb", Some(&token), 0),
        ("GET", "/proxy/", Some(&token), 0),
    ];
    for (method, path, auth, body) in cases {
        let method: http::Method = method.parse().unwrap();
        let mut routed = http::Request::builder().method(method.clone()).uri(path);
        let mut served = client.request(method, format!("{}{path}", sidecar.url));
        if let Some(auth) = auth {
            routed = routed.header("authorization", auth);
            served = served.header("authorization", auth);
        }
        let routed = support::send(
            &router,
            routed
                .body(axum::body::Body::from(vec![b'x'; body]))
                .unwrap(),
        )
        .await;
        let served = served.body(vec![b'x'; body]).send().await.unwrap();
        let status = served.status().as_u16();
        let outcome = served
            .headers()
            .get("x-sluice-outcome")
            .map(|v| v.to_str().unwrap().to_owned());
        let www = served
            .headers()
            .get("www-authenticate")
            .map(|v| v.to_str().unwrap().to_owned());
        let text = served.text().await.unwrap();
        assert_eq!(status, routed.status.as_u16(), "{path}: {text}");
        assert_eq!(
            outcome.as_deref(),
            routed.header("x-sluice-outcome"),
            "{path}"
        );
        assert_eq!(www.as_deref(), routed.header("www-authenticate"), "{path}");
        if routed.header("x-sluice-outcome").is_none() {
            // Sluice's own answers are the same bytes; the echo's name its connection.
            assert_eq!(text, routed.text(), "{path}");
        }
    }
}

/// A call whose client hangs up while it waits is dropped with it: it
/// gives its place up and never reaches the upstream. One call at a time
/// on the credential: A holds it (a 300 ms answer), B waits for it and
/// hangs up, C waits for it and stays; C is sent after A, B never.
#[tokio::test]
async fn a_waiting_call_whose_client_hangs_up_is_never_sent() {
    let echo = Echo::spawn().await;
    let config = SidecarConfig::from_toml(
        &format!(
            "[credentials.support]\nbase_url = \"{}\"\nmax_in_flight = 1\n",
            echo.url
        ),
        env,
    )
    .unwrap();
    let sidecar = Sidecar::spawn(state(config)).await;
    let mut a = connect(&sidecar).await;
    let first = tokio::spawn(async move { get(&mut a, "/proxy/support/slow").await });
    // A is in flight before B asks.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut b = connect(&sidecar).await;
    b.write_all(b"GET /proxy/support/gone HTTP/1.1\r\nhost: sidecar\r\n\r\n")
        .await
        .unwrap();
    // B's request is read and waiting for A's place; then its client hangs up.
    let mut watch = connect(&sidecar).await;
    let waiting = Instant::now() + Duration::from_secs(2);
    while queued(&mut watch).await != 1 {
        assert!(Instant::now() < waiting, "B never waited");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    drop(b);
    let mut c = connect(&sidecar).await;
    let third = get(&mut c, "/proxy/support/stays").await;
    assert!(third.starts_with("HTTP/1.1 200"), "{third}");
    let answer = first.await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // Time enough for B to have been sent, had it still been waiting.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let targets: Vec<String> = echo.seen().into_iter().map(|seen| seen.target).collect();
    assert_eq!(targets, ["/slow", "/stays"]);
}

/// Calls waiting in the `support` credential's queue, from `/metrics`.
async fn queued(stream: &mut TcpStream) -> u64 {
    let metrics = get(stream, "/metrics").await;
    metrics
        .lines()
        .filter(|line| line.starts_with("sluice_queued{credential=\"support\""))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}
