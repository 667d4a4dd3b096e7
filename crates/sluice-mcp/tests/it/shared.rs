//! `shared = true` in `sluice mcp` (issue 54): two `--listen` proxies, each
//! in front of its own remote MCP server, spend one credential's budget in
//! Redis (a redis-server of the test's own). Summed over both servers no
//! rolling window holds more starts than the key allows; every call is
//! answered exactly once, with the server's result or a deferral the model
//! reads; nothing deferred reaches a server.

use crate::support::raw_http::post_mcp;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::{Value, json};
use sluice_mcp::{McpConfig, Proxy, Remote, Server};
use sluice_testkit::{RedisServer, max_in_window};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

/// The key's limit: at most `RATE` calls start in any second.
const RATE: usize = 4;
/// Calls each proxy's client sends at once.
const CALLS: u64 = 12;

/// A start the servers saw: when (ms since the test began) and the call's `n`.
type Starts = Arc<Mutex<Vec<(f64, u64)>>>;

/// A remote MCP server answering every POST with JSON at once, recording
/// each `tools/call`'s start.
async fn server(origin: Instant, starts: Starts) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let starts = starts.clone();
            tokio::spawn(async move {
                let mut reader = BufReader::new(stream);
                let mut length = 0;
                let mut line = String::new();
                loop {
                    line.clear();
                    if reader.read_line(&mut line).await.unwrap_or(0) == 0 {
                        return;
                    }
                    if line == "\r\n" {
                        break;
                    }
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        length = v.trim().parse().unwrap_or(0);
                    }
                }
                let mut body = vec![0; length];
                let _ = reader.read_exact(&mut body).await;
                let body: Value = serde_json::from_slice(&body).unwrap_or_default();
                let result = if body["method"] == "tools/call" {
                    let n = body["params"]["arguments"]["n"].as_u64().unwrap();
                    starts
                        .lock()
                        .push((origin.elapsed().as_secs_f64() * 1_000.0, n));
                    json!({"content": [{"type": "text", "text": format!("ran {n}")}]})
                } else {
                    json!({"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                           "serverInfo": {"name": "s", "version": "0"}})
                };
                let answer = match body.get("id") {
                    Some(id) => json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string(),
                    None => String::new(),
                };
                let status = if answer.is_empty() {
                    "202 Accepted"
                } else {
                    "200 OK"
                };
                let _ = reader
                    .into_inner()
                    .write_all(
                        format!(
                            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\nmcp-session-id: up\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{answer}",
                            answer.len()
                        )
                        .as_bytes(),
                    )
                    .await;
            });
        }
    });
    format!("http://{addr}/mcp")
}

/// `sluice mcp --listen --upstream URL` on a shared key; its address.
async fn proxy(toml: &str, upstream: String) -> String {
    let config = McpConfig::from_toml(toml, None).unwrap();
    let settings = config
        .listener("127.0.0.1:0".parse().ok(), &|_| None)
        .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let remote = Remote {
        url: upstream.parse().unwrap(),
        auth: None,
        forward_authorization: false,
    };
    tokio::spawn(sluice_mcp::serve_http(
        Proxy::new(config),
        Server::Remote(remote),
        listener,
        settings,
        std::future::pending(),
    ));
    addr
}

/// One POST (JSON answer): the head and the messages of the body.
async fn post(addr: &str, session: Option<&str>, body: &str) -> (String, Vec<Value>) {
    let mut headers = vec![("host", addr), ("accept", "application/json")];
    headers.extend(session.map(|session| ("mcp-session-id", session)));
    let answer = post_mcp(addr, &headers, body, Duration::from_secs(30)).await;
    let messages = answer
        .body
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l.trim()).ok())
        .filter(Value::is_object)
        .collect();
    (answer.head, messages)
}

