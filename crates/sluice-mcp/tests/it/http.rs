//! The Streamable HTTP transports against a scripted remote server on
//! loopback: HTTP-level signals (429 + `Retry-After`), the upstream's
//! token, and hostile servers (hanging or dripping streams, garbage, a
//! huge event, a reset connection, a session that disappears), each
//! giving one outcome per call within its deadline while other calls go on.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::{Value, json};
use sluice_config::UpstreamAuth;
use sluice_mcp::{McpConfig, Proxy, Remote, Server};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// One request the scripted server received.
#[derive(Debug, Clone)]
struct Seen {
    at: Instant,
    method: String,
    headers: Vec<(String, String)>,
    body: Value,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    fn tool(&self) -> Option<&str> {
        self.body["params"]["name"].as_str()
    }
}

/// A remote MCP server whose answer depends on the tool called.
#[derive(Clone, Default)]
struct Script {
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Script {
    async fn start(self) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                tokio::spawn(self.clone().serve(stream));
            }
        });
        format!("http://{addr}/mcp")
    }

    fn calls(&self, tool: &str) -> Vec<Seen> {
        self.seen
            .lock()
            .iter()
            .filter(|s| s.body["method"] == "tools/call" && s.tool() == Some(tool))
            .cloned()
            .collect()
    }

    async fn serve(self, stream: TcpStream) {
        let mut reader = BufReader::new(stream);
        let mut head = Vec::new();
        let mut line = String::new();
        loop {
            line.clear();
            if reader.read_line(&mut line).await.unwrap_or(0) == 0 {
                return;
            }
            if line == "\r\n" {
                break;
            }
            head.push(line.trim_end().to_owned());
        }
        let method = head[0].split(' ').next().unwrap_or_default().to_owned();
        let headers: Vec<(String, String)> = head[1..]
            .iter()
            .filter_map(|h| {
                h.split_once(": ")
                    .map(|(n, v)| (n.to_owned(), v.to_owned()))
            })
            .collect();
        let length: usize = headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0; length];
        reader.read_exact(&mut body).await.unwrap();
        let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let seen = Seen {
            at: Instant::now(),
            method,
            headers,
            body: body.clone(),
        };
        let earlier = self.calls(seen.tool().unwrap_or_default()).len();
        self.seen.lock().push(seen.clone());
        let mut stream = reader.into_inner();
        let id = body["id"].clone();
        let ok = |text: &str| json!({"jsonrpc": "2.0", "id": id, "result": {"content": [{"type": "text", "text": text}]}});
        if seen.method != "POST" || body.get("id").is_none() {
            let _ = stream
                .write_all(
                    b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                )
                .await;
            return;
        }
        let sse_head =
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
        match seen.tool().unwrap_or_default() {
            "limited" if earlier == 0 => {
                let _ = stream.write_all(b"HTTP/1.1 429 Too Many Requests\r\nretry-after: 1\r\ncontent-length: 0\r\nconnection: close\r\n\r\n").await;
            }
            "quota" => {
                let _ = stream.write_all(b"HTTP/1.1 429 Too Many Requests\r\nretry-after: 90\r\ncontent-length: 0\r\nconnection: close\r\n\r\n").await;
            }
            "hang" => {
                let _ = stream.write_all(sse_head).await;
                tokio::time::sleep(Duration::from_secs(600)).await;
            }
            "drip" => {
                let _ = stream.write_all(sse_head).await;
                for _ in 0..6000 {
                    if stream.write_all(b": still here\n\n").await.is_err() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            "garbage" => {
                let _ = stream.write_all(sse_head).await;
                let _ = stream.write_all(b"data: {not json at all\n\n").await;
            }
            "huge" => {
                let _ = stream.write_all(sse_head).await;
                let _ = stream.write_all(b"data: \"").await;
                let chunk = vec![b'x'; 1 << 20];
                for _ in 0..12 {
                    if stream.write_all(&chunk).await.is_err() {
                        return;
                    }
                }
            }
            "reset" => {
                // SO_LINGER 0: the close is a reset, not a FIN.
                #[allow(deprecated)]
                let _ = stream.set_linger(Some(Duration::ZERO));
                drop(stream);
            }
            "gone" => {
                let _ = stream
                    .write_all(
                        b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                    )
                    .await;
            }
            "progress" => {
                let _ = stream.write_all(sse_head).await;
                let note = json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 1, "progress": 1}});
                let _ = stream
                    .write_all(format!("data: {note}\n\n").as_bytes())
                    .await;
                tokio::time::sleep(Duration::from_millis(50)).await;
                let _ = stream
                    .write_all(format!("id: e-2\ndata: {}\n\n", ok("streamed")).as_bytes())
                    .await;
            }
            _ => {
                let text = ok("done").to_string();
                let _ = stream
                    .write_all(format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nmcp-session-id: up-1\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}", text.len()).as_bytes())
                    .await;
            }
        }
    }
}

