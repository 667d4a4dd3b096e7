//! Secrets a remote Streamable HTTP server echoes never reach the client
//! (issue 19): in a JSON answer, in an event split across two chunks in
//! the middle of the key, in a header, and on the GET stream, whether the
//! client is on stdio (`run_remote`) or on `--listen` (`serve_http`),
//! where the GET stream is passed through as bytes.

use std::time::Duration;

use serde_json::{Value, json};
use sluice_config::ServerSettings;
use sluice_mcp::{McpConfig, Proxy, Remote, Server};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// The upstream's key, which the server below echoes everywhere it can.
const KEY: &str = "sk-remote-Echo-5551234567";

const CONFIG: &str = r#"
[defaults]
deadline = "5s"
[credentials.api]
rate = "100/1s"
"#;

/// A remote MCP server that puts [`KEY`] in everything it answers.
async fn echoing_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(serve(stream));
        }
    });
    format!("http://{addr}/mcp")
}

async fn serve(stream: TcpStream) {
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
        head.push(line.trim_end().to_ascii_lowercase());
    }
    let method = head[0]
        .split(' ')
        .next()
        .unwrap_or_default()
        .to_ascii_uppercase();
    let length: usize = head
        .iter()
        .find_map(|h| h.strip_prefix("content-length: "))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body).await.unwrap();
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let mut stream = reader.into_inner();
    let (half, rest) = KEY.split_at(12);
    match method.as_str() {
        "GET" => {
            // The key in a header passed through, and in an event whose
            // bytes arrive in two chunks, split inside the key.
            let _ = stream.write_all(format!("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; note={KEY}\r\nx-echo: {KEY}\r\nconnection: close\r\n\r\n").as_bytes()).await;
            let note = |text: &str| {
                format!(
                    r#"{{"jsonrpc":"2.0","method":"notifications/message","params":{{"level":"error","data":"stream {text}"#
                )
            };
            let _ = stream
                .write_all(format!("id: g-1\ndata: {}", note(half)).as_bytes())
                .await;
            let _ = stream.flush().await;
            tokio::time::sleep(Duration::from_millis(100)).await;
            let _ = stream
                .write_all(format!("{rest}\"}}}}\n\n").as_bytes())
                .await;
            tokio::time::sleep(Duration::from_secs(30)).await;
        }
        "DELETE" => {
            let _ = stream
                .write_all(b"HTTP/1.1 204 No Content\r\nconnection: close\r\n\r\n")
                .await;
        }
        _ if body.get("id").is_none() => {
            let _ = stream
                .write_all(
                    b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                )
                .await;
        }
        _ => {
            let id = body["id"].clone();
            let tool = body["params"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            if tool == "sse" {
                let _ = stream.write_all(format!("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nx-echo: {KEY}\r\nconnection: close\r\n\r\n").as_bytes()).await;
                let start = format!(
                    r#"data: {{"jsonrpc":"2.0","id":{id},"result":{{"content":[{{"type":"text","text":"event {half}"#
                );
                let _ = stream.write_all(start.as_bytes()).await;
                let _ = stream.flush().await;
                tokio::time::sleep(Duration::from_millis(100)).await;
                let _ = stream
                    .write_all(format!("{rest}\"}}]}}}}\n\n").as_bytes())
                    .await;
                return;
            }
            let answer = if body["method"] == "initialize" {
                json!({"jsonrpc": "2.0", "id": id, "result": {"protocolVersion": "2025-06-18", "capabilities": {}, "serverInfo": {"name": KEY, "version": "1"}}})
            } else {
                json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32000, "message": format!("invalid api key {KEY}"), "data": {"key": KEY}}})
            };
            let text = answer.to_string();
            let _ = stream.write_all(format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nmcp-session-id: up-{KEY}\r\nx-echo: {KEY}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}", text.len()).as_bytes()).await;
        }
    }
}

fn proxy() -> Proxy {
    Proxy::new(McpConfig::from_toml(CONFIG, None).unwrap())
        .seed(5)
        .scrub_secrets([KEY])
}

fn remote(url: &str) -> Remote {
    Remote {
        url: url.parse().unwrap(),
        auth: None,
        forward_authorization: false,
    }
}

fn clean(what: &str, text: &str) {
    assert!(!text.contains(KEY), "{what} holds the key: {text}");
    // Nor a part of it long enough to matter.
    assert!(
        !text.contains(&KEY[..12]),
        "{what} holds half the key: {text}"
    );
}

#[tokio::test]
async fn a_stdio_client_never_sees_what_a_remote_server_echoes() {
    let url = echoing_server().await;
    let (agent, side) = tokio::io::duplex(1 << 20);
    let (agent_in, agent_out) = tokio::io::split(side);
    tokio::spawn(sluice_mcp::run_remote(
        proxy(),
        remote(&url),
        agent_in,
        agent_out,
    ));
    let (reads, mut writes) = tokio::io::split(agent);
    let mut lines = BufReader::new(reads).lines();
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#;
    for message in [
        init,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"json","arguments":{}}}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"sse","arguments":{}}}"#,
    ] {
        writes
            .write_all(format!("{message}\n").as_bytes())
            .await
            .unwrap();
    }
    // The answers to 1, 2 and 3, and the GET stream's notification.
    let mut seen: Vec<Value> = Vec::new();
    while seen.len() < 4 {
        let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("four messages in time; got {seen:?}"))
            .unwrap()
            .unwrap();
        clean("a line to the client", &line);
        seen.push(serde_json::from_str(&line).expect("each line is still JSON"));
    }
    let by_id = |id: u64| {
        seen.iter()
            .find(|m| m["id"] == id)
            .unwrap_or_else(|| panic!("{id}: {seen:?}"))
    };
    assert_eq!(by_id(1)["result"]["serverInfo"]["name"], "***");
    let error = by_id(2);
    assert!(error.to_string().contains("***"), "{error}");
    assert_eq!(by_id(3)["result"]["content"][0]["text"], "event ***");
    let note = seen
        .iter()
        .find(|m| m["method"] == "notifications/message")
        .expect("the GET stream's event");
    assert_eq!(note["params"]["data"], "stream ***");
}

