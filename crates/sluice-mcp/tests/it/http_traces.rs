//! Issue 53 on `sluice mcp --listen`: a `tools/call` posted over
//! Streamable HTTP joins the agent's trace through
//! `params._meta.traceparent`, as on stdio. The MCP server is a small
//! shell program on stdio that answers every request.

use std::time::Duration;

use serde_json::json;
use sluice_config::Telemetry;
use sluice_http::trace::Tracer;
use sluice_mcp::{Command, McpConfig, Proxy, Server};
use sluice_testkit::OtlpReceiver;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const SERVER: &str = r#"
while IFS= read -r line; do
  id=$(printf '%s' "$line" | sed -n 's/.*"id":\("[^"]*"\|[0-9][0-9]*\).*/\1/p')
  [ -z "$id" ] && continue
  case "$line" in
    *'"method":"initialize"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"s","version":"0"}}}\n' "$id" ;;
    *'"method":"tools/call"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"done"}],"isError":false}}\n' "$id" ;;
    *) printf '{"jsonrpc":"2.0","id":%s,"result":{}}\n' "$id" ;;
  esac
done
"#;

/// One HTTP/1.1 exchange, the connection closed after it: status, head, body.
async fn post(addr: &str, headers: &[(&str, &str)], body: &str) -> (u16, String, String) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let mut request = format!(
        "POST /mcp HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-type: application/json\r\naccept: application/json, text/event-stream\r\ncontent-length: {}\r\n",
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_posted_to_listen_joins_the_agent_s_trace() {
    let receiver = OtlpReceiver::spawn().await;
    let endpoint = receiver.endpoint();
    let env = move |name: &str| (name == "OTEL_EXPORTER_OTLP_ENDPOINT").then(|| endpoint.clone());
    let tracer = Tracer::start(&Telemetry::default().resolve(&env).unwrap().unwrap()).unwrap();
    let config = McpConfig::from_toml("[credentials.api]\nrate = \"10/1s\"", None).unwrap();
    let settings = config
        .listener("127.0.0.1:0".parse().ok(), &|_| None)
        .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let server = Server::Command(Command {
        program: "sh".into(),
        args: vec!["-c".into(), SERVER.into()],
    });
    tokio::spawn(sluice_mcp::serve_http(
        Proxy::new(config).trace(Some(tracer.clone())),
        server,
        listener,
        settings,
        std::future::pending(),
    ));
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#;
    let (status, head, body) = post(&addr, &[("mcp-protocol-version", "2025-06-18")], init).await;
    assert_eq!(status, 200, "{head}{body}");
    let session = head
        .lines()
        .find_map(|line| line.strip_prefix("mcp-session-id: "))
        .expect("a session id")
        .to_owned();
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "lookup", "arguments": {},
                   "_meta": {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}});
    let (status, _, body) = post(
        &addr,
        &[
            ("mcp-session-id", &session),
            ("mcp-protocol-version", "2025-06-18"),
        ],
        &call.to_string(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("done"), "{body}");
    assert!(tracer.flush(Duration::from_secs(5)).await);
    let spans = receiver.spans();
    // The call's span, and the CLIENT span of the request sent to the server.
    assert_eq!(spans.len(), 2, "{spans:#?}");
    let span = spans
        .iter()
        .find(|span| span.name == "execute_tool lookup")
        .unwrap_or_else(|| panic!("no call span: {spans:#?}"));
    let client = spans
        .iter()
        .find(|span| span.name == "tools/call lookup")
        .unwrap_or_else(|| panic!("no CLIENT span: {spans:#?}"));
    assert_eq!(client.parent_span_id, span.span_id);
    assert_eq!(client.trace_id, span.trace_id);
    assert_eq!(span.trace_id, "0af7651916cd43dd8448eb211c80319c");
    assert_eq!(span.parent_span_id, "b7ad6b7169203331");
    assert_eq!(span.attr("gen_ai.tool.call.id"), Some(&json!("2")));
    assert_eq!(span.attr("sluice.outcome"), Some(&json!("ok")));
}
