//! `Canceller`: an `AbortSignal`'s way into Rust. Aborting it drops the
//! futures of the calls it was given to, which cancels them.

use std::future::Future;

use napi::{Error, Status};
use napi_derive::napi;
use tokio::sync::watch;

/// Aborted once, for good; `js/lib/turn.js` calls `cancel()` when the
/// call's `AbortSignal` fires.
#[napi]
pub struct Canceller {
    sender: watch::Sender<bool>,
}

#[napi]
impl Canceller {
    /// A canceller not yet aborted.
    #[napi(constructor)]
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        Canceller {
            sender: watch::Sender::new(false),
        }
    }

    /// Cancels every call this canceller was given to.
    #[napi]
    pub fn cancel(&self) {
        self.sender.send_replace(true);
    }
}

impl Canceller {
    /// Resolves once `cancel()` has been called.
    fn aborted(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut receiver = self.sender.subscribe();
        async move {
            // An error means the canceller is gone: it can no longer abort.
            if receiver.wait_for(|aborted| *aborted).await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }
}

/// Runs `work` until it ends or `canceller` aborts, whichever comes first;
/// an abort drops `work` and is the error `"aborted"` (JavaScript turns it
/// into the signal's reason).
pub(crate) async fn cancellable<T>(
    work: impl Future<Output = T> + Send,
    canceller: Option<impl Future<Output = ()> + Send>,
) -> napi::Result<T> {
    let Some(aborted) = canceller else {
        return Ok(work.await);
    };
    let work = std::pin::pin!(work);
    let aborted = std::pin::pin!(aborted);
    match futures_util::future::select(work, aborted).await {
        futures_util::future::Either::Left((value, _)) => Ok(value),
        futures_util::future::Either::Right(((), _)) => {
            Err(Error::new(Status::Cancelled, "aborted"))
        }
    }
}

/// The abort future of an optional canceller.
pub(crate) fn aborted_of(
    canceller: Option<&Canceller>,
) -> Option<impl Future<Output = ()> + Send + 'static> {
    canceller.map(Canceller::aborted)
}
