//! Why a configuration value was refused, naming the field.

use std::time::Duration;

use super::algorithm::Algorithm;

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
    /// A usage share outside 0..=100 percent, or with its minimum above its maximum.
    #[error("{field}: {min}%..{max}% must lie within 0%..100%, the minimum first")]
    UsageRange {
        /// The field.
        field: String,
        /// The minimum given.
        min: u32,
        /// The maximum given.
        max: u32,
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
            | ConfigError::UsageRange { field, .. }
            | ConfigError::Resource { field, .. } => field,
        }
    }
}
