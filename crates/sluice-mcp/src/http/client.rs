//! One `--listen` client session: its own server session (a child
//! process for a stdio server, an upstream session for a remote one), the
//! routes of what it sends the client, and how it ends.

use std::sync::Arc;

use parking_lot::Mutex;

use super::listen::{Hub, Server};
use super::routes::Routes;
use super::sessions::{Activity, Reservation};
use super::upstream::HttpUpstream;
use crate::limits;
use crate::outbox::{Inbox, Outbox};
use crate::proxy::Session;

/// One client session.
pub(super) struct ClientSession {
    pub(super) id: String,
    pub(super) session: Session,
    pub(super) upstream: Option<Arc<HttpUpstream>>,
    child: Mutex<Option<tokio::process::Child>>,
    pub(super) routes: Mutex<Routes>,
    /// Its requests in progress and when it was last used.
    pub(super) activity: Activity,
    /// How long its child has to exit at each step of stopping.
    grace: std::time::Duration,
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
        let (to_agent, inbox) = Outbox::channel();
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
                tokio::spawn(upstream.clone().pump(server_inbox));
                Arc::new(ClientSession {
                    id,
                    session,
                    upstream: Some(upstream),
                    child: Mutex::new(None),
                    routes: Mutex::new(Routes::default()),
                    activity: Activity::default(),
                    grace,
                })
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
                let client = Arc::new(ClientSession {
                    id,
                    session: session.clone(),
                    upstream: None,
                    child: Mutex::new(Some(child)),
                    routes: Mutex::new(Routes::default()),
                    activity: Activity::default(),
                    grace,
                });
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
        tokio::spawn(dispatch(Arc::downgrade(&client), inbox));
        if let Some(place) = place {
            place.fill(client.clone());
        }
        Ok(client)
    }
}

impl ClientSession {
    /// Ends the session: calls dropped or cancelled, the server's session
    /// ended (a child stopped and reaped), the client's open streams ended.
    pub(super) async fn end(&self) {
        self.session.agent_closed();
        if let Some(upstream) = &self.upstream {
            upstream.end().await;
        }
        let child = self.child.lock().take();
        if let Some(mut child) = child {
            // Its input is closed (`agent_closed`).
            crate::process::stop_child(&mut child, self.grace).await;
        }
        self.session.server_closed();
        self.routes.lock().close();
    }
}

/// Routes what the session sends the client.
async fn dispatch(client: std::sync::Weak<ClientSession>, mut inbox: Inbox) {
    while let Some(message) = inbox.next().await {
        let Some(client) = client.upgrade() else {
            return;
        };
        client.routes.lock().route(message);
    }
}
