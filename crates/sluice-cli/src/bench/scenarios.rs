//! `sluice bench scenarios`: every strategy on every scenario, one after the
//! other against a freshly reset fake API, in the same run.
//!
//! - `burst`: the article's turns (8 parallel calls, rephrasing on "tool
//!   failed", re-issuing after `rate_limited`), 500 ms of thinking between.
//! - `overload`: independent calls offered at 3x the key's limit.
//! - `shared-key`: as `overload` at the agent's share, with a production
//!   job on the same key at 4/s whose failures are counted.
//! - `unknown-limit`: as `overload`, but the limit is not in any config:
//!   `static` has nothing to limit with, `sluice` only follows the server's
//!   signals, `sluice-auto` probes for it.
//! - `llm-tokens`: LLM-style calls under requests and tokens per window,
//!   estimated high and settled lower (see [`super::llm`]).
//! - `priority`: production at high priority and a flooding agent at low
//!   on one key (see [`super::priority`]).

use std::fmt::Write as _;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use parking_lot::Mutex;
use serde::Serialize;
use serde_json::json;
use sluice::Rate;
use sluice_fake::{Config, FakeApi, FakeServer, Latency, Limits, Record};
use tokio::time::Instant;

use super::llm::{self, LlmResult};
use super::priority::{self, PriorityResult};
use crate::demo::replay::{CallLog, drive_model};
use crate::demo::scenario::{is_agent, sync_job};
use crate::harness::{Harness, Setup, Strategy, View};

/// The key's limit: this many in any rolling second.
const LIMIT: u32 = 20;
/// The production job's rate on the shared key, and the most it puts in
/// one rolling second (a 4/s job drifts a little).
const VICTIM_PEAK: u32 = 5;
const KEY: &str = "Bearer shared-org-key";
/// Each call's deadline, for every strategy.
const DEADLINE: Duration = Duration::from_secs(10);
/// Offered load, as a multiple of the rate the client may use.
const OVERLOAD: u32 = 3;
const TOOLS: [&str; 3] = ["search_tickets", "get_usage", "list_customers"];

/// Flags of `sluice bench scenarios`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Print a JSON array instead of tables.
    #[arg(long)]
    json: bool,
    /// 5 s per run instead of 20 s.
    #[arg(long)]
    quick: bool,
    /// Seed for latencies, the model's choices and jitter.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Run only this scenario (burst, overload, shared-key, unknown-limit, llm-tokens, priority).
    #[arg(long)]
    scenario: Option<String>,
    /// Run only this strategy (naive, sdk, static, sluice, sluice-auto; requests-only and
    /// reserve-reconcile in llm-tokens; fifo in priority).
    #[arg(long)]
    strategy: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scenario {
    Burst,
    Overload,
    SharedKey,
    UnknownLimit,
}

impl Scenario {
    const ALL: [Scenario; 4] = [
        Scenario::Burst,
        Scenario::Overload,
        Scenario::SharedKey,
        Scenario::UnknownLimit,
    ];

    fn name(self) -> &'static str {
        match self {
            Scenario::Burst => "burst",
            Scenario::Overload => "overload",
            Scenario::SharedKey => "shared-key",
            Scenario::UnknownLimit => "unknown-limit",
        }
    }

    /// The rate the operator configures: the key's, its share of it, or none.
    fn configured(self) -> Option<Rate> {
        let rate = |n: u32| format!("{n}/1s").parse().ok();
        match self {
            Scenario::Burst | Scenario::Overload => rate(LIMIT),
            Scenario::SharedKey => rate(LIMIT - VICTIM_PEAK),
            Scenario::UnknownLimit => None,
        }
    }
}

