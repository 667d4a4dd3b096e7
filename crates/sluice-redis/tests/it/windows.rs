//! Issue 14 end to end on a real `redis-server`: two gates (two processes)
//! share a credential with two request windows and a unit with a cost and a
//! true-up; the upstream records every request's start, and every window
//! holds summed over both gates.

use crate::support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::Mutex;
use serde_json::{Value, json};
use sluice::{
    Call, Cost, CredentialConfig, Defaults, Executor, Gate, GateConfig, Outcome, Priority, Request,
    Settle, ToolConfig, TransportError, UnitConfig,
};
use sluice_redis::RedisBudget;
use support::{RedisServer, max_in_window, redis_config};

/// Records each request's start (ms since the test began) and answers
/// that the call used `USED` tokens.
#[derive(Clone)]
struct Recorder {
    began: Instant,
    starts: Arc<Mutex<Vec<f64>>>,
}

/// The true cost the upstream reports: half the estimate.
const USED: u64 = 5;
const ESTIMATE: u64 = 10;

impl Executor for Recorder {
    type Payload = Value;

    async fn execute(&self, _request: Request<Value>) -> Result<sluice::Reply, TransportError> {
        let at = self.began.elapsed().as_secs_f64() * 1000.0;
        self.starts.lock().push(at);
        http::Response::builder()
            .status(200)
            .header("x-used", USED.to_string())
            .body(Bytes::from_static(b"{}"))
            .map(sluice::Reply::from)
            .map_err(|e| TransportError::other(e.to_string()))
    }
}

fn gate(recorder: &Recorder, budget: Arc<RedisBudget>, seed: u64) -> Gate<Recorder> {
    let credential = CredentialConfig::with_rate("5/1s".parse().unwrap())
        .window("20/10s".parse().unwrap())
        .unit("tokens", UnitConfig::with_rate("40/1s".parse().unwrap()));
    let tool = ToolConfig::read("key")
        .cost("tokens", Cost::Argument("max_tokens".into()))
        .settle("tokens", Settle::Header("x-used".into()));
    gate_of(recorder, budget, seed, credential, tool)
}

/// A gate over `credential` (made shared, 8 in flight) with `tool` as `chat`.
fn gate_of(
    recorder: &Recorder,
    budget: Arc<RedisBudget>,
    seed: u64,
    credential: CredentialConfig,
    tool: ToolConfig,
) -> Gate<Recorder> {
    let credential = credential.shared(true).max_in_flight(8).queue(64);
    let config = GateConfig::default()
        .defaults(Defaults {
            // Loopback on a loaded two-core machine: as the other Redis tests.
            window_margin: Duration::from_millis(100),
            ..Defaults::default()
        })
        .credential("key", credential)
        .tool("chat", tool);
    Gate::builder(config, recorder.clone())
        .seed(seed)
        .shared(budget)
        .build()
        .unwrap()
}

async fn connect(server: &RedisServer) -> Arc<RedisBudget> {
    Arc::new(
        RedisBudget::connect(redis_config(&server.url()))
            .await
            .unwrap(),
    )
}

