//! The client policies a model's calls can go through, and what the model is told of each call.

use std::time::Duration;

/// What a model is told about a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum View {
    Ok,
    /// Deferred: wait this long, then re-issue the same call.
    RateLimited(Duration),
    /// A generic failure ("tool failed").
    Failed,
    TimedOut,
    /// Do not retry this turn.
    QuotaExhausted,
}

/// A client policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Strategy {
    /// Fan out at once; on 429 retry after a fixed 200 ms, three times.
    Naive,
    /// What common API SDKs do: 2 retries, Retry-After honoured up to 60 s,
    /// else exponential backoff from 0.5 s doubling to 8 s with 0.75-1 jitter.
    Sdk,
    /// A client-side fixed-window limit at the key's rate; no header reading.
    Static,
    /// Every call through a sluice gate with the key's rate.
    Sluice,
    /// A sluice gate with `rate = "auto"`.
    SluiceAuto,
}

impl Strategy {
    pub(crate) const ALL: [Strategy; 5] = [
        Strategy::Naive,
        Strategy::Sdk,
        Strategy::Static,
        Strategy::Sluice,
        Strategy::SluiceAuto,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Strategy::Naive => "naive",
            Strategy::Sdk => "sdk",
            Strategy::Static => "static",
            Strategy::Sluice => "sluice",
            Strategy::SluiceAuto => "sluice-auto",
        }
    }
}
