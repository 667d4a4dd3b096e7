//! Several processes on one key: three `RedisBudget`s (each with its own
//! connections and lease pool) behind three gates, driven hard against the
//! fake API over loopback. Asserted on what the fake recorded.

use crate::support;

use std::time::Duration;

use http::{HeaderValue, StatusCode, header::RETRY_AFTER};
use sluice::Gate;
use sluice_fake::{FakeServer, Reply, Rule};
use sluice_redis::Mode;
use support::*;
use tokio::time::Instant;

/// The key's rate in these tests: R starts per second.
const R: usize = 60;
const RATE: &str = "60/1s";
const PROCESSES: usize = 3;
const WORKERS: usize = 24;

/// The load tests measure rates: one at a time on two cores.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_spend_one_rate_with_few_round_trips() {
    let _turn = crate::support::module_turn(module_path!());
    let _serial = SERIAL.lock().await;
    let Driven3 {
        redis,
        server,
        budgets,
        seen,
    } = three_driven(|server, budget, seed| gate_with_margin(server, RATE, Some(budget), 32, seed))
        .await;
    let starts = starts(&server);
    let busiest = max_in_window(&starts, 1_000.0);
    let ok: usize = seen
        .iter()
        .map(|s| s.outcomes.get("ok").copied().unwrap_or(0))
        .sum();
    let trips = redis.round_trips();
    let per_call = trips as f64 / ok as f64;
    let status: Vec<_> = budgets.iter().map(|b| b.status()).collect();
    let sizes: Vec<u32> = status.iter().map(|s| s.credentials[0].lease_size).collect();
    eprintln!(
        "shared: {} starts in 4 s, busiest 1 s window {busiest} (R = {R}), {ok} ok calls, \
         {trips} round trips = {per_call:.3} per admitted call; lease sizes {sizes:?}; seen {:?}",
        starts.len(),
        status
            .iter()
            .map(|s| s.credentials[0].decisions)
            .collect::<Vec<_>>(),
    );
    // The promise, summed over every process: leased slots carry their
    // start time, so leases add nothing to it.
    assert!(busiest <= R, "busiest window {busiest} > {R}: {starts:?}");
    // Driven hard, the key is used: close to R per second.
    assert!(starts.len() >= 3 * R, "only {} starts", starts.len());
    assert!(server.api().stats().throttled == 0);
    // Leases cut traffic well below one round trip per call.
    assert!(per_call < 0.75, "{per_call} round trips per admitted call");
    // A lease grows with the demand up to this process's fair share of
    // the window, and never past it.
    let share = (R / PROCESSES) as u32;
    assert!(sizes.iter().all(|&k| k <= share), "lease sizes {sizes:?}");
    assert!(
        sizes.iter().any(|&k| k > share / 2),
        "lease sizes {sizes:?}"
    );
    for s in &status {
        assert_eq!(s.credentials[0].mode, Mode::Shared, "{s:?}");
        assert_eq!(s.errors.total(), 0, "{s:?}");
        assert_eq!(s.credentials[0].processes_seen, PROCESSES as u32, "{s:?}");
        assert!(!format!("{s:?}").is_empty());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn separate_local_buckets_spend_three_times_the_key() {
    let _turn = crate::support::module_turn(module_path!());
    let _serial = SERIAL.lock().await;
    let server = fake(10_000).await;
    let until = Instant::now() + Duration::from_secs(3);
    let runs = ["a", "b", "c"].into_iter().enumerate().map(|(i, name)| {
        let gate = gate(&server, RATE, None, 32, i as u64);
        tokio::spawn(drive(
            gate,
            name,
            WORKERS,
            until,
            Duration::from_millis(200),
        ))
    });
    for run in runs.collect::<Vec<_>>() {
        run.await.unwrap();
    }
    let starts = starts(&server);
    let busiest = max_in_window(&starts, 1_000.0);
    eprintln!(
        "local: {} starts in 3 s, busiest 1 s window {busiest} (R = {R})",
        starts.len()
    );
    assert!(
        busiest >= 5 * R / 2,
        "busiest window {busiest}, expected about {}",
        3 * R
    );
}

/// With a bucket of burst 1 the processes' starts are spread evenly, so
/// what the fake records after the 429 shows how fast the block reached
/// the others. (A saturated sliding window hands its N slots out at one
/// instant instead, and the rest of such a burst may already be under way.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_one_process_sees_stops_every_process() {
    let _turn = crate::support::module_turn(module_path!());
    let _serial = SERIAL.lock().await;
    a_429_stops_every_process(None).await;
}

