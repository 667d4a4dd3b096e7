//! Where a scope's rate comes from: configured, learned, or probed for.

use std::num::NonZeroU32;
use std::time::Duration;

use crate::Rate;
use crate::adapt::Aimd;

/// Where a scope's rate comes from: the lowest of what was configured, what
/// the server stated, and what the auto controller allows.
#[derive(Debug)]
pub(super) struct Limit {
    pub(super) configured: Option<Rate>,
    pub(super) burst: Option<NonZeroU32>,
    pub(super) learned: Option<Rate>,
    /// Boxed: few scopes probe, and an idle scope should stay small.
    pub(super) auto: Option<Box<Aimd>>,
    pub(super) margin: Duration,
    /// The rate lives in a shared budget; the local cell only mirrors the server.
    pub(super) shared: bool,
}

impl Limit {
    pub(super) fn effective(&self) -> Option<Rate> {
        // Most scopes only have what was configured (asked three times a call).
        if self.learned.is_none() && self.auto.is_none() {
            return self.configured;
        }
        let auto = self.auto.as_ref().map(|aimd| rate_of(aimd.rate()));
        [self.configured, self.learned, auto]
            .into_iter()
            .flatten()
            .min_by(|a, b| a.per_sec().total_cmp(&b.per_sec()))
    }

    /// The rate the cells enforce: the effective one, widened by the margin.
    pub(super) fn enforced(&self) -> Option<Rate> {
        self.effective().map(|rate| rate.widened(self.margin))
    }

    /// Burst applies to the configured rate only; learned and auto rates
    /// use the exact window.
    pub(super) fn burst(&self) -> Option<NonZeroU32> {
        self.burst.filter(|_| self.effective() == self.configured)
    }
}

/// A rate in requests per second as `N/W` with a window of about a second:
/// N = the rate rounded (at least one), W = N / rate, so the fraction is kept.
fn rate_of(per_second: f64) -> Rate {
    let fallback = Rate::per_second(NonZeroU32::MIN);
    if !per_second.is_finite() || per_second <= 0.0 {
        return fallback;
    }
    let count = per_second.round().clamp(1.0, f64::from(u32::MAX));
    let window = Duration::try_from_secs_f64(count / per_second).unwrap_or(Duration::from_secs(1));
    // In range: a whole number clamped to u32.
    NonZeroU32::new(count as u32)
        .and_then(|count| Rate::new(count, window))
        .unwrap_or(fallback)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_from_floats() {
        let r = rate_of(19.6);
        assert_eq!(r.count().get(), 20);
        assert!((r.per_sec() - 19.6).abs() < 1e-6);
        assert_eq!(rate_of(0.5), "1/2s".parse().unwrap());
        assert_eq!(rate_of(f64::NAN).count().get(), 1);
    }
}