async fn drive(
    gate: Arc<Gate<Recorder>>,
    name: &'static str,
    until: tokio::time::Instant,
) -> usize {
    let mut tasks = Vec::new();
    for worker in 0..4 {
        let gate = gate.clone();
        tasks.push(tokio::spawn(async move {
            let mut ok = 0;
            let mut i = 0u64;
            while tokio::time::Instant::now() < until && i < 1_000 {
                i += 1;
                let call = Call::new(
                    "chat",
                    json!({ "q": format!("{name}-{worker}-{i}"), "max_tokens": ESTIMATE }),
                )
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

/// `rate = ["5/1s", "20/10s"]` and tokens at 40/1s, each call estimated at
/// 10 tokens and settled at 5: across both gates, no second holds more
/// than 5 starts and the first ten seconds no more than 20. The true-up
/// shows too: at the estimate only 4 calls fit the tokens of a second,
/// settled, the request window's 5 do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gates_hold_every_window_and_settle_the_unit() {
    let _turn = crate::support::module_turn(module_path!());
    let server = RedisServer::start();
    let recorder = Recorder {
        began: Instant::now(),
        starts: Arc::new(Mutex::new(Vec::new())),
    };
    let (a, b) = (connect(&server).await, connect(&server).await);
    let gate_a = Arc::new(gate(&recorder, a.clone(), 1));
    let gate_b = Arc::new(gate(&recorder, b.clone(), 2));
    let until = tokio::time::Instant::now() + Duration::from_millis(5_500);
    let (ok_a, ok_b) = tokio::join!(drive(gate_a, "a", until), drive(gate_b, "b", until));
    let starts = recorder.starts.lock().clone();
    assert_eq!(starts.len(), ok_a + ok_b, "every start is an ok call");
    assert!(
        ok_a > 0 && ok_b > 0,
        "both gates made progress: {ok_a} {ok_b}"
    );
    assert!(
        max_in_window(&starts, 1_000.0) <= 5,
        "5/1s over both gates: {starts:?}"
    );
    assert!(starts.len() <= 20, "20/10s over both gates: {starts:?}");
    // 5.5 s at 5 a second reaches the 10 s window's 20.
    assert!(
        starts.len() >= 16,
        "the windows, not the test, set the pace: {starts:?}"
    );
}

/// The true-up reaches Redis: calls taken in turn from two gates, each
/// estimated at 10 tokens of 40 a second and settled at 5, start five in
/// the first second (at the estimate only four would fit); the sixth waits
/// for the 5/1s request window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settled_cost_frees_the_unit_for_the_other_gate() {
    let _turn = crate::support::module_turn(module_path!());
    let server = RedisServer::start();
    let recorder = Recorder {
        began: Instant::now(),
        starts: Arc::new(Mutex::new(Vec::new())),
    };
    let (a, b) = (connect(&server).await, connect(&server).await);
    let gates = [gate(&recorder, a, 1), gate(&recorder, b, 2)];
    for i in 0..6 {
        let call = Call::new("chat", json!({ "q": i, "max_tokens": ESTIMATE }))
            .deadline(Duration::from_secs(3));
        let outcome = gates[i % 2].call(call).await;
        assert_eq!(outcome.status(), "ok", "call {i}: {outcome:?}");
        // The true-up is sent in the background; let it land.
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    let starts = recorder.starts.lock().clone();
    assert_eq!(starts.len(), 6);
    assert!(
        starts[4] - starts[0] < 700.0,
        "five calls in the first second once settled: {starts:?}"
    );
    assert!(
        starts[5] - starts[0] >= 1_000.0,
        "the sixth waits for 5/1s over both gates: {starts:?}"
    );
}

/// `burst` beside a second window: the first window is a GCRA bucket in
/// Redis, shared by both gates. Over both, no 50 ms holds more than the
/// burst of 2 (each gate's own bucket alone would let 4 through), and the
/// 20/10s window caps the run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_beside_a_window_is_one_bucket_over_both_gates() {
    let _turn = crate::support::module_turn(module_path!());
    let server = RedisServer::start();
    let recorder = Recorder {
        began: Instant::now(),
        starts: Arc::new(Mutex::new(Vec::new())),
    };
    let bucket = |budget: Arc<RedisBudget>, seed: u64| {
        let credential = CredentialConfig::with_rate("10/1s".parse().unwrap())
            .burst(2)
            .window("20/10s".parse().unwrap());
        gate_of(&recorder, budget, seed, credential, ToolConfig::read("key"))
    };
    let (a, b) = (connect(&server).await, connect(&server).await);
    let gate_a = Arc::new(bucket(a, 1));
    let gate_b = Arc::new(bucket(b, 2));
    let until = tokio::time::Instant::now() + Duration::from_millis(3_000);
    let (ok_a, ok_b) = tokio::join!(drive(gate_a, "a", until), drive(gate_b, "b", until));
    let starts = recorder.starts.lock().clone();
    assert_eq!(starts.len(), ok_a + ok_b, "every start is an ok call");
    assert!(
        ok_a > 0 && ok_b > 0,
        "both gates made progress: {ok_a} {ok_b}"
    );
    assert!(
        max_in_window(&starts, 50.0) <= 2,
        "a burst of 2 over both gates: {starts:?}"
    );
    assert!(starts.len() <= 20, "20/10s over both gates: {starts:?}");
    // 2 at once, then one every ~110 ms: the 10 s window's 20 by 2.2 s.
    assert!(
        starts.len() >= 16,
        "the bucket, not the test, set the pace: {starts:?}"
    );
}

/// A denial from Redis on a budget is remembered: a call that could not
/// wait until then is denied without a round trip; a call that can wait
/// longer, or one spending less in that budget, still asks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denial_is_remembered_for_the_calls_that_cannot_outwait_it() {
    let _turn = crate::support::module_turn(module_path!());
    use sluice::shared::{Decision, SharedBudget, SharedWindow};
    let server = RedisServer::start();
    let budget = RedisBudget::connect(redis_config(&server.url()))
        .await
        .unwrap();
    let window = |unit: Option<&str>, rate: &str, cost: u64| SharedWindow {
        scope: "api_key".into(),
        unit: unit.map(str::to_owned),
        index: 0,
        rate: rate.parse().unwrap(),
        cost,
        low: false,
        burst: None,
    };
    let tokens = |cost| {
        [
            window(None, "100/1s", 1),
            window(Some("tokens"), "10/1s", cost),
        ]
    };
    let ask = |windows: &[SharedWindow], max_wait: Duration| {
        let windows = windows.to_vec();
        let budget = &budget;
        async move {
            budget
                .reserve(support::spend_request(&windows, max_wait))
                .await
        }
    };
    let granted = |d: &Decision| matches!(d, Decision::Granted { .. });
    assert!(granted(&ask(&tokens(8), Duration::ZERO).await));
    // 8 of 10 tokens spent: 6 more are denied by Redis ...
    let before = server.round_trips();
    assert!(!granted(&ask(&tokens(6), Duration::ZERO).await));
    assert_eq!(server.round_trips(), before + 1);
    // ... and then 6 or more without asking, for a caller that cannot wait.
    let before = server.round_trips();
    assert!(!granted(&ask(&tokens(6), Duration::from_millis(100)).await));
    assert!(!granted(&ask(&tokens(9), Duration::ZERO).await));
    assert_eq!(server.round_trips(), before, "denied locally");
    // Less than 6 may fit, and one that can wait past the denial asks.
    assert!(granted(&ask(&tokens(2), Duration::ZERO).await));
    assert!(granted(&ask(&tokens(6), Duration::from_secs(2)).await));
    assert_eq!(server.round_trips(), before + 2);
}

/// Leases count in units: a flood from two gates on requests at 20/1s and
/// 30/10s and tokens at 120/1s, each call costing 10 tokens. Leased starts
/// are charged in every window and unit, so over both gates no second
/// holds more than the tokens' 12 calls and the run no more than 30; and
/// most calls start at a leased start, without a round trip of their own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_count_in_every_window_and_unit() {
    let _turn = crate::support::module_turn(module_path!());
    let server = RedisServer::start();
    let recorder = Recorder {
        began: Instant::now(),
        starts: Arc::new(Mutex::new(Vec::new())),
    };
    let leased = |budget: Arc<RedisBudget>, seed: u64| {
        let credential = CredentialConfig::with_rate("20/1s".parse().unwrap())
            .window("30/10s".parse().unwrap())
            .unit("tokens", UnitConfig::with_rate("120/1s".parse().unwrap()));
        let tool = ToolConfig::read("key").cost("tokens", Cost::Fixed(ESTIMATE));
        gate_of(&recorder, budget, seed, credential, tool)
    };
    let (a, b) = (connect(&server).await, connect(&server).await);
    let before = server.round_trips();
    let gate_a = Arc::new(leased(a.clone(), 1));
    let gate_b = Arc::new(leased(b.clone(), 2));
    let until = tokio::time::Instant::now() + Duration::from_millis(3_000);
    let (ok_a, ok_b) = tokio::join!(drive(gate_a, "a", until), drive(gate_b, "b", until));
    let starts = recorder.starts.lock().clone();
    assert_eq!(starts.len(), ok_a + ok_b, "every start is an ok call");
    assert!(
        max_in_window(&starts, 1_000.0) <= 12,
        "120 tokens/1s at 10 a call over both gates: {starts:?}"
    );
    assert!(starts.len() <= 30, "30/10s over both gates: {starts:?}");
    // 12 a second reaches the 10 s window's 30 within the 3 s.
    assert!(
        starts.len() >= 24,
        "the windows, not the test, set the pace: {starts:?}"
    );
    let leased: u64 = [&a, &b]
        .iter()
        .flat_map(|budget| budget.status().credentials)
        .map(|c| c.decisions.leased)
        .sum();
    let trips = server.round_trips() - before;
    // Measured: about half (14 to 17 of 30, 30 to 36 round trips in all;
    // 46 to 48 with `max_lease = 1`).
    assert!(
        leased * 4 >= starts.len() as u64,
        "a quarter of the calls or more started at leased starts: {leased} \
         of {} ({trips} round trips)",
        starts.len()
    );
}

/// Priorities on a shared credential, on Redis, with one request window
/// (the backend holds each grant until its time, seated by priority) and
/// with several (`["1/1s", "100/1h"]`: the engine sleeps until each
/// grant's start, seated the same way). Low calls 1 and 2 hold grants
/// about 1 s and 2 s out when a high call comes at 300 ms; it spends what
/// they spend, so it takes the earliest of their starts and they move one
/// start later each. It ends second, the low calls after it in their
/// order, and the rolling second holds throughout. (Calls come 50 ms
/// apart or more, so that the test, not the scheduler, sets their order.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_callers_take_shared_grants_by_priority() {
    let _turn = crate::support::module_turn(module_path!());
    let server = RedisServer::start();
    for (name, credential) in priority_credentials() {
        served_by_priority(&server, name, credential, [0, 3, 1, 2]).await;
    }
    // With a low share, which the low calls spend besides, no swap fits:
    // the high call takes low call 1's grant, which covers its own spend,
    // gives its own back, and call 1 asks again behind call 2. (A server
    // of its own: the windows of the shapes above are still in the logs.)
    let server = RedisServer::start();
    let shared = CredentialConfig::with_rate("1/1s".parse().unwrap()).low_share(0.5);
    served_by_priority(&server, "low share", shared, [0, 3, 2, 1]).await;
}

/// Two credential shapes for the priority tests: one request window of
/// 1/1s, and the same beside a long one.
fn priority_credentials() -> [(&'static str, CredentialConfig); 2] {
    let one = CredentialConfig::with_rate("1/1s".parse().unwrap());
    let several = one.clone().window("100/1h".parse().unwrap());
    [("one window", one), ("several", several)]
}

/// A gate on `credential`, shared on `server` (100 ms margin, an inline
/// wait of `inline_ms`), with `chat` a write, and its recorder.
async fn priority_gate(
    server: &RedisServer,
    credential: CredentialConfig,
    inline_ms: u64,
) -> (Arc<Gate<Recorder>>, Recorder) {
    let recorder = Recorder {
        began: Instant::now(),
        starts: Arc::new(Mutex::new(Vec::new())),
    };
    let config = GateConfig::default()
        .defaults(Defaults {
            window_margin: Duration::from_millis(100),
            inline_wait: Duration::from_millis(inline_ms),
            ..Defaults::default()
        })
        .credential("key", credential.shared(true).max_in_flight(8))
        .tool("chat", ToolConfig::write("key"));
    let gate = Gate::builder(config, recorder.clone())
        .seed(1)
        .shared(connect(server).await)
        .build()
        .unwrap();
    (Arc::new(gate), recorder)
}

/// Call `n` with `priority` on `gate` after `after_ms`: its outcome, and
/// when it ended (ms since `began`).
fn spawn_call(
    gate: &Arc<Gate<Recorder>>,
    began: Instant,
    (n, priority, after_ms): (u64, Priority, u64),
) -> tokio::task::JoinHandle<(Outcome, f64)> {
    let gate = gate.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(after_ms)).await;
        let call = Call::new("chat", json!({ "n": n })).priority(priority);
        let outcome = gate.turn().call(call).await;
        (outcome, began.elapsed().as_secs_f64() * 1000.0)
    })
}

