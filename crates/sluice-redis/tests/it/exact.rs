//! Exact at any scale (issue 49): with both cores busy (a `yes` load
//! beside the test), no rolling second of the upstream's own records holds
//! more than the limit plus one, and every call is answered once: 16
//! processes on one key, and Redis stopped (SIGSTOP) 200 ms at a time
//! mid-run. (A three-master Cluster with 12 credentials is not here yet:
//! docs/shared-limiter.md, "Exactness under load", says what it showed.)
//!
//! Not part of CI yet: on the two loaded cores these tests run on, the
//! engine's own start times (not only the upstream's arrivals) showed
//! more than the limit in a second with no timeout and no fallback
//! (docs/shared-limiter.md, "Exactness under load"). They run when
//! `SLUICE_LONG=1` is set (`scripts/exact_runs.sh`), and say so otherwise.
//!
//! Each budget is one process's view (its own connection, lease pool,
//! breaker and id in the heartbeat set), as in the other tests here.

use crate::support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use sluice::{CredentialConfig, Defaults, Gate, GateConfig, ToolConfig};
use sluice_redis::{RedisBudget, RedisConfig};
use support::http_executor::HttpExecutor;
use support::*;
use tokio::time::Instant;

/// One test at a time: each brings its own load.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Two busy loops (`yes`), killed on drop: both cores busy beside the test.
struct CpuLoad(Vec<std::process::Child>);

impl CpuLoad {
    fn start(seconds: u64) -> Self {
        let spawn = || {
            // Bounded in time even if the test dies without dropping it.
            std::process::Command::new("timeout")
                .arg(seconds.to_string())
                .arg("yes")
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap()
        };
        CpuLoad(vec![spawn(), spawn()])
    }
}

impl Drop for CpuLoad {
    fn drop(&mut self) {
        for child in &mut self.0 {
            // SIGTERM: `timeout` passes it on to `yes` (a SIGKILL would
            // leave `yes` running until its time is up).
            let _ = std::process::Command::new("kill")
                .arg("-TERM")
                .arg(child.id().to_string())
                .status();
            let _ = child.wait();
        }
    }
}

/// The window margin: the fake counts arrivals, and with both cores busy
/// (and the machine shared) a request can reach it a hundred ms and more
/// after its slot; the margin keeps this a test of the accounting, not of
/// the scheduler (`support::gate_with_margin` uses 100 ms without the
/// load).
const MARGIN: Duration = Duration::from_millis(300);
fn defaults(margin: Duration) -> Defaults {
    Defaults {
        window_margin: margin,
        ..Defaults::default()
    }
}

/// The engine's own start times, by tool: recorded as each request is
/// handed to the executor, before the loopback and the fake's scheduling.
type Started = Arc<parking_lot::Mutex<BTreeMap<String, Vec<f64>>>>;

/// An [`HttpExecutor`] that records when each request starts.
#[derive(Clone)]
struct Recording {
    inner: HttpExecutor,
    origin: Instant,
    started: Started,
}

impl sluice::Executor for Recording {
    type Payload = serde_json::Value;

    async fn execute(
        &self,
        request: sluice::Request<serde_json::Value>,
    ) -> Result<http::Response<bytes::Bytes>, sluice::TransportError> {
        let at = self.origin.elapsed().as_secs_f64() * 1_000.0;
        self.started
            .lock()
            .entry(request.tool.to_string())
            .or_default()
            .push(at);
        self.inner.execute(request).await
    }
}

/// A gate standing for one process: `credentials` credentials `k{i}` of
/// `rate` each, shared through `budget`, each with a tool `t{i}` (the
/// fake records the tool in the path).
fn gate(
    server: &sluice_fake::FakeServer,
    credentials: usize,
    rate: &str,
    budget: Arc<RedisBudget>,
    (seed, margin): (u64, Duration),
    (origin, started): (Instant, Started),
) -> Arc<Gate<Recording>> {
    let mut config = GateConfig::default().defaults(defaults(margin));
    for i in 0..credentials {
        let credential = CredentialConfig::with_rate(rate.parse().unwrap())
            .shared(true)
            .max_in_flight(16)
            .queue(128);
        config = config
            .credential(&format!("k{i}"), credential)
            .tool(&format!("t{i}"), ToolConfig::read(&format!("k{i}")));
    }
    let executor = Recording {
        inner: HttpExecutor::new(&server.url(), "Bearer shared-key"),
        origin,
        started,
    };
    Arc::new(
        Gate::builder(config, executor)
            .seed(seed)
            .shared(budget)
            .build()
            .unwrap(),
    )
}

/// Sends turns of `per_turn` calls at once on every credential of
/// `gate`, one turn after another (a deferred call backs off as an agent
/// would), until `until`. Returns the calls answered `ok`.
async fn turns(
    gate: Arc<Gate<Recording>>,
    name: String,
    credentials: usize,
    per_turn: usize,
    until: Instant,
) -> usize {
    let mut ok = 0;
    let mut turn = 0;
    while Instant::now() < until && turn < 1_000 {
        turn += 1;
        let mut calls = Vec::new();
        for c in 0..credentials {
            for i in 0..per_turn {
                let gate = gate.clone();
                let call = sluice::Call::new(
                    &format!("t{c}"),
                    serde_json::json!({ "q": format!("{name}-{turn}-{i}") }),
                )
                .deadline(Duration::from_secs(3));
                calls.push(tokio::spawn(async move { gate.call(call).await }));
            }
        }
        let mut backoff = Duration::from_millis(5);
        for call in calls {
            match call.await.unwrap() {
                sluice::Outcome::Ok { .. } => ok += 1,
                sluice::Outcome::RateLimited { retry_after_ms, .. } => {
                    backoff = backoff.max(Duration::from_millis(retry_after_ms));
                }
                _ => {}
            }
        }
        tokio::time::sleep(backoff.min(Duration::from_millis(300))).await;
    }
    ok
}