/// As [`a_429_one_process_sees_stops_every_process`], on a credential
/// whose calls spend two windows (`spend.lua`): the block reaches the
/// starts other processes were granted before it as well.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_one_process_sees_stops_every_process_on_several_windows() {
    let _turn = crate::support::module_turn(module_path!());
    let _serial = SERIAL.lock().await;
    a_429_stops_every_process(Some("100000/1h")).await;
}

async fn a_429_stops_every_process(beside: Option<&str>) {
    let redis = RedisServer::start();
    let server = fake(10_000).await;
    let mut budgets = Vec::new();
    for _ in 0..PROCESSES {
        budgets.push(budget(redis_config(&redis.url())).await);
    }
    let until = Instant::now() + Duration::from_millis(4_500);
    let runs: Vec<_> = budgets
        .iter()
        .zip(["a", "b", "c"])
        .enumerate()
        .map(|(i, (b, name))| {
            let budget = Some(b.clone());
            let gate = match beside {
                None => gate_with_burst(&server, RATE, Some(1), budget, 32, i as u64),
                Some(beside) => {
                    let limits = (RATE, Some(1), beside);
                    gate_with_burst_beside(&server, limits, budget, 32, i as u64)
                }
            };
            tokio::spawn(drive(
                gate,
                name,
                WORKERS,
                until,
                Duration::from_millis(200),
            ))
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    server.api().script(Rule::next(
        Reply::new(StatusCode::TOO_MANY_REQUESTS)
            .header(RETRY_AFTER, HeaderValue::from_static("2")),
    ));
    for run in runs {
        run.await.unwrap();
    }
    let records = server.api().requests();

    let throttled: Vec<_> = records.iter().filter(|r| r.status == 429).collect();
    assert_eq!(throttled.len(), 1, "one scripted 429");
    let t429 = throttled[0].t_ms;
    let during: Vec<f64> = records
        .iter()
        .map(|r| r.t_ms)
        .filter(|t| *t > t429 && *t < t429 + 2_000.0)
        .collect();
    let next = records
        .iter()
        .map(|r| r.t_ms)
        .filter(|t| *t > t429)
        .fold(f64::INFINITY, f64::min);
    eprintln!(
        "429 at {t429:.1} ms: {} starts in the next 2 s ({during:?}); next start {:.1} ms later",
        during.len(),
        next - t429
    );
    // Only a start already due while the block travels (a few ms; the
    // starts are 1/R apart) may fall inside the 2 s.
    assert!(
        during.iter().all(|t| *t < t429 + 20.0),
        "starts during the block: {during:?}"
    );
    assert!(during.len() <= 1, "{during:?}");
    // And traffic resumed after it.
    assert!(records.iter().any(|r| r.t_ms >= t429 + 2_000.0));
}

/// A burst of N calls at N/W, none willing to wait: all N start, none is
/// deferred because another's lease holds its slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_n_calls_at_n_per_window_all_start() {
    let _turn = crate::support::module_turn(module_path!());
    use sluice::shared::{Decision, ReserveRequest, SharedBudget, SharedLimit};
    let redis = RedisServer::start();
    let budget = budget(redis_config(&redis.url())).await;
    let limit = SharedLimit {
        rate: "10/1s".parse().unwrap(),
        burst: None,
    };
    let calls: Vec<_> = (0..10)
        .map(|_| {
            let budget = budget.clone();
            tokio::spawn(async move {
                budget
                    .reserve(ReserveRequest {
                        credential: "burst",
                        scopes: &["api_key"],
                        limit: Some(limit),
                        windows: &[],
                        not_before: Duration::ZERO,
                        max_wait: Duration::from_millis(50),
                        late_start: LATE_START,
                        priority: sluice::Priority::Normal,
                    })
                    .await
            })
        })
        .collect();
    let mut granted = 0;
    let mut denied = Vec::new();
    for call in calls {
        match call.await.unwrap() {
            Decision::Granted { .. } => granted += 1,
            other => denied.push(other),
        }
    }
    assert_eq!(granted, 10, "{denied:?} {:?}", budget.status());
}

/// As [`three_processes_spend_one_rate_with_few_round_trips`], on a
/// credential whose calls spend a second, long window beside the first
/// (`spend.lua`, which leases spends): the promise holds summed over the
/// processes, and leases serve most calls. A saturated key's next start
/// is about a window away, so a lease's further starts are placed within
/// its horizon of the call's own start, not of now: from now, none fit,
/// and every call cost a round trip (0.50 per admitted call; 0.14 since).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_on_several_windows_spend_one_rate_with_few_round_trips() {
    let _turn = crate::support::module_turn(module_path!());
    let _serial = SERIAL.lock().await;
    let limits = (RATE, None, "100000/1h");
    let Driven3 {
        redis,
        server,
        seen,
        ..
    } = three_driven(|server, budget, seed| {
        gate_with_burst_beside(server, limits, Some(budget), 32, seed)
    })
    .await;
    let ok: usize = seen
        .iter()
        .map(|s| s.outcomes.get("ok").copied().unwrap_or(0))
        .sum();
    let starts = starts(&server);
    let busiest = max_in_window(&starts, 1_000.0);
    let per_call = redis.round_trips() as f64 / ok as f64;
    eprintln!(
        "several windows: {} starts in 4 s, busiest 1 s window {busiest} (R = {R}), \
         {ok} ok calls, {per_call:.3} round trips per admitted call",
        starts.len()
    );
    assert!(busiest <= R, "busiest window {busiest} > {R}: {starts:?}");
    assert!(starts.len() >= 3 * R, "only {} starts", starts.len());
    assert!(server.api().stats().throttled == 0);
    assert!(per_call < 0.3, "{per_call} round trips per admitted call");
}