/// A low call that a high one moves past its inline wait (1.5 s) is
/// deferred for priority, and the grant it was moved to goes back to
/// Redis: a call at 1.3 s starts on it (about 2.2 s), within its wait,
/// instead of being deferred past the next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_moved_past_its_wait_gives_the_shared_grant_back() {
    let _turn = crate::support::module_turn(module_path!());
    let server = RedisServer::start();
    for (name, credential) in priority_credentials() {
        let (gate, recorder) = priority_gate(&server, credential, 1_500).await;
        let began = recorder.began;
        let first = spawn_call(&gate, began, (0, Priority::Low, 0));
        let low = spawn_call(&gate, began, (1, Priority::Low, 50));
        let high = spawn_call(&gate, began, (2, Priority::High, 200));
        let late = spawn_call(&gate, began, (3, Priority::Normal, 1_300));
        let mut ended = Vec::new();
        for task in [first, high, late, low] {
            ended.push(task.await.unwrap());
        }
        let low = ended.pop().map(|(outcome, _)| outcome).unwrap();
        let starts = recorder.starts.lock().clone();
        for (outcome, _) in &ended {
            assert!(outcome.is_ok(), "{name}: {ended:?} {low:?} {starts:?}");
        }
        let Outcome::RateLimited {
            reason,
            retry_after_ms,
            ..
        } = &low
        else {
            panic!("{name}: {low:?}");
        };
        assert_eq!(*reason, sluice::Reason::Priority, "{name}");
        assert!((1_700..=2_300).contains(retry_after_ms), "{name}: {low:?}");
        assert_eq!(starts.len(), 3, "{name}: {starts:?}");
        assert!(max_in_window(&starts, 1_000.0) <= 1, "{name}: {starts:?}");
    }
}

