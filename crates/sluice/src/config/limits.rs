//! A credential's limits with every default filled in, and the sizing rules that fill them.

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use super::validate::bounded;
use super::{ConfigError, CredentialConfig, Defaults, GroupConfig, Reserve};
use crate::Rate;
use crate::signal::BodySignals;

/// A credential's limits with every default filled in.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Limits {
    /// The rate as configured (and shown).
    pub(crate) rate: Option<Rate>,
    pub(crate) burst: Option<NonZeroU32>,
    pub(crate) max_in_flight: u32,
    pub(crate) queue: u32,
    pub(crate) expected_latency: Duration,
    pub(crate) shared: bool,
    pub(crate) margin: Duration,
    pub(crate) learn: bool,
    pub(crate) policy_window: Option<Duration>,
    pub(crate) reserve: Option<Reserve>,
    pub(crate) auto_rate: bool,
    pub(crate) auto_concurrency: bool,
    /// `false`: shadow mode (issue 20), decisions recorded, none enforced.
    pub(crate) enforce: bool,
    pub(crate) body_signals: BodySignals,
    /// Windows that hold besides `rate` (issue 14).
    pub(crate) windows: Vec<Rate>,
    /// Limit groups, by name.
    pub(crate) groups: BTreeMap<Arc<str>, GroupLimits>,
    /// Units besides requests.
    pub(crate) units: Vec<UnitLimits>,
    /// The share of every window low-priority calls may start.
    pub(crate) low_share: Option<f64>,
}

/// A group's limits with every default filled in.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct GroupLimits {
    pub(crate) rates: Vec<Rate>,
    pub(crate) burst: Option<NonZeroU32>,
    pub(crate) max_in_flight: u32,
    pub(crate) queue: u32,
}

/// A unit's windows.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct UnitLimits {
    pub(crate) name: Arc<str>,
    pub(crate) rates: Vec<Rate>,
    pub(crate) burst: Option<NonZeroU32>,
}

impl Limits {
    /// Every window of the credential's own scope: `rate` first.
    pub(crate) fn rates(&self) -> Vec<Rate> {
        self.rate.iter().chain(&self.windows).copied().collect()
    }
}

/// The concurrency bound of `max_in_flight = "auto"` when none is configured.
const AUTO_IN_FLIGHT_BOUND: u32 = 64;

/// Concurrency for a credential with no rate and no explicit cap.
const UNRATED_IN_FLIGHT: u32 = 8;

