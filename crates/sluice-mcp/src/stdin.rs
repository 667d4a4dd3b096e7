//! This process's standard input, read on a thread of its own so that a read blocked on a silent client never holds up exit.

use std::io::Read;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use tokio::io::{AsyncRead, ReadBuf};
use tokio::sync::mpsc;

/// Standard input as an [`AsyncRead`].
///
/// Tokio's own `stdin()` reads on its blocking pool, and shutting the
/// runtime down waits for that read: with a client that keeps its end open
/// after the server exited, the proxy could never exit. A plain thread
/// does not hold the runtime; it ends with the process.
#[derive(Debug)]
pub(crate) struct ThreadStdin {
    chunks: mpsc::Receiver<std::io::Result<Bytes>>,
    current: Bytes,
}

impl ThreadStdin {
    pub(crate) fn spawn() -> std::io::Result<Self> {
        let (tx, chunks) = mpsc::channel(8);
        std::thread::Builder::new()
            .name("sluice-mcp-stdin".to_owned())
            .spawn(move || {
                let mut stdin = std::io::stdin().lock();
                let mut buffer = vec![0; 64 * 1024];
                loop {
                    let chunk = match stdin.read(&mut buffer) {
                        Ok(0) => return,
                        Ok(n) => Ok(Bytes::copy_from_slice(buffer.get(..n).unwrap_or_default())),
                        Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
                        Err(error) => Err(error),
                    };
                    let failed = chunk.is_err();
                    if tx.blocking_send(chunk).is_err() || failed {
                        return;
                    }
                }
            })?;
        Ok(ThreadStdin {
            chunks,
            current: Bytes::new(),
        })
    }
}

impl AsyncRead for ThreadStdin {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        while self.current.is_empty() {
            match ready!(self.chunks.poll_recv(cx)) {
                Some(Ok(chunk)) => self.current = chunk,
                Some(Err(error)) => return Poll::Ready(Err(error)),
                // The thread ended: end of input.
                None => return Poll::Ready(Ok(())),
            }
        }
        let n = out.remaining().min(self.current.len());
        let chunk = self.current.split_to(n);
        out.put_slice(&chunk);
        Poll::Ready(Ok(()))
    }
}
