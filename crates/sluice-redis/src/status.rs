//! What operators see: the backend's state per credential, Redis errors, leases, the fallback rate.
//!
//! Everything here is safe to show: URLs are redacted and no secret is kept.
//! The counters are kept where they are counted ([`ErrorCounts`] by the
//! command runner, [`DecisionCounts`] per credential); this puts them together.

use serde::Serialize;
use tokio::time::Instant;

use crate::RedisConfig;
use crate::breaker::BreakerState;
use crate::credential::{Cred, Credentials, DecisionCounts, Mode};
use crate::fallback::{share, share_of};
use crate::runner::{BreakerView, ErrorCounts, Runner};
use crate::windows::Spends;

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
    /// Leased starts of spends on several windows, groups or units
    /// waiting for callers (every spend's pool of the credential).
    pub pooled_spends: usize,
    /// Processes the heartbeat last counted on this credential.
    pub processes_seen: u32,
    /// The rate this process would use in fallback, starts per second.
    pub fallback_per_sec: Option<f64>,
    /// Decisions made, by where.
    pub decisions: DecisionCounts,
}

/// The status now.
pub(crate) fn status(
    config: &RedisConfig,
    runner: &Runner,
    credentials: &Credentials,
    spends: &Spends,
    events_live: bool,
) -> Status {
    let breaker = runner.breaker(Instant::now());
    let (errors, last_error) = runner.errors();
    let mut creds: Vec<CredentialStatus> = credentials
        .all()
        .iter()
        .map(|cred| {
            let mut line = credential(cred, config, &breaker, last_error.as_deref());
            line.pooled_spends = spends.waiting(&cred.name);
            line
        })
        .collect();
    creds.sort_by(|a, b| a.credential.cmp(&b.credential));
    Status {
        topology: if config.cluster { "cluster" } else { "single" },
        servers: config.urls.iter().map(|u| u.redacted()).collect(),
        breaker: breaker.state,
        consecutive_failures: breaker.failures,
        probe_in_ms: u64::try_from(breaker.probe_in.as_millis()).unwrap_or(u64::MAX),
        commands: runner.commands(),
        errors,
        last_error,
        events_live,
        credentials: creds,
    }
}

/// One credential's line. While the breaker is not closed every
/// credential decides locally, whatever its last decision was.
fn credential(
    cred: &Cred,
    config: &RedisConfig,
    breaker: &BreakerView,
    last_error: Option<&str>,
) -> CredentialStatus {
    let state = cred.state.lock();
    let (mode, reason) = if breaker.state == BreakerState::Closed {
        state.mode.clone()
    } else {
        (
            Mode::Fallback,
            Some(format!(
                "circuit breaker {} after {} failures{}",
                match breaker.state {
                    BreakerState::Open => "open",
                    _ => "probing",
                },
                breaker.failures,
                last_error.map(|e| format!(": {e}")).unwrap_or_default()
            )),
        )
    };
    let share = share(config.fallback_share, state.processes);
    CredentialStatus {
        credential: cred.name.clone(),
        mode,
        reason,
        lease_size: state.pool.size(),
        pooled_slots: state.pool.pooled(),
        pooled_spends: 0,
        processes_seen: state.processes,
        fallback_per_sec: state.limit.map(|l| share_of(l, share).rate.per_sec()),
        decisions: DecisionCounts {
            returned: state.pool.returned,
            ..state.decisions
        },
    }
}
