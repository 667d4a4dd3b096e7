//! A turn's calls polled in the order JavaScript made them: one task per
//! turn takes them from a queue and runs them together, so the first one
//! made is the first to ask for a slot (spawned one by one, whichever
//! runtime thread picked a call up first would).

use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::Poll;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use napi::bindgen_prelude::spawn;
use napi::{Error, Status};
use tokio::sync::{mpsc, oneshot};

/// One call's work, and where its result goes.
type Job = (
    Pin<Box<dyn Future<Output = napi::Result<String>> + Send>>,
    oneshot::Sender<napi::Result<String>>,
);

/// The queue into a turn's task, started with its first call.
#[derive(Default)]
pub(crate) struct Ordered {
    jobs: OnceLock<mpsc::UnboundedSender<Job>>,
}

impl Ordered {
    /// Queues `work` behind the calls queued before it; resolves to its result.
    pub(crate) fn run(
        &self,
        work: impl Future<Output = napi::Result<String>> + Send + 'static,
    ) -> impl Future<Output = napi::Result<String>> + Send + 'static {
        let jobs = self.jobs.get_or_init(|| {
            let (sender, receiver) = mpsc::unbounded_channel();
            spawn(drive(receiver));
            sender
        });
        let (sender, receiver) = oneshot::channel();
        let queued = jobs.send((Box::pin(work), sender)).is_ok();
        async move {
            if !queued {
                return Err(Error::new(
                    Status::GenericFailure,
                    "the turn's task has ended",
                ));
            }
            receiver
                .await
                .map_err(|_| Error::new(Status::GenericFailure, "the call was dropped"))?
        }
    }
}

/// Runs the queued calls, each first polled in the order queued, until the
/// queue is closed (the turn is gone) and every call has ended.
async fn drive(mut jobs: mpsc::UnboundedReceiver<Job>) {
    let mut running = FuturesUnordered::new();
    let mut open = true;
    std::future::poll_fn(|context| {
        // New calls join at the back: FuturesUnordered polls them in that order.
        while open {
            match jobs.poll_recv(context) {
                Poll::Ready(Some((work, result))) => running.push(async move {
                    let _ = result.send(work.await);
                }),
                Poll::Ready(None) => open = false,
                Poll::Pending => break,
            }
        }
        while let Poll::Ready(Some(())) = running.poll_next_unpin(context) {}
        if !open && running.is_empty() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
}
