//! The harnesses a model's calls can go through, for the demo and the
//! benchmarks: what people do without sluice, and sluice.

mod client;
mod fixed_window;

use std::time::Duration;

use anyhow::Context;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;
use sluice::{Call, CredentialConfig, Gate, GateConfig, Outcome, Rate, ToolConfig, Turn};
use std::sync::{Arc, Mutex};

pub(crate) use client::ApiClient;
use fixed_window::FixedWindow;

/// What a model is told about a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum View {
    Ok,
    /// Deferred: wait this long, then re-issue the same call.
    RateLimited(Duration),
    /// A generic failure ("tool failed").
    Failed,
    TimedOut,
    /// Do not retry this turn.
    QuotaExhausted,
}

/// A client policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Strategy {
    /// Fan out at once; on 429 retry after a fixed 200 ms, three times.
    Naive,
    /// What common API SDKs do: 2 retries, Retry-After honoured up to 60 s,
    /// else exponential backoff from 0.5 s doubling to 8 s with 0.75-1 jitter.
    Sdk,
    /// A client-side fixed-window limit at the key's rate; no header reading.
    Static,
    /// Every call through a sluice gate with the key's rate.
    Sluice,
    /// A sluice gate with `rate = "auto"`.
    SluiceAuto,
}

impl Strategy {
    pub(crate) const ALL: [Strategy; 5] = [
        Strategy::Naive,
        Strategy::Sdk,
        Strategy::Static,
        Strategy::Sluice,
        Strategy::SluiceAuto,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Strategy::Naive => "naive",
            Strategy::Sdk => "sdk",
            Strategy::Static => "static",
            Strategy::Sluice => "sluice",
            Strategy::SluiceAuto => "sluice-auto",
        }
    }
}

/// The naive harness's retry policy, tuned for gateway blips.
const NAIVE_RETRIES: u32 = 3;
const NAIVE_RETRY_DELAY: Duration = Duration::from_millis(200);
/// The SDK policy's numbers (e.g. the OpenAI and Anthropic Python SDKs'
/// defaults: 2 retries, 0.5 s initial backoff, 8 s cap, jitter 0.75-1).
const SDK_RETRIES: u32 = 2;
const SDK_MAX_RETRY_AFTER: Duration = Duration::from_secs(60);
const SDK_BACKOFF_BASE: Duration = Duration::from_millis(500);
const SDK_BACKOFF_CAP: Duration = Duration::from_secs(8);
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

/// One turn's handle: calls made through it share the turn.
#[derive(Clone)]
pub(crate) struct HarnessTurn {
    strategy: Strategy,
    client: ApiClient,
    turn: Option<Turn<ApiClient>>,
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

impl HarnessTurn {
    /// One call, as the harness makes it; the deadline bounds it for every strategy.
    pub(crate) async fn call(&self, tool: &str, args: &Value) -> View {
        if let Some(turn) = &self.turn {
            return match turn.call(Call::new(tool, args.clone())).await {
                Outcome::Ok { .. } => View::Ok,
                Outcome::RateLimited { retry_after_ms, .. } => {
                    View::RateLimited(Duration::from_millis(retry_after_ms))
                }
                Outcome::QuotaExhausted { .. } => View::QuotaExhausted,
                Outcome::TimedOut { .. } => View::TimedOut,
                _ => View::Failed,
            };
        }
        let attempts = async {
            match self.strategy {
                Strategy::Sdk => self.sdk(tool, args).await,
                _ => self.naive(tool, args).await,
            }
        };
        tokio::time::timeout(self.deadline, attempts)
            .await
            .unwrap_or(View::TimedOut)
    }

    async fn send(&self, tool: &str, args: &Value) -> Result<reqwest::Response, ()> {
        if let Some(window) = &self.window {
            window.acquire().await;
        }
        self.client
            .get(tool, args, self.deadline)
            .await
            .map_err(|_| ())
    }

    /// Fan out at once; on 429 retry after a fixed delay, a few times; then "tool failed".
    async fn naive(&self, tool: &str, args: &Value) -> View {
        // The static strategy keeps the naive retries behind its limiter.
        for attempt in 0..=NAIVE_RETRIES {
            match self.send(tool, args).await {
                Ok(response) if response.status().is_success() => {
                    let _ = response.bytes().await;
                    return View::Ok;
                }
                Ok(response)
                    if response.status() == reqwest::StatusCode::TOO_MANY_REQUESTS
                        && attempt < NAIVE_RETRIES =>
                {
                    tokio::time::sleep(NAIVE_RETRY_DELAY).await;
                }
                _ => return View::Failed,
            }
        }
        View::Failed
    }

    /// Retries 429 and 5xx twice: after Retry-After when it is at most 60 s,
    /// else after an exponential backoff with 0.75-1 jitter.
    async fn sdk(&self, tool: &str, args: &Value) -> View {
        for attempt in 0..=SDK_RETRIES {
            let response = match self.send(tool, args).await {
                Ok(response) => response,
                Err(()) if attempt < SDK_RETRIES => {
                    tokio::time::sleep(self.backoff(attempt)).await;
                    continue;
                }
                Err(()) => return View::Failed,
            };
            let status = response.status();
            if status.is_success() {
                let _ = response.bytes().await;
                return View::Ok;
            }
            let retryable =
                status == reqwest::StatusCode::TOO_MANY_REQUESTS || status.is_server_error();
            if !retryable || attempt == SDK_RETRIES {
                return View::Failed;
            }
            let retry_after = response
                .headers()
                .get("retry-after")
                .and_then(|value| value.to_str().ok())
                .and_then(|text| text.trim().parse::<f64>().ok())
                .filter(|secs| secs.is_finite() && *secs >= 0.0)
                .map(Duration::from_secs_f64)
                .filter(|wait| *wait <= SDK_MAX_RETRY_AFTER);
            tokio::time::sleep(retry_after.unwrap_or_else(|| self.backoff(attempt))).await;
        }
        View::Failed
    }

    fn backoff(&self, attempt: u32) -> Duration {
        let exponential = SDK_BACKOFF_BASE
            .saturating_mul(1 << attempt.min(8))
            .min(SDK_BACKOFF_CAP);
        let jitter = self
            .rng
            .lock()
            .map_or(1.0, |mut rng| rng.random_range(0.75..=1.0));
        exponential.mul_f64(jitter)
    }
}
