//! The `llm-tokens` scenario: LLM-style calls on a key limited in requests
//! and in tokens per window, each call asking for `max_tokens` (the estimate)
//! and using less (the answer's `usage.total_tokens`). sluice (requests and
//! tokens, estimate charged, settled to the usage) against a requests-only
//! sliding window and a LiteLLM-style "reserve, then reconcile" fixed window.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use serde_json::json;
use sluice::{
    Call, Cost, CredentialConfig, Defaults, Gate, GateConfig, Outcome, Rate, Settle, ToolConfig,
    UnitConfig,
};
use sluice_fake::{Config, CostField, FakeApi, FakeServer, HeaderStyle, Latency, Limits, Record};
use tokio::time::Instant;

use super::json_api::JsonApi;
use super::limiters::{RequestWindow, ReserveReconcile};
use super::outcome::{CallLog, percentile_ms, ratio};

/// The key's windows: requests and tokens per `WINDOW` (a minute's limits
/// scaled down so that a run spans several windows).
const WINDOW: Duration = Duration::from_secs(5);
const REQUESTS: u32 = 500;
const TOKENS: u32 = 150_000;
/// Each call's `max_tokens`, uniform in this range.
const ESTIMATE: (u64, u64) = (500, 1500);
/// The share of `max_tokens` an answer really uses, in percent.
const USAGE: (u32, u32) = (30, 70);
/// Offered calls per second: 1.5 times what the tokens allow at the mean usage.
const OFFER_PER_SEC: f64 = 90.0;
const DEADLINE: Duration = Duration::from_secs(10);
/// `sluice-100ms`'s inline threshold. A call that waits for its slot holds
/// its estimate in the windows meanwhile, so the further ahead calls
/// reserve, the more of the budget is priced at estimates rather than at
/// settled usage: a short threshold keeps the reservations near now.
const SHORT_INLINE_WAIT: Duration = Duration::from_millis(100);
/// sluice's concurrency cap on the key. A call holds its permit while it
/// sleeps for its slot, so the cap covers the sleepers as well as the few
/// in flight; Little's law at the mean latency alone would give 5.
const MAX_IN_FLIGHT: u32 = 48;
const KEY: &str = "Bearer llm-key";
const TOOL: &str = "chat";
/// The comparison clients retry 429s like the OpenAI SDK: twice, after
/// Retry-After, else after 0.5 s doubling.
const SDK_RETRIES: u32 = 2;
const SDK_BACKOFF: Duration = Duration::from_millis(500);

/// How the calls are limited on the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LlmStrategy {
    RequestsOnly,
    ReserveReconcile,
    Sluice,
    /// sluice with a 100 ms inline threshold instead of the default 2 s.
    SluiceShortWait,
}

impl LlmStrategy {
    pub(crate) const ALL: [LlmStrategy; 4] = [
        LlmStrategy::RequestsOnly,
        LlmStrategy::ReserveReconcile,
        LlmStrategy::Sluice,
        LlmStrategy::SluiceShortWait,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            LlmStrategy::RequestsOnly => "requests-only",
            LlmStrategy::ReserveReconcile => "reserve-reconcile",
            LlmStrategy::Sluice => "sluice",
            LlmStrategy::SluiceShortWait => "sluice-100ms",
        }
    }
}

/// One run's figures.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct LlmResult {
    pub(crate) scenario: &'static str,
    pub(crate) strategy: &'static str,
    /// Tokens the server accepted (as used) per second, over the token limit per second.
    pub(crate) token_goodput: f64,
    /// Requests the server refused with 429, over all requests sent.
    pub(crate) throttled_ratio: f64,
    /// Windows of the run (aligned to its start) in which the client asked
    /// for more than the server's budget held: at least one 429.
    pub(crate) overspent_windows: usize,
    pub(crate) windows: usize,
    pub(crate) p50_ms: u64,
    pub(crate) p99_ms: u64,
    /// Calls answered with a 200, over all calls.
    pub(crate) ok_ratio: f64,
    pub(crate) calls: usize,
    pub(crate) upstream_requests: usize,
}

fn rate(count: u32) -> anyhow::Result<Rate> {
    format!("{count}/{}s", WINDOW.as_secs())
        .parse()
        .context("the scenario's rate")
}

fn fake(seed: u64) -> anyhow::Result<FakeApi> {
    let window = WINDOW.as_secs();
    let limits = Limits::new(REQUESTS, WINDOW)
        .with_tokens(1, TOKENS)
        .with_tokens_from(CostField::Body("/max_tokens".to_owned()))
        .with_usage(USAGE.0, USAGE.1);
    let config = Config::new(limits)
        // OpenAI's headers state per-minute limits, which a scaled-down
        // window would misstate; the IETF fields carry the window itself.
        .with_headers(HeaderStyle::Ietf)
        .with_latency(Latency::Uniform {
            min: Duration::from_millis(20),
            max: Duration::from_millis(80),
        })
        .with_seed(seed);
    tracing::debug!(window, "llm-tokens fake");
    Ok(FakeApi::new(config)?)
}