/// One (scenario, strategy) run's figures.
#[derive(Debug, Clone, Serialize)]
struct Result {
    scenario: &'static str,
    strategy: &'static str,
    /// Accepted agent requests per second over the key's limit.
    goodput_ratio: f64,
    /// Agent requests the API refused, over all agent requests.
    throttled_ratio: f64,
    /// Agent requests per logical call.
    amplification: f64,
    victim_failures: usize,
    p50_ms: u64,
    p99_ms: u64,
    /// Calls answered `ok` within their deadline, over all calls.
    answered_within_deadline: f64,
    calls: usize,
    upstream_requests: usize,
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

pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let seconds = if args.quick { 5 } else { 20 };
    let duration = Duration::from_secs(seconds);
    let server = FakeServer::spawn(fake(args.seed)?)
        .await
        .context("starting the fake API")?;
    let mut results = Vec::new();
    let wanted = |name: &str, filter: &Option<String>| filter.as_deref().is_none_or(|f| f == name);
    for scenario in Scenario::ALL
        .into_iter()
        .filter(|s| wanted(s.name(), &args.scenario))
    {
        for strategy in Strategy::ALL
            .into_iter()
            .filter(|s| wanted(s.name(), &args.strategy))
        {
            server.api().reset();
            let result = run_one(scenario, strategy, &server, duration, args.seed).await?;
            if !args.json {
                eprintln!(
                    "{:<14} {:<12} goodput {:>5.2}  throttled {:>5.1}%  amplification {:>5.2}",
                    result.scenario,
                    result.strategy,
                    result.goodput_ratio,
                    result.throttled_ratio * 100.0,
                    result.amplification
                );
            }
            results.push(result);
        }
    }
    server.shutdown().await.context("stopping the fake API")?;
    let strategy = args.strategy.as_deref();
    let llm = if wanted("llm-tokens", &args.scenario) {
        llm::run(duration, args.seed, strategy).await?
    } else {
        Vec::new()
    };
    let priority = if wanted("priority", &args.scenario) {
        priority::run(duration, args.seed, strategy).await?
    } else {
        Vec::new()
    };
    if args.json {
        let mut all = serde_json::to_value(&results)?
            .as_array()
            .cloned()
            .unwrap_or_default();
        for result in &llm {
            all.push(serde_json::to_value(result)?);
        }
        for result in &priority {
            all.push(serde_json::to_value(result)?);
        }
        println!("{}", serde_json::to_string_pretty(&all)?);
    } else {
        print!("{}", tables(&results, seconds));
        print!("{}", budget_tables(&llm, &priority));
    }
    Ok(ExitCode::SUCCESS)
}

async fn run_one(
    scenario: Scenario,
    strategy: Strategy,
    server: &FakeServer,
    duration: Duration,
    seed: u64,
) -> anyhow::Result<Result> {
    let url = server.url();
    let setup = Setup {
        base: &url,
        key: KEY,
        rate: scenario.configured(),
        tools: &TOOLS,
        seed,
        deadline: DEADLINE,
        queue: None,
    };
    let harness = Harness::new(strategy, &setup)?;
    let start = Instant::now();
    let start_ms = start
        .saturating_duration_since(server.api().origin())
        .as_secs_f64()
        * 1_000.0;
    let end = start + duration;
    let log = Arc::new(Mutex::new(Vec::new()));
    let victim = (scenario == Scenario::SharedKey)
        .then(|| tokio::spawn(sync_job(harness.client(), url.clone(), end)));
    match scenario {
        Scenario::Burst => drive_model(&harness, seed, end, log.clone()).await,
        _ => {
            let rate = scenario
                .configured()
                .map_or(f64::from(LIMIT), |rate| rate.per_sec());
            offer(&harness, rate * f64::from(OVERLOAD), end, log.clone()).await;
        }
    }
    if let Some(victim) = victim {
        victim.await?;
    }
    let calls = std::mem::take(&mut *log.lock());
    Ok(measure(
        scenario,
        strategy,
        &server.api().requests(),
        &calls,
        start_ms,
        duration,
    ))
}

/// Independent calls at `per_second` until `end`, each waited for.
async fn offer(harness: &Harness, per_second: f64, end: Instant, log: Arc<Mutex<Vec<CallLog>>>) {
    let every = Duration::from_secs_f64(1.0 / per_second);
    let mut calls = tokio::task::JoinSet::new();
    let mut n = 0u64;
    let mut next = Instant::now();
    while next < end {
        tokio::time::sleep_until(next).await;
        let (turn, log) = (harness.turn(), log.clone());
        let tool = TOOLS[(n % 3) as usize];
        let args = json!({ "q": format!("q{n}") });
        calls.spawn(async move {
            let started = Instant::now();
            let view = turn.call(tool, &args).await;
            log.lock().push(CallLog {
                elapsed: started.elapsed(),
                view,
            });
        });
        n += 1;
        next += every;
    }
    while calls.join_next().await.is_some() {}
}

