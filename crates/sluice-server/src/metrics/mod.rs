//! Prometheus metrics: the engine's events counted as they happen, scope
//! gauges read from `Gate::status` at scrape time.
//!
//! - `families`: [`Metrics`], every family and its registration;
//! - `labels`: the label sets, bounded (credentials and tools come from the
//!   configuration, scopes from the engine);
//! - `record`: what each event counts;
//! - `handles`: the handles an event touches, cached per thread;
//! - `scrape`: the gauges set at scrape time, and the encoding.

mod families;
mod handles;
mod labels;
mod record;
mod scrape;
#[cfg(test)]
mod tests;

pub use families::Metrics;

/// The content type of [`Metrics::encode`]'s output.
pub(crate) const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