/// Runs every strategy (or `only`) for `duration` each against a fresh fake.
pub(crate) async fn run(
    duration: Duration,
    seed: u64,
    only: Option<&str>,
) -> anyhow::Result<Vec<LlmResult>> {
    let server = FakeServer::spawn(fake(seed)?)
        .await
        .context("starting the fake API")?;
    let mut results = Vec::new();
    for strategy in LlmStrategy::ALL
        .into_iter()
        .filter(|s| only.is_none_or(|name| name == s.name()))
    {
        server.api().reset();
        results.push(run_one(strategy, &server, duration, seed).await?);
    }
    server.shutdown().await.context("stopping the fake API")?;
    Ok(results)
}

/// The clients of one strategy.
enum Client {
    RequestsOnly(JsonApi, RequestWindow),
    ReserveReconcile(JsonApi, ReserveReconcile),
    Sluice(Gate<JsonApi>),
}

impl Client {
    fn new(strategy: LlmStrategy, api: JsonApi, seed: u64) -> anyhow::Result<Self> {
        Ok(match strategy {
            LlmStrategy::RequestsOnly => {
                Client::RequestsOnly(api, RequestWindow::new(REQUESTS, WINDOW))
            }
            LlmStrategy::ReserveReconcile => Client::ReserveReconcile(
                api,
                ReserveReconcile::new(REQUESTS, u64::from(TOKENS), WINDOW),
            ),
            LlmStrategy::Sluice | LlmStrategy::SluiceShortWait => {
                let credential = CredentialConfig::with_rate(rate(REQUESTS)?)
                    .unit("tokens", UnitConfig::with_rate(rate(TOKENS)?))
                    .max_in_flight(MAX_IN_FLIGHT)
                    .expected_latency(Duration::from_millis(50));
                let tool = ToolConfig::read("api")
                    .deadline(DEADLINE)
                    .cost("tokens", Cost::Argument("max_tokens".to_owned()))
                    .settle("tokens", Settle::Pointer("/usage/total_tokens".to_owned()));
                let mut defaults = Defaults::default();
                if strategy == LlmStrategy::SluiceShortWait {
                    defaults.inline_wait = SHORT_INLINE_WAIT;
                }
                let config = GateConfig::default()
                    .defaults(defaults)
                    .credential("api", credential)
                    .tool(TOOL, tool);
                Client::Sluice(
                    Gate::builder(config, api)
                        .seed(seed)
                        .build()
                        .context("building the sluice gate")?,
                )
            }
        })
    }

    /// One call; `true` when it was answered 200.
    async fn call(&self, args: serde_json::Value, estimate: u64) -> bool {
        match self {
            Client::Sluice(gate) => matches!(
                gate.turn().call(Call::new(TOOL, args)).await,
                Outcome::Ok { .. }
            ),
            Client::RequestsOnly(api, limiter) => {
                let attempts = async {
                    for attempt in 0..=SDK_RETRIES {
                        limiter.acquire().await;
                        let answer = api.call(TOOL, &args, DEADLINE).await;
                        if let Some(wait) = retry(answer, attempt) {
                            tokio::time::sleep(wait).await;
                            continue;
                        }
                        return answer.is_some_and(|a| a.status == 200);
                    }
                    false
                };
                tokio::time::timeout(DEADLINE, attempts)
                    .await
                    .unwrap_or(false)
            }
            Client::ReserveReconcile(api, limiter) => {
                let attempts = async {
                    for attempt in 0..=SDK_RETRIES {
                        let reservation = limiter.acquire(estimate).await;
                        let answer = api.call(TOOL, &args, DEADLINE).await;
                        let used = answer.and_then(|a| a.used).unwrap_or(0);
                        limiter.reconcile(reservation, used);
                        if let Some(wait) = retry(answer, attempt) {
                            tokio::time::sleep(wait).await;
                            continue;
                        }
                        return answer.is_some_and(|a| a.status == 200);
                    }
                    false
                };
                tokio::time::timeout(DEADLINE, attempts)
                    .await
                    .unwrap_or(false)
            }
        }
    }
}

/// The SDK's wait before retrying a 429, or `None` to stop.
fn retry(answer: Option<super::json_api::Answer>, attempt: u32) -> Option<Duration> {
    let answer = answer?;
    (answer.status == 429 && attempt < SDK_RETRIES).then(|| {
        answer
            .retry_after
            .unwrap_or_else(|| SDK_BACKOFF.saturating_mul(1 << attempt))
    })
}

