//! MCP's Streamable HTTP transport, on both sides of the proxy: a remote
//! server (`--upstream URL`, [`upstream`]) and clients connecting to
//! `http://ADDR/mcp` (`--listen ADDR`, [`listen`]).

mod activity;
mod client;
mod guard;
mod hub;
pub(crate) mod listen;
mod overload;
mod post;
mod routes;
mod sessions;
pub(crate) mod sse;
mod stream;
pub(crate) mod upstream;

use tokio::io::{AsyncRead, AsyncWrite};

use crate::error::McpError;
use crate::limits;
use crate::outbox::Outbox;
use crate::proxy::{Proxy, Session};

pub use hub::Server;
pub use listen::{MCP_PATH, serve_http};
pub use upstream::Remote;

/// Proxies a stdio client (`agent_in`, `agent_out`: this process's standard
/// input and output in `sluice mcp --upstream URL`) to a remote server over
/// Streamable HTTP, until the client's input ends; then what is still on
/// its way is delivered, and the upstream session is ended (DELETE).
pub async fn run_remote<AI, AO>(
    proxy: Proxy,
    remote: Remote,
    agent_in: AI,
    agent_out: AO,
) -> Result<(), McpError>
where
    AI: AsyncRead + Unpin + Send + 'static,
    AO: AsyncWrite + Unpin + Send + 'static,
{
    let gate = proxy.gate().await?;
    let client = upstream::client()?;
    let upstream =
        upstream::HttpUpstream::new(client, &remote, proxy.config().gate.defaults.deadline);
    upstream.open_get_when_ready();
    let max = proxy.config().max_message_size;
    let (to_agent, agent_writer) = Outbox::spawn_scrubbed(
        "agent",
        agent_out,
        limits::queue_cap(max),
        proxy.scrubber().cloned(),
    );
    let (to_server, inbox) = Outbox::channel();
    let session = Session::new(
        &gate,
        &proxy,
        to_agent.clone(),
        to_server,
        Some(upstream.clone()),
    );
    upstream.attach(session.downgrade());
    let pump = tokio::spawn(upstream.clone().pump(inbox));
    limits::read_lines("agent", agent_in, max, |line| match line {
        limits::Line::Whole(line) => session.agent_says(line),
        limits::Line::TooLong(refused) => session.agent_too_long(&refused),
    })
    .await;
    session.agent_closed();
    let _ = pump.await;
    upstream.end().await;
    session.server_closed();
    drop(session);
    to_agent.close();
    drop(to_agent);
    let _ = agent_writer.await;
    Ok(())
}

/// `sluice mcp --upstream URL`: this process's standard input and output
/// proxied to the remote server ([`run_remote`]) through `proxy`
/// (`sluice mcp` scrubs with [`Proxy::scrub_env_secrets`]).
pub async fn run_upstream(proxy: Proxy, remote: Remote) -> Result<(), McpError> {
    let stdin = crate::stdin::ThreadStdin::spawn().map_err(|source| McpError::Io {
        context: "cannot read standard input",
        source,
    })?;
    run_remote(proxy, remote, stdin, tokio::io::stdout()).await
}
