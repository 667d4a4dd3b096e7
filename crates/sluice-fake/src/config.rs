//! What the fake enforces and how it answers: limits, resources, latency, header style, Retry-After.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use rand::Rng;

/// How a limit of `count` requests per `window` is enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Algorithm {
    /// At most `count` requests start in any window of length `window`: an exact log of
    /// recent accepted starts. What a strict server enforces, and the default.
    #[default]
    SlidingWindow,
    /// At most `count` requests start in each window `[k*W, (k+1)*W)`, counted from the
    /// moment the fake was created, so a client can send `2*count` across a boundary.
    FixedWindow,
    /// A bucket of `burst` tokens (default `count`) refilled continuously at `count/window`.
    TokenBucket,
}

impl Algorithm {
    /// The name used on the command line and in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::SlidingWindow => "sliding-window",
            Algorithm::FixedWindow => "fixed-window",
            Algorithm::TokenBucket => "token-bucket",
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Algorithm {
    type Err = ParseNameError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "sliding-window" => Ok(Algorithm::SlidingWindow),
            "fixed-window" => Ok(Algorithm::FixedWindow),
            "token-bucket" => Ok(Algorithm::TokenBucket),
            _ => Err(ParseNameError {
                got: text.to_owned(),
                expected: "sliding-window, fixed-window or token-bucket",
            }),
        }
    }
}

/// Which rate-limit headers the fake sends, imitating a family of real APIs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum HeaderStyle {
    /// No rate-limit headers at all, not even `Retry-After`: a server that just says 429.
    None,
    /// Only `Retry-After` and `retry-after-ms`, on throttled responses. The default.
    #[default]
    RetryAfter,
    /// The IETF draft's structured `RateLimit-Policy` and `RateLimit` fields on every response.
    Ietf,
    /// GitHub's `x-ratelimit-limit/-remaining/-reset/-used/-resource` on every response.
    Github,
    /// OpenAI's `x-ratelimit-{limit,remaining,reset}-{requests,tokens}` on every response.
    Openai,
}

impl HeaderStyle {
    /// The name used on the command line and in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            HeaderStyle::None => "none",
            HeaderStyle::RetryAfter => "retry-after",
            HeaderStyle::Ietf => "ietf",
            HeaderStyle::Github => "github",
            HeaderStyle::Openai => "openai",
        }
    }
}

impl fmt::Display for HeaderStyle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for HeaderStyle {
    type Err = ParseNameError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "none" => Ok(HeaderStyle::None),
            "retry-after" => Ok(HeaderStyle::RetryAfter),
            "ietf" => Ok(HeaderStyle::Ietf),
            "github" => Ok(HeaderStyle::Github),
            "openai" => Ok(HeaderStyle::Openai),
            _ => Err(ParseNameError {
                got: text.to_owned(),
                expected: "none, retry-after, ietf, github or openai",
            }),
        }
    }
}

/// A name that is not one of the accepted choices.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{got:?} is not one of {expected}")]
pub struct ParseNameError {
    got: String,
    expected: &'static str,
}

/// What the fake puts in `Retry-After` when it throttles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RetryAfter {
    /// The exact time until this request would be admitted: until a slot of the key's
    /// limiter frees, or until the earliest in-flight request finishes. The default.
    #[default]
    Auto,
    /// Always this long, whatever the limiter says (a server with a canned answer).
    Fixed(Duration),
    /// No `Retry-After` at all (other rate-limit headers still follow the style).
    Off,
}

/// How long an admitted request takes before the fake answers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Latency {
    /// Answer at once. The default.
    #[default]
    Zero,
    /// Always this long.
    Fixed(Duration),
    /// Uniformly distributed between `min` and `max` inclusive, from the fake's seeded RNG.
    Uniform {
        /// The shortest latency.
        min: Duration,
        /// The longest latency.
        max: Duration,
    },
}

impl Latency {
    /// Draws one latency from `rng`.
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> Duration {
        match *self {
            Latency::Zero => Duration::ZERO,
            Latency::Fixed(latency) => latency,
            Latency::Uniform { min, max } if min < max => {
                let low = duration_nanos(min);
                let high = duration_nanos(max);
                Duration::from_nanos(rng.random_range(low..=high))
            }
            Latency::Uniform { min, .. } => min,
        }
    }
}

