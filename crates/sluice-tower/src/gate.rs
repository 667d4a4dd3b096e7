//! [`Sluice`]: one gate for every HTTP stack built on it.

use std::sync::Arc;

use sluice::{Gate, GateConfig, Observer};

use crate::call::Dispatch;
use crate::layer::SluiceLayer;
use crate::turn::Turn;

/// A gate for HTTP requests. Cheap to clone; clones, and every layer and
/// middleware made from it, share one set of limits.
///
/// ```
/// use sluice::{CredentialConfig, GateConfig};
/// use sluice_tower::Sluice;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let config = GateConfig::default()
///     .credential("github", CredentialConfig::with_rate("10/1s".parse()?).max_in_flight(4));
/// let sluice = Sluice::builder(config).seed(7).build()?;
/// assert_eq!(sluice.gate().credentials().collect::<Vec<_>>(), ["github"]);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Sluice {
    gate: Gate<Dispatch>,
}

/// Builds a [`Sluice`]; see [`Sluice::builder`].
pub struct SluiceBuilder {
    config: GateConfig,
    seed: Option<u64>,
    observer: Option<Arc<dyn Observer>>,
}

impl std::fmt::Debug for SluiceBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SluiceBuilder")
            .field("config", &self.config)
            .field("seed", &self.seed)
            .finish_non_exhaustive()
    }
}

impl Sluice {
    /// A gate for `config`, with jitter from the OS. Must run inside a
    /// tokio runtime (the engine reads tokio's clock).
    pub fn new(config: GateConfig) -> Result<Self, sluice::ConfigError> {
        Sluice::builder(config).build()
    }

    /// Starts building a gate for `config`.
    pub fn builder(config: GateConfig) -> SluiceBuilder {
        SluiceBuilder {
            config,
            seed: None,
            observer: None,
        }
    }

    /// A tower [`Layer`](tower_layer::Layer) whose services send through
    /// this gate; `classify` says what each request is (`None`: not gated,
    /// sent as is).
    pub fn layer<F>(&self, classify: F) -> SluiceLayer<F>
    where
        F: Fn(&http::Request<bytes::Bytes>) -> Option<crate::Target> + Send + Sync + 'static,
    {
        SluiceLayer::new(self.gate.clone(), classify)
    }

    /// A new turn: requests carrying it (in their extensions) share
    /// single-flight and a read cache. Requests without one are each a
    /// turn of their own.
    pub fn turn(&self) -> Turn {
        Turn::new(self.gate.turn())
    }

    /// The gate, for status and in-flight counts.
    pub fn gate(&self) -> &Gate<Dispatch> {
        &self.gate
    }
}

impl SluiceBuilder {
    /// Seeds the retry jitter (tests, reproducible runs).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Reports the gate's events to `observer` (metrics).
    pub fn observer(mut self, observer: Arc<dyn Observer>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Validates the configuration and builds the gate.
    pub fn build(self) -> Result<Sluice, sluice::ConfigError> {
        let mut builder = Gate::builder(self.config, Dispatch);
        if let Some(seed) = self.seed {
            builder = builder.seed(seed);
        }
        if let Some(observer) = self.observer {
            builder = builder.observer(observer);
        }
        Ok(Sluice {
            gate: builder.build()?,
        })
    }
}
