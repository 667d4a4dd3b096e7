//! Issue 14 with Redis away: two gates (two processes) share a credential
//! with `rate = ["5/1s", "20/10s"]` and a group at 3/1s; Redis is killed
//! under load and restarted. While it is away, each gate holds every
//! window it spends — both request windows and the group's — at its share
//! (one half), so the starts the upstream recorded, summed over both gates,
//! keep every window within its limit × (1 + the fallback's documented
//! overshoot, (P − 1)/P = 1/2 for two processes) over the whole run (the
//! restart included: for the longest window after its last local start, a
//! gate's shared starts must also fit its share), and within the limit
//! once the fallback has settled.

use crate::support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::Mutex;
use serde_json::{Value, json};
use sluice::{
    Call, CredentialConfig, Defaults, Executor, Gate, GateConfig, GroupConfig, Outcome, Request,
    ToolConfig, TransportError,
};
use sluice_redis::{Mode, RedisBudget};
use support::{RedisServer, max_in_window, redis_config};

/// Records each request's start (ms since the test began) and its tool.
#[derive(Clone)]
struct Recorder {
    began: Instant,
    starts: Arc<Mutex<Vec<(f64, String)>>>,
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

fn gate(recorder: &Recorder, budget: Arc<RedisBudget>, seed: u64) -> Gate<Recorder> {
    let credential = CredentialConfig::with_rate("5/1s".parse().unwrap())
        .window("20/10s".parse().unwrap())
        .group("search", GroupConfig::with_rate("3/1s".parse().unwrap()))
        .shared(true)
        .max_in_flight(8)
        .queue(64);
    let config = GateConfig::default()
        .defaults(Defaults {
            // Loopback on a loaded two-core machine: as the other Redis tests.
            window_margin: Duration::from_millis(100),
            ..Defaults::default()
        })
        .credential("key", credential)
        .tool("chat", ToolConfig::read("key"))
        .tool("find", ToolConfig::read("key").group("search"));
    Gate::builder(config, recorder.clone())
        .seed(seed)
        .shared(budget)
        .build()
        .unwrap()
}

/// Two workers per tool call until `until`, backing off as told.
async fn drive(
    gate: Arc<Gate<Recorder>>,
    name: &'static str,
    until: tokio::time::Instant,
) -> usize {
    let mut tasks = Vec::new();
    for (worker, tool) in ["chat", "chat", "find", "find"].into_iter().enumerate() {
        let gate = gate.clone();
        tasks.push(tokio::spawn(async move {
            let mut ok = 0;
            let mut i = 0u64;
            while tokio::time::Instant::now() < until && i < 1_000 {
                i += 1;
                let call = Call::new(tool, json!({ "q": format!("{name}-{worker}-{i}") }))
                    .deadline(Duration::from_secs(2));
                match gate.call(call).await {
                    Outcome::RateLimited { retry_after_ms, .. } => {
                        let backoff = Duration::from_millis(retry_after_ms.clamp(5, 200));
                        tokio::time::sleep(backoff).await;
                    }
                    outcome if outcome.status() == "ok" => ok += 1,
                    _ => tokio::time::sleep(Duration::from_millis(20)).await,
                }
            }
            ok
        }));
    }
    let mut ok = 0;
    for task in tasks {
        ok += task.await.unwrap();
    }
    ok
}

fn status(budget: &RedisBudget) -> (Mode, u32) {
    budget
        .status()
        .credentials
        .iter()
        .find(|c| c.credential == "key")
        .map_or((Mode::Shared, 0), |c| (c.mode, c.processes_seen))
}

/// The most starts of `starts` in any window of `window` ms that begins
/// at or after `from` and ends before `to`.
fn max_within(starts: &[f64], window: f64, from: f64, to: f64) -> usize {
    starts
        .iter()
        .filter(|t| **t >= from && **t + window <= to)
        .map(|t| {
            starts
                .iter()
                .filter(|u| **u >= *t && **u < *t + window)
                .count()
        })
        .max()
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_holds_every_window_and_group_at_the_share() {
    let _turn = crate::support::module_turn(module_path!());
    let mut redis = RedisServer::start();
    let recorder = Recorder {
        began: Instant::now(),
        starts: Arc::new(Mutex::new(Vec::new())),
    };
    let a = Arc::new(
        RedisBudget::connect(redis_config(&redis.url()))
            .await
            .unwrap(),
    );
    let b = Arc::new(
        RedisBudget::connect(redis_config(&redis.url()))
            .await
            .unwrap(),
    );
    let origin = tokio::time::Instant::now();
    let until = origin + Duration::from_millis(7_000);
    let runs = [
        tokio::spawn(drive(Arc::new(gate(&recorder, a.clone(), 1)), "a", until)),
        tokio::spawn(drive(Arc::new(gate(&recorder, b.clone(), 2)), "b", until)),
    ];
    // Kill once both have counted two processes in the heartbeat (the
    // spends beat it): the share is one over the processes seen.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let counted = origin + Duration::from_millis(4_000);
    while !(status(&a).1 == 2 && status(&b).1 == 2) && tokio::time::Instant::now() < counted {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        (status(&a).1, status(&b).1),
        (2, 2),
        "both processes counted"
    );
    let killed_at = recorder.began.elapsed().as_secs_f64() * 1000.0;
    redis.kill();
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    let fallen = (status(&a).0, status(&b).0);
    let restarted_at = recorder.began.elapsed().as_secs_f64() * 1000.0;
    redis.restart();
    let mut ok = 0;
    for run in runs {
        ok += run.await.unwrap();
    }
    let recorded = recorder.starts.lock().clone();
    let all: Vec<f64> = recorded.iter().map(|(t, _)| *t).collect();
    let group: Vec<f64> = recorded
        .iter()
        .filter(|(_, tool)| tool == "find")
        .map(|(t, _)| *t)
        .collect();
    let summary = format!(
        "killed at {killed_at:.0} ms, restarted at {restarted_at:.0} ms, {} starts ({} in the group): {all:?}",
        all.len(),
        group.len()
    );
    assert_eq!(all.len(), ok, "every start is an ok call");
    assert_eq!(fallen, (Mode::Fallback, Mode::Fallback), "{summary}");
    assert!(
        all.iter()
            .any(|t| *t > killed_at + 200.0 && *t < restarted_at),
        "calls flowed while Redis was away: {summary}"
    );
    // Over the whole run: limit × 1.5 (the first window after the last
    // shared start may hold what each process had left of its share).
    assert!(max_in_window(&all, 1_000.0) <= 7, "5/1s × 1.5: {summary}");
    assert!(max_in_window(&group, 1_000.0) <= 4, "3/1s × 1.5: {summary}");
    assert!(
        all.len() <= 30,
        "20/10s × 1.5 (the run is shorter than 10 s): {summary}"
    );
    // Settled (a window after the last shared start, which a call granted
    // just before the kill may keep up to its inline wait, 2 s, ahead;
    // Redis still away): each gate at
    // its share, floor(5 / 2) and floor(3 / 2) a second, within the limit.
    let settled = killed_at + 2_100.0;
    let requests = max_within(&all, 1_000.0, settled, restarted_at);
    let searches = max_within(&group, 1_000.0, settled, restarted_at);
    eprintln!(
        "measured: busiest second {} (group {}), {} starts in the run, settled busiest second {requests} (group {searches})",
        max_in_window(&all, 1_000.0),
        max_in_window(&group, 1_000.0),
        all.len()
    );
    assert!(requests <= 4, "two shares of 2/1s: {requests}, {summary}");
    assert!(searches <= 2, "two shares of 1/1s: {searches}, {summary}");
}

/// Redis said moments ago that no start of a spend is free for about a
/// second (another process spent the window): when Redis goes away, this
/// process's fallback starts no sooner than that, whatever room its own
/// share has. (As a one-window reservation's `next` does.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fallback_starts_no_sooner_than_redis_last_said_a_start_was_free() {
    let _turn = crate::support::module_turn(module_path!());
    use sluice::shared::{Decision, SharedBudget, SharedWindow};
    let mut server = RedisServer::start();
    let connect = || async {
        Arc::new(
            RedisBudget::connect(redis_config(&server.url()))
                .await
                .unwrap(),
        )
    };
    let (a, b) = (connect().await, connect().await);
    let window = |rate: &str| SharedWindow {
        scope: "api_key".into(),
        unit: None,
        index: 0,
        rate: rate.parse().unwrap(),
        cost: 1,
        low: false,
        burst: None,
    };
    let windows = [
        window("5/1s"),
        SharedWindow {
            index: 1,
            ..window("100/1h")
        },
    ];
    let request = |max_wait| support::spend_request(&windows, max_wait);
    // The other process spends the window (its leased starts a few ms ahead).
    for _ in 0..5 {
        let decision = b.reserve(request(Duration::from_millis(100))).await;
        assert!(matches!(decision, Decision::Granted { .. }), "{decision:?}");
    }
    // This one is told nothing is free for about a second.
    let decision = a.reserve(request(Duration::ZERO)).await;
    let Decision::Denied { wait, .. } = decision else {
        panic!("the window is full: {decision:?}");
    };
    assert!(wait > Duration::from_millis(800), "{wait:?}");
    server.kill();
    // Redis away: decided locally, at a share of one half (2 a second,
    // room for a start at once), but no sooner than Redis said.
    let decision = a.reserve(request(Duration::from_secs(2))).await;
    let Decision::Granted { wait, .. } = decision else {
        panic!("the fallback grants within 2 s: {decision:?}");
    };
    assert!(
        wait > Duration::from_millis(700),
        "a local start at {wait:?}"
    );
    assert_eq!(support::key_mode(&a), Mode::Fallback);
}
