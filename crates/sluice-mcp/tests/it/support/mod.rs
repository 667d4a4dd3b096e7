//! The test harness: a proxy between an in-memory agent and an in-memory MCP server that the test plays.
#![allow(dead_code, unreachable_pub)]

pub mod raw_http;

use std::time::Duration;

use serde_json::{Value, json};
use sluice_mcp::{McpConfig, McpError, Proxy};
use tokio::io::{
    AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines, ReadHalf, WriteHalf,
};
use tokio::task::JoinHandle;

/// Longer than any wait a test means to see through; on the paused clock it costs nothing.
pub const PATIENCE: Duration = Duration::from_secs(120);

/// Both ends of a running proxy.
pub struct Harness {
    agent_writes: Option<WriteHalf<DuplexStream>>,
    agent_reads: Lines<BufReader<ReadHalf<DuplexStream>>>,
    server_writes: Option<WriteHalf<DuplexStream>>,
    server_reads: Lines<BufReader<ReadHalf<DuplexStream>>>,
    pub serving: JoinHandle<Result<(), McpError>>,
}

impl Harness {
    /// A proxy for this configuration, with the proxy's credential chosen as the file says.
    pub fn start(toml: &str) -> Self {
        Self::start_with(toml, |proxy| proxy)
    }

    /// As [`Harness::start`], with the proxy adjusted (a tracer, say).
    pub fn start_with(toml: &str, adjust: impl FnOnce(Proxy) -> Proxy) -> Self {
        let config = McpConfig::from_toml(toml, None).expect("valid test configuration");
        let (agent, agent_side) = tokio::io::duplex(1 << 20);
        let (server, server_side) = tokio::io::duplex(1 << 20);
        let (agent_in, agent_out) = tokio::io::split(agent_side);
        let (server_out, server_in) = tokio::io::split(server_side);
        let serving = tokio::spawn(
            adjust(Proxy::new(config).seed(7)).serve(agent_in, agent_out, server_in, server_out),
        );
        let (agent_reads, agent_writes) = tokio::io::split(agent);
        let (server_reads, server_writes) = tokio::io::split(server);
        Harness {
            agent_writes: Some(agent_writes),
            agent_reads: BufReader::new(agent_reads).lines(),
            server_writes: Some(server_writes),
            server_reads: BufReader::new(server_reads).lines(),
            serving,
        }
    }

    /// The agent writes one line (a newline is added).
    pub async fn agent_sends(&mut self, line: &str) {
        let writer = self
            .agent_writes
            .as_mut()
            .expect("the agent's input is open");
        writer
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
    }

    /// The agent writes raw bytes.
    pub async fn agent_sends_bytes(&mut self, bytes: &[u8]) {
        let writer = self
            .agent_writes
            .as_mut()
            .expect("the agent's input is open");
        writer.write_all(bytes).await.unwrap();
    }

    /// The agent closes the proxy's input.
    pub async fn agent_closes(&mut self) {
        if let Some(mut writer) = self.agent_writes.take() {
            writer.shutdown().await.unwrap();
        }
    }

    /// The next line the agent reads, as written.
    pub async fn agent_line(&mut self) -> String {
        self.try_agent_line(PATIENCE)
            .await
            .expect("the agent got a message")
    }

    /// The next message the agent reads.
    pub async fn agent_gets(&mut self) -> Value {
        serde_json::from_str(&self.agent_line().await).unwrap()
    }

    /// The next line the agent reads within `wait`, if any.
    pub async fn try_agent_line(&mut self, wait: Duration) -> Option<String> {
        tokio::time::timeout(wait, self.agent_reads.next_line())
            .await
            .ok()
            .and_then(|line| line.unwrap())
    }

    /// The server writes one line.
    pub async fn server_sends(&mut self, line: &str) {
        let writer = self
            .server_writes
            .as_mut()
            .expect("the server's output is open");
        writer
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
    }

    /// The server closes its output (it exits).
    pub async fn server_exits(&mut self) {
        if let Some(mut writer) = self.server_writes.take() {
            writer.shutdown().await.unwrap();
        }
    }

    /// The next line the server reads, as written.
    pub async fn server_line(&mut self) -> String {
        self.try_server_line(PATIENCE)
            .await
            .expect("the server got a message")
    }

    /// The next message the server reads.
    pub async fn server_gets(&mut self) -> Value {
        serde_json::from_str(&self.server_line().await).unwrap()
    }

    /// The next line the server reads within `wait`; `None` at the end of its input too.
    pub async fn try_server_line(&mut self, wait: Duration) -> Option<String> {
        tokio::time::timeout(wait, self.server_reads.next_line())
            .await
            .ok()
            .and_then(|line| line.unwrap())
    }

    /// True once the server's input has been closed.
    pub async fn server_input_closed(&mut self) -> bool {
        matches!(
            tokio::time::timeout(PATIENCE, self.server_reads.next_line()).await,
            Ok(Ok(None))
        )
    }

    /// The server answers a request with a result.
    pub async fn server_answers(&mut self, request: &Value, result: Value) {
        let answer = json!({"jsonrpc": "2.0", "id": request["id"], "result": result});
        self.server_sends(&answer.to_string()).await;
    }

    /// The server lists its tools; `read_only` ones carry `readOnlyHint: true`.
    pub async fn list_tools(&mut self, read_only: &[&str], others: &[&str]) {
        self.agent_sends(r#"{"jsonrpc":"2.0","id":"list-1","method":"tools/list"}"#)
            .await;
        let request = self.server_gets().await;
        assert_eq!(request["method"], "tools/list");
        let mut tools: Vec<Value> = read_only
            .iter()
            .map(|name| json!({"name": name, "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}}))
            .collect();
        tools.extend(
            others
                .iter()
                .map(|name| json!({"name": name, "inputSchema": {"type": "object"}})),
        );
        self.server_answers(&request, json!({ "tools": tools }))
            .await;
        let listed = self.agent_gets().await;
        assert_eq!(listed["id"], "list-1");
    }
}

/// A `tools/call` request line.
pub fn call(id: Value, tool: &str, arguments: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": tool, "arguments": arguments}})
    .to_string()
}

/// A text tool result.
pub fn text(text: &str) -> Value {
    json!({"content": [{"type": "text", "text": text}], "isError": false})
}
