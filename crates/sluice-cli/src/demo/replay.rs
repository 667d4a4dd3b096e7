//! One replay: a harness driven through the scenario for the run's time, the model's turns and the sync job side by side, everything recorded.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
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
    /// Which phase of the demo it is: `None` for the incident, or the
    /// second phase's name.
    pub(crate) phase: Option<&'static str>,
    /// Deferred calls the model re-issued after their wait, and how many of
    /// those were deferred again.
    pub(crate) reissues: Reissues,
}

/// Re-issues of deferred calls, counted as the model makes them.
#[derive(Debug, Default)]
pub(crate) struct Reissues {
    pub(crate) issued: AtomicUsize,
    pub(crate) deferred_again: AtomicUsize,
}

impl Clone for Reissues {
    fn clone(&self) -> Self {
        Reissues {
            issued: AtomicUsize::new(self.issued.load(Ordering::Relaxed)),
            deferred_again: AtomicUsize::new(self.deferred_again.load(Ordering::Relaxed)),
        }
    }
}

/// The second phase, "twelve calls, four now": one turn larger than the
/// queue, the model re-issuing each deferred call after its own wait.
pub(crate) const TWELVE_CALLS: &str = "twelve calls, four now";

/// sluice's queue in the second phase: with the two permits Little's law
/// gives the agent's share, four calls of the twelve can be taken now.
const PHASE_TWO_QUEUE: u32 = 2;

/// How long the sync job runs beside the second phase's one turn.
const PHASE_TWO_SYNC: Duration = Duration::from_secs(6);

/// Runs `harness` against `server` for `duration`, the sync job beside it.
pub(crate) async fn run(
    harness: Strategy,
    server: &FakeServer,
    duration: Duration,
    seed: u64,
    progress: &Progress,
) -> anyhow::Result<Run> {
    let base = server.url();
    let agent = Harness::new(harness, &setup(&base, seed, None)?)?;
    let start = Instant::now();
    let start_ms = start
        .saturating_duration_since(server.api().origin())
        .as_secs_f64()
        * 1_000.0;
    let end = start + duration;
    let calls = Arc::new(Mutex::new(Vec::new()));
    let reissues = Reissues::default();

    let ticker = progress.start(harness, server.api().clone(), start, duration);
    let sync = tokio::spawn(sync_job(agent.client(), server.url(), end));
    let mut model = Model::new(seed);
    while Instant::now() < end {
        let turn = agent.turn();
        let first = model.turn_calls();
        run_turn(&turn, &mut model, first, end, &calls, &reissues).await;
        tokio::time::sleep(THINKING).await;
    }
    sync.await?;
    ticker.finish();

    let calls = std::mem::take(&mut *calls.lock());
    Ok(Run {
        harness,
        calls,
        records: server.api().requests(),
        start_ms,
        phase: None,
        reissues,
    })
}

/// The second phase ([`TWELVE_CALLS`]): the sync job for a few seconds,
/// and beside it one turn of twelve distinct calls, more than sluice's
/// queue holds. The model re-issues each deferred call after its wait and
/// rephrases each failed one, until every call has its answer.
pub(crate) async fn run_twelve(
    harness: Strategy,
    server: &FakeServer,
    seed: u64,
    progress: &Progress,
) -> anyhow::Result<Run> {
    let base = server.url();
    let agent = Harness::new(harness, &setup(&base, seed, Some(PHASE_TWO_QUEUE))?)?;
    let start = Instant::now();
    let start_ms = start
        .saturating_duration_since(server.api().origin())
        .as_secs_f64()
        * 1_000.0;
    let calls = Mutex::new(Vec::new());
    let reissues = Reissues::default();
    let ticker = progress.start(harness, server.api().clone(), start, PHASE_TWO_SYNC);
    let sync = tokio::spawn(sync_job(
        agent.client(),
        server.url(),
        start + PHASE_TWO_SYNC,
    ));
    let mut model = Model::new(seed);
    let twelve = model.twelve_calls();
    // Every re-issue fits: the model waits as long as it is told, within
    // a call's deadline.
    let end = start + DEADLINE;
    run_turn(&agent.turn(), &mut model, twelve, end, &calls, &reissues).await;
    sync.await?;
    ticker.finish();
    Ok(Run {
        harness,
        calls: calls.into_inner(),
        records: server.api().requests(),
        start_ms,
        phase: Some(TWELVE_CALLS),
        reissues,
    })
}

/// What both phases give a harness: sluice's bucket is the agent's share of
/// the key, its limit minus the most the sync job can spend in one rolling
/// second.
fn setup(base: &str, seed: u64, queue: Option<u32>) -> anyhow::Result<Setup<'_>> {
    let share = format!(
        "{}/{}ms",
        KEY_LIMIT - SYNC_PEAK_PER_WINDOW,
        KEY_WINDOW.as_millis()
    );
    Ok(Setup {
        base,
        key: ORG_KEY,
        rate: Some(share.parse()?),
        tools: &TOOLS,
        seed,
        deadline: DEADLINE,
        queue,
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
    let reissues = Reissues::default();
    while Instant::now() < end {
        let turn = agent.turn();
        let first = model.turn_calls();
        run_turn(&turn, &mut model, first, end, &log, &reissues).await;
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
    reissues: &Reissues,
) {
    let mut pending = FuturesUnordered::new();
    for call in first {
        pending.push(issue(turn.clone(), call, None));
    }
    while let Some((call, view, elapsed, reissued)) = pending.next().await {
        log.lock().push(CallLog { elapsed, view });
        if reissued {
            reissues.issued.fetch_add(1, Ordering::Relaxed);
            if matches!(view, View::RateLimited(_)) {
                reissues.deferred_again.fetch_add(1, Ordering::Relaxed);
            }
        }
        let now = Instant::now();
        match view {
            View::RateLimited(wait) if now + wait < end => {
                pending.push(issue(turn.clone(), call, Some(wait)))
            }
            View::Failed | View::TimedOut if now < end => {
                for narrower in model.rephrase(&call) {
                    pending.push(issue(turn.clone(), narrower, None));
                }
            }
            _ => {}
        }
    }
}

/// Issues `call`, or re-issues it after the wait it was told; returns it,
/// what the model was told, how long that took, and whether it was a
/// re-issue.
async fn issue(
    turn: HarnessTurn,
    call: ToolCall,
    after: Option<Duration>,
) -> (ToolCall, View, Duration, bool) {
    if let Some(wait) = after {
        tokio::time::sleep(wait).await;
    }
    let started = Instant::now();
    let view = turn.call(call.tool, &call.args).await;
    (call, view, started.elapsed(), after.is_some())
}