async fn run_one(
    strategy: LlmStrategy,
    server: &FakeServer,
    duration: Duration,
    seed: u64,
) -> anyhow::Result<LlmResult> {
    let api = JsonApi::new(&server.url(), KEY)?;
    let client = Arc::new(Client::new(strategy, api, seed)?);
    let start = Instant::now();
    let start_ms = start
        .saturating_duration_since(server.api().origin())
        .as_secs_f64()
        * 1_000.0;
    let end = start + duration;
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut rng = StdRng::seed_from_u64(seed);
    let every = Duration::from_secs_f64(1.0 / OFFER_PER_SEC);
    let mut calls = tokio::task::JoinSet::new();
    let mut next = start;
    let mut n = 0u64;
    while next < end {
        tokio::time::sleep_until(next).await;
        let estimate = rng.random_range(ESTIMATE.0..=ESTIMATE.1);
        let args = json!({ "model": "m", "max_tokens": estimate, "n": n });
        let (client, log) = (client.clone(), log.clone());
        calls.spawn(async move {
            let started = Instant::now();
            let ok = client.call(args, estimate).await;
            log.lock().push(CallLog {
                elapsed: started.elapsed(),
                ok,
            });
        });
        n += 1;
        next += every;
    }
    while calls.join_next().await.is_some() {}
    let calls = std::mem::take(&mut *log.lock());
    Ok(measure(
        strategy,
        &server.api().requests(),
        &calls,
        start_ms,
        duration,
    ))
}

fn measure(
    strategy: LlmStrategy,
    records: &[Record],
    calls: &[CallLog],
    start_ms: f64,
    duration: Duration,
) -> LlmResult {
    let run_ms = duration.as_secs_f64() * 1_000.0;
    let window_ms = WINDOW.as_secs_f64() * 1_000.0;
    let in_run = |record: &&Record| record.t_ms >= start_ms && record.t_ms < start_ms + run_ms;
    let tokens: u64 = records
        .iter()
        .filter(in_run)
        .filter(|record| record.status == 200)
        .filter_map(|record| record.tokens)
        .map(u64::from)
        .sum();
    let limit = f64::from(TOKENS) * duration.as_secs_f64() / WINDOW.as_secs_f64();
    let mut overspent: Vec<u64> = records
        .iter()
        .filter(in_run)
        .filter(|record| record.status == 429)
        .map(|record| ((record.t_ms - start_ms) / window_ms) as u64)
        .collect();
    overspent.dedup();
    let throttled = records.iter().filter(|record| record.status == 429).count();
    let mut latencies: Vec<Duration> = calls.iter().map(|call| call.elapsed).collect();
    latencies.sort_unstable();
    let ok = calls.iter().filter(|call| call.ok).count();
    LlmResult {
        scenario: "llm-tokens",
        strategy: strategy.name(),
        token_goodput: tokens as f64 / limit,
        throttled_ratio: ratio(throttled, records.len()),
        overspent_windows: overspent.len(),
        windows: usize::try_from(duration.as_nanos().div_ceil(WINDOW.as_nanos()))
            .unwrap_or(usize::MAX),
        p50_ms: percentile_ms(&latencies, 50),
        p99_ms: percentile_ms(&latencies, 99),
        ok_ratio: ratio(ok, calls.len()),
        calls: calls.len(),
        upstream_requests: records.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(t_ms: f64, status: u16, tokens: Option<u32>) -> Record {
        Record {
            t_ms,
            end_ms: t_ms,
            key: KEY.to_owned(),
            resource: "default".to_owned(),
            method: "POST".to_owned(),
            path: "/v1/chat".to_owned(),
            status,
            in_flight: 1,
            tokens,
        }
    }

    #[test]
    fn measures_tokens_in_the_run_and_windows_with_refusals() {
        let records = [
            record(999.0, 200, Some(100_000)),
            record(1000.0, 200, Some(75_000)),
            record(1500.0, 429, None),
            record(2000.0, 429, None),
            record(7000.0, 429, None),
            record(21_000.0, 429, None),
            record(21_000.0, 200, Some(50_000)),
        ];
        let calls = [
            CallLog {
                elapsed: Duration::from_millis(10),
                ok: true,
            },
            CallLog {
                elapsed: Duration::from_millis(30),
                ok: false,
            },
        ];
        let result = measure(
            LlmStrategy::Sluice,
            &records,
            &calls,
            1000.0,
            Duration::from_secs(20),
        );
        // 75,000 tokens in 20 s against 150,000 per 5 s.
        assert!((result.token_goodput - 0.125).abs() < 1e-9);
        assert_eq!((result.overspent_windows, result.windows), (2, 4));
        assert!((result.throttled_ratio - 4.0 / 7.0).abs() < 1e-9);
        assert_eq!((result.p50_ms, result.p99_ms), (10, 30));
        assert!((result.ok_ratio - 0.5).abs() < 1e-9);
    }
}
