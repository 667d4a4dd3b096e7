//! The gate's configuration: defaults, credentials and tools, validated once when the gate is built.

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::time::Duration;

use crate::Rate;

/// Everything a [`Gate`](crate::Gate) needs to know about limits.
///
/// ```
/// use sluice::{CredentialConfig, GateConfig, ToolConfig};
/// let config = GateConfig::default()
///     .credential("support", CredentialConfig::with_rate("10/1s".parse().unwrap()).max_in_flight(4))
///     .tool("search_tickets", ToolConfig::read("support"))
///     .tool("create_ticket", ToolConfig::write("support"));
/// assert!(config.validate().is_ok());
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GateConfig {
    /// Values used where a credential or tool does not say.
    pub defaults: Defaults,
    /// Credentials by name: the unit a server throttles.
    pub credentials: BTreeMap<String, CredentialConfig>,
    /// Tools by name, each bound to one credential.
    pub tools: BTreeMap<String, ToolConfig>,
}

/// Gate-wide defaults and tuning.
#[derive(Debug, Clone, PartialEq)]
pub struct Defaults {
    /// A call's deadline when neither the call nor its tool sets one.
    pub deadline: Duration,
    /// Waits up to this long are absorbed below the model's view.
    pub inline_wait: Duration,
    /// How long a turn's read cache answers a repeated read.
    pub turn_cache_ttl: Duration,
    /// A server wait longer than this marks the scope's quota exhausted.
    pub quota_after: Duration,
    /// Attempts per call, the first included.
    pub max_attempts: u32,
    /// Full-jitter backoff: `U(0, min(cap, base * 2^attempt))`.
    pub backoff_base: Duration,
    /// The backoff's cap.
    pub backoff_cap: Duration,
    /// Retries per credential may be at most this share of recent requests...
    pub retry_ratio: f64,
    /// ...plus this many per retry window, so a quiet key can still retry.
    pub retry_floor: u32,
    /// The window the retry budget counts over.
    pub retry_window: Duration,
    /// The latency assumed before any is measured (Little's law, drain estimates).
    pub expected_latency: Duration,
    /// Extra spacing added to every rate window (at most a tenth of it), so
    /// that jitter in transit cannot make requests started a window apart
    /// arrive closer together than the server allows.
    pub window_margin: Duration,
    /// Scopes idle this long are forgotten (they are recreated fresh on use).
    pub scope_idle: Duration,
    /// At most this many upstream requests per turn (`None`: no budget).
    pub turn_budget: Option<u32>,
}

impl Default for Defaults {
    fn default() -> Self {
        Defaults {
            deadline: Duration::from_secs(30),
            inline_wait: Duration::from_secs(2),
            turn_cache_ttl: Duration::from_secs(3),
            quota_after: Duration::from_secs(300),
            max_attempts: 4,
            // The article's full-jitter defaults: base 0.5 s, cap 20 s.
            backoff_base: Duration::from_millis(500),
            backoff_cap: Duration::from_secs(20),
            // Finagle's RetryBudget defaults: 20% of requests, 10 per second floor over 10 s.
            retry_ratio: 0.2,
            retry_floor: 10,
            retry_window: Duration::from_secs(10),
            expected_latency: Duration::from_millis(500),
            // A request on a fresh connection reaches the server later than
            // one on a reused connection: ~2 ms on idle loopback, ~18 ms on a
            // loaded 2-core machine, more with TLS. 20 ms costs 2% of a
            // one-second window.
            window_margin: Duration::from_millis(20),
            scope_idle: Duration::from_secs(600),
            turn_budget: None,
        }
    }
}

/// One credential's limits.
#[derive(Debug, Clone, PartialEq)]
pub struct CredentialConfig {
    /// At most N starts in any window W; `None`: only the server's signals
    /// limit it (and `auto_rate`, if set). With `auto_rate` it is the ceiling.
    pub rate: Option<Rate>,
    /// `rate = "auto"`: probe for the server's limit (see [`crate::adapt`]).
    pub auto_rate: bool,
    /// Adopt a lower rate the server states in a policy header (default on).
    pub learn: bool,
    /// The window of limits servers report without one (`X-RateLimit-Limit`:
    /// GitHub documents an hour), so that they can be learned.
    pub policy_window: Option<Duration>,
    /// Leave this much of each server window to the key's other users: stop
    /// spending when the server's reported remaining falls to it.
    pub reserve: Option<Reserve>,
    /// `max_in_flight = "auto"`: follow rate x smoothed latency, with
    /// `max_in_flight` (default 64) as the bound.
    pub auto_concurrency: bool,
    /// Set: GCRA token-bucket semantics with this burst instead of the exact window.
    pub burst: Option<u32>,
    /// Requests in flight at once; default from Little's law (rate x latency, at least 1).
    pub max_in_flight: Option<u32>,
    /// Calls that may wait for a permit; default four times `max_in_flight`.
    pub queue: Option<u32>,
    /// Latency expected before any is measured; default [`Defaults::expected_latency`].
    pub expected_latency: Option<Duration>,
    /// Spend a budget shared with other processes (see [`crate::shared`]).
    pub shared: bool,
}

