//! sluice for MCP: `sluice mcp` puts an MCP server's tool calls through a
//! sluice gate, so an agent's parallel calls respect the limits of the API
//! behind the server.
//!
//! # Mental model
//!
//! The proxy sits between the agent (the MCP client) and the MCP server, on
//! either transport on either side: the server a child process on stdio
//! ([`run`]) or a remote one over Streamable HTTP ([`run_remote`],
//! [`Remote`]); the agent on this process's stdio, or clients at
//! `http://ADDR/mcp` ([`serve_http`]), each with a session of its own and
//! all spending one gate. Every JSON-RPC
//! message passes through unchanged, in both directions, except the
//! agent's `tools/call` requests: each becomes a call on a [`sluice::Gate`]
//! and gets the engine's whole pipeline (coalescing, admission, concurrency,
//! rate, deadline, retries). When the gate admits a call, the proxy sends
//! the `tools/call` to the server under an id of its own, waits for the
//! answer, and returns it to the agent under the agent's id. When the gate
//! defers it, the agent gets a normal tool result with `isError: true` whose
//! `structuredContent` is the [`sluice::Outcome`] (`status: "rate_limited"`,
//! `retry_after_ms`, `hint`, …), the form the MCP spec gives tool errors a
//! model should see.
//!
//! - **Credential.** All the server's tools spend one credential
//!   (`--credential`, else `[mcp] credential`, else the configuration's
//!   only one); `[tools.NAME]` may move a tool to another ([`McpConfig`]).
//! - **Reads.** A tool is a read when `[tools.NAME] read` says so, else when
//!   the server's `tools/list` marked it `annotations.readOnlyHint: true`
//!   (the proxy reads those responses as they pass). Identical reads
//!   (same tool, same arguments) in flight together send one request, and
//!   a repeat within `turn_cache_ttl` is answered from the cache.
//! - **Turn.** The engine's turn, drawn from what the proxy sees: one burst
//!   of calls, ending when no call is in progress and none has ended for
//!   `turn_cache_ttl` (see `session_turn.rs`).
//! - **The server's own signals.** A JSON-RPC `-32023` error and a tool
//!   error that reports its API's rate limit (`signals.rs`) reach the gate
//!   as a 429 with the stated wait: the scope is penalized, the call retried
//!   inline when that is safe and the wait fits, else deferred. A deferral
//!   is a tool result, or with `[mcp] deferral = "error"` a `-32023` error.
//!   A call with a `progressToken` that waits over a second (for a start
//!   slot, a backoff, or in the admission queue) gets
//!   `notifications/progress` (`progress.rs`).
//! - **Annotations.** `readOnlyHint`, `idempotentHint`, `destructiveHint`
//!   and `openWorldHint` decide coalescing, retries and charging, each
//!   overridden by `[tools.NAME]`; `trust_annotations = false` ignores them.
//! - **Limits.** No message over `[mcp] max_message_size` is held
//!   (`limits.rs`), and what waits for a peer that stops reading is bounded.
//! - **Cancellation.** `notifications/cancelled` for a call still waiting in
//!   sluice drops it from the queue and sends nothing; for a call already
//!   sent, the cancellation is passed on under the proxy's id.
//!
//! # Why raw JSON-RPC, not `rmcp`
//!
//! A proxy must pass on messages it does not understand (newer protocol
//! revisions, extensions, vendor fields) exactly as they were written. The
//! official Rust SDK, `rmcp`, is built for endpoints: it decodes messages
//! into typed models of the revisions it knows and encodes them again,
//! which would drop or reshape what it does not model, and it would tie
//! the proxy to its release cadence. MCP's stdio transport is small enough
//! to implement faithfully: newline-delimited JSON-RPC 2.0, with requests,
//! notifications and responses, ids of any JSON type (compared by value,
//! echoed as written), and batches (revision 2025-03-26; later revisions
//! removed them, so a batch's elements are sent to the server one by one
//! and the responses return to the agent as one array). The proxy reads
//! only the few members it routes on and splices every id, `params` and
//! `result` through as the peer wrote it; it works with every revision
//! from 2024-11-05 to 2026-07-28, handshake or per-request envelope.
//!
//! # Example
//!
//! A server that answers every `tools/call` with a text block, and an agent
//! that sends three calls on a credential allowing one at a time, with no
//! room to queue (`queue = 0`): two are shed as `rate_limited` results.
//!
//! ```
//! use sluice_mcp::{McpConfig, Proxy};
//! use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let config = McpConfig::from_toml(
//!     "[credentials.api]\nrate = \"10/1s\"\nmax_in_flight = 1\nqueue = 0",
//!     None,
//! )?;
//! let (agent, agent_side) = tokio::io::duplex(1 << 16);
//! let (server, server_side) = tokio::io::duplex(1 << 16);
//! let (agent_in, agent_out) = tokio::io::split(agent_side);
//! let (server_out, server_in) = tokio::io::split(server_side);
//! tokio::spawn(Proxy::new(config).seed(1).serve(agent_in, agent_out, server_in, server_out));
//!
//! // The MCP server: echoes each request's id with a result.
//! let (server_reads, mut server_writes) = tokio::io::split(server);
//! tokio::spawn(async move {
//!     let mut lines = BufReader::new(server_reads).lines();
//!     while let Ok(Some(line)) = lines.next_line().await {
//!         let request: serde_json::Value = serde_json::from_str(&line).unwrap();
//!         let answer = serde_json::json!({"jsonrpc": "2.0", "id": request["id"],
//!             "result": {"content": [{"type": "text", "text": "done"}]}});
//!         server_writes.write_all(format!("{answer}\n").as_bytes()).await.unwrap();
//!     }
//! });
//!
//! let (agent_reads, mut agent_writes) = tokio::io::split(agent);
//! for id in 1..=3 {
//!     let call = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"send","arguments":{{"n":{id}}}}}}}"#);
//!     agent_writes.write_all(format!("{call}\n").as_bytes()).await?;
//! }
//! let mut lines = BufReader::new(agent_reads).lines();
//! let mut shed = 0;
//! for _ in 0..3 {
//!     let response: serde_json::Value = serde_json::from_str(&lines.next_line().await?.unwrap())?;
//!     if response["result"]["isError"] == true {
//!         assert_eq!(response["result"]["structuredContent"]["status"], "rate_limited");
//!         assert_eq!(response["result"]["structuredContent"]["reason"], "shed");
//!         shed += 1;
//!     }
//! }
//! assert_eq!(shed, 2);
//! # Ok(())
//! # }
//! ```

mod batch;
mod catalog;
mod error;
mod executor;
mod http;
mod jsonrpc;
mod limits;
mod live;
mod outbox;
mod pending;
mod process;
mod progress;
mod proxy;
mod reply;
mod router;
mod scrub;
mod session_turn;
mod shared;
mod signals;
mod stdin;
mod trace_meta;

// `sluice.toml` as this proxy reads it (sluice-config's MCP view).
pub use error::McpError;
pub use http::{MCP_PATH, Remote, Server, run_remote, run_upstream, serve_http};
pub use live::Reloader;
pub use process::{Command, exit_code, run, run_with};
pub use proxy::Proxy;
pub use sluice_config::{McpConfig, ToolOverride};