fn duration_nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// A second budget counted in tokens, shown by the `openai` header style as `-tokens`.
///
/// Every request costs `per_request` tokens out of `limit` per window (same window and
/// algorithm as the request limit); a request is admitted only when both budgets allow it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenLimit {
    /// Tokens charged for every admitted request.
    pub per_request: u32,
    /// Tokens available per window.
    pub limit: u32,
}

/// The limits of one resource, applied to each key separately.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// `N`: requests per window. At least 1.
    pub count: u32,
    /// `W`: the window. Positive.
    pub window: Duration,
    /// How `count` per `window` is enforced.
    pub algorithm: Algorithm,
    /// The token bucket's capacity (default `count`). Only with [`Algorithm::TokenBucket`].
    pub burst: Option<u32>,
    /// Requests served at once per key; one more is rejected with 429 at once.
    pub max_in_flight: Option<u32>,
    /// Requests accepted per key per day, days counted from the fake's creation.
    pub daily_quota: Option<u32>,
    /// A token budget next to the request budget.
    pub tokens: Option<TokenLimit>,
}

impl Default for Limits {
    /// 10 requests per second, sliding window, nothing else.
    fn default() -> Self {
        Limits::new(10, Duration::from_secs(1))
    }
}

impl Limits {
    /// `count` requests per `window` on a sliding window, with no other limit.
    pub fn new(count: u32, window: Duration) -> Self {
        Limits {
            count,
            window,
            algorithm: Algorithm::SlidingWindow,
            burst: None,
            max_in_flight: None,
            daily_quota: None,
            tokens: None,
        }
    }

    /// Sets the algorithm.
    pub fn with_algorithm(mut self, algorithm: Algorithm) -> Self {
        self.algorithm = algorithm;
        self
    }

    /// Selects the token bucket with this capacity.
    pub fn with_burst(mut self, burst: u32) -> Self {
        self.algorithm = Algorithm::TokenBucket;
        self.burst = Some(burst);
        self
    }

    /// Sets the limit of requests in flight per key.
    pub fn with_max_in_flight(mut self, max_in_flight: u32) -> Self {
        self.max_in_flight = Some(max_in_flight);
        self
    }

    /// Sets the daily quota per key.
    pub fn with_daily_quota(mut self, daily_quota: u32) -> Self {
        self.daily_quota = Some(daily_quota);
        self
    }

    /// Adds a token budget: `per_request` tokens per request out of `limit` per window.
    pub fn with_tokens(mut self, per_request: u32, limit: u32) -> Self {
        self.tokens = Some(TokenLimit { per_request, limit });
        self
    }

    /// The capacity of the request limiter: `burst` for a bucket, else `count`.
    pub fn capacity(&self) -> u32 {
        match self.algorithm {
            Algorithm::TokenBucket => self.burst.unwrap_or(self.count),
            _ => self.count,
        }
    }

    fn validate(&self, field: &str) -> Result<(), ConfigError> {
        at_least_one(self.count, || format!("{field}.count"))?;
        if self.window.is_zero() {
            return Err(ConfigError::ZeroWindow {
                field: format!("{field}.window"),
            });
        }
        if let Some(burst) = self.burst {
            at_least_one(burst, || format!("{field}.burst"))?;
            if self.algorithm != Algorithm::TokenBucket {
                return Err(ConfigError::BurstNeedsBucket {
                    field: format!("{field}.burst"),
                    algorithm: self.algorithm,
                });
            }
        }
        if let Some(max) = self.max_in_flight {
            at_least_one(max, || format!("{field}.max_in_flight"))?;
        }
        if let Some(quota) = self.daily_quota {
            at_least_one(quota, || format!("{field}.daily_quota"))?;
        }
        if let Some(tokens) = self.tokens {
            at_least_one(tokens.per_request, || format!("{field}.tokens.per_request"))?;
            at_least_one(tokens.limit, || format!("{field}.tokens.limit"))?;
            // A request costing more than the whole budget could never be admitted.
            if tokens.per_request > tokens.limit {
                return Err(ConfigError::TokenCost {
                    field: format!("{field}.tokens.per_request"),
                    per_request: tokens.per_request,
                    limit: tokens.limit,
                });
            }
        }
        Ok(())
    }
}

