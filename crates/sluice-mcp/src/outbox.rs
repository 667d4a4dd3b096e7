//! Ordered, line-at-a-time output to one peer, written by one task so that messages never interleave.

use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

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
/// Unbounded on purpose: messages are queued from `Drop` (a cancelled
/// call's `notifications/cancelled`), where nothing may wait. What queues
/// is bounded by what the other peer sends, as it would be in a pipe.
#[derive(Debug, Clone)]
pub(crate) struct Outbox(mpsc::UnboundedSender<Outgoing>);

impl Outbox {
    /// Starts the task that writes to `out`; it ends on [`Outbox::close`],
    /// when every `Outbox` is gone, or when a write fails (the peer left).
    pub(crate) fn spawn<W>(name: &'static str, out: W) -> (Outbox, tokio::task::JoinHandle<()>)
    where
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let (tx, rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(write_lines(name, out, rx));
        (Outbox(tx), task)
    }

    /// Queues one message; false when the writer has stopped.
    pub(crate) fn send(&self, line: Vec<u8>) -> bool {
        self.0.send(Outgoing::Line(line)).is_ok()
    }

    /// Closes the stream once everything queued before is written.
    pub(crate) fn close(&self) {
        let _ = self.0.send(Outgoing::Close);
    }
}

async fn write_lines<W>(name: &'static str, mut out: W, mut rx: mpsc::UnboundedReceiver<Outgoing>)
where
    W: AsyncWrite + Unpin + Send + 'static,
{
    while let Some(message) = rx.recv().await {
        let Outgoing::Line(mut line) = message else {
            break;
        };
        line.push(b'\n');
        if let Err(error) = out.write_all(&line).await {
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
