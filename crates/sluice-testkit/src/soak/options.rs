//! What a soak does: duration, load, faults and the credential's settings, with the defaults.

use std::time::Duration;

/// The credential's secret, set in the sidecar's environment only: it must
/// reach the upstream and appear in none of the sidecar's output.
pub const SECRET: &str = "sk-soak-71c9e04b2d-never-print";

/// How far over the bucket's bound (burst + rate in any second) the
/// upstream may see starts, summed over a switch to the fallback and back:
/// the settled fallback's bound (issue 19).
pub const FALLBACK_OVERSHOOT: f64 = 0.02;

/// Attempts per call the sidecar is configured with (`defaults.max_attempts`).
pub const MAX_ATTEMPTS: u32 = 3;

/// The faults a call may ask for, with their weights (out of 100): the
/// default mix of [`SoakOptions::faults`].
pub const FAULTS: [(&str, u32); 10] = [
    ("ok", 85),
    ("hang", 1),
    ("reset", 2),
    ("close_mid_body", 2),
    ("long_length", 1),
    ("trickle", 2),
    ("garbage", 2),
    ("r429", 1),
    ("r503", 2),
    ("not_http", 2),
];

/// What a soak does.
#[derive(Debug, Clone)]
pub struct SoakOptions {
    /// How long calls are sent.
    pub duration: Duration,
    /// Stop earlier once this many calls were sent.
    pub max_calls: u64,
    /// Clients sending requests back to back.
    pub workers: usize,
    /// Redis is killed at half time and restarted this much later.
    pub redis_outage: Duration,
    /// How late past its deadline an answer may come and not count as late.
    pub slack: Duration,
    /// Seeds the choice of faults, tools, deadlines and calls per request.
    pub seed: u64,
    /// The credential's rate, per second (a GCRA bucket with a tenth of it as burst).
    pub rate: u32,
    /// The faults calls ask for, with their weights (see [`FAULTS`]).
    pub faults: Vec<(&'static str, u32)>,
    /// `shared = true` on the credential (its budget in Redis); false keeps
    /// it local (Redis is still started, killed and restarted, unused).
    pub shared: bool,
    /// Requests of a worker share a few turn ids (single-flight and cache
    /// across requests, long-lived turns); false: every request its own turn.
    pub turn_ids: bool,
    /// Redis on TLS with an ACL user: the sidecar connects by
    /// `rediss://user:password@…` with `tls_ca_file` (certificates made
    /// for the run).
    pub redis_tls: bool,
    /// Redis is a Cluster of three masters with a replica each; at half
    /// time the master owning the credential's slot is killed and its
    /// replica promoted (instead of the node's outage).
    pub cluster_failover: bool,
}

impl Default for SoakOptions {
    fn default() -> Self {
        SoakOptions {
            duration: Duration::from_secs(60),
            max_calls: 2_000_000,
            workers: 48,
            redis_outage: Duration::from_secs(5),
            slack: Duration::from_millis(250),
            seed: 1,
            rate: 5_000,
            faults: FAULTS.to_vec(),
            shared: true,
            turn_ids: true,
            redis_tls: false,
            cluster_failover: false,
        }
    }
}
