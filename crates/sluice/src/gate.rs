//! The [`Gate`]: built once from a [`GateConfig`] and an [`Executor`], the handle every turn starts from.

use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};

use crate::call::{Call, Completion};
use crate::config::{ConfigError, Defaults, GateConfig};
use crate::engine::{Engine, TurnState};
use crate::executor::Executor;
use crate::observe::Observer;
use crate::outcome::Outcome;
use crate::pipeline::{self, Keep};
use crate::scope::ScopeStatus;
use crate::shared::SharedBudget;
use crate::signal::DEFAULT_SCOPE;
use crate::turn::Turn;

/// The limits every call a harness makes goes through. Cheap to clone.
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
    engine: Arc<Engine<E>>,
}

impl<E> std::fmt::Debug for Gate<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.engine.fmt(f)
    }
}

impl<E> Clone for Gate<E> {
    fn clone(&self) -> Self {
        Gate {
            engine: self.engine.clone(),
        }
    }
}

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

    /// The bytes of the box `call`'s steps would run in, on a turn of its
    /// own, without running them; `None` when the call needs no box. A
    /// measurement `sluice-bench` reports (`benches/future_size.rs`), not
    /// an API: a compiler's layout moves it.
    #[doc(hidden)]
    pub fn steps_bytes(&self, call: &Call<E::Payload>) -> Option<usize> {
        let turn = TurnState::single(&self.engine.defaults);
        pipeline::steps_size(&self.engine, &turn, call)
    }

    /// A new turn: the calls of one model step, sharing single-flight and a read cache.
    pub fn turn(&self) -> Turn<E> {
        Turn::new(self.engine.clone())
    }

    /// Runs one call in a turn of its own.
    pub async fn call(&self, call: Call<E::Payload>) -> Outcome {
        // Nothing outlives the call that would share its turn, so the
        // turn's state lives in the call's future, not in an allocation.
        let turn = TurnState::single(&self.engine.defaults);
        pipeline::complete(&self.engine, &turn, call, Keep::Outcome)
            .await
            .outcome
    }

    /// Runs one call in a turn of its own and keeps the upstream response
    /// alongside the outcome, as [`Turn::complete`] does for a turn's call.
    pub async fn complete(&self, call: Call<E::Payload>) -> Completion {
        let turn = TurnState::single(&self.engine.defaults);
        pipeline::complete(&self.engine, &turn, call, Keep::Response).await
    }

    /// Every live scope, for status pages.
    pub fn status(&self) -> Vec<ScopeStatus> {
        let now = self.engine.now();
        self.engine
            .scopes
            .all()
            .iter()
            .map(|scope| scope.status(now))
            .collect()
    }

    /// Calls in flight on a credential's own scope right now.
    pub fn in_flight(&self, credential: &str) -> usize {
        self.engine
            .scopes
            .find(credential, DEFAULT_SCOPE)
            .map_or(0, |scope| scope.in_flight())
    }

    /// The executor the gate sends through.
    pub fn executor(&self) -> &E {
        &self.engine.executor
    }

    /// The defaults in force.
    pub fn defaults(&self) -> &Defaults {
        &self.engine.defaults
    }

    /// The configured credentials' names.
    pub fn credentials(&self) -> impl Iterator<Item = &str> {
        self.engine.credentials.keys().map(|name| &**name)
    }
}

impl<E: Executor + Clone> Gate<E> {
    /// Reloads: builds a gate for `config` that takes over this one's
    /// scopes, so what each window has spent, the calls in flight and the
    /// calls waiting are kept, and hands it to `install` (which puts it
    /// where new calls find it). Changed limits apply to calls that start
    /// after; a call already holding a reserved start keeps it, and a call
    /// waiting for a permit gets one under the new cap. Calls running on
    /// this gate finish on it, against the same scopes.
    ///
    /// Refused, naming the field, when `config` is invalid or changes what
    /// cannot change without losing spend: besides tools, credentials
    /// added or removed and `[defaults]` (but `scope_idle` and
    /// `window_margin`), only a credential's `rate` and `burst` (not
    /// between a window and a bucket) and its `max_in_flight` (not to or
    /// from `"auto"`) may change. Nothing is changed then.
    pub fn reload(
        &self,
        config: GateConfig,
        install: impl FnOnce(Gate<E>),
    ) -> Result<(), ConfigError> {
        let engine = Arc::new(self.engine.reloaded(config)?);
        install(Gate {
            engine: engine.clone(),
        });
        // A call of this gate may have made a scope since the limits were
        // put into the live ones.
        engine.relimit();
        Ok(())
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
        let engine = Engine::new(
            self.config,
            self.executor,
            self.rng,
            self.observer,
            self.shared,
        )?;
        Ok(Gate {
            engine: Arc::new(engine),
        })
    }
}