fn measure(
    scenario: Scenario,
    strategy: Strategy,
    records: &[Record],
    calls: &[CallLog],
    start_ms: f64,
    duration: Duration,
) -> Result {
    let agent: Vec<&Record> = records.iter().filter(|r| is_agent(r)).collect();
    let victim_failures = records
        .iter()
        .filter(|r| !is_agent(r) && r.status != 200)
        .count();
    let window_ms = duration.as_secs_f64() * 1_000.0;
    let accepted = agent
        .iter()
        .filter(|r| r.status == 200 && r.t_ms >= start_ms && r.t_ms < start_ms + window_ms)
        .count();
    let throttled = agent.iter().filter(|r| r.status == 429).count();
    let mut latencies: Vec<Duration> = calls.iter().map(|c| c.elapsed).collect();
    latencies.sort_unstable();
    let ok_in_time = calls
        .iter()
        .filter(|c| c.view == View::Ok && c.elapsed <= DEADLINE)
        .count();
    let ratio = |a: usize, b: usize| if b == 0 { 0.0 } else { a as f64 / b as f64 };
    Result {
        scenario: scenario.name(),
        strategy: strategy.name(),
        goodput_ratio: accepted as f64 / (f64::from(LIMIT) * duration.as_secs_f64()),
        throttled_ratio: ratio(throttled, agent.len()),
        amplification: ratio(agent.len(), calls.len()),
        victim_failures,
        p50_ms: percentile_ms(&latencies, 50),
        p99_ms: percentile_ms(&latencies, 99),
        answered_within_deadline: ratio(ok_in_time, calls.len()),
        calls: calls.len(),
        upstream_requests: agent.len(),
    }
}

/// Nearest-rank percentile of sorted durations, in whole milliseconds.
fn percentile_ms(sorted: &[Duration], p: usize) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (p * sorted.len()).div_ceil(100).clamp(1, sorted.len());
    u64::try_from(sorted[rank - 1].as_millis()).unwrap_or(u64::MAX)
}

fn tables(results: &[Result], seconds: u64) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nA key at {LIMIT} requests per rolling second; {seconds} s per run; deadline {} s per call.",
        DEADLINE.as_secs()
    );
    for scenario in Scenario::ALL {
        let _ = writeln!(out, "\n{}", scenario.name());
        let _ = writeln!(
            out,
            "| strategy | goodput | throttled | amplification | victim failures | p50 ms | p99 ms | ok within deadline |"
        );
        let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|");
        for r in results.iter().filter(|r| r.scenario == scenario.name()) {
            let _ = writeln!(
                out,
                "| {} | {:.2} | {:.1}% | {:.2} | {} | {} | {} | {:.0}% |",
                r.strategy,
                r.goodput_ratio,
                r.throttled_ratio * 100.0,
                r.amplification,
                r.victim_failures,
                r.p50_ms,
                r.p99_ms,
                r.answered_within_deadline * 100.0
            );
        }
    }
    out
}

fn budget_tables(llm: &[LlmResult], priority: &[PriorityResult]) -> String {
    let mut out = String::new();
    if !llm.is_empty() {
        let _ = writeln!(out, "\nllm-tokens");
        let _ = writeln!(
            out,
            "| strategy | token goodput | throttled | windows over-spent | p50 ms | p99 ms | ok |"
        );
        let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|");
        for r in llm {
            let _ = writeln!(
                out,
                "| {} | {:.3} | {:.1}% | {}/{} | {} | {} | {:.0}% |",
                r.strategy,
                r.token_goodput,
                r.throttled_ratio * 100.0,
                r.overspent_windows,
                r.windows,
                r.p50_ms,
                r.p99_ms,
                r.ok_ratio * 100.0
            );
        }
    }
    if !priority.is_empty() {
        let _ = writeln!(out, "\npriority");
        let _ = writeln!(
            out,
            "| strategy | production failures | production p50 ms | production p99 ms | agent goodput | throttled |"
        );
        let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|");
        for r in priority {
            let _ = writeln!(
                out,
                "| {} | {}/{} | {} | {} | {:.2} | {:.1}% |",
                r.strategy,
                r.production_failures,
                r.production_calls,
                r.production_p50_ms,
                r.production_p99_ms,
                r.agent_goodput,
                r.throttled_ratio * 100.0
            );
        }
    }
    out
}
