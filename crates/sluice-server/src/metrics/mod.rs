//! Prometheus metrics: the engine's events counted as they happen, scope
//! gauges read from `Gate::status` at scrape time.

use std::cell::RefCell;
use std::sync::atomic::AtomicU64;

use parking_lot::Mutex;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use sluice::scope::ScopeStatus;
use sluice::{Event, Observer, Outcome};
use thread_local::ThreadLocal;

mod handles;

use handles::Handles;

/// The content type of [`Metrics::encode`]'s output.
pub(crate) const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    credential: String,
    tool: String,
    outcome: String,
    reason: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabels {
    credential: String,
    tool: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct UpstreamLabels {
    credential: String,
    status: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CredentialLabels {
    credential: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WaitLabels {
    credential: String,
    kind: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ScopeLabels {
    credential: String,
    scope: String,
}

/// One window of a scope: requests, or a unit's.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WindowLabels {
    credential: String,
    scope: String,
    unit: String,
    window: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModeLabels {
    credential: String,
    mode: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShadowLabels {
    credential: String,
    scope: String,
    decision: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: String,
}

type SecondsHistograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// 1 ms to about 33 s, doubling: rate waits, backoffs and API latencies.
fn seconds_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

/// The sidecar's metrics. Label values are bounded: credentials and tools
/// come from the configuration, scopes from the engine (capped per credential).
pub struct Metrics {
    registry: Registry,
    calls: Family<CallLabels, Counter>,
    coalesced: Family<ToolLabels, Counter>,
    upstream: Family<UpstreamLabels, Counter>,
    upstream_latency: SecondsHistograms<CredentialLabels>,
    waits: SecondsHistograms<WaitLabels>,
    sheds: Family<CredentialLabels, Counter>,
    retries: Family<ToolLabels, Counter>,
    quota_events: Family<ScopeLabels, Counter>,
    in_flight: Family<ScopeLabels, Gauge>,
    queued: Family<ScopeLabels, Gauge>,
    quota_exhausted: Family<ScopeLabels, Gauge>,
    blocked: Family<ScopeLabels, Gauge<f64, AtomicU64>>,
    shared_mode: Family<ModeLabels, Gauge>,
    redis_errors: Family<KindLabels, Gauge>,
    shadow: Family<ShadowLabels, Counter>,
    modes: Family<ModeLabels, Gauge>,
    max_in_flight: Family<ScopeLabels, Gauge>,
    queue_limit: Family<ScopeLabels, Gauge>,
    server_remaining: Family<ScopeLabels, Gauge>,
    window_used: Family<WindowLabels, Gauge>,
    window_remaining: Family<WindowLabels, Gauge>,
    window_next_free: Family<WindowLabels, Gauge<f64, AtomicU64>>,
    /// Scrapes refresh the gauges then encode: one at a time.
    scrape: Mutex<()>,
    /// The handles every request's events touch, per thread.
    handles: ThreadLocal<RefCell<Handles>>,
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

    /// Sets the mode gauge of every credential (`enforce` is `false` in shadow mode).
    pub fn record_modes<'a>(&self, credentials: impl IntoIterator<Item = (&'a str, bool)>) {
        for (credential, enforce) in credentials {
            for (mode, on) in [("enforce", enforce), ("shadow", !enforce)] {
                self.modes
                    .get_or_create(&ModeLabels {
                        credential: credential.to_owned(),
                        mode: mode.to_owned(),
                    })
                    .set(i64::from(on));
            }
        }
    }

    /// Counts an outcome decided outside the engine (an unknown tool, a
    /// missing argument), as the engine's own outcomes are counted.
    pub fn record_outcome(&self, credential: &str, tool: &str, outcome: &Outcome) {
        let (status, reason) = (outcome.status(), reason(outcome));
        let labels = || CallLabels {
            credential: credential.to_owned(),
            tool: tool.to_owned(),
            outcome: status.to_owned(),
            reason: reason.to_owned(),
        };
        let made = || self.calls.get_or_create(&labels()).clone();
        let mut handles = self.handles().borrow_mut();
        handles.count_call((credential, tool), (status, reason), made);
    }

    /// This thread's cache of handles.
    fn handles(&self) -> &RefCell<Handles> {
        self.handles.get_or_default()
    }

    /// An upstream answer (`status`, or none for a transport error) on
    /// `credential`, and its latency.
    fn record_upstream(&self, credential: &str, status: Option<u16>, latency: f64) {
        let mut handles = self.handles().borrow_mut();
        let made = || {
            let labels = UpstreamLabels {
                credential: credential.to_owned(),
                status: status.map_or_else(|| "error".to_owned(), |s| s.to_string()),
            };
            self.upstream.get_or_create(&labels).clone()
        };
        handles.count_upstream(credential, status, made);
        let made = || {
            let labels = CredentialLabels {
                credential: credential.to_owned(),
            };
            self.upstream_latency.get_or_create(&labels).clone()
        };
        handles.observe_latency(credential, latency, made);
    }

    /// The Prometheus text, with the scope gauges set from `scopes`, and the
    /// shared backend's from `shared`, first.
    pub fn encode(&self, scopes: &[ScopeStatus], shared: Option<&sluice_redis::Status>) -> String {
        let _one_at_a_time = self.scrape.lock();
        // Scopes come and go: start from empty so forgotten ones disappear.
        for family in [
            &self.in_flight,
            &self.queued,
            &self.quota_exhausted,
            &self.max_in_flight,
            &self.queue_limit,
            &self.server_remaining,
        ] {
            family.clear();
        }
        self.blocked.clear();
        self.window_used.clear();
        self.window_remaining.clear();
        self.window_next_free.clear();
        for scope in scopes {
            let labels = ScopeLabels {
                credential: scope.credential.clone(),
                scope: scope.scope.clone(),
            };
            self.in_flight
                .get_or_create(&labels)
                .set(i64::try_from(scope.in_flight).unwrap_or(i64::MAX));
            self.queued
                .get_or_create(&labels)
                .set(i64::try_from(scope.queued).unwrap_or(i64::MAX));
            self.quota_exhausted
                .get_or_create(&labels)
                .set(i64::from(scope.quota_exhausted));
            let optional = [
                (&self.max_in_flight, scope.max_in_flight.map(i64::from)),
                (&self.queue_limit, scope.queue_limit.map(i64::from)),
                (
                    &self.server_remaining,
                    scope
                        .server_remaining
                        .map(|n| i64::try_from(n).unwrap_or(i64::MAX)),
                ),
            ];
            for (family, value) in optional {
                if let Some(value) = value {
                    family.get_or_create(&labels).set(value);
                }
            }
            let requests = scope.windows.iter().map(|window| ("requests", window));
            let units = scope.units.iter().flat_map(|unit| {
                unit.windows
                    .iter()
                    .map(move |window| (unit.unit.as_str(), window))
            });
            for (unit, window) in requests.chain(units) {
                let labels = WindowLabels {
                    credential: scope.credential.clone(),
                    scope: scope.scope.clone(),
                    unit: unit.to_owned(),
                    window: window.window.clone(),
                };
                let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
                self.window_used
                    .get_or_create(&labels)
                    .set(count(window.used));
                self.window_remaining
                    .get_or_create(&labels)
                    .set(count(window.remaining));
                // Milliseconds to seconds for display.
                self.window_next_free
                    .get_or_create(&labels)
                    .set(window.next_free_ms as f64 / 1_000.0);
            }
            let blocked_ms = scope.blocked_for_ms.unwrap_or(0);
            // Milliseconds to seconds for display; precision loss is irrelevant here.
            self.blocked
                .get_or_create(&labels)
                .set(blocked_ms as f64 / 1_000.0);
        }
        self.shared_mode.clear();
        if let Some(shared) = shared {
            for credential in &shared.credentials {
                for mode in ["shared", "fallback"] {
                    let now = match credential.mode {
                        sluice_redis::Mode::Shared => "shared",
                        sluice_redis::Mode::Fallback => "fallback",
                    };
                    self.shared_mode
                        .get_or_create(&ModeLabels {
                            credential: credential.credential.clone(),
                            mode: mode.to_owned(),
                        })
                        .set(i64::from(now == mode));
                }
            }
            let errors = shared.errors;
            for (kind, count) in [
                ("timeout", errors.timeout),
                ("connection", errors.connection),
                ("server", errors.server),
                ("reply", errors.reply),
            ] {
                self.redis_errors
                    .get_or_create(&KindLabels {
                        kind: kind.to_owned(),
                    })
                    .set(i64::try_from(count).unwrap_or(i64::MAX));
            }
        }
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = encode(&mut text, &self.registry);
        text
    }
}

/// The `reason` label: a deferral's reason, empty otherwise.
fn reason(outcome: &Outcome) -> &'static str {
    match outcome {
        Outcome::RateLimited { reason, .. } => reason.as_str(),
        _ => "",
    }
}

impl Observer for Metrics {
    fn observe(&self, event: &Event<'_>) {
        match event {
            Event::Outcome {
                credential,
                tool,
                outcome,
                coalesced,
                ..
            } => {
                self.record_outcome(credential, tool, outcome);
                if *coalesced {
                    self.coalesced
                        .get_or_create(&ToolLabels {
                            credential: (*credential).to_owned(),
                            tool: (*tool).to_owned(),
                        })
                        .inc();
                }
                if let Outcome::RateLimited {
                    reason: sluice::Reason::Shed,
                    ..
                } = outcome
                {
                    self.sheds
                        .get_or_create(&CredentialLabels {
                            credential: (*credential).to_owned(),
                        })
                        .inc();
                }
            }
            Event::Request {
                credential,
                status,
                latency,
                ..
            } => self.record_upstream(credential, *status, latency.as_secs_f64()),
            Event::Wait {
                credential,
                wait,
                kind,
                ..
            } => {
                self.waits
                    .get_or_create(&WaitLabels {
                        credential: (*credential).to_owned(),
                        kind: kind.as_str().to_owned(),
                    })
                    .observe(wait.as_secs_f64());
            }
            Event::Retry {
                credential, tool, ..
            } => {
                self.retries
                    .get_or_create(&ToolLabels {
                        credential: (*credential).to_owned(),
                        tool: (*tool).to_owned(),
                    })
                    .inc();
            }
            Event::QuotaExhausted {
                credential, scope, ..
            } => {
                self.quota_events
                    .get_or_create(&ScopeLabels {
                        credential: (*credential).to_owned(),
                        scope: (*scope).to_owned(),
                    })
                    .inc();
            }
            Event::Shadow {
                credential,
                scope,
                decision,
                ..
            } => {
                self.shadow
                    .get_or_create(&ShadowLabels {
                        credential: (*credential).to_owned(),
                        scope: (*scope).to_owned(),
                        decision: decision.as_str().to_owned(),
                    })
                    .inc();
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use sluice::{Reason, WaitKind};

    use super::*;

    /// A real scope's status (its fields belong to the engine).
    async fn live_scope() -> ScopeStatus {
        use bytes::Bytes;
        use sluice::{Call, CredentialConfig, Gate, GateConfig, ToolConfig, executor_fn};
        let config = GateConfig::default()
            .credential("support", CredentialConfig::default())
            .tool("search", ToolConfig::read("support"));
        let executor =
            executor_fn(|_request| async { Ok(http::Response::new(Bytes::from_static(b"{}"))) });
        let gate = Gate::builder(config, executor).seed(1).build().unwrap();
        gate.call(Call::new("search", serde_json::json!({}))).await;
        gate.status().remove(0)
    }

    #[tokio::test]
    async fn counts_events_and_sets_gauges_at_scrape() {
        let metrics = Metrics::new();
        let shed =
            Outcome::rate_limited("api_key", Reason::Shed, Duration::from_millis(5), Some(1));
        metrics.observe(&Event::Outcome {
            credential: "support",
            tool: "search",
            outcome: &shed,
            coalesced: false,
            elapsed: Duration::ZERO,
        });
        metrics.observe(&Event::Request {
            credential: "support",
            tool: "search",
            status: Some(429),
            latency: Duration::from_millis(3),
        });
        metrics.observe(&Event::Wait {
            credential: "support",
            scope: "api_key",
            wait: Duration::from_millis(150),
            kind: WaitKind::Rate,
        });
        let mut scope = live_scope().await;
        scope.in_flight = 2;
        scope.queued = 3;
        scope.blocked_for_ms = Some(1500);
        let window = |used, remaining| sluice::scope::WindowStatus {
            window: "10/1s".to_owned(),
            used,
            remaining,
            next_free_ms: 250,
        };
        scope.windows = vec![window(4, 6)];
        scope.units = vec![sluice::scope::UnitStatus {
            unit: "tokens".to_owned(),
            windows: vec![window(7, 3)],
            server_remaining: None,
            server_reset_in_ms: None,
        }];
        let text = metrics.encode(&[scope], None);
        for line in [
            r#"sluice_calls_total{credential="support",tool="search",outcome="rate_limited",reason="shed"} 1"#,
            r#"sluice_shed_calls_total{credential="support"} 1"#,
            r#"sluice_upstream_requests_total{credential="support",status="429"} 1"#,
            r#"sluice_wait_seconds_count{credential="support",kind="rate"} 1"#,
            r#"sluice_in_flight{credential="support",scope="api_key"} 2"#,
            r#"sluice_queued{credential="support",scope="api_key"} 3"#,
            r#"sluice_blocked_seconds{credential="support",scope="api_key"} 1.5"#,
            r#"sluice_window_used{credential="support",scope="api_key",unit="requests",window="10/1s"} 4"#,
            r#"sluice_window_remaining{credential="support",scope="api_key",unit="tokens",window="10/1s"} 3"#,
            r#"sluice_window_next_free_seconds{credential="support",scope="api_key",unit="requests",window="10/1s"} 0.25"#,
        ] {
            assert!(text.contains(line), "{line}\n{text}");
        }
        // A scope that is gone disappears from the gauges.
        let text = metrics.encode(&[], None);
        assert!(!text.contains("sluice_in_flight{"), "{text}");
    }
}
