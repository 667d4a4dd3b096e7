//! What the budget scenarios keep of each call, and the arithmetic of their figures.

use std::time::Duration;

/// One call as its caller saw it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CallLog {
    pub(crate) elapsed: Duration,
    pub(crate) ok: bool,
}

/// `a / b`, 0 when `b` is 0.
pub(crate) fn ratio(a: usize, b: usize) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

/// Nearest-rank percentile of sorted durations, in whole milliseconds.
pub(crate) fn percentile_ms(sorted: &[Duration], p: usize) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (p * sorted.len()).div_ceil(100).clamp(1, sorted.len());
    u64::try_from(sorted[rank - 1].as_millis()).unwrap_or(u64::MAX)
}