async fn served_by_priority(
    server: &RedisServer,
    name: &str,
    credential: CredentialConfig,
    expected: [u64; 4],
) {
    let (gate, recorder) = priority_gate(server, credential, 10_000).await;
    let began = recorder.began;
    let calls = [
        (0, Priority::Low, 0),
        (1, Priority::Low, 50),
        (2, Priority::Low, 100),
        (3, Priority::High, 300),
    ];
    let tasks: Vec<_> = calls
        .into_iter()
        .map(|call| (call.0, spawn_call(&gate, began, call)))
        .collect();
    let mut ended = Vec::new();
    for (n, task) in tasks {
        let (outcome, at) = task.await.unwrap();
        assert!(outcome.is_ok(), "{name} {n}: {outcome:?}");
        ended.push((at, n));
    }
    ended.sort_by(|a, b| a.0.total_cmp(&b.0));
    let order: Vec<u64> = ended.iter().map(|(_, n)| *n).collect();
    assert_eq!(order, expected, "{name}: {ended:?}");
    let starts = recorder.starts.lock().clone();
    assert!(max_in_window(&starts, 1_000.0) <= 1, "{name}: {starts:?}");
}

/// A high call costing more than any waiting low call it outranks, on
/// Redis (tokens 10/1s): low call 0 (10 tokens) starts at once, low calls
/// 1 and 2 (5 each) hold grants sharing about 1.1 s; the high call (10) at
/// 300 ms would start about 2.2 s. No swap fits and neither grant covers
/// its cost, so it gives their grants back to Redis, takes their start,
/// and they ask again behind it: it ends second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_costlier_high_call_gives_the_grants_it_outranks_back() {
    let _turn = crate::support::module_turn(module_path!());
    let server = RedisServer::start();
    let recorder = Recorder {
        began: Instant::now(),
        starts: Arc::new(Mutex::new(Vec::new())),
    };
    let credential = CredentialConfig::with_rate("100/1s".parse().unwrap())
        .unit("tokens", UnitConfig::with_rate("10/1s".parse().unwrap()))
        .shared(true)
        .max_in_flight(8);
    let config = GateConfig::default()
        .defaults(Defaults {
            window_margin: Duration::from_millis(100),
            inline_wait: Duration::from_secs(10),
            ..Defaults::default()
        })
        .credential("key", credential)
        .tool(
            "chat",
            ToolConfig::write("key").cost("tokens", Cost::Argument("max_tokens".into())),
        );
    let gate = Gate::builder(config, recorder.clone())
        .seed(1)
        .shared(connect(&server).await)
        .build()
        .unwrap();
    let gate = Arc::new(gate);
    let calls = [
        (0, 10, Priority::Low, 0),
        (1, 5, Priority::Low, 50),
        (2, 5, Priority::Low, 100),
        (3, 10, Priority::High, 300),
    ];
    let tasks: Vec<_> = calls
        .into_iter()
        .map(|(n, tokens, priority, after_ms)| {
            let (gate, began) = (gate.clone(), recorder.began);
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(after_ms)).await;
                let call = Call::new("chat", json!({ "n": n, "max_tokens": tokens }));
                let outcome = gate.turn().call(call.priority(priority)).await;
                (n, outcome, began.elapsed().as_secs_f64() * 1000.0)
            })
        })
        .collect();
    let mut ended = Vec::new();
    for task in tasks {
        let (n, outcome, at) = task.await.unwrap();
        assert!(outcome.is_ok(), "{n}: {outcome:?}");
        ended.push((at, n));
    }
    ended.sort_by(|a, b| a.0.total_cmp(&b.0));
    let order: Vec<u64> = ended.iter().map(|(_, n)| *n).collect();
    assert_eq!(order[..2], [0, 3], "{ended:?}");
}

