//! Hooks for metrics: the engine reports what happened; a server turns it into Prometheus.

use std::time::Duration;

use crate::outcome::Outcome;

/// Something worth counting happened.
#[derive(Debug)]
#[non_exhaustive]
pub enum Event<'a> {
    /// A call got its outcome.
    Outcome {
        /// The call's credential (empty for an unknown tool).
        credential: &'a str,
        /// The call's tool.
        tool: &'a str,
        /// What it was told.
        outcome: &'a Outcome,
        /// True when another call in the turn answered it (joined or cached).
        coalesced: bool,
        /// From the call's start to its outcome.
        elapsed: Duration,
    },
    /// An upstream request finished.
    Request {
        /// Its credential.
        credential: &'a str,
        /// Its tool.
        tool: &'a str,
        /// The response status, `None` for a transport error or timeout.
        status: Option<u16>,
        /// How long the request took.
        latency: Duration,
    },
    /// A call waited below the model's view.
    Wait {
        /// Its credential.
        credential: &'a str,
        /// The scope it waited on.
        scope: &'a str,
        /// For how long.
        wait: Duration,
        /// Why.
        kind: WaitKind,
    },
    /// A call is being retried.
    Retry {
        /// Its credential.
        credential: &'a str,
        /// Its tool.
        tool: &'a str,
        /// The attempt about to be made (1 for the first retry).
        attempt: u32,
    },
    /// A scope's quota was found spent.
    QuotaExhausted {
        /// Its credential.
        credential: &'a str,
        /// The scope.
        scope: &'a str,
        /// Until it resets.
        resets_in: Duration,
    },
    /// Shadow mode (`enforce = false`): what sluice would have done to a
    /// call it sent at once instead.
    Shadow {
        /// The call's credential.
        credential: &'a str,
        /// The scope the decision was made on.
        scope: &'a str,
        /// The call's tool.
        tool: &'a str,
        /// What enforcing would have done.
        decision: ShadowDecision,
        /// The wait it would have had (inline for `Wait`, the
        /// `retry_after_ms` a deferral or a shed would have told).
        wait: Duration,
    },
}

/// What enforcing would have done to a call that shadow mode sent at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ShadowDecision {
    /// Waited inline (for a start slot, or in the admission queue).
    Wait,
    /// Deferred it: `rate_limited` or `quota_exhausted` without sending.
    Defer,
    /// Shed it: the admission queue was full.
    Shed,
}

impl ShadowDecision {
    /// Its label in metrics (`decision="wait"`).
    pub fn as_str(self) -> &'static str {
        match self {
            ShadowDecision::Wait => "wait",
            ShadowDecision::Defer => "defer",
            ShadowDecision::Shed => "shed",
        }
    }
}

/// Why a call waited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitKind {
    /// For a start slot from the scope's limiter.
    Rate,
    /// For a retry's jittered backoff.
    Backoff,
    /// In a scope's admission queue, for a concurrency permit: reported
    /// once the permit is granted, with the time spent queued (the others
    /// are reported as the wait begins).
    Admission,
}

impl WaitKind {
    /// Its label in metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            WaitKind::Rate => "rate",
            WaitKind::Backoff => "backoff",
            WaitKind::Admission => "admission",
        }
    }
}

/// Receives the engine's events. Called inline: keep it cheap and non-blocking.
pub trait Observer: Send + Sync + 'static {
    /// One event.
    fn observe(&self, event: &Event<'_>);
}
