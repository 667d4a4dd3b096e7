//! An upstream body relayed to the client as it arrives; the call keeps its
//! concurrency permit until the body has ended or the client has gone.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use sluice::BodyHold;

/// The upstream's body, frame by frame, after what the executor read of it
/// already, with the call's hold on its scope.
pub(crate) struct Relay {
    read: Option<Bytes>,
    body: Incoming,
    /// Dropped at the body's end (or with the relay, if the client leaves).
    hold: Option<BodyHold>,
}

impl Relay {
    pub(crate) fn new(read: Bytes, body: Incoming, hold: Option<BodyHold>) -> Self {
        let read = (!read.is_empty()).then_some(read);
        Relay { read, body, hold }
    }
}

impl HttpBody for Relay {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        if let Some(read) = self.read.take() {
            return Poll::Ready(Some(Ok(Frame::data(read))));
        }
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        if matches!(polled, Poll::Ready(None) | Poll::Ready(Some(Err(_)))) {
            // The request is over upstream: give the permit back now, not
            // when the server gets round to dropping the body.
            self.hold = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.read.is_none() && self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let read = self.read.as_ref().map_or(0, |read| read.len() as u64);
        let rest = self.body.size_hint();
        let mut hint = SizeHint::new();
        hint.set_lower(rest.lower() + read);
        if let Some(upper) = rest.upper() {
            hint.set_upper(upper + read);
        }
        hint
    }
}
