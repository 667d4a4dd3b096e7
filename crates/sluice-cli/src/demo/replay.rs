//! One replay: a harness driven through the scenario for the run's time, the model's turns and the sync job side by side, everything recorded.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use parking_lot::Mutex;
use sluice_fake::{FakeServer, Record};
use tokio::time::Instant;

use super::model::{Model, ToolCall, View};
use super::progress::Progress;
use super::scenario::{
    DEADLINE, KEY_LIMIT, KEY_WINDOW, ORG_KEY, SYNC_PEAK_PER_WINDOW, TOOLS, sync_job,
};
use crate::harness::{Harness, HarnessTurn, Setup, Strategy};

/// The model thinks this long between turns.
const THINKING: Duration = Duration::from_millis(500);

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

/// Runs `harness` against `server` for `duration`, the sync job beside it.
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
        key: ORG_KEY,
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

    let calls = std::mem::take(&mut *calls.lock());
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
        log.lock().push(CallLog { elapsed, view });
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
