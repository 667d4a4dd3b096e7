//! What every request to the `--listen` endpoint shares ([`Hub`]): the
//! proxy, its gate, the server behind it and the open sessions; a new
//! client session with its own server session ([`Hub::open`]); and the
//! JSON-RPC refusal of what cannot reach a session.

use std::sync::{Arc, OnceLock, Weak};

use axum::response::{IntoResponse, Response};
use http::StatusCode;
use http::header::CONTENT_TYPE;
use serde_json::json;
use sluice_config::Secret;
use tokio::sync::watch;

use super::client::ClientSession;
use super::sessions::{Reservation, Sessions};
use super::upstream::{Client, HttpUpstream, Remote};
use crate::executor::ServerExecutor;
use crate::jsonrpc;
use crate::limits;
use crate::live::LiveGate;
use crate::outbox::Outbox;
use crate::process::Command;
use crate::proxy::{Proxy, Session};

/// The server behind `sluice mcp --listen`.
#[derive(Debug, Clone)]
pub enum Server {
    /// A stdio server: one child process per client session.
    Command(Command),
    /// A remote server over Streamable HTTP: one upstream session per client session.
    Remote(Remote),
}

/// Shared by every request to the listener.
pub(super) struct Hub {
    pub(super) proxy: Proxy,
    pub(super) gate: Arc<LiveGate<ServerExecutor>>,
    pub(super) server: Server,
    pub(super) client: Option<Client>,
    pub(super) token: Option<Secret>,
    pub(super) exposure: sluice_config::McpExposure,
    pub(super) sessions: Arc<Sessions>,
    pub(super) stop: watch::Receiver<bool>,
}

impl Hub {
    /// A new client session with its own server session, kept in `place`
    /// (none for the stateless revision's, which lasts one POST).
    pub(super) async fn open(
        self: &Arc<Self>,
        place: Option<Reservation<'_>>,
    ) -> Result<Arc<ClientSession>, String> {
        let grace = self.proxy.shutdown_grace();
        let id = format!("{:032x}", rand::random::<u128>());
        // What the session sends its client is routed at once, in the
        // sender's task (`Outbox::handler`), to the client's waiting POST
        // or stream, once the client session exists.
        let routed: Arc<OnceLock<Weak<ClientSession>>> = Arc::default();
        let to_agent = Outbox::handler({
            let routed = routed.clone();
            move |message| {
                if let Some(client) = routed.get().and_then(Weak::upgrade) {
                    client.routes.lock().route(message);
                }
            }
        });
        let client = match &self.server {
            Server::Remote(remote) => {
                let http = self.client.clone().ok_or("no HTTP client")?;
                let upstream =
                    HttpUpstream::new(http, remote, self.proxy.config().gate.defaults.deadline);
                let (to_server, server_inbox) = Outbox::channel();
                let session = Session::new(
                    &self.gate,
                    &self.proxy,
                    to_agent,
                    to_server,
                    Some(upstream.clone()),
                );
                upstream.attach(session.downgrade());
                let client = ClientSession::new(id, session, Some(upstream.clone()), None, grace);
                let _ = routed.set(Arc::downgrade(&client));
                tokio::spawn(upstream.pump(server_inbox));
                client
            }
            Server::Command(command) => {
                let mut child = tokio::process::Command::new(&command.program)
                    .args(&command.args)
                    .stdin(std::process::Stdio::piped())
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::inherit())
                    .kill_on_drop(true)
                    .spawn()
                    .map_err(|error| format!("cannot start the MCP server: {error}"))?;
                let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
                    return Err(
                        "the MCP server's standard input or output is not a pipe".to_owned()
                    );
                };
                let max = self.proxy.config().max_message_size;
                let (to_server, _writer) = Outbox::spawn("server", stdin, limits::queue_cap(max));
                let session = Session::new(&self.gate, &self.proxy, to_agent, to_server, None);
                let client = ClientSession::new(id, session.clone(), None, Some(child), grace);
                let _ = routed.set(Arc::downgrade(&client));
                let hub = Arc::downgrade(self);
                let weak = Arc::downgrade(&client);
                tokio::spawn(async move {
                    limits::read_lines("server", stdout, max, |line| match line {
                        limits::Line::Whole(line) => session.server_says(line),
                        limits::Line::TooLong(refused) => session.server_too_long(&refused),
                    })
                    .await;
                    session.server_closed();
                    // The server is gone: so is the session.
                    if let (Some(hub), Some(client)) = (hub.upgrade(), weak.upgrade()) {
                        hub.sessions.remove(&client.id);
                    }
                });
                client
            }
        };
        if let Some(place) = place {
            place.fill(client.clone());
        }
        Ok(client)
    }
}

/// A JSON-RPC error as an HTTP answer (for what cannot reach a session).
pub(super) fn refuse(status: StatusCode, message: &str) -> Response {
    let body = jsonrpc::error_response(
        "null",
        &json!({"code": jsonrpc::INVALID_REQUEST, "message": message}).to_string(),
    );
    (status, [(CONTENT_TYPE, "application/json")], body).into_response()
}
