//! The [`Engine`]: everything a gate holds for every call, built once from its configuration.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};
use tokio::time::Instant;

use super::Credential;
use crate::call::Route;
use crate::clock::EngineClock;
use crate::config::{ConfigError, Defaults, GateConfig, Spend};
use crate::deadline::Deadline;
use crate::hash::FastMap;
use crate::limiter::{Micros, micros};
use crate::observe::{Event, Observer};
use crate::retry::full_jitter;
use crate::scope::Registry;
use crate::shared::SharedBudget;

/// A configured tool, resolved when the gate is built.
#[derive(Debug)]
pub(crate) struct Tool {
    pub(crate) route: Route,
    /// What its calls spend besides their request (issue 14).
    pub(crate) spend: Spend,
    pub(crate) credential: Arc<Credential>,
}

/// A gate's state: defaults, the executor, credentials and tools, the live
/// scopes, the jitter's RNG, the clock's origin, the observer and the
/// shared budget. Shared by every handle ([`Gate`](crate::Gate),
/// [`Turn`](crate::Turn)) behind one `Arc`.
pub(crate) struct Engine<E> {
    pub(crate) defaults: Defaults,
    pub(crate) executor: E,
    pub(crate) credentials: FastMap<Arc<str>, Arc<Credential>>,
    /// Each configured tool with its route, spend and credential, found by
    /// one look-up of its name.
    pub(crate) tools: FastMap<Arc<str>, Tool>,
    /// Shared with the engine a reload replaces it with (`reload.rs`).
    pub(crate) scopes: Arc<Registry>,
    /// [`DEFAULT_SCOPE`](crate::signal::DEFAULT_SCOPE), once for every
    /// credential's own scope: a look-up compares it with bytes in cache.
    pub(crate) default_scope: Arc<str>,
    rng: Mutex<Box<dyn RngCore + Send>>,
    /// Where the engine's microsecond clock starts, as an instant...
    pub(super) origin: Instant,
    /// ...and the clock itself, read on every call.
    pub(super) ticks: EngineClock,
    pub(super) observer: Option<Arc<dyn Observer>>,
    pub(super) shared: Option<Arc<dyn SharedBudget>>,
}

impl<E> std::fmt::Debug for Engine<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate")
            .field("credentials", &self.credentials.keys().collect::<Vec<_>>())
            .field("tools", &self.tools.keys().collect::<Vec<_>>())
            .field("scopes", &self.scopes.len())
            .finish_non_exhaustive()
    }
}

impl<E> Engine<E> {
    /// Validates `config` and builds the state, starting the engine's clock
    /// (on tokio's clock if the runtime is paused: `EngineClock::start`).
    pub(crate) fn new(
        config: GateConfig,
        executor: E,
        rng: Option<Box<dyn RngCore + Send>>,
        observer: Option<Arc<dyn Observer>>,
        shared: Option<Arc<dyn SharedBudget>>,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        let defaults = config.defaults.clone();
        let mut credentials = FastMap::default();
        for (name, credential) in &config.credentials {
            let limits = credential.resolve(name, &defaults)?;
            if limits.shared && shared.is_none() {
                return Err(ConfigError::new(
                    format!("credentials.{name}.shared"),
                    "a shared credential needs a shared backend (GateBuilder::shared)",
                ));
            }
            let name: Arc<str> = Arc::from(name.as_str());
            let credential = Arc::new(Credential::new(name.clone(), limits, &defaults));
            credentials.insert(name, credential);
        }
        let mut tools = FastMap::default();
        for (name, tool) in &config.tools {
            // `validate` has checked that every tool names a credential.
            let Some(credential) = credentials.get(tool.credential.as_str()) else {
                return Err(ConfigError::new(
                    format!("tools.{name}.credential"),
                    format!("no credential named {:?}", tool.credential),
                ));
            };
            let route = Route {
                credential: tool.credential.clone(),
                read: tool.read,
                idempotent: tool.idempotent,
                deadline: tool.deadline,
            };
            let tool = Tool {
                route,
                spend: tool.spend.clone(),
                credential: Arc::clone(credential),
            };
            tools.insert(Arc::from(name.as_str()), tool);
        }
        let rng = rng.unwrap_or_else(|| Box::new(StdRng::from_os_rng()));
        let ticks = EngineClock::start();
        Ok(Engine {
            scopes: Arc::new(Registry::new(micros(defaults.scope_idle))),
            default_scope: Arc::from(crate::signal::DEFAULT_SCOPE),
            defaults,
            executor,
            credentials,
            tools,
            rng: Mutex::new(rng),
            origin: ticks.now(),
            ticks,
            observer,
            shared,
        })
    }

    /// Now, in microseconds since the engine was built, on the engine's clock
    /// (one counter read and a subtraction on a production build).
    pub(crate) fn now(&self) -> Micros {
        self.ticks.micros()
    }

    /// One reading of the clock, as an instant and as [`Engine::now`].
    pub(crate) fn clock(&self) -> (Instant, Micros) {
        let at = self.ticks.now();
        (at, self.micros_at(at))
    }

    /// `at`, in microseconds since the engine was built.
    pub(crate) fn micros_at(&self, at: Instant) -> Micros {
        micros(at.saturating_duration_since(self.origin))
    }

    /// The instant `at` microseconds after the engine was built. Starts are
    /// never further off than a deadline, so the fallback (a deadline's
    /// length from now) is only there so that no value can overflow.
    pub(crate) fn instant(&self, at: Micros) -> Instant {
        self.origin
            .checked_add(Duration::from_micros(at))
            .unwrap_or_else(|| {
                let now = self.ticks.now();
                now.checked_add(Deadline::MAX_LEN).unwrap_or(now)
            })
    }

    /// True when an observer is told of events (so an event's own cost,
    /// a clock reading, is only paid for someone).
    pub(crate) fn observed(&self) -> bool {
        self.observer.is_some()
    }

    /// Reports `event` to the observer, if there is one.
    pub(crate) fn observe(&self, event: Event<'_>) {
        if let Some(observer) = &self.observer {
            observer.observe(&event);
        }
    }

    /// The shared budget, when `credential` spends one.
    pub(crate) fn shared_for(&self, credential: &Credential) -> Option<&Arc<dyn SharedBudget>> {
        self.shared.as_ref().filter(|_| credential.limits.shared)
    }

    /// The full-jitter backoff before retry `attempt` (1 for the first retry).
    pub(crate) fn backoff(&self, attempt: u32) -> Duration {
        let mut rng = self.rng.lock();
        full_jitter(
            &mut **rng,
            self.defaults.backoff_base,
            self.defaults.backoff_cap,
            attempt.saturating_sub(1),
        )
    }
}
