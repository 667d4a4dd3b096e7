//! Issue 14's `priorities.low` on a shared credential, on a real
//! `redis-server`: two gates flood one key with low-priority calls while
//! one of them also sends normal ones. Summed over both gates, the low
//! calls start at most the low share of the window, and the normal calls
//! all go through. And a credential with one window and a unit: the calls
//! without a cost spend the same shared log as those with one.

use crate::support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::Mutex;
use serde_json::{Value, json};
use sluice::{
    Call, Cost, CredentialConfig, Defaults, Executor, Gate, GateConfig, Outcome, Priority, Request,
    ToolConfig, TransportError, UnitConfig,
};
use sluice_redis::RedisBudget;
use support::{RedisServer, max_in_window, redis_config};

/// Records each request's start (ms since the test began) and its tool.
#[derive(Clone)]
struct Recorder {
    began: Instant,
    starts: Arc<Mutex<Vec<(f64, String)>>>,
}

impl Recorder {
    fn new() -> Self {
        Recorder {
            began: Instant::now(),
            starts: Arc::new(Mutex::new(Vec::new())),
        }
    }

    fn of(&self, tool: Option<&str>) -> Vec<f64> {
        self.starts
            .lock()
            .iter()
            .filter(|(_, t)| tool.is_none_or(|tool| tool == t))
            .map(|(at, _)| *at)
            .collect()
    }
}

impl Executor for Recorder {
    type Payload = Value;

    async fn execute(&self, request: Request<Value>) -> Result<sluice::Reply, TransportError> {
        let at = self.began.elapsed().as_secs_f64() * 1000.0;
        self.starts.lock().push((at, request.tool.to_string()));
        http::Response::builder()
            .status(200)
            .body(Bytes::from_static(b"{}"))
            .map(sluice::Reply::from)
            .map_err(|e| TransportError::other(e.to_string()))
    }
}

fn defaults() -> Defaults {
    Defaults {
        // Loopback on a loaded two-core machine: as the other Redis tests.
        window_margin: Duration::from_millis(100),
        ..Defaults::default()
    }
}

fn build(
    recorder: &Recorder,
    config: GateConfig,
    budget: Arc<RedisBudget>,
    seed: u64,
) -> Gate<Recorder> {
    Gate::builder(config, recorder.clone())
        .seed(seed)
        .shared(budget)
        .build()
        .unwrap()
}