async fn request(
    addr: &str,
    method: &str,
    headers: &[(&str, &str)],
    body: &str,
    until: &str,
) -> (String, String) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let mut text = format!(
        "{method} /mcp HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    text.push_str("\r\n");
    text.push_str(body);
    stream.write_all(text.as_bytes()).await.unwrap();
    // Read until `until` shows (a GET stream does not end) or the answer ends.
    let mut answer = Vec::new();
    let mut chunk = vec![0; 16 << 10];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let read = tokio::time::timeout_at(deadline, stream.read(&mut chunk)).await;
        let Ok(Ok(n)) = read else { break };
        if n == 0 {
            break;
        }
        answer.extend_from_slice(&chunk[..n]);
        if !until.is_empty() && split(&answer).1.contains(until) {
            break;
        }
    }
    split(&answer)
}

/// Head and body (de-chunked) of an HTTP answer read so far.
fn split(answer: &[u8]) -> (String, String) {
    let answer = String::from_utf8_lossy(answer);
    let (head, mut rest) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    if !head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return (head.to_owned(), rest.to_owned());
    }
    let mut body = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if size == 0 || after.len() < size {
            body.push_str(&after[..after.len().min(size)]);
            break;
        }
        body.push_str(&after[..size]);
        rest = after[size..].strip_prefix("\r\n").unwrap_or(&after[size..]);
    }
    (head.to_owned(), body)
}

#[tokio::test]
async fn a_listen_client_never_sees_what_a_remote_server_echoes() {
    let url = echoing_server().await;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let settings: ServerSettings = McpConfig::from_toml(CONFIG, None)
        .unwrap()
        .listener("127.0.0.1:0".parse().ok(), &|_| None)
        .unwrap();
    tokio::spawn(sluice_mcp::serve_http(
        proxy(),
        Server::Remote(remote(&url)),
        listener,
        settings,
        std::future::pending(),
    ));
    let json_type = ("content-type", "application/json");
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#;
    // A JSON answer: masked whole, still JSON, with an exact length.
    let (head, body) = request(
        &addr,
        "POST",
        &[json_type, ("accept", "application/json")],
        init,
        "",
    )
    .await;
    clean("the initialize answer", &format!("{head}\r\n\r\n{body}"));
    let answer: Value = serde_json::from_str(&body).expect("a JSON body");
    assert_eq!(answer["result"]["serverInfo"]["name"], "***");
    let session = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("mcp-session-id: ")
                .map(str::to_owned)
        })
        .expect("a session");
    let with_session = [
        json_type,
        ("accept", "application/json, text/event-stream"),
        ("mcp-session-id", session.as_str()),
    ];
    let call = |id: u64, tool: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{{}}}}}}"#
        )
    };
    // An error echoing the key, as an event stream.
    let (head, body) = request(&addr, "POST", &with_session, &call(2, "json"), "").await;
    clean("the error", &format!("{head}\r\n\r\n{body}"));
    assert!(body.contains("invalid api key ***"), "{body}");
    // The key split across two chunks of the server's event stream.
    let (head, body) = request(&addr, "POST", &with_session, &call(3, "sse"), "").await;
    clean("the streamed answer", &format!("{head}\r\n\r\n{body}"));
    assert!(body.contains("event ***"), "{body}");
    // The GET stream, passed through as bytes: its header and its event
    // split inside the key are masked as they stream.
    let get = [
        ("accept", "text/event-stream"),
        ("mcp-session-id", session.as_str()),
    ];
    let (head, body) = request(&addr, "GET", &get, "", "stream ***").await;
    clean("the GET stream", &format!("{head}\r\n\r\n{body}"));
    assert!(
        head.to_ascii_lowercase()
            .contains("text/event-stream; note=***"),
        "{head}"
    );
    assert!(body.contains("stream ***"), "{body}");
}

#[tokio::test]
async fn without_a_secret_nothing_is_masked() {
    let url = echoing_server().await;
    let (agent, side) = tokio::io::duplex(1 << 20);
    let (agent_in, agent_out) = tokio::io::split(side);
    let proxy = Proxy::new(McpConfig::from_toml(CONFIG, None).unwrap()).scrub_secrets([""]);
    tokio::spawn(sluice_mcp::run_remote(
        proxy,
        remote(&url),
        agent_in,
        agent_out,
    ));
    let (reads, mut writes) = tokio::io::split(agent);
    let mut lines = BufReader::new(reads).lines();
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#;
    writes
        .write_all(format!("{init}\n").as_bytes())
        .await
        .unwrap();
    let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(line.contains(KEY), "{line}");
}
