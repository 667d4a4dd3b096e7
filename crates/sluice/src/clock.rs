//! The clock the engine reads: once when a call enters, once when its
//! answer comes, and again only after a step that waited (the pipeline
//! passes the call's reading down; `pipeline/clock_reads.rs` pins it).
//!
//! One engine clock, `EngineClock`, in tests and in production alike.
//! Which counter it reads is decided when the gate is built:
//!
//! - [`TscClock`]: the CPU's time-stamp counter through `quanta` (a few
//!   nanoseconds; `clock_gettime` costs 37 ns on the benchmark VM);
//! - [`TokioClock`]: tokio's clock, when it stands still at that moment:
//!   a runtime paused by `tokio::time::pause()` or `start_paused` (a test),
//!   whose time moves only as tokio advances it, so that the engine's
//!   windows and deadlines move with it.
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

/// The engine's clock: microseconds since the gate was built, on the
/// time-stamp counter, or on tokio's clock when the gate was built on a
/// paused runtime (see the module's documentation).
#[derive(Debug, Clone, Copy)]
pub(crate) enum EngineClock {
    /// The counter, from this reading of it.
    Tsc(u64),
    /// tokio's paused clock, from this instant.
    Tokio(Instant),
}

impl EngineClock {
    /// A clock starting now, on tokio's clock if it stands still.
    pub(crate) fn start() -> Self {
        if tokio_paused() {
            EngineClock::Tokio(TokioClock::origin())
        } else {
            EngineClock::Tsc(TscClock::origin())
        }
    }

    /// Microseconds since the clock started.
    #[inline]
    pub(crate) fn micros(&self) -> Micros {
        #[cfg(test)]
        counting::count();
        match *self {
            EngineClock::Tsc(origin) => TscClock::micros_since(origin),
            EngineClock::Tokio(origin) => TokioClock::micros_since(origin),
        }
    }

    /// Now, as an instant.
    #[inline]
    pub(crate) fn now(&self) -> Instant {
        #[cfg(test)]
        counting::count();
        match self {
            EngineClock::Tsc(_) => TscClock::now(),
            EngineClock::Tokio(_) => TokioClock::now(),
        }
    }
}

/// Whether tokio's clock stands still: a paused clock moves only when
/// tokio advances it, never while this thread spins for 20 µs, and the
/// OS clock always does. Built outside a runtime, or in one that is not
/// paused, the gate reads the counter.
fn tokio_paused() -> bool {
    let before = Instant::now();
    let spun = std::time::Instant::now();
    while spun.elapsed() < std::time::Duration::from_micros(20) {
        std::hint::spin_loop();
    }
    Instant::now() == before
}

/// Reads of the engine's clock made on this thread so far (the crate's
/// tests only).
#[cfg(test)]
pub(crate) fn reads() -> u64 {
    counting::READS.with(std::cell::Cell::get)
}

/// The crate's tests count the engine's clock reads on the reading
/// thread; release builds never compile the counter.
#[cfg(test)]
mod counting {
    use std::cell::Cell;

    thread_local! {
        pub(super) static READS: Cell<u64> = const { Cell::new(0) };
    }

    pub(super) fn count() {
        READS.with(|reads| reads.set(reads.get() + 1));
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
    async fn a_clock_started_on_a_paused_runtime_reads_it() {
        let clock = EngineClock::start();
        assert!(matches!(clock, EngineClock::Tokio(_)), "{clock:?}");
        let before = clock.now();
        tokio::time::sleep(Duration::from_secs(3_600)).await;
        assert_eq!(clock.now() - before, Duration::from_secs(3_600));
        assert_eq!(clock.micros(), 3_600_000_000);
    }

    #[tokio::test]
    async fn a_clock_started_on_a_running_runtime_reads_the_counter() {
        let clock = EngineClock::start();
        assert!(matches!(clock, EngineClock::Tsc(_)), "{clock:?}");
        let before = clock.now();
        tokio::time::sleep(Duration::from_millis(20)).await;
        let took = clock.now() - before;
        assert!(took >= Duration::from_millis(19), "{took:?}");
        assert!(clock.micros() >= 19_000);
    }

    #[test]
    fn a_clock_started_outside_a_runtime_reads_the_counter() {
        assert!(matches!(EngineClock::start(), EngineClock::Tsc(_)));
    }
}
