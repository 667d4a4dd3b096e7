//! One `--listen` client session: its own server session (a child
//! process for a stdio server, an upstream session for a remote one), the
//! routes of what it sends the client, and how it ends.

use std::sync::Arc;

use parking_lot::Mutex;

use super::activity::Activity;
use super::routes::Routes;
use super::upstream::HttpUpstream;
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

impl ClientSession {
    /// A session with no request yet; `child` is its stdio server's
    /// process, `upstream` its remote server's session.
    pub(super) fn new(
        id: String,
        session: Session,
        upstream: Option<Arc<HttpUpstream>>,
        child: Option<tokio::process::Child>,
        grace: std::time::Duration,
    ) -> Arc<Self> {
        Arc::new(ClientSession {
            id,
            session,
            upstream,
            child: Mutex::new(child),
            routes: Mutex::new(Routes::default()),
            activity: Activity::default(),
            grace,
        })
    }

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
