//! What the fake remembers of each request, and the stats document built from it.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// One request as the fake saw it. Times are milliseconds since the fake started.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// When the request arrived.
    pub t_ms: f64,
    /// When its response was due: `t_ms` plus its latency (equal to `t_ms` when throttled).
    pub end_ms: f64,
    /// The key it was counted against (`Authorization`, else `x-api-key`, else `anonymous`).
    pub key: String,
    /// The resource (scope) it belonged to.
    pub resource: String,
    /// The method.
    pub method: String,
    /// The path with its query.
    pub path: String,
    /// The status answered.
    pub status: u16,
    /// The key's requests being served on this resource when it arrived, itself included
    /// if it was served: the highest value over the records is the peak concurrency.
    pub in_flight: u32,
    /// The tokens it finally spent in its resource's token budget: the reported usage when
    /// the fake trues up, else the charge. `None` when throttled or without a token budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u32>,
}

impl Record {
    /// `t_ms` as a duration since the fake started.
    pub fn start(&self) -> Duration {
        from_ms(self.t_ms)
    }

    /// `end_ms` as a duration since the fake started.
    pub fn end(&self) -> Duration {
        from_ms(self.end_ms)
    }
}

/// The body of `GET /_fake/stats`: every record, how many, and how many were 429s.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    /// Every recorded request, in the order the fake decided them.
    pub requests: Vec<Record>,
    /// The number of records.
    pub total: usize,
    /// The number of records answered 429 (by the limiter or by a scripted rule).
    pub throttled: usize,
}

impl Stats {
    /// The stats of these records.
    pub fn new(requests: Vec<Record>) -> Self {
        let throttled = requests
            .iter()
            .filter(|record| record.status == 429)
            .count();
        Stats {
            total: requests.len(),
            throttled,
            requests,
        }
    }
}

/// Milliseconds, with the fraction, from a duration.
pub(crate) fn to_ms(duration: Duration) -> f64 {
    // Nanoseconds below 2^53 (about 104 days) convert exactly.
    duration.as_nanos() as f64 / 1e6
}

/// A duration from milliseconds, to the nearest nanosecond so that `to_ms` round-trips.
fn from_ms(millis: f64) -> Duration {
    let nanos = (millis * 1e6).round();
    if nanos.is_finite() && nanos > 0.0 {
        // `as` saturates, and a record's time is far below u64::MAX nanoseconds.
        Duration::from_nanos(nanos as u64)
    } else {
        Duration::ZERO
    }
}