impl Default for CredentialConfig {
    fn default() -> Self {
        CredentialConfig {
            rate: None,
            auto_rate: false,
            learn: true,
            policy_window: None,
            reserve: None,
            auto_concurrency: false,
            burst: None,
            max_in_flight: None,
            queue: None,
            expected_latency: None,
            shared: false,
        }
    }
}

/// Headroom left on a shared key: a number of requests, or a share of the
/// server's stated limit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Reserve {
    /// Stop when this many remain.
    Requests(u64),
    /// Stop when this share of the limit remains (0 to 1).
    Fraction(f64),
}

impl Reserve {
    /// The requests to leave, for a window of `limit` requests.
    pub fn of(self, limit: Option<u64>) -> u64 {
        match self {
            Reserve::Requests(n) => n,
            // Rounded up: leaving a fraction of a request leaves one.
            Reserve::Fraction(share) => {
                limit.map_or(0, |limit| (limit as f64 * share).ceil() as u64)
            }
        }
    }
}

impl CredentialConfig {
    /// Probes for the server's limit (`rate = "auto"`); a set `rate` stays the ceiling.
    pub fn auto_rate(mut self) -> Self {
        self.auto_rate = true;
        self
    }

    /// Lets the concurrency cap follow rate x latency, up to `max_in_flight`.
    pub fn auto_concurrency(mut self) -> Self {
        self.auto_concurrency = true;
        self
    }

    /// Sets the headroom left to the key's other users.
    pub fn reserve(mut self, reserve: Reserve) -> Self {
        self.reserve = Some(reserve);
        self
    }

    /// Turns learning stated policies on or off.
    pub fn learn(mut self, learn: bool) -> Self {
        self.learn = learn;
        self
    }

    /// Sets the window assumed for limits reported without one.
    pub fn policy_window(mut self, window: Duration) -> Self {
        self.policy_window = Some(window);
        self
    }

    /// A credential limited to `rate`.
    pub fn with_rate(rate: Rate) -> Self {
        CredentialConfig {
            rate: Some(rate),
            ..Self::default()
        }
    }

    /// Sets the burst (selects GCRA semantics).
    pub fn burst(mut self, burst: u32) -> Self {
        self.burst = Some(burst);
        self
    }

    /// Sets the concurrency cap.
    pub fn max_in_flight(mut self, max: u32) -> Self {
        self.max_in_flight = Some(max);
        self
    }

    /// Sets the admission queue's bound.
    pub fn queue(mut self, queue: u32) -> Self {
        self.queue = Some(queue);
        self
    }

    /// Shares the credential's budget with other processes.
    pub fn shared(mut self, shared: bool) -> Self {
        self.shared = shared;
        self
    }

    /// Sets the latency assumed until one is measured.
    pub fn expected_latency(mut self, latency: Duration) -> Self {
        self.expected_latency = Some(latency);
        self
    }
}

/// One tool: what the model calls, bound to one credential.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolConfig {
    /// The credential it spends.
    pub credential: String,
    /// A read: coalesced within a turn, cached, retried on 5xx.
    pub read: bool,
    /// A write that is safe to repeat (retried on 5xx and connection errors).
    pub idempotent: bool,
    /// Its default deadline; else [`Defaults::deadline`].
    pub deadline: Option<Duration>,
}

impl ToolConfig {
    /// A read on `credential`.
    pub fn read(credential: &str) -> Self {
        ToolConfig {
            credential: credential.to_owned(),
            read: true,
            idempotent: true,
            deadline: None,
        }
    }

    /// A write on `credential` (not idempotent).
    pub fn write(credential: &str) -> Self {
        ToolConfig {
            credential: credential.to_owned(),
            read: false,
            idempotent: false,
            deadline: None,
        }
    }

    /// Marks a write safe to repeat.
    pub fn idempotent(mut self, idempotent: bool) -> Self {
        self.idempotent = idempotent;
        self
    }

    /// Sets the tool's default deadline.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }
}

impl GateConfig {
    /// Adds or replaces a credential.
    pub fn credential(mut self, name: &str, credential: CredentialConfig) -> Self {
        self.credentials.insert(name.to_owned(), credential);
        self
    }

    /// Adds or replaces a tool.
    pub fn tool(mut self, name: &str, tool: ToolConfig) -> Self {
        self.tools.insert(name.to_owned(), tool);
        self
    }

    /// Replaces the defaults.
    pub fn defaults(mut self, defaults: Defaults) -> Self {
        self.defaults = defaults;
        self
    }

