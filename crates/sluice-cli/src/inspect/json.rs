//! `sluice inspect --json`: one object with what the explanation says.

use serde::Serialize;
use sluice::signal::ScopeSignal;

use super::{Reading, millis};

impl Reading<'_> {
    /// The `--json` object of this reading.
    pub(super) fn report(&self) -> Report<'_> {
        let decided = self.scope_signal();
        Report {
            http_status: self.signal.http_status,
            throttled: self.signal.throttled,
            wait_ms: self.wait.as_ref().map(|w| millis(w.delay)),
            source: self.wait.as_ref().map(|w| w.source),
            scope: self.scope.as_deref(),
            remaining: decided.and_then(|s| s.remaining),
            limit: decided.and_then(|s| s.limit),
            reset_ms: decided.and_then(|s| s.reset).map(millis),
            quota_exhausted: self.quota_scope.is_some(),
            quota_scope: self.quota_scope.as_deref(),
            concurrency: self.signal.concurrency,
            body: self.signal.body,
            cost: self.signal.cost.as_ref().map(|cost| CostReport {
                unit: cost.unit,
                requested: cost.requested,
                available: cost.available,
                wait_ms: millis(cost.delay),
            }),
            clock: if self.clock.uses_date_header() {
                "date_header"
            } else {
                "local"
            },
            skipped_lines: self.head.skipped,
            scopes: self.signal.scopes.iter().map(ScopeReport::from).collect(),
        }
    }
}

/// The `--json` object.
#[derive(Debug, Serialize)]
pub(super) struct Report<'a> {
    pub(super) http_status: u16,
    pub(super) throttled: bool,
    pub(super) wait_ms: Option<u64>,
    pub(super) source: Option<&'static str>,
    pub(super) scope: Option<&'a str>,
    pub(super) remaining: Option<u64>,
    pub(super) limit: Option<u64>,
    pub(super) reset_ms: Option<u64>,
    pub(super) quota_exhausted: bool,
    pub(super) quota_scope: Option<&'a str>,
    /// The refusal was for too many requests in flight, not their rate.
    pub(super) concurrency: bool,
    /// The body profile that read the body, if one did.
    pub(super) body: Option<&'static str>,
    /// A GraphQL cost budget's wait, if the body stated one.
    pub(super) cost: Option<CostReport>,
    /// `date_header` or `local`: what absolute times were measured against.
    pub(super) clock: &'static str,
    pub(super) skipped_lines: usize,
    pub(super) scopes: Vec<ScopeReport<'a>>,
}

#[derive(Debug, Serialize)]
pub(super) struct CostReport {
    pub(super) unit: &'static str,
    pub(super) requested: u64,
    pub(super) available: u64,
    pub(super) wait_ms: u64,
}

#[derive(Debug, Serialize)]
pub(super) struct ScopeReport<'a> {
    pub(super) name: &'a str,
    pub(super) remaining: Option<u64>,
    pub(super) limit: Option<u64>,
    pub(super) reset_ms: Option<u64>,
    pub(super) window_ms: Option<u64>,
    pub(super) source: &'static str,
}

impl<'a> From<&'a ScopeSignal> for ScopeReport<'a> {
    fn from(scope: &'a ScopeSignal) -> Self {
        ScopeReport {
            name: &scope.name,
            remaining: scope.remaining,
            limit: scope.limit,
            reset_ms: scope.reset.map(millis),
            window_ms: scope.window.map(millis),
            source: scope.source,
        }
    }
}
