//! A call's deadline: when it started, how long it may take, and whether that has run out.

use std::fmt;
use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::task::Poll;
use std::time::Duration;

use tokio::time::Instant;

/// The time a call may take, fixed when it starts.
///
/// Built with checked arithmetic and bounded by [`Deadline::MAX_LEN`], so no
/// length a caller, a config file or a request field can give makes an
/// instant overflow: a length that does not fit is an error the call is
/// answered with, not a panic inside a worker.
///
/// ```
/// use std::time::Duration;
/// use sluice::Deadline;
/// use tokio::time::Instant;
///
/// let start = Instant::now();
/// let deadline = Deadline::new(start, Duration::from_secs(30)).unwrap();
/// assert_eq!(deadline.remaining(start + Duration::from_secs(10)), Duration::from_secs(20));
/// assert!(deadline.is_past(start + Duration::from_secs(30)));
/// assert!(Deadline::new(start, Duration::MAX).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline {
    len: Duration,
    at: Instant,
}

/// A deadline that cannot be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DeadlineError {
    /// Longer than [`Deadline::MAX_LEN`].
    #[error("{} exceeds the longest allowed, 7 days", Seconds(*.0))]
    TooLong(Duration),
    /// Within the bound, but past what the clock can represent from its start.
    #[error("{} from its start is past what the clock can represent", Seconds(*.0))]
    OutOfRange(Duration),
}

impl Deadline {
    /// The longest deadline, and the longest duration the library accepts
    /// anywhere (defaults, tools, credentials): a week. No tool call an
    /// agent waits on needs longer, and every instant a week ahead is
    /// representable on every platform.
    pub const MAX_LEN: Duration = Duration::from_secs(7 * 24 * 3600);

    /// A deadline `len` after `start`.
    pub fn new(start: Instant, len: Duration) -> Result<Self, DeadlineError> {
        check(len)?;
        let at = start
            .checked_add(len)
            .ok_or(DeadlineError::OutOfRange(len))?;
        Ok(Deadline { len, at })
    }

    /// How long is left at `now`; zero once it has passed.
    pub fn remaining(&self, now: Instant) -> Duration {
        self.at.saturating_duration_since(now)
    }

    /// The whole length it was given.
    pub fn len(&self) -> Duration {
        self.len
    }

    /// True once `now` has reached it.
    pub fn is_past(&self, now: Instant) -> bool {
        now >= self.at
    }

    /// The instant it runs out, for timeouts.
    pub fn at(&self) -> Instant {
        self.at
    }

    /// `future`'s output, or `None` once the deadline has passed (the
    /// output wins when both are ready, as with tokio's `timeout_at`).
    /// The deadline's timer is made only if the future does not finish
    /// at its first poll: a call answered by the turn's cache or by an
    /// in-process tool never touches tokio's timer, whose registration
    /// showed in every call's profile (docs/PERFORMANCE.md).
    ///
    /// The caller pins the future where it lives: taken by value, it would
    /// sit in this function's state twice, once as the argument and once
    /// pinned, and every enclosing future would grow by its size (the
    /// sidecar copies the whole proxy future into its box per request).
    pub(crate) async fn bound<F: Future>(self, mut future: Pin<&mut F>) -> Option<F::Output> {
        if let Poll::Ready(output) = poll_fn(|cx| Poll::Ready(future.as_mut().poll(cx))).await {
            return Some(output);
        }
        // Out of tokio's cooperative budget, as in `timeout_at`: a future
        // that spends the task's budget on every poll cannot keep its
        // deadline from firing.
        let mut timer = pin!(tokio::task::unconstrained(tokio::time::sleep_until(
            self.at
        )));
        // The future was polled just now, with this task's waker: the
        // first round only arms the timer.
        let mut polled = true;
        poll_fn(|cx| {
            if !std::mem::take(&mut polled)
                && let Poll::Ready(output) = future.as_mut().poll(cx)
            {
                return Poll::Ready(Some(output));
            }
            timer.as_mut().poll(cx).map(|()| None)
        })
        .await
    }
}

