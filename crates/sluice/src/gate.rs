//! The [`Gate`]: built once from a [`GateConfig`] and an [`Executor`], shared by every turn.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};
use tokio::time::Instant;

use crate::call::{Call, Route};
use crate::config::{ConfigError, Defaults, GateConfig, Limits};
use crate::executor::Executor;
use crate::limiter::{Micros, micros};
use crate::observe::{Event, Observer};
use crate::outcome::Outcome;
use crate::retry::RetryBudget;
use crate::scope::{Registry, Scope, ScopeStatus};
use crate::shared::SharedBudget;
use crate::signal::DEFAULT_SCOPE;
use crate::turn::Turn;

/// The shared limits for every call a harness makes. Cheap to clone.
///
/// ```
/// use bytes::Bytes;
/// use serde_json::json;
/// use sluice::{Call, CredentialConfig, Gate, GateConfig, ToolConfig, executor_fn};
///
/// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
/// let config = GateConfig::default()
///     .credential("support", CredentialConfig::with_rate("10/1s".parse().unwrap()))
///     .tool("search_tickets", ToolConfig::read("support"));
/// let executor = executor_fn(|request| async move {
///     // A real harness sends an HTTP request for `request.tool` here.
///     Ok(http::Response::new(Bytes::from(format!("{{\"q\":{}}}", request.payload["q"]))))
/// });
/// let gate = Gate::builder(config, executor).seed(7).build().unwrap();
///
/// let turn = gate.turn();
/// let outcomes = turn
///     .run(vec![
///         Call::new("search_tickets", json!({"q": "refund"})),
///         Call::new("search_tickets", json!({"q": "refund"})), // joins the first
///         Call::new("search_tickets", json!({"q": "late"})),
///     ])
///     .await;
/// assert!(outcomes.iter().all(|o| o.is_ok()));
/// # });
/// ```
pub struct Gate<E> {
    pub(crate) inner: Arc<Inner<E>>,
}

impl<E> std::fmt::Debug for Gate<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}

impl<E> Clone for Gate<E> {
    fn clone(&self) -> Self {
        Gate {
            inner: self.inner.clone(),
        }
    }
}

pub(crate) struct Inner<E> {
    pub(crate) defaults: Defaults,
    pub(crate) executor: E,
    pub(crate) credentials: HashMap<Arc<str>, Credential>,
    pub(crate) tools: HashMap<Arc<str>, Arc<Route>>,
    pub(crate) scopes: Registry,
    pub(crate) rng: Mutex<Box<dyn RngCore + Send>>,
    pub(crate) origin: Instant,
    pub(crate) observer: Option<Arc<dyn Observer>>,
    pub(crate) shared: Option<Arc<dyn SharedBudget>>,
}

impl<E> std::fmt::Debug for Inner<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate")
            .field("credentials", &self.credentials.keys().collect::<Vec<_>>())
            .field("tools", &self.tools.keys().collect::<Vec<_>>())
            .field("scopes", &self.scopes.len())
            .finish_non_exhaustive()
    }
}

/// A credential at run time.
#[derive(Debug)]
pub(crate) struct Credential {
    pub(crate) name: Arc<str>,
    pub(crate) limits: Limits,
    pub(crate) retry: Mutex<RetryBudget>,
    /// Tool -> scopes the server reported on that tool's responses.
    pub(crate) bindings: Mutex<HashMap<Arc<str>, Vec<Arc<str>>>>,
}

/// Most scopes the server may create under one credential; more names are
/// folded into the credential's own scope so headers cannot grow memory.
const MAX_REPORTED_SCOPES: usize = 32;
/// Most reported scopes one tool is bound to.
const MAX_BINDINGS_PER_TOOL: usize = 8;

/// Builds a [`Gate`]; see [`Gate::builder`].
pub struct GateBuilder<E> {
    config: GateConfig,
    executor: E,
    rng: Option<Box<dyn RngCore + Send>>,
    observer: Option<Arc<dyn Observer>>,
    shared: Option<Arc<dyn SharedBudget>>,
}

