//! The honest drain estimate a deferred call is given: when a start would be free for it.

use std::time::Duration;

/// How long until `ahead` queued calls, and then one more, have each had a
/// permit and a start slot.
///
/// Two limits drain the queue and the slower one decides: permits come
/// back `max_in_flight` at a time, once per `latency`; start slots come as
/// the rate allows, the one for this call `by_rate` from now (the limiter
/// says when the `ahead + 1`-th start is free).
pub fn drain_estimate(
    ahead: usize,
    max_in_flight: u32,
    latency: Duration,
    by_rate: Duration,
) -> Duration {
    let calls = u32::try_from(ahead).unwrap_or(u32::MAX).saturating_add(1);
    let waves = calls.div_ceil(max_in_flight.max(1));
    let by_concurrency = latency.saturating_mul(waves);
    by_concurrency.max(by_rate)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_slower_limit_decides() {
        // 16 queued ahead, 4 in flight, 400 ms each: 5 waves of permits.
        assert_eq!(drain_estimate(16, 4, 400 * MS, 1_600 * MS), 2_000 * MS);
        // A slow rate dominates.
        assert_eq!(drain_estimate(16, 4, 400 * MS, 8_300 * MS), 8_300 * MS);
        assert_eq!(drain_estimate(0, 4, 400 * MS, Duration::ZERO), 400 * MS);
    }

    #[test]
    fn never_zero_with_a_latency() {
        assert!(drain_estimate(0, u32::MAX, MS, Duration::ZERO) > Duration::ZERO);
    }
}