impl CredentialConfig {
    pub(crate) fn resolve(&self, name: &str, defaults: &Defaults) -> Result<Limits, ConfigError> {
        let field = |f: &str| format!("credentials.{name}.{f}");
        let burst = match self.burst {
            None => None,
            Some(burst) => Some(
                NonZeroU32::new(burst)
                    .ok_or_else(|| ConfigError::new(field("burst"), "must be at least 1"))?,
            ),
        };
        if burst.is_some() && self.rate.is_none() {
            return Err(ConfigError::new(
                field("burst"),
                "needs a rate to refill at",
            ));
        }
        let expected_latency = self.expected_latency.unwrap_or(defaults.expected_latency);
        if expected_latency.is_zero() {
            return Err(ConfigError::new(
                field("expected_latency"),
                "must be longer than zero",
            ));
        }
        bounded(field("expected_latency"), expected_latency)?;
        if let Some(Reserve::Fraction(share)) = self.reserve
            && !(0.0..1.0).contains(&share)
        {
            return Err(ConfigError::new(
                field("reserve"),
                "a share must be at least 0% and below 100%",
            ));
        }
        if let Some(window) = self.policy_window {
            if window.is_zero() {
                return Err(ConfigError::new(
                    field("policy_window"),
                    "must be longer than zero",
                ));
            }
            bounded(field("policy_window"), window)?;
        }
        let max_in_flight = match self.max_in_flight {
            None if self.auto_concurrency => AUTO_IN_FLIGHT_BOUND,
            Some(0) => {
                return Err(ConfigError::new(
                    field("max_in_flight"),
                    "must be at least 1",
                ));
            }
            Some(max) => max,
            None => self.rate.map_or(UNRATED_IN_FLIGHT, |rate| {
                littles_law(rate, expected_latency)
            }),
        };
        let queue = self.queue.unwrap_or_else(|| {
            let rates: Vec<Rate> = self.rate.iter().chain(&self.windows).copied().collect();
            queue_within(
                &rates,
                burst,
                max_in_flight,
                expected_latency,
                defaults.inline_wait,
            )
        });
        if !self.windows.is_empty() && self.rate.is_none() {
            return Err(ConfigError::new(
                field("rate"),
                "further windows need a first rate",
            ));
        }
        let mut groups = BTreeMap::new();
        for (group, config) in &self.groups {
            let limits =
                resolve_group(name, group, config, expected_latency, defaults.inline_wait)?;
            groups.insert(Arc::from(group.as_str()), limits);
        }
        let mut units = Vec::new();
        for (unit, config) in &self.units {
            let field = |f: &str| format!("credentials.{name}.units.{unit}.{f}");
            if config.rates.is_empty() {
                return Err(ConfigError::new(field("rate"), "a unit needs a rate"));
            }
            let burst = match config.burst {
                None => None,
                Some(burst) => Some(
                    NonZeroU32::new(burst)
                        .ok_or_else(|| ConfigError::new(field("burst"), "must be at least 1"))?,
                ),
            };
            units.push(UnitLimits {
                name: Arc::from(unit.as_str()),
                rates: config.rates.clone(),
                burst,
            });
        }
        if let Some(share) = self.low_share
            && !(share > 0.0 && share <= 1.0)
        {
            return Err(ConfigError::new(
                field("priorities.low"),
                "a share must be above 0% and at most 100%",
            ));
        }
        Ok(Limits {
            rate: self.rate,
            burst,
            max_in_flight,
            queue,
            expected_latency,
            shared: self.shared,
            margin: defaults.window_margin,
            learn: self.learn,
            policy_window: self.policy_window,
            reserve: self.reserve,
            auto_rate: self.auto_rate,
            auto_concurrency: self.auto_concurrency,
            enforce: self.enforce,
            body_signals: self.body_signals,
            windows: self.windows.clone(),
            groups,
            units,
            low_share: self.low_share,
        })
    }
}

fn resolve_group(
    credential: &str,
    name: &str,
    config: &GroupConfig,
    expected_latency: Duration,
    inline_wait: Duration,
) -> Result<GroupLimits, ConfigError> {
    let field = |f: &str| format!("credentials.{credential}.groups.{name}.{f}");
    if name == crate::signal::DEFAULT_SCOPE {
        return Err(ConfigError::new(
            format!("credentials.{credential}.groups.{name}"),
            "is the credential's own scope's name",
        ));
    }
    let Some(&first) = config.rates.first() else {
        return Err(ConfigError::new(field("rate"), "a group needs a rate"));
    };
    let burst = match config.burst {
        None => None,
        Some(burst) => Some(
            NonZeroU32::new(burst)
                .ok_or_else(|| ConfigError::new(field("burst"), "must be at least 1"))?,
        ),
    };
    let max_in_flight = match config.max_in_flight {
        Some(0) => {
            return Err(ConfigError::new(
                field("max_in_flight"),
                "must be at least 1",
            ));
        }
        Some(max) => max,
        None => littles_law(first, expected_latency),
    };
    Ok(GroupLimits {
        rates: config.rates.clone(),
        burst,
        max_in_flight,
        queue: config.queue.unwrap_or_else(|| {
            queue_within(
                &config.rates,
                burst,
                max_in_flight,
                expected_latency,
                inline_wait,
            )
        }),
    })
}

/// The most calls a default queue holds, however long the inline wait:
/// the queue is never unbounded, and a wait of hours is not one a caller
/// should sit through in a queue.
const MAX_DEFAULT_QUEUE: u32 = 10_000;