/// Opens a session on `addr` and sends `CALLS` calls at once, numbered
/// from `first`: each call's `n` and the answers its POST carried.
async fn burst(addr: String, first: u64) -> Vec<(u64, Vec<Value>)> {
    let init = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#;
    let (head, _) = post(&addr, None, init).await;
    let session = head
        .lines()
        .find_map(|l| l.strip_prefix("mcp-session-id: "))
        .expect("a session")
        .to_owned();
    let calls: Vec<_> = (first..first + CALLS)
        .map(|n| {
            let (addr, session) = (addr.clone(), session.clone());
            tokio::spawn(async move {
                let call = json!({"jsonrpc": "2.0", "id": n, "method": "tools/call",
                                  "params": {"name": "send", "arguments": {"n": n}}});
                (n, post(&addr, Some(&session), &call.to_string()).await.1)
            })
        })
        .collect();
    let mut answers = Vec::new();
    for call in calls {
        answers.push(call.await.unwrap());
    }
    answers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_proxies_on_one_shared_key_keep_its_window_together() {
    let redis = RedisServer::start();
    // A window margin of 100 ms, as the sidecar's shared test uses on a
    // loaded two-core machine: the limiter decides starts, the servers
    // record arrivals a little later.
    let toml = format!(
        "[defaults]\nwindow_margin = \"100ms\"\ninline_wait = \"1500ms\"\ndeadline = \"10s\"\n\
         [credentials.api]\nrate = \"{RATE}/1s\"\nmax_in_flight = 16\nqueue = 64\nshared = true\n\
         [shared]\nredis_url = \"{}\"\ntimeout = \"1s\"\n",
        redis.url()
    );
    let origin = Instant::now();
    let starts: Starts = Arc::default();
    let first = proxy(&toml, server(origin, starts.clone()).await).await;
    let second = proxy(&toml, server(origin, starts.clone()).await).await;
    let (a, b) = tokio::join!(burst(first, 0), burst(second, 100));
    let starts = starts.lock().clone();

    // No rolling second at the two servers together holds more than RATE.
    let times: Vec<f64> = starts.iter().map(|(at, _)| *at).collect();
    let busiest = max_in_window(&times, 1_000.0);
    assert!(
        busiest <= RATE,
        "{busiest} starts in one second: {starts:?}"
    );

    let mut ran: HashMap<u64, usize> = HashMap::new();
    for (_, n) in &starts {
        *ran.entry(*n).or_default() += 1;
    }
    let (mut answered, mut deferred) = (0, 0);
    for (n, messages) in a.into_iter().chain(b) {
        // Exactly one answer, to this call.
        let responses: Vec<&Value> = messages.iter().filter(|m| m.get("id").is_some()).collect();
        assert_eq!(responses.len(), 1, "call {n}: {messages:?}");
        let answer = responses[0];
        assert_eq!(answer["id"], n);
        let result = &answer["result"];
        if result["isError"] == true {
            // A deferral the model can read; the call never reached a server.
            let outcome = &result["structuredContent"];
            assert_eq!(outcome["status"], "rate_limited", "call {n}: {answer}");
            assert!(outcome["retry_after_ms"].as_u64().is_some(), "{answer}");
            let text: Value =
                serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap();
            assert_eq!(&text, outcome);
            assert_eq!(ran.get(&n), None, "deferred call {n} reached a server");
            deferred += 1;
        } else {
            assert_eq!(result["content"][0]["text"], format!("ran {n}"));
            assert_eq!(ran.get(&n), Some(&1), "call {n} ran once");
            answered += 1;
        }
    }
    assert_eq!(answered + deferred, 2 * CALLS as usize);
    assert_eq!(answered, starts.len());
    // Within 1.5 s of waiting, the key lets through about two windows' worth.
    assert!(answered >= RATE, "{answered} answered, {deferred} deferred");
    assert!(deferred > 0, "24 calls at {RATE}/1s: some must be deferred");
    eprintln!("shared: {answered} ran, {deferred} deferred, busiest second {busiest}");
}