/// Calls `tool` from `workers` tasks until `until`, backing off as told.
/// Returns the calls that were not `ok` and not deferred.
async fn drive(
    gate: Arc<Gate<Recorder>>,
    tool: &'static str,
    workers: usize,
    until: tokio::time::Instant,
) -> Vec<Outcome> {
    let mut tasks = Vec::new();
    for worker in 0..workers {
        let gate = gate.clone();
        tasks.push(tokio::spawn(async move {
            let mut failed = Vec::new();
            let mut i = 0u64;
            while tokio::time::Instant::now() < until && i < 1_000 {
                i += 1;
                let call = Call::new(
                    tool,
                    json!({ "q": format!("{tool}-{worker}-{i}"), "n": 10 }),
                )
                .deadline(Duration::from_secs(3));
                match gate.call(call).await {
                    Outcome::RateLimited { retry_after_ms, .. } => {
                        let backoff = Duration::from_millis(retry_after_ms.clamp(5, 200));
                        tokio::time::sleep(backoff).await;
                    }
                    outcome if outcome.status() == "ok" => {}
                    outcome => {
                        failed.push(outcome);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
            }
            failed
        }));
    }
    let mut failed = Vec::new();
    for task in tasks {
        failed.extend(task.await.unwrap());
    }
    failed
}

async fn budgets(server: &RedisServer) -> (Arc<RedisBudget>, Arc<RedisBudget>) {
    let a = RedisBudget::connect(redis_config(&server.url()))
        .await
        .unwrap();
    let b = RedisBudget::connect(redis_config(&server.url()))
        .await
        .unwrap();
    (Arc::new(a), Arc::new(b))
}

/// `rate = "10/1s"` with `priorities.low = "50%"`: low calls from both
/// gates together start at most 5 in any second; a normal caller on one
/// gate sees no failure, and the window as a whole keeps its 10.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_low_share_holds_over_both_gates() {
    let _turn = crate::support::module_turn(module_path!());
    let server = RedisServer::start();
    let recorder = Recorder::new();
    let (a, b) = budgets(&server).await;
    let config = || {
        GateConfig::default()
            .defaults(defaults())
            .credential(
                "key",
                CredentialConfig::with_rate("10/1s".parse().unwrap())
                    .low_share(0.5)
                    .shared(true)
                    .max_in_flight(8)
                    .queue(64),
            )
            .tool("bulk", ToolConfig::read("key").priority(Priority::Low))
            .tool("prod", ToolConfig::read("key"))
    };
    let gate_a = Arc::new(build(&recorder, config(), a, 1));
    let gate_b = Arc::new(build(&recorder, config(), b, 2));
    let until = tokio::time::Instant::now() + Duration::from_millis(3_500);
    let (low_a, low_b, prod) = tokio::join!(
        drive(gate_a.clone(), "bulk", 3, until),
        drive(gate_b, "bulk", 3, until),
        drive(gate_a, "prod", 1, until),
    );
    let (low, normal, all) = (
        recorder.of(Some("bulk")),
        recorder.of(Some("prod")),
        recorder.of(None),
    );
    assert!(low_a.is_empty() && low_b.is_empty(), "{low_a:?} {low_b:?}");
    assert!(
        prod.is_empty(),
        "the normal caller sees no failure: {prod:?}"
    );
    assert!(
        max_in_window(&low, 1_000.0) <= 5,
        "half of 10/1s for low calls over both gates: {low:?}"
    );
    assert!(max_in_window(&all, 1_000.0) <= 10, "10/1s: {all:?}");
    // 3.5 s at 5 a second: the share, not the test, set the low pace.
    assert!(low.len() >= 12, "low calls used their share: {low:?}");
    assert!(normal.len() >= 3, "normal calls went through: {normal:?}");
}

/// One request window and a unit: a tool without a cost and one with
/// decide in the same shared logs, so both gates together keep 5/1s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_with_and_without_a_cost_share_one_window() {
    let _turn = crate::support::module_turn(module_path!());
    let server = RedisServer::start();
    let recorder = Recorder::new();
    let (a, b) = budgets(&server).await;
    let config = || {
        GateConfig::default()
            .defaults(defaults())
            .credential(
                "key",
                CredentialConfig::with_rate("5/1s".parse().unwrap())
                    .unit("tokens", UnitConfig::with_rate("1000/1s".parse().unwrap()))
                    .shared(true)
                    .max_in_flight(8)
                    .queue(64),
            )
            .tool("plain", ToolConfig::read("key"))
            .tool(
                "costly",
                ToolConfig::read("key").cost("tokens", Cost::Argument("n".into())),
            )
    };
    let gate_a = Arc::new(build(&recorder, config(), a, 1));
    let gate_b = Arc::new(build(&recorder, config(), b, 2));
    let until = tokio::time::Instant::now() + Duration::from_millis(2_500);
    let failed = tokio::join!(
        drive(gate_a.clone(), "plain", 2, until),
        drive(gate_a, "costly", 2, until),
        drive(gate_b.clone(), "plain", 2, until),
        drive(gate_b, "costly", 2, until),
    );
    assert!(
        failed.0.is_empty() && failed.1.is_empty() && failed.2.is_empty() && failed.3.is_empty(),
        "{failed:?}"
    );
    let (plain, costly, all) = (
        recorder.of(Some("plain")),
        recorder.of(Some("costly")),
        recorder.of(None),
    );
    assert!(!plain.is_empty() && !costly.is_empty(), "{all:?}");
    assert!(
        max_in_window(&all, 1_000.0) <= 5,
        "5/1s over both gates and tools: {all:?}"
    );
    // No lease on this path: every admitted call was one spend in Redis
    // (and each denied call one too; refunds go in the background).
    let round_trips = server.round_trips();
    eprintln!(
        "measured: {round_trips} round trips for {} admitted calls ({:.2} each)",
        all.len(),
        round_trips as f64 / all.len() as f64
    );
    assert!(
        round_trips >= all.len() as u64,
        "{round_trips} round trips, {} calls",
        all.len()
    );
}
