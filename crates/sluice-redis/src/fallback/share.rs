//! This process's share of a credential's limit while Redis cannot be
//! asked: the one rule both the request cells (`cells.rs`) and the window
//! spends (`spends.rs`) are sized by.

use std::num::NonZeroU32;
use std::time::Duration;

use sluice::Rate;
use sluice::shared::SharedLimit;

/// The longest window [`Rate`] accepts (a week).
const MAX_WINDOW: Duration = Duration::from_secs(7 * 24 * 3600);

/// This process's share of a credential's rate: `configured`
/// (`fallback_share`), else one over the `processes` the heartbeat counted.
pub(crate) fn share(configured: Option<f64>, processes: u32) -> f64 {
    configured.unwrap_or(1.0 / f64::from(processes.max(1)))
}

/// `limit` scaled to `share` of it: the rate and burst one process may use alone.
pub(crate) fn share_of(limit: SharedLimit, share: f64) -> SharedLimit {
    let share = if share.is_finite() {
        share.clamp(f64::MIN_POSITIVE, 1.0)
    } else {
        1.0
    };
    let count = f64::from(limit.rate.count().get()) * share;
    let rate = if count >= 1.0 {
        // In range: 1 <= count <= u32::MAX.
        let whole = NonZeroU32::new(count.floor() as u32).unwrap_or(NonZeroU32::MIN);
        Rate::new(whole, limit.rate.window()).unwrap_or(limit.rate)
    } else {
        let window = limit.rate.window().mul_f64(1.0 / count).min(MAX_WINDOW);
        Rate::new(NonZeroU32::MIN, window).unwrap_or(limit.rate)
    };
    let burst = limit.burst.map(|burst| {
        let scaled = (f64::from(burst.get()) * share).floor();
        NonZeroU32::new(scaled as u32).unwrap_or(NonZeroU32::MIN)
    });
    SharedLimit { rate, burst }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(text: &str, burst: Option<u32>) -> SharedLimit {
        SharedLimit {
            rate: text.parse().unwrap(),
            burst: burst.and_then(NonZeroU32::new),
        }
    }

    #[test]
    fn shares_never_exceed_the_whole() {
        let third = share_of(limit("30/1s", None), 1.0 / 3.0);
        assert_eq!(third.rate.to_string(), "10/1s");
        let rounded = share_of(limit("5/1s", None), 1.0 / 3.0);
        assert_eq!(rounded.rate.count().get(), 1);
        assert_eq!(rounded.rate.window(), Duration::from_secs(1));
        let thin = share_of(limit("1/1s", None), 0.25);
        assert_eq!(thin.rate.count().get(), 1);
        assert_eq!(thin.rate.window(), Duration::from_secs(4));
        let bucket = share_of(limit("10/1s", Some(6)), 0.5);
        assert_eq!(
            (bucket.rate.count().get(), bucket.burst.map(NonZeroU32::get)),
            (5, Some(3))
        );
    }

    #[test]
    fn the_share_is_configured_or_one_over_the_processes() {
        assert_eq!(share(Some(0.5), 4), 0.5);
        assert_eq!(share(None, 4), 0.25);
        assert_eq!(share(None, 0), 1.0);
    }
}
