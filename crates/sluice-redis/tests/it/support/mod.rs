//! Shared helpers for the Redis tests: private `redis-server` processes on
//! free loopback ports (killed on drop, even on panic), fault injection, a
//! three-master cluster, and gates that talk to the fake API over HTTP.
#![allow(
    dead_code,
    unused_imports,
    unreachable_pub,
    clippy::unwrap_used,
    clippy::expect_used
)]

pub mod http_executor;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use sluice::shared::SharedBudget as _;
use sluice::{CredentialConfig, Defaults, Gate, GateConfig, ToolConfig};
use sluice_fake::{Config, FakeApi, FakeServer, Limits, RetryAfter};
use sluice_redis::{RedisBudget, RedisConfig};

/// Which module's tests are running, and how many of them.
static TURN: std::sync::Mutex<(Option<&'static str>, usize)> = std::sync::Mutex::new((None, 0));
static TURN_ENDED: std::sync::Condvar = std::sync::Condvar::new();

/// A test's share of its module's turn; the turn ends with the module's last test running.
pub struct ModuleTurn;

/// Waits until no other module's test runs. The tests of one module may
/// run together, as when each module was a test binary of its own, but the
/// tests of two modules never do: each brings its own redis-server
/// processes and load, and they measure rates and stalls on two cores.
/// Blocks the test's thread before its runtime does anything.
pub fn module_turn(module: &'static str) -> ModuleTurn {
    let mut turn = TURN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    while turn.0.is_some_and(|running| running != module) {
        turn = TURN_ENDED
            .wait(turn)
            .unwrap_or_else(std::sync::PoisonError::into_inner);
    }
    turn.0 = Some(module);
    turn.1 += 1;
    ModuleTurn
}

impl Drop for ModuleTurn {
    fn drop(&mut self) {
        let mut turn = TURN
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        turn.1 -= 1;
        if turn.1 == 0 {
            turn.0 = None;
            TURN_ENDED.notify_all();
        }
    }
}

pub use http_executor::HttpExecutor;
use http_executor::Tag;

pub use sluice_testkit::{RedisCluster, RedisServer, busiest_window, max_in_window};

/// A request's `late_start` as the engine sets it on the default 20 ms
/// window margin: half of it.
pub const LATE_START: Duration = Duration::from_millis(10);

/// A fake API allowing `allow` requests per second per key, with
/// Retry-After set to the exact wait when it throttles.
pub async fn fake(allow: u32) -> FakeServer {
    let config =
        Config::new(Limits::new(allow, Duration::from_secs(1))).with_retry_after(RetryAfter::Auto);
    FakeServer::spawn(FakeApi::new(config).unwrap())
        .await
        .unwrap()
}

/// The command timeout of [`redis_config`]: the outage tests pause Redis
/// for 0.2 to 1 s and need its commands to time out within that, so they
/// keep the short timeout they were written with (the default is longer:
/// docs/shared-limiter.md, "The bound, and the timeout").
pub const TEST_TIMEOUT: Duration = Duration::from_millis(50);

/// The test config for a budget: the given Redis, a fast breaker, and
/// [`TEST_TIMEOUT`].
pub fn redis_config(url: &str) -> RedisConfig {
    RedisConfig::single(url).timeout(TEST_TIMEOUT)
}

pub async fn budget(config: RedisConfig) -> Arc<RedisBudget> {
    Arc::new(RedisBudget::connect(config).await.unwrap())
}

/// A gate standing for one process: credential `key` at `rate`, shared
/// through `budget` when given, with one read tool `search`.
pub fn gate(
    server: &FakeServer,
    rate: &str,
    budget: Option<Arc<RedisBudget>>,
    max_in_flight: u32,
    seed: u64,
) -> Gate<HttpExecutor> {
    gate_with_burst(server, rate, None, budget, max_in_flight, seed)
}

/// As [`gate`], with a burst (GCRA semantics) when given.
pub fn gate_with_burst(
    server: &FakeServer,
    rate: &str,
    burst: Option<u32>,
    budget: Option<Arc<RedisBudget>>,
    max_in_flight: u32,
    seed: u64,
) -> Gate<HttpExecutor> {
    let defaults = Defaults::default();
    let executor = executor(server, None);
    build(
        executor,
        (rate, burst, None),
        budget,
        max_in_flight,
        seed,
        defaults,
    )
}

/// As [`gate_with_burst`], with a second window `beside` the first (its
/// calls spend several windows at once, `spend.lua`) and the 100 ms margin
/// of [`gate_with_margin`].
pub fn gate_with_burst_beside(
    server: &FakeServer,
    (rate, burst, beside): (&str, Option<u32>, &str),
    budget: Option<Arc<RedisBudget>>,
    max_in_flight: u32,
    seed: u64,
) -> Gate<HttpExecutor> {
    let (executor, limits) = (executor(server, None), (rate, burst, Some(beside)));
    build(executor, limits, budget, max_in_flight, seed, margin())
}

/// As [`gate`], with a window margin of 100 ms. The fake counts arrivals,
/// and on a loaded two-core machine (CI runs the whole suite there) a
/// request can reach it ~50 ms after its slot: the default 20 ms margin
/// absorbs loopback transit, not a starved runtime. Tests of the shared
/// accounting use this so that they measure the accounting.
pub fn gate_with_margin(
    server: &FakeServer,
    rate: &str,
    budget: Option<Arc<RedisBudget>>,
    max_in_flight: u32,
    seed: u64,
) -> Gate<HttpExecutor> {
    let executor = executor(server, None);
    let limits = (rate, None, None);
    build(executor, limits, budget, max_in_flight, seed, margin())
}

/// As [`gate_with_margin`] (with a second window `beside` the first when
/// given), on `budget`, each request naming the mode its
/// credential `key` was in as it was sent (`m=shared` or `m=fallback`):
/// [`modes_in`] counts them.
pub fn gate_naming_modes(
    server: &FakeServer,
    (rate, beside): (&str, Option<&str>),
    budget: Arc<RedisBudget>,
    max_in_flight: u32,
    seed: u64,
    sent: Option<Sent>,
) -> Gate<HttpExecutor> {
    let shared = budget.clone();
    let origin = server.api().origin();
    let tag: Tag = Arc::new(move || {
        if let Some(sent) = &sent {
            sent.lock().push(origin.elapsed().as_secs_f64() * 1e3);
        }
        match key_mode(&shared) {
            sluice_redis::Mode::Fallback => "fallback",
            sluice_redis::Mode::Shared => "shared",
        }
    });
    let (executor, budget) = (executor(server, Some(tag)), Some(budget));
    let limits = (rate, None, beside);
    build(executor, limits, budget, max_in_flight, seed, margin())
}

/// The engine's own start times (ms on the fake's clock), as each request
/// reaches the executor of a gate built by [`gate_naming_modes`].
pub type Sent = Arc<parking_lot::Mutex<Vec<f64>>>;

/// Requests to `server` with the shared key, tagged when given.
fn executor(server: &FakeServer, tag: Option<Tag>) -> HttpExecutor {
    let mut executor = HttpExecutor::new(&server.url(), "Bearer shared-key");
    executor.tag = tag;
    executor
}

/// The budget's mode for credential `key` (shared until it has decided one).
pub fn key_mode(budget: &RedisBudget) -> sluice_redis::Mode {
    budget
        .status()
        .credentials
        .iter()
        .find(|c| c.credential == "key")
        .map_or(sluice_redis::Mode::Shared, |c| c.mode)
}

/// The 100 ms window margin of [`gate_with_margin`].
fn margin() -> Defaults {
    Defaults {
        window_margin: std::time::Duration::from_millis(100),
        ..Defaults::default()
    }
}

/// The admitted requests starting in `[from_ms, to_ms)`, counted by the
/// driver that sent them (the `q` before its first `-`) and the mode
/// [`gate_naming_modes`] named.
pub fn modes_in(server: &FakeServer, from_ms: f64, to_ms: f64) -> Vec<((String, String), usize)> {
    let mut counts: std::collections::BTreeMap<(String, String), usize> = Default::default();
    for record in server.api().requests() {
        if record.t_ms < from_ms || record.t_ms >= to_ms {
            continue;
        }
        let query = record.path.split_once('?').map_or("", |(_, q)| q);
        let field = |name: &str| {
            query
                .split('&')
                .find_map(|pair| pair.strip_prefix(name))
                .unwrap_or("?")
                .to_owned()
        };
        let q = field("q=");
        let driver = q.split('-').next().unwrap_or("?").to_owned();
        *counts.entry((driver, field("m="))).or_default() += 1;
    }
    counts.into_iter().collect()
}

fn build(
    executor: HttpExecutor,
    (rate, burst, beside): (&str, Option<u32>, Option<&str>),
    budget: Option<Arc<RedisBudget>>,
    max_in_flight: u32,
    seed: u64,
    defaults: Defaults,
) -> Gate<HttpExecutor> {
    let mut credential = CredentialConfig::with_rate(rate.parse().unwrap())
        .shared(budget.is_some())
        .max_in_flight(max_in_flight)
        .queue(max_in_flight * 8);
    if let Some(burst) = burst {
        credential = credential.burst(burst);
    }
    if let Some(beside) = beside {
        credential = credential.window(beside.parse().unwrap());
    }
    let config = GateConfig::default()
        .defaults(defaults)
        .credential("key", credential)
        .tool("search", ToolConfig::read("key"));
    let builder = Gate::builder(config, executor).seed(seed);
    let builder = match budget {
        Some(budget) => builder.shared(budget),
        None => builder,
    };
    builder.build().unwrap()
}

/// What one driver saw.
#[derive(Debug, Default, Clone)]
pub struct Driven {
    pub outcomes: HashMap<&'static str, usize>,
    /// The longest time a call took beyond the wait it was told to sleep
    /// (its `retry_after` or inline wait are not known here: the total).
    pub slowest: Duration,
    pub calls: usize,
}

/// Each driven call's deadline.
pub const DEADLINE: Duration = Duration::from_secs(3);

/// Drives `gate` hard from `workers` concurrent loops until `until`, each
/// issuing distinct calls back to back; a deferred call backs off for its
/// `retry_after_ms` (at most `max_backoff`), as an agent would.
pub async fn drive(
    gate: Gate<HttpExecutor>,
    name: &'static str,
    workers: usize,
    until: tokio::time::Instant,
    max_backoff: Duration,
) -> Driven {
    let gate = Arc::new(gate);
    let mut tasks = Vec::new();
    for w in 0..workers {
        let gate = gate.clone();
        tasks.push(tokio::spawn(async move {
            let mut seen = Driven::default();
            let mut i = 0u64;
            // Bounded in count as well as in time.
            while tokio::time::Instant::now() < until && i < 10_000 {
                i += 1;
                let call = sluice::Call::new(
                    "search",
                    serde_json::json!({ "q": format!("{name}-{w}-{i}") }),
                )
                .deadline(DEADLINE);
                let started = tokio::time::Instant::now();
                let outcome = gate.call(call).await;
                seen.slowest = seen.slowest.max(started.elapsed());
                seen.calls += 1;
                *seen.outcomes.entry(outcome.status()).or_default() += 1;
                if let sluice::Outcome::RateLimited { retry_after_ms, .. } = outcome {
                    let backoff = Duration::from_millis(retry_after_ms.max(5)).min(max_backoff);
                    tokio::time::sleep(backoff).await;
                }
            }
            seen
        }));
    }
    let mut total = Driven::default();
    for task in tasks {
        let seen = task.await.unwrap();
        total.calls += seen.calls;
        total.slowest = total.slowest.max(seen.slowest);
        for (status, n) in seen.outcomes {
            *total.outcomes.entry(status).or_default() += n;
        }
    }
    total
}

/// Starts of admitted (non-429) requests, in ms since the fake started.
pub fn starts(server: &FakeServer) -> Vec<f64> {
    server.api().requests().iter().map(|r| r.t_ms).collect()
}

/// Calls `reserve` with no acceptable wait every 20 ms until `until`: such
/// a call is answered at once (granted now or denied), so its duration is
/// exactly the extra time Redis cost it. Returns the longest.
pub async fn probe(budget: Arc<RedisBudget>, until: tokio::time::Instant) -> Duration {
    let limit = sluice::shared::SharedLimit {
        rate: "1000/1s".parse().unwrap(),
        burst: None,
    };
    let mut longest = Duration::ZERO;
    while tokio::time::Instant::now() < until {
        let started = tokio::time::Instant::now();
        let decision = budget
            .reserve(sluice::shared::ReserveRequest {
                credential: "probe",
                scopes: &["api_key"],
                limit: Some(limit),
                windows: &[],
                not_before: Duration::ZERO,
                max_wait: Duration::ZERO,
                late_start: LATE_START,
                priority: sluice::Priority::Normal,
            })
            .await;
        longest = longest.max(started.elapsed());
        if let sluice::shared::Decision::Granted { wait, .. } = decision {
            assert!(wait <= Duration::from_millis(1), "{wait:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    longest
}

/// A call on credential `key`'s scope `api_key` spending `windows`, from
/// now, within `max_wait`, at normal priority: what the engine asks a
/// shared budget for a credential of several windows.
pub fn spend_request(
    windows: &[sluice::shared::SharedWindow],
    max_wait: Duration,
) -> sluice::shared::ReserveRequest<'_> {
    sluice::shared::ReserveRequest {
        credential: "key",
        scopes: &["api_key"],
        limit: None,
        windows,
        not_before: Duration::ZERO,
        max_wait,
        late_start: LATE_START,
        priority: sluice::Priority::Normal,
    }
}
