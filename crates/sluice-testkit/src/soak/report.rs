//! What a soak found, and the properties it must keep, each broken one named.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::options::MAX_ATTEMPTS;
use super::redis::RedisFault;
use crate::procfs::ProcStats;

/// The sidecar's figures at one moment.
#[derive(Debug, Clone)]
pub struct Sample {
    /// `start`, `middle`, `end` or `after`.
    pub label: &'static str,
    /// Since the load started.
    pub at: Duration,
    /// Calls sent by then.
    pub calls: u64,
    /// Memory and descriptors.
    pub stats: ProcStats,
}

/// What a soak found.
#[derive(Debug, Clone, Default)]
pub struct SoakReport {
    /// From the first call to the last answer.
    pub elapsed: Duration,
    /// Calls sent (each with its own id).
    pub calls: u64,
    /// Calls answered exactly once, under their own id, in order.
    pub answered: u64,
    /// Calls that got no answer (the request to the sidecar failed).
    pub lost: u64,
    /// Answers with an id that was not asked, asked twice, or out of order.
    pub wrong_ids: u64,
    /// Requests sent to the sidecar: to `/v1/turns` (several calls each)
    /// and proxied (one call each).
    pub requests: u64,
    /// Proxied requests (each one call).
    pub proxied: u64,
    /// Calls by outcome status.
    pub statuses: BTreeMap<String, u64>,
    /// `rate_limited` calls by reason (`throttled`, `shed`, `budget`, ...).
    pub reasons: BTreeMap<String, u64>,
    /// Calls by fault asked for, then by outcome status.
    pub by_fault: BTreeMap<String, BTreeMap<String, u64>>,
    /// Requests that reached the upstream.
    pub upstream_requests: u64,
    /// Connections the upstream accepted.
    pub upstream_connections: u64,
    /// The most requests any one call caused.
    pub max_requests_per_call: u32,
    /// Answers later than the largest deadline in their request plus the slack.
    pub late: u64,
    /// The latest answer past its deadline.
    pub worst_late: Duration,
    /// Figures at the start (after warm-up), middle, end and after the load.
    pub samples: Vec<Sample>,
    /// Every reading taken while the load ran (every half second).
    pub series: Vec<Sample>,
    /// The highest RSS seen in any sample (KiB), and the process's `VmHWM` at the end.
    pub peak_rss_kib: u64,
    /// The most descriptors seen in any sample.
    pub peak_fds: usize,
    /// Shared-backend modes seen on `/v1/status` while running.
    pub modes: BTreeSet<String>,
    /// What Redis was: one node, TLS, a Cluster.
    pub redis: &'static str,
    /// What Redis went through at half time, and when.
    pub redis_fault: Option<RedisFault>,
    /// The shared backend's modes (`/v1/status`) each time they changed,
    /// since the start.
    pub mode_changes: Vec<(Duration, String)>,
    /// The most requests the upstream saw start in any one second.
    pub busiest_second: usize,
    /// What a second may hold: (rate + burst) × (1 + [`FALLBACK_OVERSHOOT`](super::FALLBACK_OVERSHOOT)).
    pub spend_bound: usize,
    /// The credential is shared: its mode must read `shared` at the end.
    pub expect_shared: bool,
    /// Scopes still holding permits or queued calls after the load.
    pub stuck: Vec<String>,
    /// The secret appeared in the sidecar's stdout or stderr.
    pub secret_leaked: bool,
    /// The shared backend's mode per credential at the end.
    pub final_modes: Vec<String>,
}

/// How memory and descriptors moved with the number of calls.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MemoryTrend {
    /// RSS growth per call between the first and last samples of the last
    /// third of the run: what a leak shows as, whatever the load's phases.
    pub tail_bytes_per_call: f64,
    /// The highest RSS sampled before the last third, KiB.
    pub before_tail_peak_kib: u64,
    /// RSS when the load ended, KiB.
    pub end_rss_kib: u64,
    /// The most descriptors sampled before the last third.
    pub before_tail_peak_fds: usize,
    /// Descriptors when the load ended.
    pub end_fds: usize,
}

