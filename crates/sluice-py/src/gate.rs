//! `GateCore`: the engine's gate built from a configuration (a `dict` with
//! sluice.toml's schema, or TOML text), over the Python executor, with the
//! Redis budget when a credential is `shared`.

use std::sync::Arc;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};
use sluice::Gate;
use sluice_config::{ConfigError, EmbeddedConfig};
use sluice_http::trace::TraceObserver;
use sluice_http::{HttpExecutor, redis_config};
use sluice_redis::RedisBudget;

use crate::convert::to_json;
use crate::errors::{config_error, guard, internal};
use crate::executor::PyExecutor;
use crate::runtime;
use crate::state::GateState;
use crate::telemetry;
use crate::turn::TurnCore;

/// The engine's gate; `sluice.Gate` wraps it.
#[pyclass(module = "sluice._sluice", frozen)]
pub(crate) struct GateCore {
    state: Arc<GateState>,
}

fn read_config(config: &Bound<'_, PyAny>) -> PyResult<EmbeddedConfig> {
    let env = |name: &str| std::env::var(name).ok();
    let parsed = if let Ok(text) = config.cast::<PyString>() {
        EmbeddedConfig::from_toml(&text.to_cow()?, env)
    } else if config.is_instance_of::<PyDict>() {
        EmbeddedConfig::from_json(to_json(config, "config")?, env)
    } else {
        return Err(PyTypeError::new_err(
            "config must be a dict with sluice.toml's schema, or TOML text",
        ));
    };
    parsed.map_err(|error| config_error(&error))
}

#[pymethods]
impl GateCore {
    #[new]
    #[pyo3(signature = (config, seed=None))]
    fn new(py: Python<'_>, config: &Bound<'_, PyAny>, seed: Option<u64>) -> PyResult<Self> {
        guard(|| {
            let config = read_config(config)?;
            let runtime = runtime::runtime()?;
            let _entered = runtime.enter();
            let budget = match &config.shared {
                Some(settings) if config.gate.credentials.values().any(|c| c.shared) => {
                    let redis = redis_config(settings);
                    // Redis being down is not an error: the budget starts in
                    // its local fallback and recovers by itself.
                    let connected = py.detach(|| runtime.block_on(RedisBudget::connect(redis)));
                    let budget = connected.map_err(|error| {
                        config_error(&ConfigError::invalid("shared", error.to_string()))
                    })?;
                    Some(Arc::new(budget))
                }
                _ => None,
            };
            let http = HttpExecutor::new(&config.credentials)
                .map_err(|error| internal(error.to_string()))?;
            let tracer = telemetry::start(py, &config.telemetry)?;
            let mut builder = Gate::builder(config.gate.clone(), PyExecutor::new(http));
            // The same observer as the sidecar's: it notes on each call's
            // span why it waited and how it ended.
            if let Some(observer) = TraceObserver::wrap(tracer.as_ref(), None) {
                builder = builder.observer(observer);
            }
            if let Some(seed) = seed {
                builder = builder.seed(seed);
            }
            if let Some(budget) = &budget {
                builder = builder.shared(budget.clone());
            }
            let gate = builder
                .build()
                .map_err(|error| config_error(&ConfigError::from(error)))?;
            Ok(GateCore {
                state: Arc::new(GateState {
                    gate,
                    tools: config.tools,
                    upstreams: config.credentials,
                    _budget: budget,
                    tracer,
                }),
            })
        })
    }

    /// A new turn.
    fn turn(&self) -> TurnCore {
        TurnCore::new(self.state.clone())
    }

    /// The configured credentials' names.
    fn credentials(&self) -> Vec<String> {
        self.state.gate.credentials().map(str::to_owned).collect()
    }

    /// The configured (HTTP) tools' names.
    fn tools(&self) -> Vec<String> {
        self.state.tools.keys().cloned().collect()
    }

    /// Sends the spans this gate's calls left, waiting at most `timeout_s`
    /// seconds; false when they did not all leave in time.
    fn flush_traces(&self, py: Python<'_>, timeout_s: f64) -> PyResult<bool> {
        guard(|| telemetry::flush(py, self.state.tracer.as_slice(), timeout_s))
    }

    /// Calls in flight on a credential's own scope.
    fn in_flight(&self, credential: &str) -> usize {
        self.state.gate.in_flight(credential)
    }
}