/// `Ok` when `len` is at most [`Deadline::MAX_LEN`]; the error says by how much it is not.
pub(crate) fn check(len: Duration) -> Result<(), DeadlineError> {
    if len > Deadline::MAX_LEN {
        return Err(DeadlineError::TooLong(len));
    }
    Ok(())
}

/// A duration in whole seconds (`18446744073709551615 s`), with the
/// fraction only where the whole seconds alone would not show that it is
/// past the bound (`604800.25 s`).
struct Seconds(Duration);

impl fmt::Display for Seconds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.0.as_secs();
        let nanos = self.0.subsec_nanos();
        if nanos == 0 || secs > Deadline::MAX_LEN.as_secs() {
            return write!(f, "{secs} s");
        }
        let fraction = format!("{nanos:09}");
        write!(f, "{secs}.{} s", fraction.trim_end_matches('0'))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remaining_counts_down_and_stops_at_zero() {
        let start = Instant::now();
        let deadline = Deadline::new(start, Duration::from_secs(2)).unwrap();
        assert_eq!(deadline.len(), Duration::from_secs(2));
        assert_eq!(deadline.at(), start + Duration::from_secs(2));
        assert_eq!(deadline.remaining(start), Duration::from_secs(2));
        assert!(!deadline.is_past(start + Duration::from_millis(1_999)));
        assert!(deadline.is_past(start + Duration::from_secs(2)));
        assert_eq!(
            deadline.remaining(start + Duration::from_secs(5)),
            Duration::ZERO
        );
    }

    /// A future ready at its first poll needs no timer: polled with no
    /// runtime at all (where making tokio's timer would panic), it
    /// answers.
    #[test]
    fn a_future_ready_at_once_is_answered_without_a_timer() {
        let deadline = Deadline::new(Instant::now(), Duration::from_secs(1)).unwrap();
        let ready = pin!(std::future::ready(7));
        let mut bounded = pin!(deadline.bound(ready));
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        assert_eq!(bounded.as_mut().poll(&mut cx), Poll::Ready(Some(7)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_pending_future_is_bounded_at_the_deadline_and_wins_a_tie() {
        let start = Instant::now();
        let deadline = Deadline::new(start, Duration::from_millis(100)).unwrap();
        let never = std::future::pending::<()>();
        assert_eq!(deadline.bound(pin!(never)).await, None);
        assert_eq!(start.elapsed(), Duration::from_millis(100));

        let start = Instant::now();
        let deadline = Deadline::new(start, Duration::from_millis(100)).unwrap();
        let soon = async {
            tokio::time::sleep(Duration::from_millis(40)).await;
            "answered"
        };
        assert_eq!(deadline.bound(pin!(soon)).await, Some("answered"));
        assert_eq!(start.elapsed(), Duration::from_millis(40));

        // Ready on the deadline's own instant: the answer is kept.
        let at_once = async {
            tokio::time::sleep_until(deadline.at()).await;
            "kept"
        };
        assert_eq!(deadline.bound(pin!(at_once)).await, Some("kept"));
        assert_eq!(start.elapsed(), Duration::from_millis(100));
    }

    #[test]
    fn the_bound_is_a_week_and_the_error_names_the_length() {
        let start = Instant::now();
        assert!(Deadline::new(start, Deadline::MAX_LEN).is_ok());
        let error = Deadline::new(start, Duration::MAX).unwrap_err();
        assert_eq!(
            error.to_string(),
            "18446744073709551615 s exceeds the longest allowed, 7 days"
        );
        let error = Deadline::new(start, Deadline::MAX_LEN + Duration::from_millis(250));
        assert_eq!(
            error.unwrap_err().to_string(),
            "604800.25 s exceeds the longest allowed, 7 days"
        );
    }
}