/// A leak of a small response per call is several KiB; allocator noise,
/// and caches that follow the call rate, are far below this.
const MAX_BYTES_PER_CALL: f64 = 1024.0;
/// A step up within the last third that the per-call slope would not
/// show: caches sized by the call rate (the turns' read caches, pools)
/// reach their high-water mark well before it.
const MAX_LATE_GROWTH_KIB: u64 = 32 * 1024;
/// Descriptors: pooled connections come and go with concurrency.
const MAX_LATE_FDS: usize = 64;

impl SoakReport {
    /// Memory and descriptors against calls; `None` with too few samples.
    pub fn memory_trend(&self) -> Option<MemoryTrend> {
        let end = self.samples.iter().find(|s| s.label == "end")?;
        let tail_start = end.at * 2 / 3;
        let before: Vec<&Sample> = self.series.iter().filter(|s| s.at < tail_start).collect();
        let tail: Vec<&Sample> = self
            .series
            .iter()
            .filter(|s| s.at >= tail_start)
            .chain(std::iter::once(end))
            .collect();
        let (first, last) = (tail.first()?, tail.last()?);
        let calls = last.calls.saturating_sub(first.calls).max(1) as f64;
        let grown = last.stats.rss_kib as f64 - first.stats.rss_kib as f64;
        Some(MemoryTrend {
            tail_bytes_per_call: grown * 1024.0 / calls,
            before_tail_peak_kib: before.iter().map(|s| s.stats.rss_kib).max()?,
            end_rss_kib: end.stats.rss_kib,
            before_tail_peak_fds: before.iter().map(|s| s.stats.fds).max()?,
            end_fds: end.stats.fds,
        })
    }

    /// The properties a soak must keep, each broken one named.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.lost > 0 {
            problems.push(format!("{} calls got no answer", self.lost));
        }
        if self.wrong_ids > 0 {
            problems.push(format!("{} answers had a wrong id", self.wrong_ids));
        }
        if self.answered != self.calls {
            problems.push(format!("{} calls, {} answered", self.calls, self.answered));
        }
        let counted: u64 = self.statuses.values().sum();
        if counted != self.calls {
            problems.push(format!("{counted} outcomes for {} calls", self.calls));
        }
        if self.max_requests_per_call > MAX_ATTEMPTS {
            problems.push(format!(
                "a call caused {} requests (max_attempts {MAX_ATTEMPTS})",
                self.max_requests_per_call
            ));
        }
        if !self.stuck.is_empty() {
            problems.push(format!("stuck scopes: {:?}", self.stuck));
        }
        if self.busiest_second > self.spend_bound {
            problems.push(format!(
                "{} upstream requests started in one second (bound {})",
                self.busiest_second, self.spend_bound
            ));
        }
        if self.expect_shared
            && (self.final_modes.is_empty() || self.final_modes.iter().any(|m| m != "shared"))
        {
            problems.push(format!(
                "the shared backend did not return to shared by itself: {:?}",
                self.final_modes
            ));
        }
        if let Some(fault) = &self.redis_fault
            && fault.how.starts_with("no replica")
        {
            problems.push(format!("Redis did not come back: {}", fault.how));
        }
        if self.secret_leaked {
            problems.push("the secret appeared in the sidecar's output".to_owned());
        }
        if self.late > 0 {
            problems.push(format!(
                "{} answers came later than deadline + slack (worst {} ms late)",
                self.late,
                self.worst_late.as_millis()
            ));
        }
        match self.memory_trend() {
            Some(trend) => {
                if trend.tail_bytes_per_call > MAX_BYTES_PER_CALL {
                    problems.push(format!(
                        "RSS grew by {:.0} bytes per call over the last third of the run",
                        trend.tail_bytes_per_call
                    ));
                }
                if trend.end_rss_kib > trend.before_tail_peak_kib + MAX_LATE_GROWTH_KIB {
                    problems.push(format!(
                        "RSS at the end ({} KiB) is over its peak before the last third ({} KiB) by more than {} MiB",
                        trend.end_rss_kib,
                        trend.before_tail_peak_kib,
                        MAX_LATE_GROWTH_KIB / 1024
                    ));
                }
                if trend.end_fds > trend.before_tail_peak_fds + MAX_LATE_FDS {
                    problems.push(format!(
                        "descriptors grew from at most {} before the last third to {} at the end",
                        trend.before_tail_peak_fds, trend.end_fds
                    ));
                }
            }
            None => problems.push("too few samples to judge memory".to_owned()),
        }
        problems
    }
}
