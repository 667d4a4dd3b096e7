//! What the page renders: every credential with its mode and limits, and its live scopes.

use serde::Serialize;
use sluice::GateConfig;
use sluice::scope::ScopeStatus;

/// Whether a credential's limits are enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Calls wait, are deferred or shed as the limits say.
    Enforce,
    /// `enforce = false`: every decision is recorded, none acted on.
    Shadow,
}

impl Mode {
    /// The mode of a credential whose `enforce` is `enforce`.
    pub fn of(enforce: bool) -> Mode {
        if enforce { Mode::Enforce } else { Mode::Shadow }
    }
}

/// One credential as configured, with its live scopes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CredentialView {
    /// The credential's name.
    pub name: String,
    /// Enforcing or shadow.
    pub mode: Mode,
    /// `false` in shadow mode (the configuration's own word).
    pub enforce: bool,
    /// The configured rate, e.g. `10/1s`.
    pub rate: Option<String>,
    /// `rate = "auto"`: probing for the server's limit.
    pub auto_rate: bool,
    /// The configured burst (GCRA semantics).
    pub burst: Option<u32>,
    /// The configured concurrency cap (the scope shows the one in force).
    pub max_in_flight: Option<u32>,
    /// The configured queue bound (the scope shows the one in force).
    pub queue: Option<u32>,
    /// Spends a budget shared with other processes.
    pub shared: bool,
    /// Live scopes; none until the credential's first call.
    pub scopes: Vec<ScopeStatus>,
}

/// Everything the page shows at one moment.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Snapshot {
    /// Every configured credential, by name.
    pub credentials: Vec<CredentialView>,
}

impl Snapshot {
    /// The credentials of `config` with the live `scopes` of a gate built
    /// from it ([`sluice::Gate::status`]), each under its credential.
    pub fn new(config: &GateConfig, scopes: Vec<ScopeStatus>) -> Snapshot {
        let mut credentials: Vec<CredentialView> = config
            .credentials
            .iter()
            .map(|(name, credential)| CredentialView {
                name: name.clone(),
                mode: Mode::of(credential.enforce),
                enforce: credential.enforce,
                rate: credential.rate.map(|rate| rate.to_string()),
                auto_rate: credential.auto_rate,
                burst: credential.burst,
                max_in_flight: credential.max_in_flight,
                queue: credential.queue,
                shared: credential.shared,
                scopes: Vec::new(),
            })
            .collect();
        for scope in scopes {
            if let Some(view) = credentials.iter_mut().find(|c| c.name == scope.credential) {
                view.scopes.push(scope);
            }
        }
        for view in &mut credentials {
            // The credential's own scope first, then the others by name.
            view.scopes.sort_by(|a, b| {
                (a.scope != sluice::signal::DEFAULT_SCOPE, &a.scope)
                    .cmp(&(b.scope != sluice::signal::DEFAULT_SCOPE, &b.scope))
            });
        }
        Snapshot { credentials }
    }
}