/// What [`three_driven`] ran on, and what each of its drivers saw.
struct Driven3 {
    redis: RedisServer,
    server: FakeServer,
    budgets: Vec<std::sync::Arc<sluice_redis::RedisBudget>>,
    seen: Vec<Driven>,
}

/// Three processes on one Redis, each a gate `gate` makes on its own
/// budget (a second for a reply: a test of Redis answering, so that a
/// loaded machine's stall is not a failed command; the fallback has tests
/// of its own, in faults.rs and local_starts.rs), driven hard for 4 s;
/// Redis's statistics count from the drive's start.
async fn three_driven(
    gate: impl Fn(&FakeServer, std::sync::Arc<sluice_redis::RedisBudget>, u64) -> Gate<HttpExecutor>,
) -> Driven3 {
    let redis = RedisServer::start();
    let server = fake(10_000).await;
    let mut budgets = Vec::new();
    for _ in 0..PROCESSES {
        let config = redis_config(&redis.url()).timeout(Duration::from_secs(1));
        budgets.push(budget(config).await);
    }
    let gates: Vec<_> = budgets
        .iter()
        .enumerate()
        .map(|(i, b)| gate(&server, b.clone(), i as u64))
        .collect();
    redis.reset_stats();
    let until = Instant::now() + Duration::from_secs(4);
    let backoff = Duration::from_millis(200);
    let runs: Vec<_> = gates
        .into_iter()
        .zip(["a", "b", "c"])
        .map(|(gate, name)| tokio::spawn(drive(gate, name, WORKERS, until, backoff)))
        .collect();
    let mut seen = Vec::new();
    for run in runs {
        seen.push(run.await.unwrap());
    }
    Driven3 {
        redis,
        server,
        budgets,
        seen,
    }
}
