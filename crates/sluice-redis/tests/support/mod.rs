//! Shared helpers for the Redis tests: private `redis-server` processes on
//! free loopback ports (killed on drop, even on panic), fault injection, a
//! three-master cluster, and gates that talk to the fake API over HTTP.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

pub mod http_executor;

use std::collections::HashMap;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sluice::{CredentialConfig, Defaults, Gate, GateConfig, ToolConfig};
use sluice_fake::{Config, FakeApi, FakeServer, Limits, RetryAfter};
use sluice_redis::{RedisBudget, RedisConfig};

use http_executor::HttpExecutor;

static NEXT_DIR: AtomicU64 = AtomicU64::new(0);

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One `redis-server` of our own. Killed when dropped.
pub struct RedisServer {
    pub port: u16,
    dir: PathBuf,
    cluster: bool,
    child: Option<Child>,
}

impl RedisServer {
    /// A standalone server on a free port.
    pub fn start() -> Self {
        Self::start_with(false)
    }

    fn start_with(cluster: bool) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "sluice-redis-test-{}-{}",
            std::process::id(),
            NEXT_DIR.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        for _ in 0..5 {
            let mut server = RedisServer {
                port: free_port(),
                dir: dir.clone(),
                cluster,
                child: None,
            };
            server.spawn();
            if server.wait_ready(Duration::from_secs(5)) {
                return server;
            }
            server.kill();
        }
        panic!("could not start redis-server");
    }

    fn spawn(&mut self) {
        let mut command = Command::new("redis-server");
        command
            .arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--enable-debug-command", "local"])
            .arg("--dir")
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if self.cluster {
            command
                .args(["--cluster-enabled", "yes"])
                .args(["--cluster-node-timeout", "5000"])
                .arg("--cluster-config-file")
                .arg(format!("nodes-{}.conf", self.port));
        }
        self.child = Some(command.spawn().expect("redis-server is installed"));
    }

    fn wait_ready(&self, within: Duration) -> bool {
        let until = Instant::now() + within;
        while Instant::now() < until {
            if let Ok(mut conn) = self.client().get_connection()
                && redis::cmd("PING").query::<String>(&mut conn).is_ok()
            {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).unwrap()
    }

    fn conn(&self) -> redis::Connection {
        self.client()
            .get_connection_with_timeout(Duration::from_secs(2))
            .unwrap()
    }

    /// Runs one command and returns its reply.
    pub fn command<T: redis::FromRedisValue>(&self, args: &[&str]) -> T {
        let mut cmd = redis::cmd(args[0]);
        for arg in &args[1..] {
            cmd.arg(*arg);
        }
        cmd.query(&mut self.conn()).unwrap()
    }

    /// Kills the server (SIGKILL) and waits for it to exit.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port (empty: no persistence).
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
        assert!(
            self.wait_ready(Duration::from_secs(5)),
            "redis-server restart"
        );
    }

    /// `DEBUG SLEEP secs` on a thread of its own (the command blocks the
    /// server, and the connection that sent it, for that long).
    pub fn pause(&self, secs: f64) -> std::thread::JoinHandle<()> {
        let mut conn = self.conn();
        std::thread::spawn(move || {
            let _: redis::Value = redis::cmd("DEBUG")
                .arg("SLEEP")
                .arg(secs)
                .query(&mut conn)
                .unwrap();
        })
    }

    pub fn script_flush(&self) {
        let _: String = self.command(&["SCRIPT", "FLUSH"]);
    }

    /// `INFO commandstats` as command -> calls.
    pub fn command_calls(&self) -> HashMap<String, u64> {
        let info: String = self.command(&["INFO", "commandstats"]);
        info.lines()
            .filter_map(|line| {
                let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
                let calls = rest.split(',').find_map(|f| f.strip_prefix("calls="))?;
                Some((name.to_owned(), calls.parse().ok()?))
            })
            .collect()
    }

    /// Round trips: the commands a client sends itself (scripts and their
    /// loading), not the ones scripts run inside.
    pub fn round_trips(&self) -> u64 {
        let calls = self.command_calls();
        ["evalsha", "eval", "script|load", "script"]
            .iter()
            .map(|name| calls.get(*name).copied().unwrap_or(0))
            .sum()
    }

    pub fn reset_stats(&self) {
        let _: String = self.command(&["CONFIG", "RESETSTAT"]);
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Three masters, no replicas, slots spread by `redis-cli --cluster create`.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    pub fn start() -> Self {
        let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start_with(true)).collect();
        let addresses: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let output = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addresses)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("redis-cli is installed");
        assert!(
            output.status.success(),
            "cluster create: {}",
            String::from_utf8_lossy(&output.stdout)
        );
        let cluster = RedisCluster { nodes };
        let until = Instant::now() + Duration::from_secs(20);
        while !cluster.nodes.iter().all(|node| {
            node.command::<String>(&["CLUSTER", "INFO"])
                .contains("cluster_state:ok")
        }) {
            assert!(Instant::now() < until, "the cluster never became ok");
            std::thread::sleep(Duration::from_millis(100));
        }
        cluster
    }

    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    pub fn round_trips(&self) -> u64 {
        self.nodes.iter().map(RedisServer::round_trips).sum()
    }
}

/// A fake API allowing `allow` requests per second per key, with
/// Retry-After set to the exact wait when it throttles.
pub async fn fake(allow: u32) -> FakeServer {
    let config =
        Config::new(Limits::new(allow, Duration::from_secs(1))).with_retry_after(RetryAfter::Auto);
    FakeServer::spawn(FakeApi::new(config).unwrap())
        .await
        .unwrap()
}

/// The test config for a budget: the given Redis, a fast breaker.
pub fn redis_config(url: &str) -> RedisConfig {
    RedisConfig::single(url)
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
    let mut credential = CredentialConfig::with_rate(rate.parse().unwrap())
        .shared(budget.is_some())
        .max_in_flight(max_in_flight)
        .queue(max_in_flight * 8);
    if let Some(burst) = burst {
        credential = credential.burst(burst);
    }
    let config = GateConfig::default()
        .defaults(Defaults::default())
        .credential("key", credential)
        .tool("search", ToolConfig::read("key"));
    let builder = Gate::builder(
        config,
        HttpExecutor::new(&server.url(), "Bearer shared-key"),
    )
    .seed(seed);
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
                .deadline(Duration::from_secs(3));
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

/// The most starts in any window of `window_ms` (half-open).
pub fn max_in_window(starts: &[f64], window_ms: f64) -> usize {
    let mut starts = starts.to_vec();
    starts.sort_by(f64::total_cmp);
    let mut best = 0;
    let mut lo = 0;
    for hi in 0..starts.len() {
        while starts[hi] - starts[lo] >= window_ms - 1e-6 {
            lo += 1;
        }
        best = best.max(hi - lo + 1);
    }
    best
}

/// Starts of admitted (non-429) requests, in ms since the fake started.
pub fn starts(server: &FakeServer) -> Vec<f64> {
    server.api().requests().iter().map(|r| r.t_ms).collect()
}