/// The fake's admitted starts (ms) by tool.
fn starts_by_tool(server: &sluice_fake::FakeServer) -> BTreeMap<String, Vec<f64>> {
    let mut by_tool: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for record in server.api().requests() {
        let tool = record
            .path
            .trim_start_matches("/api/")
            .split('?')
            .next()
            .unwrap_or("?")
            .to_owned();
        by_tool.entry(tool).or_default().push(record.t_ms);
    }
    by_tool
}

/// Runs `processes` budgets (made by `config`) on `credentials`
/// credentials of `n`/1s each for `seconds`, both cores busy, while
/// `meanwhile` runs; asserts every credential's busiest second holds at
/// most `n + 1` starts and the upstream saw exactly the calls answered
/// `ok`. Returns the busiest seconds by tool.
async fn run_exact<F>(
    config: impl Fn() -> RedisConfig,
    (processes, credentials, n, per_turn): (usize, usize, usize, usize),
    (seconds, margin): (u64, Duration),
    meanwhile: F,
) -> BTreeMap<String, usize>
where
    F: std::future::Future<Output = ()>,
{
    if std::env::var_os("SLUICE_LONG").is_none() {
        eprintln!("skipped: set SLUICE_LONG=1 (scripts/exact_runs.sh) to run it");
        return BTreeMap::new();
    }
    let _load = CpuLoad::start(seconds + 30);
    let server = fake(100_000).await;
    let mut budgets = Vec::new();
    for _ in 0..processes {
        budgets.push(budget(config()).await);
    }
    let rate = format!("{n}/1s");
    let (origin, started) = (Instant::now(), Started::default());
    let until = Instant::now() + Duration::from_secs(seconds);
    let runs: Vec<_> = budgets
        .iter()
        .enumerate()
        .map(|(p, b)| {
            let gate = gate(
                &server,
                credentials,
                &rate,
                b.clone(),
                (p as u64, margin),
                (origin, started.clone()),
            );
            tokio::spawn(turns(gate, format!("p{p}"), credentials, per_turn, until))
        })
        .collect();
    meanwhile.await;
    let mut ok = 0;
    for run in runs {
        ok += run.await.unwrap();
    }
    let by_tool = starts_by_tool(&server);
    let busiest: BTreeMap<String, usize> = by_tool
        .iter()
        .map(|(tool, starts)| (tool.clone(), max_in_window(starts, 1_000.0)))
        .collect();
    let total: usize = by_tool.values().map(Vec::len).sum();
    let engine: BTreeMap<String, usize> = started
        .lock()
        .iter()
        .map(|(tool, starts)| (tool.clone(), max_in_window(starts, 1_000.0)))
        .collect();
    let errors: Vec<_> = budgets.iter().map(|b| b.status().errors).collect();
    let fallback: u64 = budgets
        .iter()
        .flat_map(|b| b.status().credentials)
        .map(|c| c.decisions.fallback)
        .sum();
    eprintln!(
        "{processes} processes, {credentials} credentials of {n}/1s: {total} starts, \
         busiest seconds {busiest:?} (the engine's own starts: {engine:?}); {fallback} fallback decisions; errors {errors:?}"
    );
    assert_eq!(by_tool.len(), credentials, "{by_tool:?}");
    for (tool, most) in &busiest {
        assert!(
            *most <= n + 1,
            "{tool}: {most} starts in one second, limit {n}"
        );
    }
    // Every call answered once: the upstream saw exactly the calls
    // answered `ok`, none lost, none sent twice.
    assert_eq!(ok, total);
    busiest
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_processes_on_one_key_start_at_most_the_limit_in_any_second() {
    let _turn = crate::support::module_turn(module_path!());
    let _serial = SERIAL.lock().await;
    let redis = RedisServer::start();
    let url = redis.url();
    // 16 processes, each sending turns of 8 calls: 128 at once on 20/1s.
    run_exact(
        || RedisConfig::single(url.clone()),
        (16, 1, 20, 8),
        (6, MARGIN),
        async {},
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_stopped_two_hundred_ms_at_a_time_mid_run_overspends_nothing() {
    let _turn = crate::support::module_turn(module_path!());
    let _serial = SERIAL.lock().await;
    let redis = RedisServer::start();
    let url = redis.url();
    let pid = redis.pid().unwrap();
    let signal = move |name: &str| {
        let status = std::process::Command::new("kill")
            .arg(format!("-{name}"))
            .arg(pid.to_string())
            .status()
            .unwrap();
        assert!(status.success());
    };
    let stops = async move {
        for _ in 0..4 {
            tokio::time::sleep(Duration::from_millis(1_000)).await;
            signal("STOP");
            tokio::time::sleep(Duration::from_millis(200)).await;
            signal("CONT");
        }
    };
    // The default timeout: a 200 ms stop is a slow answer, not an outage.
    run_exact(
        || RedisConfig::single(url.clone()),
        (4, 1, 20, 8),
        (6, MARGIN),
        stops,
    )
    .await;
}
