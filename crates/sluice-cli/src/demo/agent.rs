//! The two harnesses a model's calls go through: naive, and sluice.

use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use reqwest::Url;
use sluice::{
    Call, CredentialConfig, Executor, Gate, GateConfig, Outcome, Request, ToolConfig,
    TransportError, Turn,
};

use super::model::{ToolCall, View};
use super::scenario::{Harness, KEY_LIMIT, KEY_WINDOW, SHARED_KEY, SYNC_PEAK_PER_WINDOW};

/// The naive harness's retry policy, tuned for gateway blips.
const NAIVE_RETRIES: u32 = 3;
const NAIVE_RETRY_DELAY: Duration = Duration::from_millis(200);
/// The API's latency as the operator knows it (feeds Little's law).
const EXPECTED_LATENCY: Duration = Duration::from_millis(400);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
const TOOLS: [&str; 3] = ["search_tickets", "get_usage", "list_customers"];

/// Sends the demo's tool calls to the API: `GET /api/{tool}?{args}`.
#[derive(Debug, Clone)]
pub(crate) struct ApiClient {
    client: reqwest::Client,
    base: Url,
}

impl ApiClient {
    fn new(base: &str) -> anyhow::Result<Self> {
        Ok(ApiClient {
            client: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .context("building the HTTP client")?,
            base: Url::parse(base)
                .with_context(|| format!("parsing the API's address {base:?}"))?,
        })
    }

    fn url(&self, tool: &str, args: &serde_json::Value) -> Url {
        let mut url = self.base.clone();
        if let Ok(mut segments) = url.path_segments_mut() {
            segments.pop_if_empty().extend(["api", tool]);
        }
        if let Some(args) = args.as_object().filter(|args| !args.is_empty()) {
            let mut query = url.query_pairs_mut();
            for (name, value) in args {
                query.append_pair(name, value.as_str().unwrap_or_default());
            }
        }
        url
    }

    async fn get(
        &self,
        tool: &str,
        args: &serde_json::Value,
        timeout: Duration,
    ) -> reqwest::Result<reqwest::Response> {
        self.client
            .get(self.url(tool, args))
            .header("authorization", SHARED_KEY)
            .timeout(timeout)
            .send()
            .await
    }
}

impl Executor for ApiClient {
    type Payload = serde_json::Value;

    async fn execute(
        &self,
        request: Request<serde_json::Value>,
    ) -> Result<http::Response<Bytes>, TransportError> {
        let response = self
            .get(&request.tool, &request.payload, request.timeout)
            .await
            .map_err(|error| {
                if error.is_connect() {
                    TransportError::connect(error.to_string())
                } else {
                    TransportError::other(error.to_string())
                }
            })?;
        let mut builder = http::Response::builder().status(response.status().as_u16());
        for (name, value) in response.headers() {
            builder = builder.header(name.as_str(), value.as_bytes());
        }
        let body = response
            .bytes()
            .await
            .map_err(|error| TransportError::other(error.to_string()))?;
        builder
            .body(body)
            .map_err(|error| TransportError::other(error.to_string()))
    }
}

/// A harness, ready to run turns.
pub(crate) enum Agent {
    Naive(ApiClient),
    Sluice(Gate<ApiClient>),
}

/// One turn's handle: calls made through it share the turn.
#[derive(Clone)]
pub(crate) enum AgentTurn {
    Naive(ApiClient),
    Sluice(Turn<ApiClient>),
}

impl Agent {
    pub(crate) fn new(harness: Harness, base: &str, seed: u64) -> anyhow::Result<Self> {
        let client = ApiClient::new(base)?;
        Ok(match harness {
            Harness::Naive => Agent::Naive(client),
            Harness::Sluice => Agent::Sluice(
                Gate::builder(gate_config()?, client)
                    .seed(seed)
                    .build()
                    .context("building the sluice gate")?,
            ),
        })
    }

    pub(crate) fn client(&self) -> reqwest::Client {
        match self {
            Agent::Naive(client) => client.client.clone(),
            Agent::Sluice(gate) => gate.executor().client.clone(),
        }
    }

    pub(crate) fn turn(&self) -> AgentTurn {
        match self {
            Agent::Naive(client) => AgentTurn::Naive(client.clone()),
            Agent::Sluice(gate) => AgentTurn::Sluice(gate.turn()),
        }
    }
}

/// sluice's configuration for the agent: a bucket for its share of the key
/// (the key's limit minus the most the sync job can spend in one rolling
/// second), everything else default:
/// `max_in_flight` from Little's law, headers honored, the 2 s inline
/// threshold, single-flight and the turn cache.
fn gate_config() -> anyhow::Result<GateConfig> {
    let share = format!(
        "{}/{}ms",
        KEY_LIMIT - SYNC_PEAK_PER_WINDOW,
        KEY_WINDOW.as_millis()
    );
    let credential = CredentialConfig::with_rate(share.parse()?).expected_latency(EXPECTED_LATENCY);
    let config = TOOLS.iter().fold(
        GateConfig::default().credential("support", credential),
        |config, tool| config.tool(tool, ToolConfig::read("support")),
    );
    Ok(config)
}

impl AgentTurn {
    pub(crate) async fn call(&self, call: &ToolCall) -> View {
        match self {
            AgentTurn::Naive(client) => naive_call(client, call).await,
            AgentTurn::Sluice(turn) => {
                match turn.call(Call::new(call.tool, call.args.clone())).await {
                    Outcome::Ok { .. } => View::Ok,
                    Outcome::RateLimited { retry_after_ms, .. } => {
                        View::RateLimited(Duration::from_millis(retry_after_ms))
                    }
                    Outcome::QuotaExhausted { .. } => View::QuotaExhausted,
                    Outcome::TimedOut { .. } => View::TimedOut,
                    _ => View::Failed,
                }
            }
        }
    }
}

/// Fan out at once; on 429 retry after a fixed 200 ms, three times, without
/// jitter or reading any header; then report "tool failed".
async fn naive_call(client: &ApiClient, call: &ToolCall) -> View {
    for attempt in 0..=NAIVE_RETRIES {
        match client.get(call.tool, &call.args, REQUEST_TIMEOUT).await {
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
