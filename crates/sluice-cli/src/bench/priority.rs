//! The `priority` scenario: a production job at high priority and an agent
//! at low priority on one key, through one gate. The agent floods at three
//! times the key's limit; production calls at a steady rate. sluice with
//! priorities (and `priorities.low` capping the agent's share) against the
//! same gate serving everyone first come, first served.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use parking_lot::Mutex;
use serde::Serialize;
use serde_json::json;
use sluice::{Call, CredentialConfig, Gate, GateConfig, Outcome, Priority, Rate, ToolConfig};
use sluice_fake::{Config, FakeApi, FakeServer, Latency, Limits, Record};
use tokio::time::Instant;

use super::json_api::JsonApi;
use super::outcome::{CallLog, percentile_ms, ratio};

/// The key's limit, per rolling second.
const LIMIT: u32 = 20;
/// Production's steady rate, and the agent's flood as a multiple of the limit.
const PRODUCTION_PER_SEC: f64 = 4.0;
const AGENT_OVERLOAD: f64 = 3.0;
/// `priorities.low`: the share of every window the agent may start.
const LOW_SHARE: f64 = 0.75;
/// The engine's default inline threshold: production's waits must stay under it.
pub(crate) const INLINE_THRESHOLD: Duration = Duration::from_secs(2);
const DEADLINE: Duration = Duration::from_secs(10);
const KEY: &str = "Bearer shared-org-key";
const PRODUCTION: &str = "production_sync";
const AGENT: &str = "agent_search";

/// How the gate orders the two callers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PriorityStrategy {
    /// Everyone at normal priority, no share cap: first come, first served.
    Fifo,
    /// Production high, the agent low and capped at `LOW_SHARE`.
    Sluice,
}

impl PriorityStrategy {
    pub(crate) const ALL: [PriorityStrategy; 2] =
        [PriorityStrategy::Fifo, PriorityStrategy::Sluice];

    pub(crate) fn name(self) -> &'static str {
        match self {
            PriorityStrategy::Fifo => "fifo",
            PriorityStrategy::Sluice => "sluice",
        }
    }
}

/// One run's figures.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct PriorityResult {
    pub(crate) scenario: &'static str,
    pub(crate) strategy: &'static str,
    pub(crate) production_calls: usize,
    /// Production calls not answered `ok`.
    pub(crate) production_failures: usize,
    pub(crate) production_p50_ms: u64,
    pub(crate) production_p99_ms: u64,
    pub(crate) inline_threshold_ms: u64,
    /// The agent's accepted requests per second, over the key's limit.
    pub(crate) agent_goodput: f64,
    pub(crate) agent_calls: usize,
    /// Requests the server refused, over all requests.
    pub(crate) throttled_ratio: f64,
}

fn fake(seed: u64) -> anyhow::Result<FakeApi> {
    let config = Config::new(Limits::new(LIMIT, Duration::from_secs(1)))
        .with_latency(Latency::Uniform {
            min: Duration::from_millis(50),
            max: Duration::from_millis(150),
        })
        .with_seed(seed);
    Ok(FakeApi::new(config)?)
}

fn gate(strategy: PriorityStrategy, api: JsonApi, seed: u64) -> anyhow::Result<Gate<JsonApi>> {
    let rate: Rate = format!("{LIMIT}/1s").parse().context("the key's rate")?;
    let mut credential = CredentialConfig::with_rate(rate)
        .max_in_flight(10)
        .expected_latency(Duration::from_millis(100));
    let (production, agent) = match strategy {
        PriorityStrategy::Fifo => (Priority::Normal, Priority::Normal),
        PriorityStrategy::Sluice => {
            credential = credential.low_share(LOW_SHARE);
            (Priority::High, Priority::Low)
        }
    };
    let tool = |priority| {
        ToolConfig::read("api")
            .deadline(DEADLINE)
            .priority(priority)
    };
    let config = GateConfig::default()
        .credential("api", credential)
        .tool(PRODUCTION, tool(production))
        .tool(AGENT, tool(agent));
    Gate::builder(config, api)
        .seed(seed)
        .build()
        .context("building the sluice gate")
}

