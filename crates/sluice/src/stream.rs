//! A response whose body is still arriving when its head comes back: the
//! executor returns the head and the body as a [`BodyStream`], and the call
//! keeps its concurrency permit and in-flight count inside that body until
//! it ends, so `max_in_flight` counts streams, not heads (invariant 2).

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::BodyExt;
use parking_lot::Mutex;

use crate::scope::Held;

/// The error a streamed body can end with.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

type Rest = Pin<Box<dyn HttpBody<Data = Bytes, Error = BoxError> + Send>>;

/// The body of an answer that streams: what the executor read of it
/// already, then the rest as it arrives. While the call that sent it holds
/// its scope (a call nothing else shares), the permit and the in-flight
/// count go back when the body ends, fails, or is dropped.
///
/// ```
/// use bytes::Bytes;
/// use http_body_util::{BodyExt, Full};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let body = sluice::BodyStream::new(Bytes::from("event: "), Full::new(Bytes::from("ping\n")));
/// let bytes = body.collect().await.unwrap().to_bytes();
/// assert_eq!(bytes, "event: ping\n");
/// # }
/// ```
pub struct BodyStream {
    read: Option<Bytes>,
    rest: Rest,
    /// Dropped at the body's end, or with the body if its reader leaves.
    held: Option<Held>,
}

impl BodyStream {
    /// A body whose first `read` bytes are in hand and whose `rest` is
    /// still arriving.
    pub fn new<B>(read: Bytes, rest: B) -> Self
    where
        B: HttpBody<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        BodyStream {
            read: (!read.is_empty()).then_some(read),
            rest: Box::pin(rest.map_err(Into::into)),
            held: None,
        }
    }

    /// Keeps the call's hold on its scopes until the body is done.
    pub(crate) fn hold(&mut self, held: Held) {
        self.held = Some(held);
    }
}

impl HttpBody for BodyStream {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Some(read) = self.read.take() {
            return Poll::Ready(Some(Ok(Frame::data(read))));
        }
        let polled = self.rest.as_mut().poll_frame(cx);
        if matches!(polled, Poll::Ready(None) | Poll::Ready(Some(Err(_)))) {
            // The request is over upstream: give the permit back now, not
            // when the reader gets round to dropping the body.
            self.held = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.read.is_none() && self.rest.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let read = self.read.as_ref().map_or(0, |read| read.len() as u64);
        let rest = self.rest.size_hint();
        let mut hint = SizeHint::new();
        hint.set_lower(rest.lower() + read);
        if let Some(upper) = rest.upper() {
            hint.set_upper(upper + read);
        }
        hint
    }
}

impl fmt::Debug for BodyStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BodyStream")
            .field("read", &self.read.as_ref().map(Bytes::len))
            .field("held", &self.held.is_some())
            .finish_non_exhaustive()
    }
}

/// A completed call's streamed body, for the one reader that takes it
/// ([`crate::Completion::stream`]). A body nobody takes is dropped with the
/// last copy of the completion, and what it held goes back then.
#[derive(Debug, Clone)]
pub struct StreamSlot(Arc<Mutex<Option<BodyStream>>>);

impl StreamSlot {
    pub(crate) fn new(body: BodyStream) -> Self {
        StreamSlot(Arc::new(Mutex::new(Some(body))))
    }

    /// The body, for the first caller that takes it.
    pub fn take(&self) -> Option<BodyStream> {
        self.0.lock().take()
    }
}
