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
    /// The learned and probed rates, in one block made when a scope first
    /// has either: most scopes have neither, and an idle scope should stay
    /// small (issue 18).
    adaptive: Option<Box<Adaptive>>,
    /// The margin in nanoseconds: 8 bytes where a `Duration` takes 16.
    margin: u64,
    /// The rate lives in a shared budget; the local cell only mirrors the server.
    pub(super) shared: bool,
}

/// What a scope learned from the server, and its auto controller.
#[derive(Debug, Default)]
struct Adaptive {
    learned: Option<Rate>,
    auto: Option<Aimd>,
}

impl Limit {
    pub(super) fn new(
        configured: Option<Rate>,
        burst: Option<NonZeroU32>,
        auto: Option<Aimd>,
        margin: Duration,
        shared: bool,
    ) -> Self {
        Limit {
            configured,
            burst,
            adaptive: auto.map(|auto| {
                Box::new(Adaptive {
                    learned: None,
                    auto: Some(auto),
                })
            }),
            margin: u64::try_from(margin.as_nanos()).unwrap_or(u64::MAX),
            shared,
        }
    }

    pub(super) fn margin(&self) -> Duration {
        Duration::from_nanos(self.margin)
    }

    /// The rate the server stated, if it stated one.
    pub(super) fn learned(&self) -> Option<Rate> {
        self.adaptive.as_ref().and_then(|adaptive| adaptive.learned)
    }

    pub(super) fn set_learned(&mut self, rate: Rate) {
        self.adaptive.get_or_insert_default().learned = Some(rate);
    }

    /// The `rate = "auto"` controller, on a scope that probes.
    pub(super) fn auto(&self) -> Option<&Aimd> {
        self.adaptive.as_ref()?.auto.as_ref()
    }

    pub(super) fn auto_mut(&mut self) -> Option<&mut Aimd> {
        self.adaptive.as_mut()?.auto.as_mut()
    }

    /// Only what was configured: nothing learned, nothing probed.
    pub(super) fn is_configured_only(&self) -> bool {
        self.adaptive.is_none()
    }

    pub(super) fn effective(&self) -> Option<Rate> {
        // Most scopes only have what was configured (asked three times a call).
        let Some(adaptive) = &self.adaptive else {
            return self.configured;
        };
        let auto = adaptive.auto.as_ref().map(|aimd| rate_of(aimd.rate()));
        [self.configured, adaptive.learned, auto]
            .into_iter()
            .flatten()
            .min_by(|a, b| a.per_sec().total_cmp(&b.per_sec()))
    }

    /// The rate the cells enforce: the effective one, widened by the margin.
    pub(super) fn enforced(&self) -> Option<Rate> {
        self.effective().map(|rate| rate.widened(self.margin()))
    }

    /// The enforced rate, and how late a start may come after its slot and
    /// still fall inside the window the server counts: half of what the
    /// margin widened the window by, the other half being left for transit.
    /// One reading of the effective rate for both.
    pub(super) fn enforced_late(&self) -> Option<(Rate, Duration)> {
        let exact = self.effective()?;
        let widened = exact.widened(self.margin());
        Some((widened, widened.window().saturating_sub(exact.window()) / 2))
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

    #[test]
    fn a_start_may_come_half_the_margin_late() {
        let ms = Duration::from_millis;
        let late = |rate: &str, margin| {
            let limit = Limit::new(Some(rate.parse().unwrap()), None, None, margin, true);
            // The rate it goes with is the enforced one.
            assert_eq!(
                limit.enforced_late().map(|(rate, _)| rate),
                limit.enforced()
            );
            limit.enforced_late().map(|(_, late)| late)
        };
        assert_eq!(late("40/1s", ms(20)), Some(ms(10)));
        // The margin is at most a tenth of the window.
        assert_eq!(late("1/100ms", ms(100)), Some(ms(5)));
        assert_eq!(late("40/1s", Duration::ZERO), Some(Duration::ZERO));
        let unlimited = Limit::new(None, None, None, ms(20), true);
        assert_eq!(unlimited.enforced_late(), None);
    }
}
