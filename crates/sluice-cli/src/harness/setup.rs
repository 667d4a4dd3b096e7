//! Setting a harness up for a strategy: the client, and the sluice gate or fixed-window limiter that strategy puts in front of it.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use parking_lot::Mutex;
use rand::SeedableRng;
use rand::rngs::StdRng;
use sluice::{CredentialConfig, Gate, GateConfig, Rate, ToolConfig};

use super::client::ApiClient;
use super::fixed_window::FixedWindow;
use super::strategy::Strategy;
use super::turn::HarnessTurn;

/// The API's latency as the operator knows it (feeds Little's law).
const EXPECTED_LATENCY: Duration = Duration::from_millis(400);

/// Everything a harness needs to know about the key.
#[derive(Debug, Clone)]
pub(crate) struct Setup<'a> {
    pub(crate) base: &'a str,
    pub(crate) key: &'a str,
    /// The rate the operator configures (`None`: unknown).
    pub(crate) rate: Option<Rate>,
    pub(crate) tools: &'a [&'a str],
    pub(crate) seed: u64,
    pub(crate) deadline: Duration,
    /// sluice's admission queue (`None`: its default).
    pub(crate) queue: Option<u32>,
}

/// A harness, ready to run turns.
pub(crate) struct Harness {
    strategy: Strategy,
    client: ApiClient,
    gate: Option<Gate<ApiClient>>,
    window: Option<Arc<FixedWindow>>,
    rng: Arc<Mutex<StdRng>>,
    deadline: Duration,
}

impl Harness {
    pub(crate) fn new(strategy: Strategy, setup: &Setup<'_>) -> anyhow::Result<Self> {
        let client = ApiClient::new(setup.base, setup.key)?;
        let gate = match strategy {
            Strategy::Sluice | Strategy::SluiceAuto => {
                let mut credential = CredentialConfig::default().expected_latency(EXPECTED_LATENCY);
                match strategy {
                    Strategy::SluiceAuto => credential = credential.auto_rate(),
                    _ => credential.rate = setup.rate,
                }
                credential.queue = setup.queue;
                let config = setup.tools.iter().fold(
                    GateConfig::default().credential("api", credential),
                    |config, tool| {
                        config.tool(tool, ToolConfig::read("api").deadline(setup.deadline))
                    },
                );
                Some(
                    Gate::builder(config, client.clone())
                        .seed(setup.seed)
                        .build()
                        .context("building the sluice gate")?,
                )
            }
            _ => None,
        };
        let window = (strategy == Strategy::Static)
            .then(|| setup.rate.map(|rate| Arc::new(FixedWindow::new(rate))))
            .flatten();
        Ok(Harness {
            strategy,
            client,
            gate,
            window,
            rng: Arc::new(Mutex::new(StdRng::seed_from_u64(setup.seed))),
            deadline: setup.deadline,
        })
    }

    pub(crate) fn client(&self) -> reqwest::Client {
        self.client.client.clone()
    }

    pub(crate) fn turn(&self) -> HarnessTurn {
        HarnessTurn {
            strategy: self.strategy,
            client: self.client.clone(),
            turn: self.gate.as_ref().map(Gate::turn),
            window: self.window.clone(),
            rng: self.rng.clone(),
            deadline: self.deadline,
        }
    }
}
