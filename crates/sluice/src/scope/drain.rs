//! The honest drain estimate a deferred call is given: when a start would be free for it.

use std::time::Duration;

/// When the last of `slots.len()` calls in line would start: each takes
/// the first of `max_in_flight` permits to come free and starts at its
/// start slot or then, whichever is later, and holds the permit `latency`
/// from its start (a permit is held through the wait for a slot, so the
/// two limits add up where they meet). `running` permits are out now and
/// come back `latency` from now; `slots` are the rate's start slots, from
/// now, in order.
///
/// Zero for no call.
pub fn drain_estimate(
    slots: &[Duration],
    max_in_flight: u32,
    running: usize,
    latency: Duration,
) -> Duration {
    let cap = usize::try_from(max_in_flight.max(1)).unwrap_or(usize::MAX);
    // When each permit is next free; the cap bounds the list, and a list
    // longer than the line ahead is never read.
    let permits = cap.min(slots.len().max(1));
    let mut free: Vec<Duration> = (0..permits)
        .map(|i| if i < running { latency } else { Duration::ZERO })
        .collect();
    let mut start = Duration::ZERO;
    for slot in slots {
        let (index, earliest) = free
            .iter()
            .copied()
            .enumerate()
            .min_by_key(|&(_, at)| at)
            .unwrap_or((0, Duration::ZERO));
        start = earliest.max(*slot);
        if let Some(permit) = free.get_mut(index) {
            *permit = start.saturating_add(latency);
        }
    }
    start
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn permits_bind_when_the_rate_does_not() {
        // 16 queued ahead and this call, 4 permits of 400 ms, all out now:
        // four waves of four before it, so it starts at 2 s.
        let slots = vec![Duration::ZERO; 17];
        assert_eq!(drain_estimate(&slots, 4, 4, 400 * MS), 2_000 * MS);
        // None out: the first wave starts now.
        assert_eq!(drain_estimate(&slots, 4, 0, 400 * MS), 1_600 * MS);
        assert_eq!(drain_estimate(&slots[..4], 4, 0, 400 * MS), Duration::ZERO);
    }

    #[test]
    fn a_permit_waits_through_its_slot() {
        // One permit, slots every 500 ms, calls of 100 ms: the rate binds.
        let slots: Vec<Duration> = (0..4).map(|i| 500 * MS * i).collect();
        assert_eq!(drain_estimate(&slots, 1, 0, 100 * MS), 1_500 * MS);
        // Calls of 700 ms: each holds the permit past the next slot.
        assert_eq!(drain_estimate(&slots, 1, 0, 700 * MS), 2_100 * MS);
    }

    #[test]
    fn no_call_waits_for_nothing() {
        assert_eq!(drain_estimate(&[], 4, 4, 400 * MS), Duration::ZERO);
    }
}