const CONFIG: &str = r#"
[defaults]
deadline = "2s"
inline_wait = "5s"
[credentials.api]
rate = "100/1s"
max_in_flight = 8
"#;

/// A stdio agent on `run_remote`.
struct Agent {
    writes: tokio::io::WriteHalf<tokio::io::DuplexStream>,
    reads: tokio::io::Lines<BufReader<tokio::io::ReadHalf<tokio::io::DuplexStream>>>,
}

impl Agent {
    fn start(url: &str, toml: &str, auth: Option<UpstreamAuth>) -> Agent {
        let config = McpConfig::from_toml(toml, None).unwrap();
        let (agent, side) = tokio::io::duplex(1 << 20);
        let (agent_in, agent_out) = tokio::io::split(side);
        let remote = Remote {
            url: url.parse().unwrap(),
            auth,
            forward_authorization: false,
        };
        tokio::spawn(sluice_mcp::run_remote(
            Proxy::new(config).seed(3),
            remote,
            agent_in,
            agent_out,
        ));
        let (reads, writes) = tokio::io::split(agent);
        Agent {
            writes,
            reads: BufReader::new(reads).lines(),
        }
    }

    async fn call(&mut self, id: u64, tool: &str) {
        let line = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": {}, "_meta": {"progressToken": 1}}});
        self.writes
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
    }

    /// The next message that is not sluice's own progress while a call
    /// waits (the calls carry a progress token); the server's pass through.
    async fn next(&mut self, within: Duration) -> Value {
        loop {
            let line = tokio::time::timeout(within, self.reads.next_line())
                .await
                .expect("an answer in time")
                .unwrap()
                .unwrap();
            let message: Value = serde_json::from_str(&line).unwrap();
            let sluices = message["params"]["message"]
                .as_str()
                .is_some_and(|text| text.starts_with("waiting for a rate-limit slot"));
            if !sluices {
                return message;
            }
        }
    }
}

#[tokio::test]
async fn a_429_with_retry_after_is_waited_out_inline_and_sent_again_after_it() {
    let script = Script::default();
    let url = script.clone().start().await;
    let mut agent = Agent::start(&url, CONFIG, None);
    agent.call(1, "limited").await;
    let answer = agent.next(Duration::from_secs(10)).await;
    assert_eq!(answer["id"], 1);
    assert_eq!(answer["result"]["content"][0]["text"], "done", "{answer}");
    let calls = script.calls("limited");
    assert_eq!(calls.len(), 2, "one refused, one sent after the wait");
    let gap = calls[1].at - calls[0].at;
    assert!(
        gap >= Duration::from_millis(950),
        "sent again after {gap:?}, told 1 s"
    );
}

#[tokio::test]
async fn a_wait_longer_than_inline_is_a_structured_rate_limited_result() {
    let script = Script::default();
    let url = script.clone().start().await;
    let mut agent = Agent::start(&url, CONFIG, None);
    agent.call(1, "quota").await;
    let answer = agent.next(Duration::from_secs(5)).await;
    let outcome = &answer["result"]["structuredContent"];
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    assert_eq!(outcome["status"], "rate_limited", "{answer}");
    let wait = outcome["retry_after_ms"].as_u64().unwrap();
    assert!((85_000..=90_000).contains(&wait), "{wait}");
    // The scope is penalized: the next call is not sent either.
    agent.call(2, "quota").await;
    let again = agent.next(Duration::from_secs(5)).await;
    assert_eq!(
        again["result"]["structuredContent"]["status"],
        "rate_limited"
    );
    assert_eq!(
        script.calls("quota").len(),
        1,
        "nothing sent before the server's wait"
    );
}

#[tokio::test]
async fn the_upstream_token_is_sent_and_never_shown() {
    let script = Script::default();
    let url = script.clone().start().await;
    let auth = UpstreamAuth {
        header: http::HeaderName::from_static("authorization"),
        value: sluice_config::Secret::new("Bearer tok-secret-42"),
    };
    let mut agent = Agent::start(&url, CONFIG, Some(auth));
    agent.call(1, "ok").await;
    let answer = agent.next(Duration::from_secs(5)).await;
    assert!(!answer.to_string().contains("tok-secret-42"));
    agent.call(2, "gone").await;
    let failed = agent.next(Duration::from_secs(5)).await;
    assert!(!failed.to_string().contains("tok-secret-42"), "{failed}");
    let seen = script.seen.lock().clone();
    assert!(seen.len() >= 2);
    for request in &seen {
        assert_eq!(
            request.header("authorization"),
            Some("Bearer tok-secret-42")
        );
    }
    // The session id the server handed out is carried afterwards.
    assert_eq!(seen.last().unwrap().header("mcp-session-id"), Some("up-1"));
}

