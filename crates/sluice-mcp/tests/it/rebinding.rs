//! DNS rebinding (issue 54): `--listen` answers only loopback `Host` values
//! and a missing or loopback `Origin`, plus `[mcp] allowed_hosts` /
//! `allowed_origins`. A refused request gets 421 (Host) or 403 (Origin)
//! before anything happens: with a stdio server no child is started, with a
//! remote one nothing is sent upstream.

use crate::support::raw_http::{INIT, post_mcp};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use sluice_mcp::{Command, McpConfig, Proxy, Remote, Server};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

/// A stdio server that notes each start in its log, then answers
/// `initialize` and pings.
const SERVER: &str = r#"
import json, os, sys
with open(sys.argv[1], "a") as f:
    f.write("start %d\n" % os.getpid())
for line in sys.stdin:
    m = json.loads(line)
    if "id" in m and m.get("method") == "initialize":
        r = {"protocolVersion": "2025-06-18", "capabilities": {}, "serverInfo": {"name": "s", "version": "0"}}
    elif "id" in m:
        r = {}
    else:
        continue
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": r}) + "\n")
    sys.stdout.flush()
"#;

/// What a listener in front of a server has started or sent.
enum Backend {
    Children { log: PathBuf, dir: PathBuf },
    Upstream { requests: Arc<AtomicUsize> },
}

impl Backend {
    /// Children started, or requests the remote server received.
    fn reached(&self) -> usize {
        match self {
            Backend::Children { log, .. } => std::fs::read_to_string(log)
                .unwrap_or_default()
                .lines()
                .filter(|l| l.starts_with("start"))
                .count(),
            Backend::Upstream { requests } => requests.load(Ordering::SeqCst),
        }
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        if let Backend::Children { dir, .. } = self {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// A remote server that counts every request and answers each POST with
/// an empty result (a session id on `initialize`).
async fn counting_upstream(requests: Arc<AtomicUsize>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let requests = requests.clone();
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
                requests.fetch_add(1, Ordering::SeqCst);
                let mut body = vec![0; length];
                let _ = reader.read_exact(&mut body).await;
                let body: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                let answer = match body.get("id") {
                    Some(id) => {
                        serde_json::json!({"jsonrpc": "2.0", "id": id, "result": {}}).to_string()
                    }
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
                            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\nmcp-session-id: up-1\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{answer}",
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

/// `sluice mcp --listen` on loopback with `extra` in `[mcp]`, in front of a
/// stdio server (`stdio`) or a remote one.
async fn listen(stdio: bool, extra: &str) -> (String, Backend) {
    let config = McpConfig::from_toml(
        &format!("[credentials.api]\nrate = \"100/1s\"\n[mcp]\n{extra}"),
        None,
    )
    .unwrap();
    let settings = config
        .listener("127.0.0.1:0".parse().ok(), &|_| None)
        .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (server, backend) = if stdio {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "sluice-rebinding-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let script = dir.join("server.py");
        std::fs::write(&script, SERVER).unwrap();
        let log = dir.join("log");
        let command = Command {
            program: "python3".into(),
            args: vec![script.into_os_string(), log.clone().into_os_string()],
        };
        (Server::Command(command), Backend::Children { log, dir })
    } else {
        let requests = Arc::new(AtomicUsize::new(0));
        let url = counting_upstream(requests.clone()).await;
        let remote = Remote {
            url: url.parse().unwrap(),
            auth: None,
            forward_authorization: false,
        };
        (Server::Remote(remote), Backend::Upstream { requests })
    };
    tokio::spawn(sluice_mcp::serve_http(
        Proxy::new(config),
        server,
        listener,
        settings,
        std::future::pending(),
    ));
    (format!("127.0.0.1:{port}"), backend)
}

/// A POST `initialize` to `addr` with these `Host` and `Origin` headers
/// (each left out when `None`): the status and the head.
async fn initialize(addr: &str, host: Option<&str>, origin: Option<&str>) -> (u16, String) {
    let mut headers = Vec::new();
    headers.extend(host.map(|host| ("host", host)));
    headers.extend(origin.map(|origin| ("origin", origin)));
    headers.push(("accept", "application/json, text/event-stream"));
    let answer = post_mcp(addr, &headers, INIT, Duration::from_secs(15)).await;
    (answer.status, answer.head)
}

async fn refused_before_anything_starts(stdio: bool) {
    let (addr, backend) = listen(stdio, "").await;
    let port = addr.rsplit(':').next().unwrap().to_owned();
    let evil_port = format!("evil.example.com:{port}");
    for (host, origin, status) in [
        // The conformance suite's case: both rebound.
        (
            Some("evil.example.com"),
            Some("http://evil.example.com"),
            421,
        ),
        (Some(evil_port.as_str()), None, 421),
        (Some("localhost.evil.example.com"), None, 421),
        (None, None, 421),
        (Some(addr.as_str()), Some("http://evil.example.com"), 403),
        (Some("localhost"), Some("null"), 403),
        (
            Some(addr.as_str()),
            Some("http://127.0.0.1.evil.example.com"),
            403,
        ),
    ] {
        let (got, head) = initialize(&addr, host, origin).await;
        assert_eq!(got, status, "Host {host:?}, Origin {origin:?}: {head}");
        assert!(
            !head.contains("mcp-session-id"),
            "no session for a refused request: {head}"
        );
    }
    // Nothing started, nothing sent.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(backend.reached(), 0);

    // Every loopback form, with a loopback Origin or none, is served.
    let mut served = 0;
    let localhost_port = format!("localhost:{port}");
    let v6_port = format!("[::1]:{port}");
    for (host, origin) in [
        (addr.as_str(), None),
        ("127.0.0.1", None),
        ("localhost", None),
        (localhost_port.as_str(), Some("http://localhost:3000")),
        ("[::1]", None),
        (v6_port.as_str(), Some("http://[::1]:3000")),
    ] {
        let (got, head) = initialize(&addr, Some(host), origin).await;
        assert_eq!(got, 200, "Host {host:?}, Origin {origin:?}: {head}");
        assert!(head.contains("mcp-session-id"), "{head}");
        served += 1;
    }
    if stdio {
        let began = std::time::Instant::now();
        while backend.reached() < served {
            assert!(began.elapsed() < Duration::from_secs(10));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    assert_eq!(backend.reached(), served);
}

#[tokio::test]
async fn a_rebound_host_or_origin_starts_no_child() {
    refused_before_anything_starts(true).await;
}

#[tokio::test]
async fn a_rebound_host_or_origin_sends_nothing_upstream() {
    refused_before_anything_starts(false).await;
}

async fn allowed_names_are_served(stdio: bool) {
    let (addr, backend) = listen(
        stdio,
        "allowed_hosts = [\"mcp.example.com\"]\nallowed_origins = [\"https://app.example.com\"]",
    )
    .await;
    let (got, head) = initialize(
        &addr,
        Some("mcp.example.com:8443"),
        Some("https://app.example.com"),
    )
    .await;
    assert_eq!(got, 200, "{head}");
    assert_eq!(
        initialize(
            &addr,
            Some("mcp.example.com"),
            Some("https://evil.example.com")
        )
        .await
        .0,
        403
    );
    assert_eq!(
        initialize(&addr, Some("other.example.com"), None).await.0,
        421
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(backend.reached(), 1);
}

#[tokio::test]
async fn allowed_hosts_and_origins_add_names_for_a_stdio_server() {
    allowed_names_are_served(true).await;
}

#[tokio::test]
async fn allowed_hosts_and_origins_add_names_for_a_remote_server() {
    allowed_names_are_served(false).await;
}
