//! `GateCore`: the engine's gate built from a configuration (sluice.toml's
//! schema, as JSON text or TOML text), over the JavaScript executor, with
//! the Redis budget when a credential is `shared`.

use std::sync::Arc;

use crate::{HttpExecutor, redis_config};
use napi::bindgen_prelude::{Either, PromiseRaw, block_on, within_runtime_if_available};
use napi::{Env, Error, Status};
use napi_derive::napi;
use sluice::Gate;
use sluice_config::{ConfigError, EmbeddedConfig};
use sluice_redis::RedisBudget;

use crate::cancel::{Canceller, aborted_of, cancellable};
use crate::executor::JsExecutor;
use crate::fetch::{FetchAnswer, FetchRequest, fetch_answer, fetch_call};
use crate::state::GateState;
use crate::turn::TurnCore;

/// A configuration refused: `js/lib/errors.js` makes it a `ConfigError`.
#[napi(object)]
pub struct ConfigProblem {
    /// The field at fault, e.g. `credentials.support.rate`, when one is.
    pub field: Option<String>,
    /// The whole message, naming the field.
    pub message: String,
}

impl From<&ConfigError> for ConfigProblem {
    fn from(error: &ConfigError) -> Self {
        ConfigProblem {
            field: error.field().map(str::to_owned),
            message: error.to_string(),
        }
    }
}

/// The engine's gate; `Gate` in `js/lib/gate.js` wraps it.
#[napi]
pub struct GateCore {
    state: Arc<GateState>,
}

/// Builds a gate from `config`: JSON text of sluice.toml's schema, or TOML
/// text when `toml`. A configuration the engine refuses is answered as a
/// [`ConfigProblem`], not thrown.
#[napi(catch_unwind)]
pub fn open_gate(config: String, toml: bool) -> napi::Result<Either<GateCore, ConfigProblem>> {
    let env = |name: &str| std::env::var(name).ok();
    let parsed = if toml {
        EmbeddedConfig::from_toml(&config, env)
    } else {
        match serde_json::from_str(&config) {
            Ok(value) => EmbeddedConfig::from_json(value, env),
            Err(error) => {
                return Err(Error::new(
                    Status::InvalidArg,
                    format!("config is not JSON: {error}"),
                ));
            }
        }
    };
    let config = match parsed {
        Ok(config) => config,
        Err(error) => return Ok(Either::B(ConfigProblem::from(&error))),
    };
    let budget = match &config.shared {
        Some(settings) if config.gate.credentials.values().any(|c| c.shared) => {
            // Redis being down is not an error: the budget starts in its
            // local fallback and recovers by itself.
            match block_on(RedisBudget::connect(redis_config(settings))) {
                Ok(budget) => Some(Arc::new(budget)),
                Err(error) => {
                    let error = ConfigError::invalid("shared", error.to_string());
                    return Ok(Either::B(ConfigProblem::from(&error)));
                }
            }
        }
        _ => None,
    };
    within_runtime_if_available(|| {
        let http = HttpExecutor::new(&config.credentials)
            .map_err(|error| Error::new(Status::GenericFailure, error.to_string()))?;
        let mut builder = Gate::builder(config.gate.clone(), JsExecutor::new(http));
        if let Some(budget) = &budget {
            builder = builder.shared(budget.clone());
        }
        let gate = match builder.build() {
            Ok(gate) => gate,
            Err(error) => {
                return Ok(Either::B(ConfigProblem::from(&ConfigError::from(error))));
            }
        };
        Ok(Either::A(GateCore {
            state: Arc::new(GateState {
                gate,
                tools: config.tools,
                upstreams: config.credentials,
                _budget: budget,
            }),
        }))
    })
}

#[napi]
impl GateCore {
    /// A new turn.
    #[napi]
    pub fn turn(&self) -> TurnCore {
        TurnCore::new(self.state.clone())
    }

    /// The configured credentials' names.
    #[napi]
    pub fn credentials(&self) -> Vec<String> {
        self.state.gate.credentials().map(str::to_owned).collect()
    }

    /// The configured (HTTP) tools' names.
    #[napi]
    pub fn tools(&self) -> Vec<String> {
        self.state.tools.keys().cloned().collect()
    }

    /// Sends a `gate.fetch` request as a call in a turn of its own: a
    /// promise of its [`FetchAnswer`].
    #[napi(catch_unwind, ts_return_type = "Promise<FetchAnswer>")]
    pub fn fetch<'env>(
        &self,
        env: &'env Env,
        request: FetchRequest,
        canceller: Option<&Canceller>,
    ) -> napi::Result<PromiseRaw<'env, FetchAnswer>> {
        let completion = fetch_call(&self.state, request)?;
        let aborted = aborted_of(canceller);
        env.spawn_future(async move {
            let completion = cancellable(completion, aborted).await?;
            fetch_answer(&completion)
        })
    }

    /// Calls in flight on a credential's own scope.
    #[napi]
    pub fn in_flight(&self, credential: String) -> u32 {
        u32::try_from(self.state.gate.in_flight(&credential)).unwrap_or(u32::MAX)
    }
}
