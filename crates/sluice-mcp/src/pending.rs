//! The proxy's own requests to the MCP server: ids it owns, and the executors waiting for their answers.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::oneshot;

use crate::jsonrpc::IdKey;

/// The MCP server's answer to a forwarded `tools/call`, as JSON text.
#[derive(Debug)]
pub(crate) enum ChildReply {
    /// The `result` member.
    Result(Bytes),
    /// The `error` member (the error object).
    Error(Bytes),
}

#[derive(Debug)]
struct Entry {
    /// The agent's request this one was sent for.
    owner: IdKey,
    reply: oneshot::Sender<ChildReply>,
    /// `notifications/cancelled` has been sent for it already.
    cancelled: bool,
}

/// Requests sent under proxy-owned ids, awaiting their answers.
///
/// The ids are strings, `sluice-<random>-<n>`: the random part (fresh per
/// proxy) keeps them apart from the agent's own ids, which pass through
/// unchanged on every other request.
#[derive(Debug)]
pub(crate) struct Pending {
    prefix: String,
    next: AtomicU64,
    entries: Mutex<HashMap<String, Entry>>,
}

impl Pending {
    pub(crate) fn new(nonce: u64) -> Self {
        Pending {
            prefix: format!("sluice-{nonce:016x}-"),
            next: AtomicU64::new(1),
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// A fresh id for a request sent for the agent's request `owner`.
    pub(crate) fn open(&self, owner: IdKey) -> (String, oneshot::Receiver<ChildReply>) {
        let id = format!(
            "{}{}",
            self.prefix,
            self.next.fetch_add(1, Ordering::Relaxed)
        );
        let (reply, receiver) = oneshot::channel();
        self.entries.lock().insert(
            id.clone(),
            Entry {
                owner,
                reply,
                cancelled: false,
            },
        );
        (id, receiver)
    }

    /// True for an id this proxy owns (answered, cancelled or not).
    pub(crate) fn owns(&self, id: &IdKey) -> bool {
        id.as_str().is_some_and(|id| id.starts_with(&self.prefix))
    }

    /// Hands an answer to its waiting executor; false when nobody waits
    /// any more (the call was cancelled or ran out of time).
    pub(crate) fn answer(&self, id: &str, reply: ChildReply) -> bool {
        match self.entries.lock().remove(id) {
            Some(entry) => entry.reply.send(reply).is_ok(),
            None => false,
        }
    }

    /// Forgets a request whose executor stopped waiting. `Some(true)` when
    /// it still needs a `notifications/cancelled`.
    pub(crate) fn abandon(&self, id: &str) -> Option<bool> {
        self.entries.lock().remove(id).map(|entry| !entry.cancelled)
    }

    /// Marks the requests sent for `owner` as cancelled; returns their ids,
    /// for the `notifications/cancelled` to send.
    pub(crate) fn cancel_owned_by(&self, owner: &IdKey) -> Vec<String> {
        self.mark(|entry| &entry.owner == owner)
    }

    /// Marks every request as cancelled; returns their ids.
    pub(crate) fn cancel_all(&self) -> Vec<String> {
        self.mark(|_| true)
    }

    fn mark(&self, which: impl Fn(&Entry) -> bool) -> Vec<String> {
        let mut entries = self.entries.lock();
        entries
            .iter_mut()
            .filter(|(_, entry)| !entry.cancelled && which(entry))
            .map(|(id, entry)| {
                entry.cancelled = true;
                id.clone()
            })
            .collect()
    }

    /// The server is gone: every waiting executor learns it now.
    pub(crate) fn clear(&self) {
        self.entries.lock().clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_owned_answered_and_cancelled_once() {
        let pending = Pending::new(0xab);
        let agent = IdKey::Num("1".to_owned());
        let (id, mut receiver) = pending.open(agent.clone());
        assert_eq!(id, "sluice-00000000000000ab-1");
        assert!(pending.owns(&IdKey::Str(id.clone())));
        assert!(!pending.owns(&IdKey::Str("sluice-other-1".to_owned())));
        assert!(!pending.owns(&IdKey::Num("1".to_owned())));

        assert_eq!(pending.cancel_owned_by(&agent), vec![id.clone()]);
        assert!(pending.cancel_owned_by(&agent).is_empty());
        // Already cancelled: the executor's guard must not send it again.
        assert_eq!(pending.abandon(&id), Some(false));
        assert_eq!(pending.abandon(&id), None);
        assert!(receiver.try_recv().is_err());

        let (second, receiver) = pending.open(agent);
        assert!(pending.answer(&second, ChildReply::Result(Bytes::from_static(b"{}"))));
        assert!(!pending.answer(&second, ChildReply::Result(Bytes::new())));
        drop(receiver);
        let (third, _receiver) = pending.open(IdKey::Num("2".to_owned()));
        assert_eq!(pending.cancel_all(), vec![third.clone()]);
        pending.clear();
        assert_eq!(pending.abandon(&third), None);
    }
}
