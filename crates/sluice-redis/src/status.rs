//! What operators see: the backend's state per credential, Redis errors, leases, the fallback rate.
//!
//! Everything here is safe to show: URLs are redacted and no secret is kept.

use serde::Serialize;

use crate::breaker::BreakerState;

/// The backend as a whole.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Status {
    /// `single` or `cluster`.
    pub topology: &'static str,
    /// The configured URLs, passwords redacted.
    pub servers: Vec<String>,
    /// The circuit breaker.
    pub breaker: BreakerState,
    /// Failures in a row (0 while Redis answers).
    pub consecutive_failures: u32,
    /// Milliseconds until the breaker probes again (0 when closed).
    pub probe_in_ms: u64,
    /// Script calls sent to Redis (reservations, refunds, blocks).
    pub commands: u64,
    /// Failed commands, by kind.
    pub errors: ErrorCounts,
    /// The last error, scrubbed of secrets.
    pub last_error: Option<String>,
    /// Whether the penalty subscription is live.
    pub events_live: bool,
    /// Every credential this process has used.
    pub credentials: Vec<CredentialStatus>,
}

/// Failed Redis commands, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ErrorCounts {
    /// No answer within the timeout.
    pub timeout: u64,
    /// The connection failed or dropped.
    pub connection: u64,
    /// Redis answered with an error.
    pub server: u64,
    /// A reply this crate did not understand.
    pub reply: u64,
}

impl ErrorCounts {
    /// All of them.
    pub fn total(&self) -> u64 {
        self.timeout + self.connection + self.server + self.reply
    }
}

/// Where a credential's decisions are made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// In Redis, shared with every process.
    Shared,
    /// Locally, at this process's share of the rate.
    Fallback,
}

/// One credential's backend state.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CredentialStatus {
    /// The credential's name (a config name, never its secret).
    pub credential: String,
    /// Shared or fallback.
    pub mode: Mode,
    /// Why it is in fallback.
    pub reason: Option<String>,
    /// Slots the next lease asks for.
    pub lease_size: u32,
    /// Leased slots waiting for callers.
    pub pooled_slots: usize,
    /// Processes the heartbeat last counted on this credential.
    pub processes_seen: u32,
    /// The rate this process would use in fallback, starts per second.
    pub fallback_per_sec: Option<f64>,
    /// Decisions made, by where.
    pub decisions: DecisionCounts,
}

/// Decisions on one credential.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct DecisionCounts {
    /// Granted by a reservation in Redis.
    pub shared: u64,
    /// Granted from a leased slot (no round trip).
    pub leased: u64,
    /// Granted locally while Redis was unreachable.
    pub fallback: u64,
    /// Denied (by Redis, by a known hold, or by the fallback cell).
    pub denied: u64,
    /// Leased slots given back unused.
    pub returned: u64,
}
