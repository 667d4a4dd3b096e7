//! The sidecar's metrics: every family, registered under the `sluice_`
//! prefix, and the per-thread cache of the handles events touch.

use std::cell::RefCell;
use std::sync::atomic::AtomicU64;

use parking_lot::Mutex;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use thread_local::ThreadLocal;

use super::handles::Handles;
use super::labels::*;

/// The sidecar's metrics. Label values are bounded: credentials and tools
/// come from the configuration, scopes from the engine (capped per credential).
pub struct Metrics {
    pub(super) registry: Registry,
    pub(super) calls: Family<CallLabels, Counter>,
    pub(super) coalesced: Family<ToolLabels, Counter>,
    pub(super) upstream: Family<UpstreamLabels, Counter>,
    pub(super) upstream_latency: SecondsHistograms<CredentialLabels>,
    pub(super) waits: SecondsHistograms<WaitLabels>,
    pub(super) sheds: Family<CredentialLabels, Counter>,
    pub(super) retries: Family<ToolLabels, Counter>,
    pub(super) quota_events: Family<ScopeLabels, Counter>,
    pub(super) in_flight: Family<ScopeLabels, Gauge>,
    pub(super) queued: Family<ScopeLabels, Gauge>,
    pub(super) quota_exhausted: Family<ScopeLabels, Gauge>,
    pub(super) blocked: Family<ScopeLabels, Gauge<f64, AtomicU64>>,
    pub(super) shared_mode: Family<ModeLabels, Gauge>,
    pub(super) redis_errors: Family<KindLabels, Gauge>,
    pub(super) shadow: Family<ShadowLabels, Counter>,
    pub(super) modes: Family<ModeLabels, Gauge>,
    pub(super) max_in_flight: Family<ScopeLabels, Gauge>,
    pub(super) queue_limit: Family<ScopeLabels, Gauge>,
    pub(super) server_remaining: Family<ScopeLabels, Gauge>,
    pub(super) window_used: Family<WindowLabels, Gauge>,
    pub(super) window_remaining: Family<WindowLabels, Gauge>,
    pub(super) window_next_free: Family<WindowLabels, Gauge<f64, AtomicU64>>,
    /// Scrapes refresh the gauges then encode: one at a time.
    pub(super) scrape: Mutex<()>,
    /// The handles every request's events touch, per thread.
    pub(super) handles: ThreadLocal<RefCell<Handles>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// Every metric, registered under the `sluice_` prefix.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("sluice");
        let metrics = Metrics {
            calls: Family::default(),
            coalesced: Family::default(),
            upstream: Family::default(),
            upstream_latency: Family::new_with_constructor(seconds_histogram),
            waits: Family::new_with_constructor(seconds_histogram),
            sheds: Family::default(),
            retries: Family::default(),
            quota_events: Family::default(),
            in_flight: Family::default(),
            queued: Family::default(),
            quota_exhausted: Family::default(),
            blocked: Family::default(),
            shared_mode: Family::default(),
            redis_errors: Family::default(),
            shadow: Family::default(),
            modes: Family::default(),
            max_in_flight: Family::default(),
            queue_limit: Family::default(),
            server_remaining: Family::default(),
            window_used: Family::default(),
            window_remaining: Family::default(),
            window_next_free: Family::default(),
            scrape: Mutex::new(()),
            handles: ThreadLocal::new(),
            registry: Registry::default(),
        };
        registry.register(
            "calls",
            "Calls by credential, tool, outcome status and rate_limited reason",
            metrics.calls.clone(),
        );
        registry.register(
            "coalesced_calls",
            "Calls answered by an identical read in the same turn",
            metrics.coalesced.clone(),
        );
        registry.register(
            "upstream_requests",
            "Requests sent upstream by credential and response status (\"error\": no response)",
            metrics.upstream.clone(),
        );
        registry.register(
            "upstream_latency_seconds",
            "Upstream request latency by credential",
            metrics.upstream_latency.clone(),
        );
        registry.register(
            "wait_seconds",
            "Waits below the model's view, by credential and kind (rate, backoff)",
            metrics.waits.clone(),
        );
        registry.register(
            "shed_calls",
            "Calls shed because a scope's admission queue was full",
            metrics.sheds.clone(),
        );
        registry.register(
            "retries",
            "Retried attempts by credential and tool",
            metrics.retries.clone(),
        );
        registry.register(
            "quota_exhaustions",
            "Times a scope's quota was found spent",
            metrics.quota_events.clone(),
        );
        registry.register(
            "in_flight",
            "Requests in flight per scope",
            metrics.in_flight.clone(),
        );
        registry.register(
            "queued",
            "Calls waiting for a permit per scope",
            metrics.queued.clone(),
        );
        registry.register(
            "quota_exhausted",
            "1 while a scope's quota is spent",
            metrics.quota_exhausted.clone(),
        );
        registry.register(
            "blocked_seconds",
            "How long the server has blocked a scope from now",
            metrics.blocked.clone(),
        );
        registry.register(
            "shared_backend_mode",
            "1 for the mode a shared credential is in now (shared: decided in Redis; fallback: locally at its share)",
            metrics.shared_mode.clone(),
        );
        registry.register(
            "shared_redis_errors",
            "Redis commands that failed since start, by kind",
            metrics.redis_errors.clone(),
        );
        registry.register(
            "shadow_decisions",
            "Shadow mode: what enforcing would have done to calls sent at once, by scope and decision (wait, defer, shed)",
            metrics.shadow.clone(),
        );
        registry.register(
            "max_in_flight",
            "The concurrency cap in force per scope (what in_flight is held to)",
            metrics.max_in_flight.clone(),
        );
        registry.register(
            "queue_limit",
            "The admission queue's bound per scope (what queued is held to)",
            metrics.queue_limit.clone(),
        );
        registry.register(
            "server_remaining",
            "What the server last said remains in its window, per scope (after any reserve)",
            metrics.server_remaining.clone(),
        );
        registry.register(
            "window_used",
            "Spent in each window sluice keeps, ending now: requests, or a unit's (issue 14)",
            metrics.window_used.clone(),
        );
        registry.register(
            "window_remaining",
            "Left of each window's count now: requests, or a unit's",
            metrics.window_remaining.clone(),
        );
        registry.register(
            "window_next_free_seconds",
            "Time until each window's next free slot (a request, or one unit)",
            metrics.window_next_free.clone(),
        );
        registry.register(
            "credential_mode",
            "1 for the mode each credential runs in (enforce, or shadow: decisions recorded, none enforced)",
            metrics.modes.clone(),
        );
        Metrics {
            registry,
            ..metrics
        }
    }

    /// This thread's cache of handles.
    pub(super) fn handles(&self) -> &RefCell<Handles> {
        self.handles.get_or_default()
    }
}
