//! The incident's setting: a key rated 10 per rolling second, a production
//! sync job on it, and a model driving agent turns through a harness.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use sluice_fake::{Config, FakeServer, HeaderStyle, Latency, Limits, Record};
use tokio::time::{Instant, MissedTickBehavior};

use super::model::{Model, ToolCall, View};
use super::report::Progress;
use crate::harness::{Harness, HarnessTurn, Setup, Strategy};

/// The key's limit: 10 requests in any rolling second.
pub(crate) const KEY_LIMIT: u32 = 10;
pub(crate) const KEY_WINDOW: Duration = Duration::from_secs(1);
/// The production sync job's steady rate.
pub(crate) const SYNC_PER_SECOND: u32 = 4;
/// The most sync requests one rolling second can hold: a job that averages
/// 4/s drifts by a millisecond here and there (timers, transit), so a
/// window sometimes catches a fifth. The agent's share is what is left.
pub(crate) const SYNC_PEAK_PER_WINDOW: u32 = SYNC_PER_SECOND + 1;
/// The API answers in about 400 ms.
const LATENCY_MIN: Duration = Duration::from_millis(300);
const LATENCY_MAX: Duration = Duration::from_millis(500);
/// The model thinks this long between turns.
const THINKING: Duration = Duration::from_millis(500);
/// The one API key the agent and the sync job share.
pub(crate) const SHARED_KEY: &str = "Bearer shared-org-key";

/// The tools the simulated model calls.
const TOOLS: [&str; 3] = ["search_tickets", "get_usage", "list_customers"];
/// A model's calls may take this long.
const DEADLINE: Duration = Duration::from_secs(30);

/// The third-party API: rolling-window limit, ~400 ms answers, Retry-After
/// and IETF RateLimit headers.
pub(crate) fn fake_config(seed: u64) -> Config {
    Config::new(Limits::new(KEY_LIMIT, KEY_WINDOW))
        .with_latency(Latency::Uniform {
            min: LATENCY_MIN,
            max: LATENCY_MAX,
        })
        .with_headers(HeaderStyle::Ietf)
        .with_seed(seed)
}

/// One logical call the model made, and what it was told.
#[derive(Debug, Clone)]
pub(crate) struct CallLog {
    pub(crate) elapsed: Duration,
    pub(crate) view: View,
}

/// Everything one run produced: the model's view and the API's records.
#[derive(Debug, Clone)]
pub(crate) struct Run {
    pub(crate) harness: Strategy,
    pub(crate) calls: Vec<CallLog>,
    pub(crate) records: Vec<Record>,
    /// The run's start on the fake's clock, in milliseconds.
    pub(crate) start_ms: f64,
}

pub(crate) async fn run(
    harness: Strategy,
    server: &FakeServer,
    duration: Duration,
    seed: u64,
    progress: &Progress,
) -> anyhow::Result<Run> {
    // sluice's bucket is the agent's share of the key: its limit minus the
    // most the sync job can spend in one rolling second.
    let share = format!(
        "{}/{}ms",
        KEY_LIMIT - SYNC_PEAK_PER_WINDOW,
        KEY_WINDOW.as_millis()
    );
    let setup = Setup {
        base: &server.url(),
        key: SHARED_KEY,
        rate: Some(share.parse()?),
        tools: &TOOLS,
        seed,
        deadline: DEADLINE,
    };
    let agent = Harness::new(harness, &setup)?;
    let start = Instant::now();
    let start_ms = start
        .saturating_duration_since(server.api().origin())
        .as_secs_f64()
        * 1_000.0;
    let end = start + duration;
    let calls = Arc::new(Mutex::new(Vec::new()));

    let ticker = progress.start(harness, server.api().clone(), start, duration);
    let sync = tokio::spawn(sync_job(agent.client(), server.url(), end));
    drive_model(&agent, seed, end, calls.clone()).await;
    sync.await?;
    ticker.finish();

    let calls = std::mem::take(&mut *calls.lock().unwrap_or_else(|p| p.into_inner()));
    Ok(Run {
        harness,
        calls,
        records: server.api().requests(),
        start_ms,
    })
}

/// Turns until the run's time is up: 8 parallel calls, their follow-ups,
/// then a pause to think.
pub(crate) async fn drive_model(
    agent: &Harness,
    seed: u64,
    end: Instant,
    log: Arc<Mutex<Vec<CallLog>>>,
) {
    let mut model = Model::new(seed);
    while Instant::now() < end {
        let turn = agent.turn();
        let first = model.turn_calls();
        run_turn(&turn, &mut model, first, end, &log).await;
        tokio::time::sleep(THINKING).await;
    }
}

/// Runs a turn's calls at once; reacts to each answer as a model does:
/// re-issues a deferred call after its wait, rephrases a failed one.
async fn run_turn(
    turn: &HarnessTurn,
    model: &mut Model,
    first: Vec<ToolCall>,
    end: Instant,
    log: &Mutex<Vec<CallLog>>,
) {
    let mut pending = FuturesUnordered::new();
    for call in first {
        pending.push(issue(turn.clone(), call, Duration::ZERO));
    }
    while let Some((call, view, elapsed)) = pending.next().await {
        log.lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(CallLog { elapsed, view });
        let now = Instant::now();
        match view {
            View::RateLimited(wait) if now + wait < end => {
                pending.push(issue(turn.clone(), call, wait))
            }
            View::Failed | View::TimedOut if now < end => {
                for narrower in model.rephrase(&call) {
                    pending.push(issue(turn.clone(), narrower, Duration::ZERO));
                }
            }
            _ => {}
        }
    }
}

async fn issue(turn: HarnessTurn, call: ToolCall, after: Duration) -> (ToolCall, View, Duration) {
    tokio::time::sleep(after).await;
    let started = Instant::now();
    let view = turn.call(call.tool, &call.args).await;
    (call, view, started.elapsed())
}

/// The production job: one request every 250 ms, each on its own, on the
/// same key. Its results are read from the API's records.
pub(crate) async fn sync_job(client: reqwest::Client, base: String, end: Instant) {
    let mut ticks = tokio::time::interval(Duration::from_secs(1) / SYNC_PER_SECOND);
    // A late tick must not be followed by a catch-up burst: the job is steady.
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut sent = Vec::new();
    let mut page = 0u32;
    loop {
        ticks.tick().await;
        if Instant::now() >= end {
            break;
        }
        page += 1;
        let request = client
            .get(format!("{base}/sync/export?page={page}"))
            .header("authorization", SHARED_KEY)
            .timeout(Duration::from_secs(10))
            .send();
        sent.push(tokio::spawn(async move {
            if let Ok(response) = request.await {
                let _ = response.bytes().await;
            }
        }));
    }
    for request in sent {
        let _ = request.await;
    }
}
