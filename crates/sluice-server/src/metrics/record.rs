//! What each event counts: the engine's events as they happen, and the
//! outcomes and modes the sidecar decides itself.

use sluice::{Event, Observer, Outcome};

use super::Metrics;
use super::labels::*;

impl Metrics {
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
