//! Where a `--listen` session's messages for its client go: a response to
//! the POST that asked, a progress notification to the POST whose request
//! carried its token, anything else to the GET stream, else to an open
//! POST stream, else to a bounded backlog for the next GET.
//!
//! Events on the GET stream carry ids (a number counting up within the
//! session), and the last of them are kept: a GET with `Last-Event-ID`
//! gets those after it again, then what waited, so a client whose GET
//! stream broke loses nothing it was sent.

use std::collections::{HashMap, VecDeque};

use serde_json::value::RawValue;
use tokio::sync::mpsc;

use crate::jsonrpc::{self, Frame, IdKey};

/// Messages kept for a GET stream not yet open, and sent ones kept for a
/// GET that resumes.
const BACKLOG: usize = 1_000;
/// Bytes of sent GET events kept for resuming (the oldest go first).
const REPLAY_BYTES: usize = 4 << 20;

/// A channel to one open HTTP response of the client.
pub(super) type Stream = mpsc::UnboundedSender<Vec<u8>>;
/// The channel to the GET stream: each message with its event id.
pub(super) type GetStream = mpsc::UnboundedSender<(u64, Vec<u8>)>;

/// Where messages for the client go.
#[derive(Default)]
pub(super) struct Routes {
    /// A POST waiting for the response to this request.
    pub(super) waiting: HashMap<IdKey, Stream>,
    /// A POST stream whose request carried this `progressToken`: the MCP
    /// spec has messages about a request sent on that request's stream.
    pub(super) progress: HashMap<IdKey, Stream>,
    /// POST streams open, oldest first, for what the server says unasked.
    pub(super) streams: Vec<(u64, Stream)>,
    get: Option<GetStream>,
    pub(super) backlog: VecDeque<Vec<u8>>,
    pub(super) next_stream: u64,
    /// Events sent on the GET stream, by id, for a GET that resumes.
    sent: VecDeque<(u64, Vec<u8>)>,
    sent_bytes: usize,
    last_event: u64,
}

impl Routes {
    pub(super) fn route(&mut self, message: Vec<u8>) {
        if let Some(id) = first_response_id(&message)
            && let Some(waiter) = self.waiting.remove(&id)
        {
            // The batch's other ids are answered by the same array.
            for other in response_ids(&message) {
                self.waiting.remove(&other);
            }
            let _ = waiter.send(message);
            return;
        }
        if let Some(token) = progress_token(&message)
            && let Some(stream) = self.progress.get(&token)
        {
            match stream.send(message) {
                Ok(()) => return,
                Err(returned) => {
                    self.progress.remove(&token);
                    return self.route(returned.0);
                }
            }
        }
        let message = match self.send_get(message) {
            Ok(()) => return,
            Err(message) => message,
        };
        self.streams.retain(|(_, stream)| !stream.is_closed());
        if let Some((_, stream)) = self.streams.first() {
            let _ = stream.send(message);
            return;
        }
        if self.backlog.len() >= BACKLOG {
            self.backlog.pop_front();
        }
        self.backlog.push_back(message);
    }

    /// Sends `message` on the GET stream under the next event id, and keeps
    /// it for resuming; gives it back when no GET stream is open.
    fn send_get(&mut self, message: Vec<u8>) -> Result<(), Vec<u8>> {
        let Some(get) = &self.get else {
            return Err(message);
        };
        let id = self.last_event + 1;
        if let Err(returned) = get.send((id, message.clone())) {
            self.get = None;
            return Err(returned.0.1);
        }
        self.last_event = id;
        self.sent_bytes += message.len();
        self.sent.push_back((id, message));
        while self.sent.len() > BACKLOG || self.sent_bytes > REPLAY_BYTES {
            let Some((_, old)) = self.sent.pop_front() else {
                break;
            };
            self.sent_bytes -= old.len();
        }
        Ok(())
    }

    /// A GET stream opened (replacing any other): with `resume` (its
    /// `Last-Event-ID`), the kept events after that id first, under their
    /// ids; then what waited for it.
    pub(super) fn open_get(&mut self, get: GetStream, resume: Option<u64>) {
        if let Some(after) = resume {
            for (id, message) in self.sent.iter().filter(|(id, _)| *id > after) {
                let _ = get.send((*id, message.clone()));
            }
        }
        self.get = Some(get);
        while let Some(message) = self.backlog.pop_front() {
            if let Err(message) = self.send_get(message) {
                self.backlog.push_front(message);
                break;
            }
        }
    }

    /// Every stream let go: the session is over, so its open responses end.
    pub(super) fn close(&mut self) {
        self.waiting.clear();
        self.progress.clear();
        self.streams.clear();
        self.get = None;
        self.backlog.clear();
        self.sent.clear();
        self.sent_bytes = 0;
    }
}

/// The `progressToken` of a request's `params._meta`, if it has one.
pub(super) fn request_token(params: Option<&RawValue>) -> Option<IdKey> {
    crate::progress::request_token(params?).map(IdKey::of)
}

/// The token of a `notifications/progress`.
fn progress_token(message: &[u8]) -> Option<IdKey> {
    #[derive(serde::Deserialize)]
    struct Params<'a> {
        #[serde(borrow, rename = "progressToken")]
        token: &'a RawValue,
    }
    let Frame::Single(message) = jsonrpc::parse(message) else {
        return None;
    };
    if message.method() != Some("notifications/progress") {
        return None;
    }
    let params: Params<'_> = serde_json::from_str(message.params?.get()).ok()?;
    Some(IdKey::of(params.token))
}

pub(super) fn first_response_id(message: &[u8]) -> Option<IdKey> {
    response_ids(message).into_iter().next()
}

pub(super) fn response_ids(message: &[u8]) -> Vec<IdKey> {
    jsonrpc::responses(message, |message| message.id_key())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_goes_to_the_stream_of_the_request_that_asked() {
        let mut routes = Routes::default();
        let (get, mut get_rx) = mpsc::unbounded_channel();
        let (post, mut post_rx) = mpsc::unbounded_channel();
        routes.open_get(get, None);
        routes.progress.insert(IdKey::Str("t1".into()), post);
        routes.route(
            br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t1","progress":1}}"#.to_vec(),
        );
        routes.route(
            br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t2","progress":1}}"#.to_vec(),
        );
        assert!(
            post_rx
                .try_recv()
                .is_ok_and(|m| m.windows(4).any(|w| w == b"\"t1\""))
        );
        assert!(post_rx.try_recv().is_err());
        assert!(
            get_rx
                .try_recv()
                .is_ok_and(|(_, m)| m.windows(4).any(|w| w == b"\"t2\""))
        );
    }

    #[test]
    fn a_get_that_resumes_gets_what_came_after_its_last_event_then_what_waited() {
        let mut routes = Routes::default();
        let (first, mut first_rx) = mpsc::unbounded_channel();
        routes.open_get(first, None);
        for n in 1..=3u8 {
            routes.route(vec![n]);
        }
        assert_eq!(first_rx.try_recv().unwrap(), (1, vec![1]));
        // The stream breaks; what comes meanwhile waits.
        drop(first_rx);
        routes.route(vec![4]);
        let (again, mut again_rx) = mpsc::unbounded_channel();
        routes.open_get(again, Some(1));
        let got: Vec<_> = std::iter::from_fn(|| again_rx.try_recv().ok()).collect();
        assert_eq!(got, vec![(2, vec![2]), (3, vec![3]), (4, vec![4])]);
    }
}
