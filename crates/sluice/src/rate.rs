//! Rate limits as configured: `N/W` ("at most N starts in any window W") and optional burst.

use std::fmt;
use std::num::NonZeroU32;
use std::str::FromStr;
use std::time::Duration;

/// `N` request starts per window `W`, parsed from `"N/W"`.
///
/// `W` is a duration such as `1s`, `200ms`, `1m` or `1h`; a bare unit
/// (`"10/s"`, `"600/min"`) means one of that unit.
///
/// ```
/// use sluice::Rate;
/// let rate: Rate = "10/1s".parse().unwrap();
/// assert_eq!(rate.count().get(), 10);
/// assert_eq!(rate.window(), std::time::Duration::from_secs(1));
/// assert_eq!(rate.interval(), std::time::Duration::from_millis(100));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rate {
    count: NonZeroU32,
    /// The window in nanoseconds: at most a week, so it fits, and a rate
    /// takes 16 bytes where a `Duration` would make it 24 (every scope
    /// holds several; issue 18, the memory of an idle scope).
    window: u64,
}

/// Why a rate could not be parsed or built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RateError {
    /// The text has no `/` between count and window.
    #[error("expected \"N/WINDOW\" such as \"10/1s\", got {0:?}")]
    Shape(String),
    /// The count is not a positive integer.
    #[error("the count in {0:?} must be a whole number of at least 1")]
    Count(String),
    /// The window is not a positive duration.
    #[error("the window in {0:?} must be a positive duration such as 1s, 500ms or 1m")]
    Window(String),
}

/// The longest window a rate may have: a week. Longer is a quota, not a rate.
const MAX_WINDOW: Duration = Duration::from_secs(7 * 24 * 3600);
const NANOS_PER_SECOND: u64 = 1_000_000_000;
const MAX_WINDOW_NANOS: u64 = MAX_WINDOW.as_secs() * NANOS_PER_SECOND;

impl Rate {
    /// A rate of `count` starts per `window`; `None` when the window is zero or longer than a week.
    pub fn new(count: NonZeroU32, window: Duration) -> Option<Self> {
        let nanos = u64::try_from(window.as_nanos()).ok()?;
        (!window.is_zero() && window <= MAX_WINDOW).then_some(Rate {
            count,
            window: nanos,
        })
    }

    /// `count` starts per second.
    pub fn per_second(count: NonZeroU32) -> Self {
        Rate {
            count,
            window: NANOS_PER_SECOND,
        }
    }

    /// The number of starts allowed in one window.
    pub fn count(&self) -> NonZeroU32 {
        self.count
    }

    /// The window length.
    pub fn window(&self) -> Duration {
        Duration::from_nanos(self.window)
    }

    /// The steady-state spacing between starts, `W / N`.
    pub fn interval(&self) -> Duration {
        self.window() / self.count.get()
    }

    /// This rate with its window widened by `by`, at most a tenth of the
    /// window; unchanged if that would pass the longest window. In whole
    /// nanoseconds, as the rate keeps its window: no `Duration` is made on
    /// a path every reservation takes.
    pub(crate) fn widened(self, by: Duration) -> Rate {
        let by = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        let window = self.window + by.min(self.window / 10);
        if window <= MAX_WINDOW_NANOS {
            Rate { window, ..self }
        } else {
            self
        }
    }

    /// Starts per second, for display and for Little's law.
    pub fn per_sec(&self) -> f64 {
        f64::from(self.count.get()) / self.window().as_secs_f64()
    }
}

impl FromStr for Rate {
    type Err = RateError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let trimmed = text.trim();
        let (count, window) = trimmed
            .split_once('/')
            .ok_or_else(|| RateError::Shape(text.to_owned()))?;
        let count = count
            .trim()
            .parse::<u32>()
            .ok()
            .and_then(NonZeroU32::new)
            .ok_or_else(|| RateError::Count(text.to_owned()))?;
        let window =
            parse_window(window.trim()).ok_or_else(|| RateError::Window(text.to_owned()))?;
        Rate::new(count, window).ok_or_else(|| RateError::Window(text.to_owned()))
    }
}

