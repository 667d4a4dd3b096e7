//! The concurrency a server allows, learned from its "too many concurrent requests": lower at once, recover one by one.
//!
//! A concurrency rejection says that more requests were in flight than the
//! server takes, not that they came too fast: the answer is fewer at once
//! (a lower cap on the scope's permits), not a rate penalty. The cap goes
//! to one below what was in flight, and climbs back by one each time as
//! many requests as the cap succeed in a row (additive increase, as TCP's
//! congestion avoidance adds one segment per round trip), up to the
//! configured `max_in_flight`.

/// A scope's concurrency as the server's rejections shaped it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Crowding {
    /// The cap rejections imposed, while below the configured one.
    lowered: Option<u32>,
    /// Successes in a row at the lowered cap.
    successes: u32,
}

impl Crowding {
    /// The cap in force because of rejections, if one is.
    pub(crate) fn limit(&self) -> Option<u32> {
        self.lowered
    }

    /// A rejection arrived while `running` requests held a permit under
    /// `cap`: the new cap, at least 1.
    pub(crate) fn on_rejection(&mut self, cap: u32, running: usize) -> u32 {
        let running = u32::try_from(running).unwrap_or(u32::MAX);
        let lowered = cap.min(running).saturating_sub(1).max(1);
        self.lowered = Some(lowered);
        self.successes = 0;
        lowered
    }

    /// A request succeeded: the raised cap when it moves, up to `ceiling`
    /// (where the lowering ends).
    pub(crate) fn on_success(&mut self, ceiling: u32) -> Option<u32> {
        let lowered = self.lowered?;
        self.successes += 1;
        if self.successes < lowered {
            return None;
        }
        self.successes = 0;
        let raised = lowered + 1;
        if raised >= ceiling {
            self.lowered = None;
            Some(ceiling)
        } else {
            self.lowered = Some(raised);
            Some(raised)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lowers_below_what_ran_and_recovers_additively() {
        let mut crowding = Crowding::default();
        assert_eq!(crowding.on_success(8), None);
        assert_eq!(crowding.on_rejection(8, 5), 4);
        assert_eq!(crowding.limit(), Some(4));
        // Four successes at a cap of four raise it by one.
        for _ in 0..3 {
            assert_eq!(crowding.on_success(8), None);
        }
        assert_eq!(crowding.on_success(8), Some(5));
        // A rejection starts over, never below one.
        assert_eq!(crowding.on_rejection(5, 1), 1);
        assert_eq!(crowding.on_success(8), Some(2));
        let rest: Vec<_> = (0..30).filter_map(|_| crowding.on_success(8)).collect();
        assert_eq!(rest, vec![3, 4, 5, 6, 7, 8]);
        assert_eq!(crowding.limit(), None);
        assert_eq!(crowding.on_success(8), None);
    }

    #[test]
    fn a_cap_below_what_ran_is_the_bound() {
        let mut crowding = Crowding::default();
        assert_eq!(crowding.on_rejection(3, 10), 2);
        assert_eq!(crowding.on_rejection(2, 0), 1);
    }
}