fn at_least_one(value: u32, field: impl FnOnce() -> String) -> Result<(), ConfigError> {
    if value == 0 {
        return Err(ConfigError::Zero { field: field() });
    }
    Ok(())
}

/// A scope of the API with its own limits: requests whose path starts with `path_prefix`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resource {
    /// The scope's name, shown by the header styles (GitHub's `search`, an IETF policy name).
    pub name: String,
    /// Requests whose path (without the query) starts with this belong to the resource.
    pub path_prefix: String,
    /// The limits, applied to each key separately.
    pub limits: Limits,
}

impl Resource {
    /// A resource `name` for paths starting with `path_prefix`, limited by `limits`.
    pub fn new(name: impl Into<String>, path_prefix: impl Into<String>, limits: Limits) -> Self {
        Resource {
            name: name.into(),
            path_prefix: path_prefix.into(),
            limits,
        }
    }
}

/// Limits that replace the configured ones for one key on one resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyLimits {
    /// The key (`Authorization` or `x-api-key` value, or `anonymous`).
    pub key: String,
    /// The resource name; `None` is the default resource.
    pub resource: Option<String>,
    /// The limits for this key on that resource.
    pub limits: Limits,
}

/// Everything the fake enforces and how it answers.
///
/// Plain fields with defaults (10/1s sliding window, no latency, `retry-after` headers,
/// automatic Retry-After, seed 0); [`FakeApi::new`](crate::FakeApi::new) checks them and
/// names the field of any invalid value.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Config {
    /// The limits of the default resource.
    pub limits: Limits,
    /// Further resources; a request belongs to the first whose prefix matches its path,
    /// else to the default resource.
    pub resources: Vec<Resource>,
    /// The default resource's name; `None` means `core` for the GitHub style, else `default`.
    pub default_resource: Option<String>,
    /// Per-key replacements of the limits; the last one given for a key and resource wins.
    pub key_limits: Vec<KeyLimits>,
    /// Latency of admitted requests (throttled ones are answered at once).
    pub latency: Latency,
    /// Which rate-limit headers to send.
    pub headers: HeaderStyle,
    /// What to put in `Retry-After` on throttled responses.
    pub retry_after: RetryAfter,
    /// Seed of the RNG that draws latencies.
    pub seed: u64,
}

impl Config {
    /// The default configuration with these limits on the default resource.
    pub fn new(limits: Limits) -> Self {
        Config {
            limits,
            ..Config::default()
        }
    }

    /// Adds a resource.
    pub fn with_resource(mut self, resource: Resource) -> Self {
        self.resources.push(resource);
        self
    }

    /// Replaces the default resource's limits for `key`.
    pub fn with_key_limits(mut self, key: impl Into<String>, limits: Limits) -> Self {
        self.key_limits.push(KeyLimits {
            key: key.into(),
            resource: None,
            limits,
        });
        self
    }

    /// Replaces the limits of resource `resource` for `key`.
    pub fn with_key_resource_limits(
        mut self,
        key: impl Into<String>,
        resource: impl Into<String>,
        limits: Limits,
    ) -> Self {
        self.key_limits.push(KeyLimits {
            key: key.into(),
            resource: Some(resource.into()),
            limits,
        });
        self
    }

    /// Sets the latency.
    pub fn with_latency(mut self, latency: Latency) -> Self {
        self.latency = latency;
        self
    }

    /// Sets the header style.
    pub fn with_headers(mut self, headers: HeaderStyle) -> Self {
        self.headers = headers;
        self
    }

    /// Sets the Retry-After policy.
    pub fn with_retry_after(mut self, retry_after: RetryAfter) -> Self {
        self.retry_after = retry_after;
        self
    }

    /// Sets the RNG seed.
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// The default resource's name: as configured, else `core` (GitHub style) or `default`.
    pub fn default_resource_name(&self) -> &str {
        match (&self.default_resource, self.headers) {
            (Some(name), _) => name,
            (None, HeaderStyle::Github) => "core",
            (None, _) => "default",
        }
    }

