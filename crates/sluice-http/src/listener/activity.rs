//! What one connection is doing, as its watchdog needs to know it: waiting
//! for a request (idle), reading a request's head, or serving a request.
//!
//! The transitions are recorded where they happen, in the same task: the
//! socket's reads (the first byte of a head), the service's call (a head
//! complete) and the drop of the response body (the request is over).

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

/// Later than any timeout: a day (durations in `[server]` are at most a
/// week, but a connection is looked at again well before then).
const FAR: Duration = Duration::from_secs(86_400);

const IDLE: u8 = 0;
const HEAD: u8 = 1;
const BUSY: u8 = 2;

/// A connection's state and since when, in milliseconds from its start.
#[derive(Debug)]
pub(crate) struct Activity {
    origin: Instant,
    state: AtomicU8,
    since_ms: AtomicU64,
    /// The watchdog's armed deadline, in the same milliseconds.
    armed_ms: AtomicU64,
    header_ms: u64,
    /// A head began whose deadline is before the armed one.
    rearm: AtomicBool,
}

/// What the watchdog does when its timer fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Idle past the idle timeout: close it gracefully.
    Idle,
    /// A head took longer than the header-read timeout: drop the connection.
    SlowHead,
    /// Nothing is late: look again then.
    Until(Instant),
}

impl Activity {
    pub(crate) fn new(header_read_timeout: Duration) -> Arc<Self> {
        Arc::new(Activity {
            origin: Instant::now(),
            state: AtomicU8::new(IDLE),
            since_ms: AtomicU64::new(0),
            armed_ms: AtomicU64::new(u64::MAX),
            header_ms: millis(header_read_timeout),
            rearm: AtomicBool::new(false),
        })
    }

    fn now_ms(&self) -> u64 {
        millis(self.origin.elapsed())
    }

    fn enter(&self, state: u8) {
        self.since_ms.store(self.now_ms(), Ordering::Relaxed);
        self.state.store(state, Ordering::Relaxed);
    }

    /// Bytes were read: the first ones after idleness begin a head.
    fn read(&self) {
        if self.state.load(Ordering::Relaxed) == IDLE {
            self.enter(HEAD);
            let deadline = self.since_ms.load(Ordering::Relaxed) + self.header_ms;
            if deadline < self.armed_ms.load(Ordering::Relaxed) {
                self.rearm.store(true, Ordering::Relaxed);
            }
        }
    }

    /// A request's head is complete and being served.
    pub(crate) fn busy(&self) {
        self.state.store(BUSY, Ordering::Relaxed);
    }

    /// The request is over (its response body was dropped).
    pub(crate) fn idle(&self) {
        self.enter(IDLE);
    }

    pub(crate) fn is_idle(&self) -> bool {
        self.state.load(Ordering::Relaxed) == IDLE
    }

    /// True once after a head began that is due before the armed deadline.
    pub(crate) fn take_rearm(&self) -> bool {
        self.rearm.swap(false, Ordering::Relaxed)
    }

    /// Records the watchdog's deadline.
    pub(crate) fn armed(&self, at: Instant) {
        let ms = millis(at.saturating_duration_since(self.origin));
        self.armed_ms.store(ms, Ordering::Relaxed);
    }

    /// What is late now, with `idle_timeout` for idleness.
    pub(crate) fn check(&self, idle_timeout: Duration) -> Verdict {
        let now = self.now_ms();
        let since = self.since_ms.load(Ordering::Relaxed);
        let due = match self.state.load(Ordering::Relaxed) {
            IDLE => since.saturating_add(millis(idle_timeout)),
            HEAD => since.saturating_add(self.header_ms),
            // A request in progress is the call's deadline's business (its
            // body must arrive within it; a response may stream for long):
            // look again once it could have become idle and stayed so.
            _ => now.saturating_add(millis(idle_timeout)),
        };
        if now < due {
            let at = self
                .origin
                .checked_add(Duration::from_millis(due))
                .unwrap_or_else(|| Instant::now() + FAR);
            return Verdict::Until(at);
        }
        if self.state.load(Ordering::Relaxed) == HEAD {
            Verdict::SlowHead
        } else {
            Verdict::Idle
        }
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// A socket whose reads tell its [`Activity`] when a head begins.
pub(crate) struct Watched<T> {
    inner: T,
    activity: Arc<Activity>,
}

impl<T> Watched<T> {
    pub(crate) fn new(inner: T, activity: Arc<Activity>) -> Self {
        Watched { inner, activity }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.read();
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Watched<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn idle_then_a_slow_head_then_busy() {
        let activity = Activity::new(Duration::from_secs(10));
        let idle = Duration::from_secs(60);
        assert_eq!(
            activity.check(idle),
            Verdict::Until(activity.origin + Duration::from_secs(60))
        );
        tokio::time::advance(Duration::from_secs(5)).await;
        activity.armed(activity.origin + Duration::from_secs(60));
        activity.read();
        assert!(
            activity.take_rearm(),
            "the head is due before the idle deadline"
        );
        assert!(!activity.take_rearm());
        assert_eq!(
            activity.check(idle),
            Verdict::Until(activity.origin + Duration::from_secs(15))
        );
        tokio::time::advance(Duration::from_secs(10)).await;
        assert_eq!(activity.check(idle), Verdict::SlowHead);
        activity.busy();
        assert!(matches!(activity.check(idle), Verdict::Until(_)));
        activity.idle();
        tokio::time::advance(Duration::from_secs(60)).await;
        assert_eq!(activity.check(idle), Verdict::Idle);
    }
}
