//! Ordered, line-at-a-time output to one peer, written by one task so that messages never interleave.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use sluice_http::scrub::Scrubber;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

/// Where an outbox's messages go.
#[derive(Clone)]
enum To {
    /// A writer task, or an [`Inbox`].
    Queue(mpsc::UnboundedSender<Outgoing>),
    /// A function that puts each message where it goes at once, without
    /// waiting (a `--listen` session's routes): no task to wake per
    /// message, which on a loaded machine is a thread's wake-up each.
    Handler(Arc<dyn Fn(Vec<u8>) + Send + Sync>),
}

impl std::fmt::Debug for To {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            To::Queue(_) => f.write_str("Queue"),
            To::Handler(_) => f.write_str("Handler"),
        }
    }
}

/// What a writer task is told.
#[derive(Debug)]
enum Outgoing {
    /// One message, without its newline.
    Line(Vec<u8>),
    /// Write what came before, then close the stream.
    Close,
}

/// The sending side of a peer's writer. Cheap to clone.
///
/// Never waits: messages are queued from `Drop` (a cancelled call's
/// `notifications/cancelled`), where nothing may wait. Bounded in bytes
/// instead: a peer that stops reading cannot grow the proxy's memory past
/// `cap` queued bytes; past it, [`Outbox::send`] refuses the message and
/// the caller answers for it (issue 19).
#[derive(Debug, Clone)]
pub(crate) struct Outbox {
    to: To,
    queued: Arc<AtomicUsize>,
    cap: usize,
    name: &'static str,
}

impl Outbox {
    /// Starts the task that writes to `out`; it ends on [`Outbox::close`],
    /// when every `Outbox` is gone, or when a write fails (the peer left).
    pub(crate) fn spawn<W>(
        name: &'static str,
        out: W,
        cap: usize,
    ) -> (Outbox, tokio::task::JoinHandle<()>)
    where
        W: AsyncWrite + Unpin + Send + 'static,
    {
        Self::spawn_scrubbed(name, out, cap, None)
    }

    /// [`Outbox::spawn`] for the client's side: each message has the
    /// secrets of `scrubber` masked, whole, as it is written (so that JSON
    /// stays JSON: the mask holds no quote).
    pub(crate) fn spawn_scrubbed<W>(
        name: &'static str,
        out: W,
        cap: usize,
        scrubber: Option<Arc<Scrubber>>,
    ) -> (Outbox, tokio::task::JoinHandle<()>)
    where
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let (tx, rx) = mpsc::unbounded_channel();
        let queued = Arc::new(AtomicUsize::new(0));
        let task = tokio::spawn(write_lines(name, out, rx, queued.clone(), scrubber));
        let outbox = Outbox {
            to: To::Queue(tx),
            queued,
            cap,
            name,
        };
        (outbox, task)
    }

    /// An outbox read by the caller instead of a writer task (a transport
    /// that is not a byte stream, such as Streamable HTTP).
    pub(crate) fn channel() -> (Outbox, Inbox) {
        let (tx, rx) = mpsc::unbounded_channel();
        // Read by its transport, which bounds what it holds itself.
        let outbox = Outbox {
            to: To::Queue(tx),
            queued: Arc::new(AtomicUsize::new(0)),
            cap: usize::MAX,
            name: "channel",
        };
        (outbox, Inbox(rx))
    }

    /// An outbox whose messages `handler` takes at once, in the sender's
    /// task; it must not wait. Unbounded: what it holds is its own to bound.
    pub(crate) fn handler(handler: impl Fn(Vec<u8>) + Send + Sync + 'static) -> Outbox {
        Outbox {
            to: To::Handler(Arc::new(handler)),
            queued: Arc::new(AtomicUsize::new(0)),
            cap: usize::MAX,
            name: "handler",
        }
    }

    /// Queues one message; false when the writer has stopped, or when the
    /// peer is so far behind that `cap` bytes already wait for it.
    pub(crate) fn send(&self, line: Vec<u8>) -> bool {
        let len = line.len() + 1;
        if self.cap != usize::MAX {
            let before = self.queued.fetch_add(len, Ordering::AcqRel);
            if before.saturating_add(len) > self.cap && before > 0 {
                self.queued.fetch_sub(len, Ordering::AcqRel);
                tracing::warn!(
                    peer = self.name,
                    queued = before,
                    "the peer is not reading; a message to it is refused"
                );
                return false;
            }
        }
        let tx = match &self.to {
            To::Queue(tx) => tx,
            To::Handler(handler) => {
                handler(line);
                return true;
            }
        };
        if tx.send(Outgoing::Line(line)).is_err() {
            if self.cap != usize::MAX {
                self.queued.fetch_sub(len, Ordering::AcqRel);
            }
            return false;
        }
        true
    }

    /// Closes the stream once everything queued before is written.
    pub(crate) fn close(&self) {
        if let To::Queue(tx) = &self.to {
            let _ = tx.send(Outgoing::Close);
        }
    }
}

async fn write_lines<W>(
    name: &'static str,
    mut out: W,
    mut rx: mpsc::UnboundedReceiver<Outgoing>,
    queued: Arc<AtomicUsize>,
    scrubber: Option<Arc<Scrubber>>,
) where
    W: AsyncWrite + Unpin + Send + 'static,
{
    while let Some(message) = rx.recv().await {
        let Outgoing::Line(line) = message else {
            break;
        };
        // What `send` counted, whatever masking does to the length.
        let counted = line.len() + 1;
        let mut line = crate::scrub::line(scrubber.as_deref(), line);
        line.push(b'\n');
        let written = out.write_all(&line).await;
        queued.fetch_sub(counted, Ordering::AcqRel);
        if let Err(error) = written {
            tracing::debug!(peer = name, %error, "cannot write; the peer has gone");
            return;
        }
        // Flush once the queue is drained, not after every line.
        if rx.is_empty()
            && let Err(error) = out.flush().await
        {
            tracing::debug!(peer = name, %error, "cannot flush; the peer has gone");
            return;
        }
    }
    let _ = out.flush().await;
    let _ = out.shutdown().await;
}

/// The reading side of [`Outbox::channel`].
#[derive(Debug)]
pub(crate) struct Inbox(mpsc::UnboundedReceiver<Outgoing>);

impl Inbox {
    /// The next message, or `None` once the outbox was closed or dropped.
    pub(crate) async fn next(&mut self) -> Option<Vec<u8>> {
        match self.0.recv().await {
            Some(Outgoing::Line(line)) => Some(line),
            Some(Outgoing::Close) | None => {
                self.0.close();
                None
            }
        }
    }
}