    /// The resource a path belongs to: its name and its configured limits.
    pub fn route(&self, path: &str) -> (&str, &Limits) {
        self.resources
            .iter()
            .find(|resource| path.starts_with(&resource.path_prefix))
            .map_or((self.default_resource_name(), &self.limits), |resource| {
                (resource.name.as_str(), &resource.limits)
            })
    }

    /// The limits for `key` on the resource named `resource`, overrides included.
    pub fn limits_for(&self, key: &str, resource: &str) -> &Limits {
        let default_name = self.default_resource_name();
        let overridden = self.key_limits.iter().rev().find(|entry| {
            entry.key == key && entry.resource.as_deref().unwrap_or(default_name) == resource
        });
        if let Some(entry) = overridden {
            return &entry.limits;
        }
        self.resources
            .iter()
            .find(|entry| entry.name == resource)
            .map_or(&self.limits, |entry| &entry.limits)
    }

    /// Checks every value; the error names the first invalid field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.limits.validate("limits")?;
        if let Some(name) = &self.default_resource {
            check_name(name, "default_resource")?;
        }
        let default_name = self.default_resource_name();
        for (index, resource) in self.resources.iter().enumerate() {
            let field = format!("resources[{index}]");
            check_name(&resource.name, &format!("{field}.name"))?;
            let taken = resource.name == default_name
                || self.resources[..index]
                    .iter()
                    .any(|earlier| earlier.name == resource.name);
            if taken {
                return Err(ConfigError::Resource {
                    field: format!("{field}.name"),
                    reason: format!("the name {:?} is already in use", resource.name),
                });
            }
            if !resource.path_prefix.starts_with('/') {
                return Err(ConfigError::Resource {
                    field: format!("{field}.path_prefix"),
                    reason: format!("{:?} must start with '/'", resource.path_prefix),
                });
            }
            resource.limits.validate(&format!("{field}.limits"))?;
        }
        for (index, entry) in self.key_limits.iter().enumerate() {
            let field = format!("key_limits[{index}]");
            if let Some(name) = &entry.resource {
                let known = name == default_name
                    || self.resources.iter().any(|resource| &resource.name == name);
                if !known {
                    return Err(ConfigError::Resource {
                        field: format!("{field}.resource"),
                        reason: format!("there is no resource named {name:?}"),
                    });
                }
            }
            entry.limits.validate(&format!("{field}.limits"))?;
        }
        if let Latency::Uniform { min, max } = self.latency {
            if min > max {
                return Err(ConfigError::LatencyRange {
                    field: "latency".to_owned(),
                    min,
                    max,
                });
            }
        }
        Ok(())
    }
}

/// Resource names appear inside header values and IETF structured-field strings, so they
/// keep to characters that need no escaping anywhere.
fn check_name(name: &str, field: &str) -> Result<(), ConfigError> {
    let fits = !name.is_empty()
        && name
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.'));
    if fits {
        return Ok(());
    }
    Err(ConfigError::Resource {
        field: field.to_owned(),
        reason: format!("{name:?} must be non-empty ASCII letters, digits, '-', '_' or '.'"),
    })
}

/// An invalid configuration value; `field()` names it (e.g. `limits.count`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A count that must be at least 1 is 0.
    #[error("{field} must be at least 1")]
    Zero {
        /// The field.
        field: String,
    },
    /// A window is zero.
    #[error("{field} must be a positive duration")]
    ZeroWindow {
        /// The field.
        field: String,
    },
    /// `burst` was set with an algorithm other than the token bucket.
    #[error("{field} applies only to the token-bucket algorithm, not {algorithm}")]
    BurstNeedsBucket {
        /// The field.
        field: String,
        /// The algorithm that was configured.
        algorithm: Algorithm,
    },
    /// A request would cost more tokens than the whole token budget.
    #[error("{field}: {per_request} tokens per request exceed the limit of {limit}")]
    TokenCost {
        /// The field.
        field: String,
        /// Tokens per request.
        per_request: u32,
        /// Tokens per window.
        limit: u32,
    },
    /// A latency range whose minimum exceeds its maximum.
    #[error("{field}: the minimum {min:?} is greater than the maximum {max:?}")]
    LatencyRange {
        /// The field.
        field: String,
        /// The minimum given.
        min: Duration,
        /// The maximum given.
        max: Duration,
    },
    /// A resource that is misnamed, named twice, unknown or has a bad prefix.
    #[error("{field}: {reason}")]
    Resource {
        /// The field.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
}

