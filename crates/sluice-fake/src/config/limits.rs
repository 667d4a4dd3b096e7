//! What one resource allows each key: requests per window (one or several windows) under an algorithm, in flight, per day, and tokens.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use super::algorithm::Algorithm;
use super::error::ConfigError;
use super::name::ParseNameError;

/// A second budget counted in tokens, shown by the `openai` and `anthropic` header styles
/// as `-tokens`.
///
/// Every request costs `per_request` tokens out of `limit` per window (same window and
/// algorithm as the request limit), or, with [`from`](Self::from), the value of a request
/// field; a request is admitted only when both budgets allow it. With
/// [`usage`](Self::usage) the answer reports a true usage below the charge, and the
/// budget keeps only that usage once the answer is due (LLM APIs' "reserve, then
/// reconcile").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenLimit {
    /// Tokens charged for every admitted request, and for one whose field is missing.
    pub per_request: u32,
    /// Tokens available per window.
    pub limit: u32,
    /// Where a request states its own charge (OpenAI's `max_tokens` in the JSON body).
    pub from: Option<CostField>,
    /// The true usage the answer reports, as a share of the charge.
    pub usage: Option<Usage>,
}

/// Where a request states what it costs: a JSON pointer into its body, or a header.
///
/// Parsed from `/max_tokens` (a pointer, RFC 6901) or `header:x-tokens`, the syntax of
/// sluice's own `cost`/`settle` fields. The value must be a non-negative integer (a JSON
/// number, or a header's decimal digits); anything else costs `per_request`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CostField {
    /// A JSON pointer into the request body, such as `/max_tokens`.
    Body(String),
    /// A request header, by name (case-insensitive).
    Header(String),
}

impl CostField {
    /// Reads the cost a request states; `None` when absent or not a non-negative integer.
    pub fn read(&self, headers: &http::HeaderMap, body: &[u8]) -> Option<u32> {
        match self {
            CostField::Body(pointer) => {
                let json: serde_json::Value = serde_json::from_slice(body).ok()?;
                let value = json.pointer(pointer)?.as_u64()?;
                u32::try_from(value).ok()
            }
            CostField::Header(name) => headers
                .get(name.as_str())?
                .to_str()
                .ok()?
                .trim()
                .parse()
                .ok(),
        }
    }

    /// Whether reading it needs the request body.
    pub fn needs_body(&self) -> bool {
        matches!(self, CostField::Body(_))
    }
}

impl fmt::Display for CostField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CostField::Body(pointer) => f.write_str(pointer),
            CostField::Header(name) => write!(f, "header:{name}"),
        }
    }
}

impl FromStr for CostField {
    type Err = ParseNameError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let refused = || ParseNameError {
            got: text.to_owned(),
            expected: "a JSON pointer such as /max_tokens, or header:NAME",
        };
        if let Some(name) = text.strip_prefix("header:") {
            let name = name.trim();
            if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
                return Err(refused());
            }
            return Ok(CostField::Header(name.to_ascii_lowercase()));
        }
        if text.starts_with('/') {
            return Ok(CostField::Body(text.to_owned()));
        }
        Err(refused())
    }
}

/// The true usage of an answered request, as a percentage of its charge drawn uniformly
/// from `min_percent..=max_percent` by the fake's seeded RNG, rounded up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// The least share of the charge used, in percent (0 to 100).
    pub min_percent: u32,
    /// The largest share, in percent (at least `min_percent`, at most 100).
    pub max_percent: u32,
}

impl Usage {
    /// The usage of a request charged `charged`, at `percent` of it, rounded up.
    pub fn of(charged: u32, percent: u32) -> u32 {
        let used = (u64::from(charged) * u64::from(percent)).div_ceil(100);
        u32::try_from(used).unwrap_or(charged).min(charged)
    }
}

/// One more window on a resource's requests: at most `count` start in any `window`
/// (in each aligned window for the fixed-window algorithm), besides the main limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Requests per window. At least 1.
    pub count: u32,
    /// The window. Positive.
    pub window: Duration,
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
    /// Further request windows, every one enforced at once with the same algorithm
    /// (without `burst`): GitHub's 15 a second and 5,000 an hour on one key.
    pub windows: Vec<Window>,
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
            windows: Vec::new(),
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
        self.tokens = Some(TokenLimit {
            per_request,
            limit,
            from: None,
            usage: None,
        });
        self
    }

    /// Reads each request's token charge from `field` (with [`with_tokens`](Self::with_tokens)
    /// first; its `per_request` is the charge of a request without the field).
    pub fn with_tokens_from(mut self, field: CostField) -> Self {
        if let Some(tokens) = &mut self.tokens {
            tokens.from = Some(field);
        }
        self
    }

    /// Reports a true usage of `min_percent..=max_percent` of each charge and keeps only
    /// that in the token budget once the answer is due (with [`with_tokens`](Self::with_tokens) first).
    pub fn with_usage(mut self, min_percent: u32, max_percent: u32) -> Self {
        if let Some(tokens) = &mut self.tokens {
            tokens.usage = Some(Usage {
                min_percent,
                max_percent,
            });
        }
        self
    }

    /// Adds a request window: at most `count` requests in any `window` as well.
    pub fn with_window(mut self, count: u32, window: Duration) -> Self {
        self.windows.push(Window { count, window });
        self
    }

    /// The capacity of the request limiter: `burst` for a bucket, else `count`.
    pub fn capacity(&self) -> u32 {
        match self.algorithm {
            Algorithm::TokenBucket => self.burst.unwrap_or(self.count),
            _ => self.count,
        }
    }

    pub(super) fn validate(&self, field: &str) -> Result<(), ConfigError> {
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
        for (index, extra) in self.windows.iter().enumerate() {
            at_least_one(extra.count, || format!("{field}.windows[{index}].count"))?;
            if extra.window.is_zero() {
                return Err(ConfigError::ZeroWindow {
                    field: format!("{field}.windows[{index}].window"),
                });
            }
        }
        if let Some(tokens) = &self.tokens {
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
            if let Some(usage) = tokens.usage {
                if usage.min_percent > usage.max_percent || usage.max_percent > 100 {
                    return Err(ConfigError::UsageRange {
                        field: format!("{field}.tokens.usage"),
                        min: usage.min_percent,
                        max: usage.max_percent,
                    });
                }
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