/// The default queue (issue 50): the calls that can start within
/// `inline_wait` on a scope with `rates` (every window holds; `burst`
/// makes the first a bucket) and `cap` permits of `latency` each, less the
/// `cap` calls that hold the permits. A call that would start within the
/// inline wait then finds a place; one that would not is deferred by the
/// drain estimate, not by a queue too short for the rate. At least 1.
pub(crate) fn queue_within(
    rates: &[Rate],
    burst: Option<NonZeroU32>,
    cap: u32,
    latency: Duration,
    inline_wait: Duration,
) -> u32 {
    let cap = u64::from(cap.max(1));
    // Each permit starts a call now and another each time one ends.
    let waves = inline_wait.as_micros() / latency.as_micros().max(1) + 1;
    let mut starts = cap.saturating_mul(u64::try_from(waves).unwrap_or(u64::MAX));
    for (index, rate) in rates.iter().enumerate() {
        let by_rate = match burst {
            // A bucket: its burst now, then one per interval.
            Some(burst) if index == 0 => {
                let refills = inline_wait.as_micros() / rate.interval().as_micros().max(1);
                u64::from(burst.get()).saturating_add(u64::try_from(refills).unwrap_or(u64::MAX))
            }
            // A window: its count now, and again each time it turns.
            _ => {
                let turns = inline_wait.as_micros() / rate.window().as_micros().max(1) + 1;
                u64::from(rate.count().get())
                    .saturating_mul(u64::try_from(turns).unwrap_or(u64::MAX))
            }
        };
        starts = starts.min(by_rate);
    }
    let queue = starts
        .saturating_sub(cap)
        .clamp(1, u64::from(MAX_DEFAULT_QUEUE));
    u32::try_from(queue).unwrap_or(MAX_DEFAULT_QUEUE)
}

/// Little's law: concurrency = arrival rate x time in system, at least 1.
pub(crate) fn littles_law(rate: Rate, latency: Duration) -> u32 {
    // Rounded to hundredths first: a smoothed latency approaches its value
    // from one side and never lands on it, and 2.000001 must not become 3.
    let concurrency = ((rate.per_sec() * latency.as_secs_f64() * 100.0).round() / 100.0).ceil();
    if concurrency >= f64::from(u32::MAX) {
        u32::MAX
    } else {
        // In range and non-negative: the float is a whole number below u32::MAX.
        (concurrency as u32).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn littles_law_sizes_concurrency() {
        let limits = CredentialConfig::with_rate("10/1s".parse().unwrap())
            .expected_latency(Duration::from_millis(400))
            .resolve("support", &Defaults::default())
            .unwrap();
        assert_eq!(limits.max_in_flight, 4);
        // Within the 2 s inline wait: 4 permits of 400 ms start 24 calls,
        // the rate 30; 4 of them hold the permits.
        assert_eq!(limits.queue, 20);
        assert_eq!(
            littles_law("1/1h".parse().unwrap(), Duration::from_millis(10)),
            1
        );
    }

    /// Issue 50: a default queue holds the calls that can start within the
    /// inline wait, by the slower of the rate and the permits.
    #[test]
    fn the_default_queue_holds_what_can_start_within_the_inline_wait() {
        let ms = Duration::from_millis;
        let rate = |r: &str| -> Rate { r.parse().unwrap() };
        // 2/1s over 10 s: 22 starts; one permit of 500 ms: 21; less the permit.
        assert_eq!(
            queue_within(&[rate("2/1s")], None, 1, ms(500), ms(10_000)),
            20
        );
        // The rate is the slower: 2 now and 2 more at 1 s, 2 of them with permits.
        assert_eq!(
            queue_within(&[rate("2/1s")], None, 2, ms(100), ms(1_000)),
            2
        );
        // A further window binds too.
        assert_eq!(
            queue_within(&[rate("10/1s"), rate("12/1m")], None, 4, ms(100), ms(2_000)),
            8
        );
        // A bucket of 5 refilling 1 per 500 ms: 5 + 4 in 2 s.
        let burst = NonZeroU32::new(5);
        assert_eq!(
            queue_within(&[rate("2/1s")], burst, 1, ms(100), ms(2_000)),
            8
        );
        // A rate slower than the inline wait still queues one.
        assert_eq!(
            queue_within(&[rate("1/1h")], None, 1, ms(500), ms(2_000)),
            1
        );
        // No rate: the permits alone, as four times the cap at 2 s and 500 ms.
        assert_eq!(queue_within(&[], None, 8, ms(500), ms(2_000)), 32);
        // Never unbounded.
        assert_eq!(
            queue_within(&[], None, 64, ms(1), Duration::from_secs(3_600)),
            MAX_DEFAULT_QUEUE
        );
    }
}