impl ConfigError {
    /// The path of the invalid field, such as `limits.count` or `resources[0].limits.burst`.
    pub fn field(&self) -> &str {
        match self {
            ConfigError::Zero { field }
            | ConfigError::ZeroWindow { field }
            | ConfigError::BurstNeedsBucket { field, .. }
            | ConfigError::TokenCost { field, .. }
            | ConfigError::LatencyRange { field, .. }
            | ConfigError::Resource { field, .. } => field,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(millis: u64) -> Duration {
        Duration::from_millis(millis)
    }

    #[test]
    fn defaults_are_valid() {
        assert_eq!(Config::default().validate(), Ok(()));
        assert_eq!(Config::default().default_resource_name(), "default");
        let github = Config::default().with_headers(HeaderStyle::Github);
        assert_eq!(github.default_resource_name(), "core");
    }

    #[test]
    fn invalid_values_name_their_field() {
        let field = |config: Config| config.validate().map_err(|error| error.field().to_owned());
        assert_eq!(
            field(Config::new(Limits::new(0, ms(1000)))),
            Err("limits.count".into())
        );
        assert_eq!(
            field(Config::new(Limits::new(1, Duration::ZERO))),
            Err("limits.window".into())
        );
        assert_eq!(
            field(Config::new(Limits::new(1, ms(1000)).with_burst(0))),
            Err("limits.burst".into())
        );
        let mut sliding_burst = Limits::new(1, ms(1000));
        sliding_burst.burst = Some(3);
        assert_eq!(
            field(Config::new(sliding_burst)),
            Err("limits.burst".into())
        );
        assert_eq!(
            field(Config::new(Limits::new(1, ms(1000)).with_tokens(10, 5))),
            Err("limits.tokens.per_request".into())
        );
        let range = Config::default().with_latency(Latency::Uniform {
            min: ms(80),
            max: ms(20),
        });
        assert_eq!(field(range.clone()), Err("latency".into()));
        let message = range.validate().map_err(|e| e.to_string());
        assert_eq!(
            message,
            Err("latency: the minimum 80ms is greater than the maximum 20ms".into())
        );
        let resource = Config::default().with_resource(Resource::new(
            "search",
            "/search",
            Limits::new(0, ms(1)),
        ));
        assert_eq!(field(resource), Err("resources[0].limits.count".into()));
        let unknown = Config::default().with_key_resource_limits("k", "nope", Limits::default());
        assert_eq!(field(unknown), Err("key_limits[0].resource".into()));
        let clash =
            Config::default().with_resource(Resource::new("default", "/x", Limits::default()));
        assert_eq!(field(clash), Err("resources[0].name".into()));
        let quoted =
            Config::default().with_resource(Resource::new("a\"b", "/x", Limits::default()));
        assert_eq!(field(quoted), Err("resources[0].name".into()));
    }

    #[test]
    fn routes_by_prefix_and_applies_key_overrides() {
        let search = Limits::new(30, Duration::from_secs(60));
        let config = Config::default()
            .with_headers(HeaderStyle::Github)
            .with_resource(Resource::new("search", "/search", search.clone()))
            .with_key_limits("vip", Limits::new(100, Duration::from_secs(1)));
        assert_eq!(config.route("/search/issues").0, "search");
        assert_eq!(config.route("/repos/x").0, "core");
        assert_eq!(config.limits_for("anyone", "search"), &search);
        assert_eq!(config.limits_for("vip", "core").count, 100);
        assert_eq!(config.limits_for("vip", "search"), &search);
    }

    #[test]
    fn parses_names() {
        assert_eq!("token-bucket".parse(), Ok(Algorithm::TokenBucket));
        assert_eq!("github".parse(), Ok(HeaderStyle::Github));
        assert!("bucket".parse::<Algorithm>().is_err());
    }

    #[test]
    fn uniform_latency_stays_in_range() {
        use rand::SeedableRng;
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let latency = Latency::Uniform {
            min: ms(20),
            max: ms(80),
        };
        for _ in 0..100 {
            let drawn = latency.sample(&mut rng);
            assert!(drawn >= ms(20) && drawn <= ms(80), "{drawn:?}");
        }
    }
}
