//! What the fake enforces and how it answers: limits, resources, latency, header style, Retry-After.
//!
//! [`Config`] holds it all; [`Limits`] (with their [`Algorithm`]) are what
//! one resource allows each key; [`Resource`] and [`KeyLimits`] say where
//! limits apply; [`HeaderStyle`], [`RetryAfter`] and [`Latency`] say how the
//! fake answers; [`ConfigError`] names the field of an invalid value.

mod algorithm;
mod answer;
mod error;
mod limits;
mod name;
mod resource;
mod settings;

pub use algorithm::Algorithm;
pub use answer::{HeaderStyle, Latency, RetryAfter};
pub use error::ConfigError;
pub use limits::{CostField, Limits, TokenLimit, Usage, Window};
pub use name::ParseNameError;
pub use resource::{KeyLimits, Resource};
pub use settings::Config;