/// Answers 429 with `Retry-After: 30` to its first request and 200 after,
/// counting them.
#[derive(Clone, Default)]
struct ThrottledOnce {
    sent: Arc<std::sync::atomic::AtomicUsize>,
}

impl Executor for ThrottledOnce {
    type Payload = Value;

    async fn execute(&self, _request: Request<Value>) -> Result<sluice::Reply, TransportError> {
        let first = self.sent.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0;
        http::Response::builder()
            .status(if first { 429 } else { 200 })
            .header("retry-after", "30")
            .body(Bytes::from_static(b"{}"))
            .map(sluice::Reply::from)
            .map_err(|e| TransportError::other(e.to_string()))
    }
}

/// A block one process set holds the calls of a process that came up
/// after it (and so never heard its event), whatever the credential's
/// shape: the process learns it from Redis when it asks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_set_before_a_process_started_holds_its_calls() {
    let _turn = crate::support::module_turn(module_path!());
    for (shape, credential) in priority_credentials() {
        let server = RedisServer::start();
        let upstream = ThrottledOnce::default();
        let gate = |budget| {
            let config = GateConfig::default()
                .credential("key", credential.clone().shared(true).max_in_flight(8))
                .tool("chat", ToolConfig::write("key"));
            Gate::builder(config, upstream.clone())
                .seed(1)
                .shared(budget)
                .build()
                .unwrap()
        };
        let first = gate(connect(&server).await);
        let outcome = first.call(Call::new("chat", json!({"q": 1}))).await;
        assert_eq!(outcome.status(), "rate_limited", "{shape}: {outcome:?}");
        // The block reaches Redis from the first process's worker.
        let blocked = || {
            let keys: Vec<String> = server.command(&["KEYS", "*:blocks"]);
            keys.iter().any(|k| server.command::<i64>(&["HLEN", k]) > 0)
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        while !blocked() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let later = gate(connect(&server).await);
        let outcome = later.call(Call::new("chat", json!({"q": 2}))).await;
        let Outcome::RateLimited { retry_after_ms, .. } = outcome else {
            panic!("{shape}: the later process's call was not held: {outcome:?}");
        };
        assert!(retry_after_ms > 20_000, "{shape}: {retry_after_ms} ms");
        assert_eq!(
            upstream.sent.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "{shape}: only the throttled request went upstream"
        );
    }
}