    /// Checks every field; the error names the first bad one.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.defaults.validate()?;
        for (name, credential) in &self.credentials {
            credential.resolve(name, &self.defaults)?;
        }
        for (name, tool) in &self.tools {
            let field = |f: &str| format!("tools.{name}.{f}");
            if !self.credentials.contains_key(&tool.credential) {
                return Err(ConfigError::new(
                    field("credential"),
                    format!("names unknown credential {:?}", tool.credential),
                ));
            }
            if tool.deadline.is_some_and(|d| d.is_zero()) {
                return Err(ConfigError::new(
                    field("deadline"),
                    "must be longer than zero",
                ));
            }
        }
        Ok(())
    }
}

impl Defaults {
    fn validate(&self) -> Result<(), ConfigError> {
        let field = |f: &str| format!("defaults.{f}");
        let positive = [
            ("deadline", self.deadline),
            ("turn_cache_ttl", self.turn_cache_ttl),
            ("quota_after", self.quota_after),
            ("backoff_base", self.backoff_base),
            ("retry_window", self.retry_window),
            ("expected_latency", self.expected_latency),
            ("scope_idle", self.scope_idle),
        ];
        for (name, value) in positive {
            if value.is_zero() {
                return Err(ConfigError::new(field(name), "must be longer than zero"));
            }
        }
        if self.backoff_cap < self.backoff_base {
            return Err(ConfigError::new(
                field("backoff_cap"),
                "must be at least backoff_base",
            ));
        }
        if self.max_attempts == 0 {
            return Err(ConfigError::new(
                field("max_attempts"),
                "must be at least 1",
            ));
        }
        if !(0.0..=1.0).contains(&self.retry_ratio) {
            return Err(ConfigError::new(
                field("retry_ratio"),
                "must be between 0 and 1",
            ));
        }
        if self.turn_budget == Some(0) {
            return Err(ConfigError::new(field("turn_budget"), "must be at least 1"));
        }
        Ok(())
    }
}

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
        if let Some(Reserve::Fraction(share)) = self.reserve
            && !(0.0..1.0).contains(&share)
        {
            return Err(ConfigError::new(
                field("reserve"),
                "a share must be at least 0% and below 100%",
            ));
        }
        if self.policy_window.is_some_and(|w| w.is_zero()) {
            return Err(ConfigError::new(
                field("policy_window"),
                "must be longer than zero",
            ));
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
        let queue = self.queue.unwrap_or(max_in_flight.saturating_mul(4));
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
        })
    }
}

/// `rate` with its window widened by `margin`, at most a tenth of the window.
pub(crate) fn with_margin(rate: Rate, margin: Duration) -> Rate {
    let widened = rate.window() + margin.min(rate.window() / 10);
    Rate::new(rate.count(), widened).unwrap_or(rate)
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

/// A configuration value that cannot work, and the field that holds it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ConfigError {
    /// The field's dotted path, e.g. `credentials.support.rate`.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl ConfigError {
    /// An error about `field`.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError {
            field: field.into(),
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> GateConfig {
        GateConfig::default()
            .credential(
                "support",
                CredentialConfig::with_rate("10/1s".parse().unwrap()),
            )
            .tool("search", ToolConfig::read("support"))
    }

    #[test]
    fn littles_law_sizes_concurrency() {
        let limits = base().credentials["support"]
            .clone()
            .expected_latency(Duration::from_millis(400))
            .resolve("support", &Defaults::default())
            .unwrap();
        assert_eq!(limits.max_in_flight, 4);
        assert_eq!(limits.queue, 16);
        assert_eq!(
            littles_law("1/1h".parse().unwrap(), Duration::from_millis(10)),
            1
        );
    }

    #[test]
    fn bad_values_name_their_field() {
        let cases: Vec<(GateConfig, &str)> = vec![
            (
                base().credential(
                    "support",
                    CredentialConfig::with_rate("1/1s".parse().unwrap()).burst(0),
                ),
                "credentials.support.burst",
            ),
            (
                base().credential("support", CredentialConfig::default().burst(3)),
                "credentials.support.burst",
            ),
            (
                base().credential("support", CredentialConfig::default().max_in_flight(0)),
                "credentials.support.max_in_flight",
            ),
            (
                base().tool("search", ToolConfig::read("billing")),
                "tools.search.credential",
            ),
            (
                base().tool(
                    "search",
                    ToolConfig::read("support").deadline(Duration::ZERO),
                ),
                "tools.search.deadline",
            ),
            (
                base().defaults(Defaults {
                    max_attempts: 0,
                    ..Defaults::default()
                }),
                "defaults.max_attempts",
            ),
            (
                base().defaults(Defaults {
                    retry_ratio: f64::NAN,
                    ..Defaults::default()
                }),
                "defaults.retry_ratio",
            ),
            (
                base().defaults(Defaults {
                    deadline: Duration::ZERO,
                    ..Defaults::default()
                }),
                "defaults.deadline",
            ),
        ];
        for (config, field) in cases {
            let error = config.validate().unwrap_err();
            assert_eq!(error.field, field, "{error}");
            assert!(error.to_string().starts_with(field));
        }
        assert!(base().validate().is_ok());
    }
}
