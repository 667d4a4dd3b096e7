//! The counts every worker adds to while the load runs.

use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::Duration;

use parking_lot::Mutex;

use super::report::SoakReport;

/// Everything the workers share.
pub(super) struct Tally {
    pub(super) report: Mutex<SoakReport>,
    pub(super) calls: AtomicU64,
    pub(super) next_n: AtomicU64,
    pub(super) stop: AtomicBool,
}

impl Tally {
    pub(super) fn count(&self, fault: &str, status: &str, reason: Option<&str>) {
        let mut report = self.report.lock();
        *report.statuses.entry(status.to_owned()).or_default() += 1;
        if let Some(reason) = reason {
            *report.reasons.entry(reason.to_owned()).or_default() += 1;
        }
        *report
            .by_fault
            .entry(fault.to_owned())
            .or_default()
            .entry(status.to_owned())
            .or_default() += 1;
    }
}

/// Counts an answer that took `elapsed` as late when that is past its
/// `deadline_ms` plus `slack`, and keeps the latest one.
pub(super) fn late(report: &mut SoakReport, elapsed: Duration, deadline_ms: u64, slack: Duration) {
    let deadline = Duration::from_millis(deadline_ms);
    if elapsed > deadline + slack {
        report.late += 1;
    }
    report.worst_late = report.worst_late.max(elapsed.saturating_sub(deadline));
}