#[tokio::test]
async fn an_sse_answer_is_streamed_through_as_it_arrives() {
    let script = Script::default();
    let url = script.clone().start().await;
    let mut agent = Agent::start(&url, CONFIG, None);
    agent.call(1, "progress").await;
    let first = agent.next(Duration::from_secs(5)).await;
    assert_eq!(first["method"], "notifications/progress", "{first}");
    let answer = agent.next(Duration::from_secs(5)).await;
    assert_eq!(
        answer["result"]["content"][0]["text"], "streamed",
        "{answer}"
    );
}

#[tokio::test]
async fn hostile_servers_give_one_outcome_per_call_within_the_deadline() {
    let script = Script::default();
    let url = script.clone().start().await;
    let mut agent = Agent::start(&url, CONFIG, None);
    let hostile = ["hang", "drip", "garbage", "huge", "reset", "gone"];
    let started = Instant::now();
    for (n, tool) in hostile.iter().enumerate() {
        agent.call(n as u64 + 1, tool).await;
    }
    // Another call alongside: served as usual.
    agent.call(100, "ok").await;
    let mut answers = std::collections::HashMap::new();
    for _ in 0..=hostile.len() {
        let answer = agent.next(Duration::from_secs(6)).await;
        let id = answer["id"].as_u64().expect("a response, with its id");
        assert!(
            answers.insert(id, answer).is_none(),
            "two answers for call {id}"
        );
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "past the 2 s deadline: {:?}",
        started.elapsed()
    );
    assert_eq!(answers[&100]["result"]["content"][0]["text"], "done");
    for (n, tool) in hostile.iter().enumerate() {
        let answer = &answers[&(n as u64 + 1)];
        assert_eq!(answer["result"]["isError"], true, "{tool}: {answer}");
        assert!(
            answer["result"]["structuredContent"]["status"].is_string(),
            "{tool}: {answer}"
        );
    }
    // Nothing more arrives: one outcome per call.
    assert!(
        tokio::time::timeout(Duration::from_millis(300), agent.reads.next_line())
            .await
            .is_err()
    );
    // And the proxy goes on serving.
    agent.call(101, "ok").await;
    let after = agent.next(Duration::from_secs(5)).await;
    assert_eq!(after["id"], 101);
}

/// A raw HTTP/1.1 exchange with `sluice mcp --listen` (connection closed after it).
async fn exchange(
    addr: &str,
    method: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String, String) {
    exchange_at(addr, "/mcp", method, headers, body).await
}

async fn exchange_at(
    addr: &str,
    path: &str,
    method: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String, String) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_string(&mut answer))
        .await
        .unwrap()
        .unwrap();
    let (head, rest) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, head.to_ascii_lowercase(), rest.to_owned())
}

#[tokio::test]
async fn listen_keeps_the_clients_authorization_and_guards_itself_with_a_token() {
    let script = Script::default();
    let url = script.clone().start().await;
    let config =
        McpConfig::from_toml(&format!("[server]\nauth_token_env = \"T\"\n{CONFIG}"), None).unwrap();
    let settings = config
        .listener("127.0.0.1:0".parse().ok(), &|_| {
            Some("client-token".to_owned())
        })
        .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let remote = Remote {
        url: url.parse().unwrap(),
        auth: Some(UpstreamAuth {
            header: http::HeaderName::from_static("x-api-key"),
            value: sluice_config::Secret::new("upstream-key"),
        }),
        forward_authorization: true,
    };
    tokio::spawn(sluice_mcp::serve_http(
        Proxy::new(config),
        Server::Remote(remote),
        listener,
        settings,
        std::future::pending(),
    ));
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#;
    let json = ("content-type", "application/json");
    let accept = ("accept", "application/json, text/event-stream");
    let (status, _, _) = exchange(&addr, "POST", &[json, accept], init).await;
    assert_eq!(status, 401, "no token, no session");
    let bearer = ("authorization", "Bearer client-token");
    let (status, head, body) = exchange(
        &addr,
        "POST",
        &[json, accept, bearer, ("mcp-protocol-version", "2025-06-18")],
        init,
    )
    .await;
    assert_eq!(status, 200, "{head}{body}");
    assert!(body.contains("\"id\":1"), "{body}");
    let session = head
        .lines()
        .find_map(|l| l.strip_prefix("mcp-session-id: "))
        .expect("a session id")
        .to_owned();
    assert_ne!(
        session, "up-1",
        "the client gets sluice's id, not the upstream's"
    );
    let call =
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"ok","arguments":{}}}"#;
    let (status, _, body) = exchange(
        &addr,
        "POST",
        &[json, accept, bearer, ("mcp-session-id", &session)],
        call,
    )
    .await;
    assert_eq!(status, 200);
    assert!(body.contains("done"), "{body}");
    assert!(!body.contains("upstream-key"));
    let seen = script.seen.lock().clone();
    for request in &seen {
        assert_eq!(request.header("x-api-key"), Some("upstream-key"));
        // sluice's own token never goes on: it injects its own header there.
        assert_ne!(request.header("authorization"), Some("Bearer client-token"));
    }
    assert_eq!(seen[0].header("mcp-protocol-version"), Some("2025-06-18"));
    assert_eq!(seen.last().unwrap().header("mcp-session-id"), Some("up-1"));
    // The live page and its feed are there too, behind the same token.
    let (status, _, _) = exchange_at(&addr, "/ui", "GET", &[], "").await;
    assert_eq!(status, 401);
    let (status, head, page) = exchange_at(&addr, "/ui?token=client-token", "GET", &[], "").await;
    assert_eq!(status, 200, "{head}");
    assert!(
        page.contains("<html")
            || page.contains("<!doctype html")
            || page.contains("<!DOCTYPE html")
    );
    let mut feed = TcpStream::connect(&addr).await.unwrap();
    feed.write_all(
        format!(
            "GET /v1/events HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer client-token\r\n\r\n"
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut read = vec![0; 16 << 10];
    let mut got = String::new();
    while !got.contains("\"name\":\"api\"") {
        let n = tokio::time::timeout(Duration::from_secs(5), feed.read(&mut read))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0, "the feed ended: {got}");
        got.push_str(&String::from_utf8_lossy(&read[..n]));
    }
    assert!(got.contains("event: status"), "{got}");
}