impl<E: Executor> Gate<E> {
    /// Starts building a gate for `config` that sends through `executor`.
    pub fn builder(config: GateConfig, executor: E) -> GateBuilder<E> {
        GateBuilder {
            config,
            executor,
            rng: None,
            observer: None,
            shared: None,
        }
    }

    /// A new turn: the calls of one model step, sharing single-flight and a read cache.
    pub fn turn(&self) -> Turn<E> {
        Turn::new(self.clone())
    }

    /// Runs one call in a turn of its own.
    pub async fn call(&self, call: Call<E::Payload>) -> Outcome {
        self.turn().call(call).await
    }

    /// Every live scope, for status pages.
    pub fn status(&self) -> Vec<ScopeStatus> {
        let now = self.inner.now();
        self.inner
            .scopes
            .all()
            .iter()
            .map(|scope| scope.status(now))
            .collect()
    }

    /// Calls in flight on a credential's own scope right now.
    pub fn in_flight(&self, credential: &str) -> usize {
        self.inner
            .scopes
            .find(credential, DEFAULT_SCOPE)
            .map_or(0, |scope| scope.in_flight())
    }

    /// The executor the gate sends through.
    pub fn executor(&self) -> &E {
        &self.inner.executor
    }

    /// The defaults in force.
    pub fn defaults(&self) -> &Defaults {
        &self.inner.defaults
    }

    /// The configured credentials' names.
    pub fn credentials(&self) -> impl Iterator<Item = &str> {
        self.inner.credentials.keys().map(|name| &**name)
    }
}

impl<E: Executor> GateBuilder<E> {
    /// Seeds the jitter with a fixed value (tests, `--seed`).
    pub fn seed(self, seed: u64) -> Self {
        self.rng(StdRng::seed_from_u64(seed))
    }

    /// Uses `rng` for jitter.
    pub fn rng(mut self, rng: impl RngCore + Send + 'static) -> Self {
        self.rng = Some(Box::new(rng));
        self
    }

    /// Reports events to `observer` (metrics).
    pub fn observer(mut self, observer: Arc<dyn Observer>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Spends credentials marked `shared` through `budget`, shared with
    /// other processes (the Redis backend, or [`crate::shared::InMemoryBudget`]).
    pub fn shared(mut self, budget: Arc<dyn SharedBudget>) -> Self {
        self.shared = Some(budget);
        self
    }

    /// Validates the configuration and builds the gate. Must run inside a
    /// tokio runtime (the gate reads tokio's clock).
    pub fn build(self) -> Result<Gate<E>, ConfigError> {
        let config = self.config;
        config.validate()?;
        let defaults = config.defaults.clone();
        let mut credentials = HashMap::new();
        for (name, credential) in &config.credentials {
            let limits = credential.resolve(name, &defaults)?;
            if limits.shared && self.shared.is_none() {
                return Err(ConfigError::new(
                    format!("credentials.{name}.shared"),
                    "a shared credential needs a shared backend (GateBuilder::shared)",
                ));
            }
            let name: Arc<str> = Arc::from(name.as_str());
            credentials.insert(
                name.clone(),
                Credential {
                    name,
                    limits,
                    retry: Mutex::new(RetryBudget::new(
                        defaults.retry_ratio,
                        defaults.retry_floor,
                        defaults.retry_window,
                    )),
                    bindings: Mutex::new(HashMap::new()),
                },
            );
        }
        let tools = config
            .tools
            .iter()
            .map(|(name, tool)| {
                let route = Route {
                    credential: tool.credential.clone(),
                    read: tool.read,
                    idempotent: tool.idempotent || tool.read,
                    deadline: tool.deadline,
                };
                (Arc::from(name.as_str()), Arc::new(route))
            })
            .collect();
        let rng = self.rng.unwrap_or_else(|| Box::new(StdRng::from_os_rng()));
        Ok(Gate {
            inner: Arc::new(Inner {
                scopes: Registry::new(micros(defaults.scope_idle)),
                defaults,
                executor: self.executor,
                credentials,
                tools,
                rng: Mutex::new(rng),
                origin: Instant::now(),
                observer: self.observer,
                shared: self.shared,
            }),
        })
    }
}

impl<E> Inner<E> {
    /// Now, in microseconds since the gate was built, on tokio's clock.
    pub(crate) fn now(&self) -> Micros {
        self.micros_at(Instant::now())
    }

