//! The `--listen` sessions by id, and their bounds: a session idle for
//! `[mcp] session_idle` is closed, at most `[mcp] max_sessions` are open
//! (a new one closes the least recently used idle one, else it is refused),
//! and one session has at most `[mcp] session_queue` requests in progress.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use sluice_config::McpSessions;
use tokio::sync::watch;
use tokio::time::Instant;

use super::client::ClientSession;

/// What a client waits before trying a new session again when every open
/// one is busy: sessions free up as their requests end, which sluice cannot
/// foretell, so one second (a retry soon, not a flood).
pub(super) const FULL_RETRY_AFTER: Duration = Duration::from_secs(1);

/// The open sessions by `Mcp-Session-Id`.
pub(super) struct Sessions {
    bounds: McpSessions,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    open: HashMap<String, Arc<ClientSession>>,
    /// Sessions being opened, counted against the cap.
    reserved: usize,
}

/// A place under the cap for a session being opened; given back unless filled.
pub(super) struct Reservation<'a> {
    sessions: &'a Sessions,
    filled: bool,
}

/// Every open session is busy and there are `max_sessions` of them.
#[derive(Debug)]
pub(super) struct Full;

impl Sessions {
    pub(super) fn new(bounds: McpSessions) -> Self {
        Sessions {
            bounds,
            inner: Mutex::new(Inner::default()),
        }
    }

    /// Requests one session may have in progress.
    pub(super) fn queue(&self) -> usize {
        self.bounds.queue
    }

    /// The session named `id`, its idle clock restarted.
    pub(super) fn get(&self, id: &str) -> Option<Arc<ClientSession>> {
        let client = self.inner.lock().open.get(id).cloned()?;
        client.activity.touch();
        Some(client)
    }

    /// Removes the session named `id`; the caller ends it.
    pub(super) fn remove(&self, id: &str) -> Option<Arc<ClientSession>> {
        self.inner.lock().open.remove(id)
    }

    /// Every session, removed; the caller ends them.
    pub(super) fn drain(&self) -> Vec<Arc<ClientSession>> {
        self.inner.lock().open.drain().map(|(_, s)| s).collect()
    }

    /// A place for one more session: at the cap, the least recently used
    /// idle session is closed to make room; when none is idle, [`Full`].
    pub(super) fn reserve(&self) -> Result<Reservation<'_>, Full> {
        let mut inner = self.inner.lock();
        if inner.open.len() + inner.reserved >= self.bounds.max_sessions {
            let oldest = inner
                .open
                .iter()
                .filter_map(|(id, client)| client.activity.idle_since().map(|at| (at, id)))
                .min()
                .map(|(_, id)| id.clone());
            let Some(oldest) = oldest else {
                return Err(Full);
            };
            if let Some(client) = inner.open.remove(&oldest) {
                tracing::info!(
                    "max_sessions reached: closing the least recently used idle session"
                );
                tokio::spawn(async move { client.end().await });
            }
        }
        inner.reserved += 1;
        Ok(Reservation {
            sessions: self,
            filled: false,
        })
    }

    /// Closes every session idle for `session_idle`, and returns when the
    /// next one will be due.
    fn expire(&self, now: Instant) -> Instant {
        let idle = self.bounds.idle;
        let mut next = now + idle;
        let mut inner = self.inner.lock();
        let mut due = Vec::new();
        for (id, client) in &inner.open {
            let Some(since) = client.activity.idle_since() else {
                continue;
            };
            let at = since + idle;
            if at <= now {
                due.push(id.clone());
            } else {
                next = next.min(at);
            }
        }
        for id in due {
            if let Some(client) = inner.open.remove(&id) {
                tracing::info!(
                    idle_ms = idle.as_millis() as u64,
                    "closing a session idle for session_idle"
                );
                tokio::spawn(async move { client.end().await });
            }
        }
        next
    }

    /// Closes idle sessions as they become due, until `stop` turns true.
    pub(super) async fn sweep(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        loop {
            let next = self.expire(Instant::now());
            tokio::select! {
                () = tokio::time::sleep_until(next) => {}
                _ = stop.wait_for(|stop| *stop) => return,
            }
        }
    }
}

impl Reservation<'_> {
    /// The session opened: it takes the place.
    pub(super) fn fill(mut self, client: Arc<ClientSession>) {
        let mut inner = self.sessions.inner.lock();
        inner.reserved = inner.reserved.saturating_sub(1);
        inner.open.insert(client.id.clone(), client);
        self.filled = true;
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if !self.filled {
            let mut inner = self.sessions.inner.lock();
            inner.reserved = inner.reserved.saturating_sub(1);
        }
    }
}