/// Runs both strategies (or `only`) for `duration` each against a fresh fake.
pub(crate) async fn run(
    duration: Duration,
    seed: u64,
    only: Option<&str>,
) -> anyhow::Result<Vec<PriorityResult>> {
    let server = FakeServer::spawn(fake(seed)?)
        .await
        .context("starting the fake API")?;
    let mut results = Vec::new();
    for strategy in PriorityStrategy::ALL
        .into_iter()
        .filter(|s| only.is_none_or(|name| name == s.name()))
    {
        server.api().reset();
        let api = JsonApi::new(&server.url(), KEY)?;
        let gate = Arc::new(gate(strategy, api, seed)?);
        let start = Instant::now();
        let start_ms = start
            .saturating_duration_since(server.api().origin())
            .as_secs_f64()
            * 1_000.0;
        let end = start + duration;
        let production = tokio::spawn(offer(gate.clone(), PRODUCTION, PRODUCTION_PER_SEC, end));
        let agent = offer(gate, AGENT, f64::from(LIMIT) * AGENT_OVERLOAD, end).await;
        let production = production.await.context("the production job")?;
        results.push(measure(
            strategy,
            &server.api().requests(),
            &production,
            agent.len(),
            start_ms,
            duration,
        ));
    }
    server.shutdown().await.context("stopping the fake API")?;
    Ok(results)
}

/// Calls `tool` at `per_second` until `end`, each waited for.
async fn offer(
    gate: Arc<Gate<JsonApi>>,
    tool: &'static str,
    per_second: f64,
    end: Instant,
) -> Vec<CallLog> {
    let log = Arc::new(Mutex::new(Vec::new()));
    let every = Duration::from_secs_f64(1.0 / per_second);
    let mut calls = tokio::task::JoinSet::new();
    let mut next = Instant::now();
    let mut n = 0u64;
    while next < end {
        tokio::time::sleep_until(next).await;
        let (gate, log) = (gate.clone(), log.clone());
        calls.spawn(async move {
            let started = Instant::now();
            let outcome = gate.turn().call(Call::new(tool, json!({ "n": n }))).await;
            log.lock().push(CallLog {
                elapsed: started.elapsed(),
                ok: matches!(outcome, Outcome::Ok { .. }),
            });
        });
        n += 1;
        next += every;
    }
    while calls.join_next().await.is_some() {}
    std::mem::take(&mut *log.lock())
}

fn measure(
    strategy: PriorityStrategy,
    records: &[Record],
    production: &[CallLog],
    agent_calls: usize,
    start_ms: f64,
    duration: Duration,
) -> PriorityResult {
    let run_ms = duration.as_secs_f64() * 1_000.0;
    let agent_ok = records
        .iter()
        .filter(|record| record.path.ends_with(AGENT) && record.status == 200)
        .filter(|record| record.t_ms >= start_ms && record.t_ms < start_ms + run_ms)
        .count();
    let throttled = records.iter().filter(|record| record.status == 429).count();
    let mut latencies: Vec<Duration> = production.iter().map(|call| call.elapsed).collect();
    latencies.sort_unstable();
    PriorityResult {
        scenario: "priority",
        strategy: strategy.name(),
        production_calls: production.len(),
        production_failures: production.iter().filter(|call| !call.ok).count(),
        production_p50_ms: percentile_ms(&latencies, 50),
        production_p99_ms: percentile_ms(&latencies, 99),
        inline_threshold_ms: u64::try_from(INLINE_THRESHOLD.as_millis()).unwrap_or(u64::MAX),
        agent_goodput: agent_ok as f64 / (f64::from(LIMIT) * duration.as_secs_f64()),
        agent_calls,
        throttled_ratio: ratio(throttled, records.len()),
    }
}