    /// `at`, in microseconds since the gate was built.
    pub(crate) fn micros_at(&self, at: Instant) -> Micros {
        micros(at.saturating_duration_since(self.origin))
    }

    pub(crate) fn instant(&self, at: Micros) -> Instant {
        self.origin + Duration::from_micros(at)
    }

    pub(crate) fn observe(&self, event: Event<'_>) {
        if let Some(observer) = &self.observer {
            observer.observe(&event);
        }
    }

    /// The credential's own scope.
    pub(crate) fn primary(&self, credential: &Credential, now: Micros) -> Arc<Scope> {
        self.scopes.get(&credential.name, DEFAULT_SCOPE, now, || {
            Scope::primary(
                credential.name.clone(),
                Arc::from(DEFAULT_SCOPE),
                &credential.limits,
                now,
            )
        })
    }

    /// The scopes the server reported for `tool` on earlier responses.
    pub(crate) fn bound(
        &self,
        credential: &Credential,
        tool: &str,
        now: Micros,
    ) -> Vec<Arc<Scope>> {
        let names = {
            let bindings = credential
                .bindings
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            bindings.get(tool).cloned().unwrap_or_default()
        };
        names
            .iter()
            .map(|name| self.reported(credential, name, now))
            .collect()
    }

    fn reported(&self, credential: &Credential, name: &Arc<str>, now: Micros) -> Arc<Scope> {
        self.scopes.get(&credential.name, name, now, || {
            Scope::reported(
                credential.name.clone(),
                name.clone(),
                &credential.limits,
                now,
            )
        })
    }

    /// The scope a server report about `name` applies to, binding `tool` to
    /// it. Past the caps, reports fold into the credential's own scope.
    pub(crate) fn scope_for(
        &self,
        credential: &Credential,
        tool: &Arc<str>,
        name: &str,
        now: Micros,
    ) -> Arc<Scope> {
        if name == DEFAULT_SCOPE {
            return self.primary(credential, now);
        }
        let exists = self.scopes.find(&credential.name, name).is_some();
        if !exists && self.scopes.count(&credential.name) >= MAX_REPORTED_SCOPES {
            return self.primary(credential, now);
        }
        let name: Arc<str> = {
            let mut bindings = credential
                .bindings
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            let bound = bindings.entry(tool.clone()).or_default();
            match bound.iter().find(|bound| &***bound == name) {
                Some(bound) => bound.clone(),
                None if bound.len() < MAX_BINDINGS_PER_TOOL => {
                    let name: Arc<str> = Arc::from(name);
                    bound.push(name.clone());
                    name
                }
                None => return self.primary(credential, now),
            }
        };
        self.reported(credential, &name, now)
    }

    /// Where a call goes: its routed destination, or its configured tool's.
    pub(crate) fn route(&self, call: &Call<impl Send + Sync>) -> Result<Arc<Route>, Outcome> {
        let route =
            match &call.route {
                Some(route) => route.clone(),
                None => self.tools.get(&*call.tool).cloned().ok_or_else(|| {
                    Outcome::error(None, format!("unknown tool {:?}", &*call.tool))
                })?,
            };
        if !self.credentials.contains_key(route.credential.as_str()) {
            return Err(Outcome::error(
                None,
                format!("unknown credential {:?}", route.credential),
            ));
        }
        Ok(route)
    }
}