#[tokio::test]
async fn the_listeners_token_is_never_forwarded_even_when_authorization_is() {
    let script = Script::default();
    let url = script.clone().start().await;
    let config =
        McpConfig::from_toml(&format!("[server]\nauth_token_env = \"T\"\n{CONFIG}"), None).unwrap();
    let settings = config
        .listener("127.0.0.1:0".parse().ok(), &|_| {
            Some("client-token".to_owned())
        })
        .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let remote = Remote {
        url: url.parse().unwrap(),
        auth: None,
        forward_authorization: true,
    };
    tokio::spawn(sluice_mcp::serve_http(
        Proxy::new(config),
        Server::Remote(remote),
        listener,
        settings,
        std::future::pending(),
    ));
    let call = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"ok","arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
    // The stateless form: no session; served by one that lasts the POST.
    let (status, _, body) = exchange(
        &addr,
        "POST",
        &[
            ("content-type", "application/json"),
            ("accept", "application/json"),
            ("authorization", "Bearer client-token"),
        ],
        call,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("done"), "{body}");
    let seen: Vec<Seen> = script
        .seen
        .lock()
        .iter()
        .filter(|s| s.method == "POST")
        .cloned()
        .collect();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].header("authorization"), None);
    assert_eq!(seen[0].header("mcp-session-id"), None);
}

#[tokio::test]
async fn the_listener_closes_a_slow_head_and_caps_connections() {
    let script = Script::default();
    let url = script.clone().start().await;
    let config = McpConfig::from_toml(
        &format!("[server]\nheader_read_timeout = \"300ms\"\nmax_connections = 2\n{CONFIG}"),
        None,
    )
    .unwrap();
    let settings = config
        .listener("127.0.0.1:0".parse().ok(), &|_| None)
        .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let remote = Remote {
        url: url.parse().unwrap(),
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
    // A head that never ends is closed after the header-read timeout.
    let mut slow = TcpStream::connect(&addr).await.unwrap();
    slow.write_all(b"POST /mcp HTTP/1.1\r\nhost: localhost\r\n")
        .await
        .unwrap();
    let started = Instant::now();
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), slow.read_to_end(&mut rest)).await;
    assert!(read.is_ok(), "the slow connection stayed open");
    assert!(
        started.elapsed() >= Duration::from_millis(250),
        "{:?}",
        started.elapsed()
    );
    // Two connections open (the cap): a third waits until one closes.
    let _a = TcpStream::connect(&addr).await.unwrap();
    let mut b = TcpStream::connect(&addr).await.unwrap();
    b.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(5), b.read(&mut buf))
        .await
        .unwrap()
        .unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    let mut c = TcpStream::connect(&addr).await.unwrap();
    c.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let waited = tokio::time::timeout(Duration::from_millis(200), c.read(&mut buf)).await;
    assert!(
        waited.is_err(),
        "a third connection was served past max_connections = 2"
    );
    drop(b);
    let n = tokio::time::timeout(Duration::from_secs(5), c.read(&mut buf))
        .await
        .unwrap()
        .unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
}
