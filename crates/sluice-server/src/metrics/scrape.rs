//! A scrape: the scope and shared-backend gauges set from the engine's
//! status, then every family encoded.

use prometheus_client::encoding::text::encode;
use sluice::scope::ScopeStatus;

use super::Metrics;
use super::labels::*;

impl Metrics {
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