/// `inline_wait = 0`: a turn of ten calls at once on a shared 10/1s key
/// all start, as on a local one, whatever the credential's shape. Before,
/// none did on one window and one to four on several: a start due "now"
/// in Redis came back a moment past the `latest` each call read before
/// asking (the round trip), so it counted as a wait; and the first call's
/// lease took the window for starts at least 20 ms ahead, which no call
/// that cannot wait could use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_that_will_not_wait_starts_whole_at_the_rate() {
    let _turn = crate::support::module_turn(module_path!());
    let ten = || CredentialConfig::with_rate("10/1s".parse().unwrap());
    for (shape, credential) in [
        ("one window", ten()),
        ("several", ten().window("1000/1h".parse().unwrap())),
    ] {
        let server = RedisServer::start();
        let recorder = Recorder {
            began: Instant::now(),
            starts: Arc::new(Mutex::new(Vec::new())),
        };
        let config = GateConfig::default()
            .defaults(Defaults {
                inline_wait: Duration::ZERO,
                ..Defaults::default()
            })
            .credential("key", credential.shared(true).max_in_flight(20))
            .tool("chat", ToolConfig::read("key"));
        let gate = Gate::builder(config, recorder.clone())
            .seed(1)
            .shared(connect(&server).await)
            .build()
            .unwrap();
        for round in 0..2 {
            let calls = (0..10).map(|n| Call::new("chat", json!({ "n": n, "round": round })));
            let outcomes = gate.turn().run(calls).await;
            let ok = outcomes.iter().filter(|o| o.status() == "ok").count();
            assert_eq!(ok, 10, "{shape}, round {round}: {outcomes:?}");
            tokio::time::sleep(Duration::from_millis(1_100)).await;
        }
        let starts = recorder.starts.lock().clone();
        assert!(max_in_window(&starts, 1_000.0) <= 10, "{shape}: {starts:?}");
    }
}