fn parse_window(text: &str) -> Option<Duration> {
    let bare = match text {
        "ms" => Some(Duration::from_millis(1)),
        "s" | "sec" | "second" => Some(Duration::from_secs(1)),
        "m" | "min" | "minute" => Some(Duration::from_secs(60)),
        "h" | "hour" => Some(Duration::from_secs(3600)),
        "d" | "day" => Some(Duration::from_secs(86_400)),
        _ => None,
    };
    bare.or_else(|| humantime::parse_duration(text).ok())
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{}",
            self.count,
            humantime::format_duration(self.window())
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_common_forms() {
        let r: Rate = "10/1s".parse().unwrap();
        assert_eq!((r.count().get(), r.window()), (10, Duration::from_secs(1)));
        let r: Rate = " 3 / 200ms ".parse().unwrap();
        assert_eq!(
            (r.count().get(), r.window()),
            (3, Duration::from_millis(200))
        );
        let r: Rate = "600/min".parse().unwrap();
        assert_eq!(r.window(), Duration::from_secs(60));
        assert_eq!(r.to_string(), "600/1m");
    }

    #[test]
    fn a_window_keeps_every_nanosecond_up_to_a_week() {
        let count = NonZeroU32::new(3).unwrap();
        for window in [
            Duration::from_nanos(1),
            Duration::new(1, 500),
            Duration::from_millis(1_500),
            MAX_WINDOW,
        ] {
            let rate = Rate::new(count, window).unwrap();
            assert_eq!(rate.window(), window);
            assert_eq!(rate.interval(), window / 3);
            assert_eq!(rate.per_sec(), 3.0 / window.as_secs_f64());
        }
        assert_eq!(Rate::new(count, MAX_WINDOW + Duration::from_nanos(1)), None);
        assert_eq!(Rate::new(count, Duration::ZERO), None);
    }

    #[test]
    fn a_widened_window_grows_by_at_most_a_tenth_and_never_past_a_week() {
        let count = NonZeroU32::new(7).unwrap();
        let margins = [
            Duration::ZERO,
            Duration::from_nanos(3),
            Duration::from_millis(20),
            Duration::from_secs(3600),
            Duration::MAX,
        ];
        for window in [
            Duration::from_nanos(9),
            Duration::from_millis(100),
            Duration::from_secs(1),
            Duration::from_secs(6 * 24 * 3600 + 23 * 3600),
            MAX_WINDOW,
        ] {
            let rate = Rate::new(count, window).unwrap();
            for margin in margins {
                let widened = window + margin.min(window / 10);
                let expected = Rate::new(count, widened).unwrap_or(rate);
                assert_eq!(rate.widened(margin), expected, "{window:?} + {margin:?}");
            }
        }
        let second = Rate::per_second(count);
        assert_eq!(
            second.widened(Duration::from_millis(20)).window(),
            Duration::from_millis(1_020)
        );
    }

    #[test]
    fn rejects_bad_rates_with_a_reason() {
        assert!(matches!("0/1s".parse::<Rate>(), Err(RateError::Count(_))));
        assert!(matches!("-1/1s".parse::<Rate>(), Err(RateError::Count(_))));
        assert!(matches!("10/0s".parse::<Rate>(), Err(RateError::Window(_))));
        assert!(matches!(
            "10/soon".parse::<Rate>(),
            Err(RateError::Window(_))
        ));
        assert!(matches!("10".parse::<Rate>(), Err(RateError::Shape(_))));
        assert!(matches!(
            "10/30d".parse::<Rate>(),
            Err(RateError::Window(_))
        ));
        let message = "0/1s".parse::<Rate>().unwrap_err().to_string();
        assert!(message.contains("0/1s"), "{message}");
    }
}
