//! Limiter cells: pure rate-limit state that decides when the next request may start.
//!
//! Time is an argument everywhere (integer microseconds since an origin the
//! caller chooses), so the same maths runs on tokio's paused clock, in
//! property tests, and as the model the Redis scripts are checked against.

mod algorithm;
mod cell;
mod gcra;
mod reservation;
mod window;

pub use cell::{Binding, LimiterCell, NotUntil, WindowUsage};
pub use gcra::Gcra;
pub use reservation::Reservation;
pub use window::SlidingWindow;

/// A point in time or a span, in integer microseconds.
pub type Micros = u64;

/// Converts a duration to microseconds, saturating.
pub fn micros(duration: std::time::Duration) -> Micros {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}
