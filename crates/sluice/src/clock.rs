//! The clock the engine reads: once when a call enters, once when its
//! answer comes, and again only after a step that waited (the pipeline
//! passes the call's reading down; `pipeline/clock_reads.rs` pins it).
//!
//! Chosen once, at build, by a cargo feature (docs/PERFORMANCE.md, "The
//! clock"):
//!
//! - by default [`TscClock`]: the CPU's time-stamp counter through `quanta`
//!   (a few nanoseconds; `clock_gettime` costs 37 ns on the benchmark VM);
//! - with the `tokio-clock` feature [`TokioClock`]: tokio's clock, which
//!   `tokio::time::pause()` stops and advances. Every test that runs the
//!   engine on tokio's paused clock builds with it (the crates' dev-dependency
//!   on sluice turns it on).
//!
//! Both give [`tokio::time::Instant`]s, so a start slot or a deadline is
//! slept on with tokio's timers either way.

use std::sync::OnceLock;

use tokio::time::Instant;

use crate::limiter::{Micros, micros};

/// A monotonic clock that tells time as tokio instants, and as microseconds
/// elapsed since an origin it took (the engine's hot path: no instant
/// arithmetic on a counter that is already a number).
pub trait Clock {
    /// Where [`Clock::micros_since`] counts from.
    type Origin: Copy + Send + Sync + std::fmt::Debug + 'static;

    /// Now.
    fn now() -> Instant;

    /// An origin at now.
    fn origin() -> Self::Origin;

    /// Microseconds from `origin` to now.
    fn micros_since(origin: Self::Origin) -> Micros;
}

/// tokio's clock: the OS monotonic clock, or the paused clock of a test.
#[derive(Debug, Clone, Copy, Default)]
pub struct TokioClock;

impl Clock for TokioClock {
    type Origin = Instant;

    fn now() -> Instant {
        Instant::now()
    }

    fn origin() -> Instant {
        Instant::now()
    }

    fn micros_since(origin: Instant) -> Micros {
        micros(Instant::now().saturating_duration_since(origin))
    }
}

/// The time-stamp counter, read through `quanta` (which calibrates it
/// against the OS monotonic clock, and falls back to that clock where the
/// counter is not invariant). Its instants are anchored to one reading of
/// tokio's clock the first time it is read. Never sees tokio's paused clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct TscClock;

/// The calibrated counter, and one reading of it beside tokio's clock.
fn counter() -> &'static (quanta::Clock, u64, Instant) {
    static COUNTER: OnceLock<(quanta::Clock, u64, Instant)> = OnceLock::new();
    COUNTER.get_or_init(|| {
        let clock = quanta::Clock::new();
        let raw = clock.raw();
        (clock, raw, Instant::now())
    })
}

impl Clock for TscClock {
    /// A raw counter reading.
    type Origin = u64;

    fn now() -> Instant {
        let (clock, raw, at) = counter();
        let since = clock.delta(*raw, clock.raw());
        at.checked_add(since).unwrap_or_else(Instant::now)
    }

    fn origin() -> u64 {
        counter().0.raw()
    }

    fn micros_since(origin: u64) -> Micros {
        let clock = &counter().0;
        clock.delta_as_nanos(origin, clock.raw()) / 1_000
    }
}

/// The clock this build reads.
#[cfg(all(not(test), feature = "tokio-clock"))]
pub type EngineClock = TokioClock;
/// The clock this build reads: in the crate's own tests, tokio's clock
/// with every read counted ([`reads`]), so a test can pin how often a call
/// asks for the time. Release builds never compile the counter.
#[cfg(test)]
pub type EngineClock = counting::Counted;
/// The clock this build reads.
#[cfg(not(any(test, feature = "tokio-clock")))]
pub type EngineClock = TscClock;

/// Now, on the clock this build reads.
#[inline]
pub(crate) fn now() -> Instant {
    EngineClock::now()
}

/// Reads of the engine's clock made on this thread so far (the crate's
/// tests only).
#[cfg(test)]
pub(crate) fn reads() -> u64 {
    counting::READS.with(std::cell::Cell::get)
}

#[cfg(test)]
mod counting {
    use std::cell::Cell;

    use tokio::time::Instant;

    use super::{Clock, TokioClock};
    use crate::limiter::Micros;

    thread_local! {
        pub(super) static READS: Cell<u64> = const { Cell::new(0) };
    }

    fn count() {
        READS.with(|reads| reads.set(reads.get() + 1));
    }

    /// tokio's clock, counting its reads on the reading thread.
    #[derive(Debug, Clone, Copy, Default)]
    pub struct Counted;

    impl Clock for Counted {
        type Origin = Instant;

        fn now() -> Instant {
            count();
            TokioClock::now()
        }

        fn origin() -> Instant {
            count();
            TokioClock::origin()
        }

        fn micros_since(origin: Instant) -> Micros {
            count();
            TokioClock::micros_since(origin)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn the_tsc_clock_counts_micros_from_its_origin_like_its_instants() {
        let (origin, at) = (TscClock::origin(), TscClock::now());
        std::thread::sleep(Duration::from_millis(20));
        let (counted, at_took) = (TscClock::micros_since(origin), TscClock::now() - at);
        let apart = counted.abs_diff(micros(at_took));
        assert!(counted >= 19_000, "{counted} µs");
        assert!(apart < 1_000, "{counted} µs against {at_took:?}");
    }

    #[test]
    fn the_tsc_clock_keeps_pace_with_the_os_clock() {
        let (tsc, os) = (TscClock::now(), std::time::Instant::now());
        std::thread::sleep(Duration::from_millis(20));
        let (tsc_took, os_took) = (TscClock::now() - tsc, os.elapsed());
        // Both monotonic, and within a millisecond of each other over 20 ms
        // (the counter is calibrated against the OS clock).
        assert!(tsc_took >= Duration::from_millis(19), "{tsc_took:?}");
        assert!(
            tsc_took.abs_diff(os_took) < Duration::from_millis(1),
            "{tsc_took:?} vs {os_took:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn tests_read_the_paused_clock() {
        let (before, origin) = (now(), EngineClock::origin());
        tokio::time::sleep(Duration::from_secs(3_600)).await;
        assert_eq!(now() - before, Duration::from_secs(3_600));
        assert_eq!(EngineClock::micros_since(origin), 3_600_000_000);
    }
}
