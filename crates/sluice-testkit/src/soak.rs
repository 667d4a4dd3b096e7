//! A soak of the sidecar: many turns at once for a bounded time, with random
//! upstream faults, a shared budget in Redis that is killed and restarted in
//! the middle, every call's answer checked and the sidecar's memory and file
//! descriptors sampled. Used by `sluice-cli`'s `soak` example and test.
//!
//! Each call's path is `/fault/{kind}/{n}`: the misbehaving [`Upstream`]
//! acts out `kind`, and counts the requests for call `n`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::procfs::{ProcStats, proc_stats};
use crate::upstream::{Fault, Upstream};
use crate::{RedisServer, SluiceProcess};

/// The credential's secret, set in the sidecar's environment only: it must
/// reach the upstream and appear in none of the sidecar's output.
pub const SECRET: &str = "sk-soak-71c9e04b2d-never-print";

/// Attempts per call the sidecar is configured with (`defaults.max_attempts`).
pub const MAX_ATTEMPTS: u32 = 3;

/// The faults a call may ask for, with their weights (out of 100): the
/// default mix of [`SoakOptions::faults`].
pub const FAULTS: [(&str, u32); 10] = [
    ("ok", 85),
    ("hang", 1),
    ("reset", 2),
    ("close_mid_body", 2),
    ("long_length", 1),
    ("trickle", 2),
    ("garbage", 2),
    ("r429", 1),
    ("r503", 2),
    ("not_http", 2),
];

/// What a soak does.
#[derive(Debug, Clone)]
pub struct SoakOptions {
    /// How long calls are sent.
    pub duration: Duration,
    /// Stop earlier once this many calls were sent.
    pub max_calls: u64,
    /// Clients sending requests back to back.
    pub workers: usize,
    /// Redis is killed at half time and restarted this much later.
    pub redis_outage: Duration,
    /// How late past its deadline an answer may come and not count as late.
    pub slack: Duration,
    /// Seeds the choice of faults, tools, deadlines and turn sizes.
    pub seed: u64,
    /// The credential's rate, per second (a GCRA bucket with a tenth of it as burst).
    pub rate: u32,
    /// The faults calls ask for, with their weights (see [`FAULTS`]).
    pub faults: Vec<(&'static str, u32)>,
    /// `shared = true` on the credential (its budget in Redis); false keeps
    /// it local (Redis is still started, killed and restarted, unused).
    pub shared: bool,
    /// Requests of a worker share a few turn ids (single-flight and cache
    /// across requests, long-lived turns); false: every request its own turn.
    pub turn_ids: bool,
}

impl Default for SoakOptions {
    fn default() -> Self {
        SoakOptions {
            duration: Duration::from_secs(60),
            max_calls: 2_000_000,
            workers: 48,
            redis_outage: Duration::from_secs(5),
            slack: Duration::from_millis(250),
            seed: 1,
            rate: 5_000,
            faults: FAULTS.to_vec(),
            shared: true,
            turn_ids: true,
        }
    }
}

/// The sidecar's figures at one moment.
#[derive(Debug, Clone)]
pub struct Sample {
    /// `start`, `middle`, `end` or `after`.
    pub label: &'static str,
    /// Since the load started.
    pub at: Duration,
    /// Calls sent by then.
    pub calls: u64,
    /// Memory and descriptors.
    pub stats: ProcStats,
}

/// What a soak found.
#[derive(Debug, Clone, Default)]
pub struct SoakReport {
    /// From the first call to the last answer.
    pub elapsed: Duration,
    /// Calls sent (each with its own id).
    pub calls: u64,
    /// Calls answered exactly once, under their own id, in order.
    pub answered: u64,
    /// Calls that got no answer (the request to the sidecar failed).
    pub lost: u64,
    /// Answers with an id that was not asked, asked twice, or out of order.
    pub wrong_ids: u64,
    /// Requests to `/v1/turns`, and proxied requests.
    pub turns: u64,
    /// Proxied requests (each one call).
    pub proxied: u64,
    /// Calls by outcome status.
    pub statuses: BTreeMap<String, u64>,
    /// `rate_limited` calls by reason (`throttled`, `shed`, `budget`, ...).
    pub reasons: BTreeMap<String, u64>,
    /// Calls by fault asked for, then by outcome status.
    pub by_fault: BTreeMap<String, BTreeMap<String, u64>>,
    /// Requests that reached the upstream.
    pub upstream_requests: u64,
    /// Connections the upstream accepted.
    pub upstream_connections: u64,
    /// The most requests any one call caused.
    pub max_requests_per_call: u32,
    /// Answers later than the largest deadline in their request plus the slack.
    pub late: u64,
    /// The latest answer past its deadline.
    pub worst_late: Duration,
    /// Figures at the start (after warm-up), middle, end and after the load.
    pub samples: Vec<Sample>,
    /// Every reading taken while the load ran (every half second).
    pub series: Vec<Sample>,
    /// The highest RSS seen in any sample (KiB), and the process's `VmHWM` at the end.
    pub peak_rss_kib: u64,
    /// The most descriptors seen in any sample.
    pub peak_fds: usize,
    /// Shared-backend modes seen on `/v1/status` while running.
    pub modes: BTreeSet<String>,
    /// When Redis was killed and restarted, since the start.
    pub redis_outage: Option<(Duration, Duration)>,
    /// Scopes still holding permits or queued calls after the load.
    pub stuck: Vec<String>,
    /// The secret appeared in the sidecar's stdout or stderr.
    pub secret_leaked: bool,
    /// The shared backend's mode per credential at the end.
    pub final_modes: Vec<String>,
}

/// How memory and descriptors moved with the number of calls.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MemoryTrend {
    /// RSS growth per call between the first and last samples of the last
    /// third of the run: what a leak shows as, whatever the load's phases.
    pub tail_bytes_per_call: f64,
    /// The highest RSS sampled before the last third, KiB.
    pub before_tail_peak_kib: u64,
    /// RSS when the load ended, KiB.
    pub end_rss_kib: u64,
    /// The most descriptors sampled before the last third.
    pub before_tail_peak_fds: usize,
    /// Descriptors when the load ended.
    pub end_fds: usize,
}

/// A leak of a small response per call is several KiB; allocator noise,
/// and caches that follow the call rate, are far below this.
const MAX_BYTES_PER_CALL: f64 = 1024.0;
/// A step up within the last third that the per-call slope would not
/// show: caches sized by the call rate (the turns' read caches, pools)
/// reach their high-water mark well before it.
const MAX_LATE_GROWTH_KIB: u64 = 32 * 1024;
/// Descriptors: pooled connections come and go with concurrency.
const MAX_LATE_FDS: usize = 64;

impl SoakReport {
    /// Memory and descriptors against calls; `None` with too few samples.
    pub fn memory_trend(&self) -> Option<MemoryTrend> {
        let end = self.samples.iter().find(|s| s.label == "end")?;
        let tail_start = end.at * 2 / 3;
        let before: Vec<&Sample> = self.series.iter().filter(|s| s.at < tail_start).collect();
        let tail: Vec<&Sample> = self
            .series
            .iter()
            .filter(|s| s.at >= tail_start)
            .chain(std::iter::once(end))
            .collect();
        let (first, last) = (tail.first()?, tail.last()?);
        let calls = last.calls.saturating_sub(first.calls).max(1) as f64;
        let grown = last.stats.rss_kib as f64 - first.stats.rss_kib as f64;
        Some(MemoryTrend {
            tail_bytes_per_call: grown * 1024.0 / calls,
            before_tail_peak_kib: before.iter().map(|s| s.stats.rss_kib).max()?,
            end_rss_kib: end.stats.rss_kib,
            before_tail_peak_fds: before.iter().map(|s| s.stats.fds).max()?,
            end_fds: end.stats.fds,
        })
    }

    /// The properties a soak must keep, each broken one named.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.lost > 0 {
            problems.push(format!("{} calls got no answer", self.lost));
        }
        if self.wrong_ids > 0 {
            problems.push(format!("{} answers had a wrong id", self.wrong_ids));
        }
        if self.answered != self.calls {
            problems.push(format!("{} calls, {} answered", self.calls, self.answered));
        }
        let counted: u64 = self.statuses.values().sum();
        if counted != self.calls {
            problems.push(format!("{counted} outcomes for {} calls", self.calls));
        }
        if self.max_requests_per_call > MAX_ATTEMPTS {
            problems.push(format!(
                "a call caused {} requests (max_attempts {MAX_ATTEMPTS})",
                self.max_requests_per_call
            ));
        }
        if !self.stuck.is_empty() {
            problems.push(format!("stuck scopes: {:?}", self.stuck));
        }
        if self.secret_leaked {
            problems.push("the secret appeared in the sidecar's output".to_owned());
        }
        if self.late > 0 {
            problems.push(format!(
                "{} answers came later than deadline + slack (worst {} ms late)",
                self.late,
                self.worst_late.as_millis()
            ));
        }
        match self.memory_trend() {
            Some(trend) => {
                if trend.tail_bytes_per_call > MAX_BYTES_PER_CALL {
                    problems.push(format!(
                        "RSS grew by {:.0} bytes per call over the last third of the run",
                        trend.tail_bytes_per_call
                    ));
                }
                if trend.end_rss_kib > trend.before_tail_peak_kib + MAX_LATE_GROWTH_KIB {
                    problems.push(format!(
                        "RSS at the end ({} KiB) is over its peak before the last third ({} KiB) by more than {} MiB",
                        trend.end_rss_kib,
                        trend.before_tail_peak_kib,
                        MAX_LATE_GROWTH_KIB / 1024
                    ));
                }
                if trend.end_fds > trend.before_tail_peak_fds + MAX_LATE_FDS {
                    problems.push(format!(
                        "descriptors grew from at most {} before the last third to {} at the end",
                        trend.before_tail_peak_fds, trend.end_fds
                    ));
                }
            }
            None => problems.push("too few samples to judge memory".to_owned()),
        }
        problems
    }

    /// The summary as a text table.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let secs = self.elapsed.as_secs_f64().max(1e-9);
        let _ = writeln!(
            out,
            "soak: {:.0} s, {} calls ({:.0}/s) in {} requests ({} proxied)",
            secs,
            self.calls,
            self.calls as f64 / secs,
            self.turns,
            self.proxied
        );
        let _ = writeln!(
            out,
            "answered exactly once: {}   lost: {}   wrong ids: {}   late (> deadline + slack): {} (worst {} ms)",
            self.answered,
            self.lost,
            self.wrong_ids,
            self.late,
            self.worst_late.as_millis()
        );
        let _ = writeln!(
            out,
            "upstream: {} requests on {} connections; most requests for one call: {}",
            self.upstream_requests, self.upstream_connections, self.max_requests_per_call
        );
        if let Some((killed, restarted)) = self.redis_outage {
            let _ = writeln!(
                out,
                "redis: killed at {:.1} s, restarted at {:.1} s; shared-backend modes seen: {:?}; at the end: {:?}",
                killed.as_secs_f64(),
                restarted.as_secs_f64(),
                self.modes,
                self.final_modes
            );
        }
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "{:<8} {:>8} {:>10} {:>10} {:>10} {:>6} {:>8}",
            "sample", "at (s)", "calls", "RSS MiB", "peak MiB", "fds", "threads"
        );
        for s in &self.samples {
            let _ = writeln!(
                out,
                "{:<8} {:>8.1} {:>10} {:>10.1} {:>10.1} {:>6} {:>8}",
                s.label,
                s.at.as_secs_f64(),
                s.calls,
                s.stats.rss_kib as f64 / 1024.0,
                s.stats.peak_rss_kib as f64 / 1024.0,
                s.stats.fds,
                s.stats.threads
            );
        }
        let _ = writeln!(
            out,
            "peak RSS sampled: {:.1} MiB; most fds sampled: {}",
            self.peak_rss_kib as f64 / 1024.0,
            self.peak_fds
        );
        let step = (self.series.len() / 12).max(1);
        let trace: Vec<String> = self
            .series
            .iter()
            .step_by(step)
            .map(|s| {
                format!(
                    "{:.0}s:{:.1}MiB/{}fd",
                    s.at.as_secs_f64(),
                    s.stats.rss_kib as f64 / 1024.0,
                    s.stats.fds
                )
            })
            .collect();
        let _ = writeln!(out, "RSS over time: {}", trace.join(" "));
        if let Some(trend) = self.memory_trend() {
            let _ = writeln!(
                out,
                "RSS growth over the last third: {:.0} bytes per call; end {:.1} MiB vs {:.1} MiB at most before the last third",
                trend.tail_bytes_per_call,
                trend.end_rss_kib as f64 / 1024.0,
                trend.before_tail_peak_kib as f64 / 1024.0
            );
        }
        let _ = writeln!(out);
        let statuses = [
            "ok",
            "rate_limited",
            "quota_exhausted",
            "timed_out",
            "error",
        ];
        let _ = write!(out, "{:<16} {:>9}", "fault", "calls");
        for status in statuses {
            let _ = write!(out, " {status:>15}");
        }
        let _ = writeln!(out);
        let mut rows: Vec<(&String, &BTreeMap<String, u64>)> = self.by_fault.iter().collect();
        rows.sort_by_key(|(_, counts)| std::cmp::Reverse(counts.values().sum::<u64>()));
        for (fault, counts) in rows {
            let _ = write!(out, "{fault:<16} {:>9}", counts.values().sum::<u64>());
            for status in statuses {
                let _ = write!(out, " {:>15}", counts.get(status).copied().unwrap_or(0));
            }
            let _ = writeln!(out);
        }
        let _ = write!(out, "{:<16} {:>9}", "all", self.calls);
        for status in statuses {
            let _ = write!(
                out,
                " {:>15}",
                self.statuses.get(status).copied().unwrap_or(0)
            );
        }
        let _ = writeln!(out);
        let _ = writeln!(out, "rate_limited by reason: {:?}", self.reasons);
        let others: Vec<_> = self
            .statuses
            .keys()
            .filter(|s| !statuses.contains(&s.as_str()))
            .collect();
        if !others.is_empty() {
            let _ = writeln!(out, "other statuses: {others:?}");
        }
        out
    }
}

/// The soak's load mix: a seeded generator and the weighted fault pick.
struct Mix(crate::SplitMix);

impl Mix {
    fn below(&mut self, n: u64) -> u64 {
        self.0.below(n)
    }

    fn fault(&mut self, faults: &[(&'static str, u32)]) -> &'static str {
        let total: u32 = faults.iter().map(|(_, weight)| weight).sum();
        let mut pick = self.below(u64::from(total.max(1))) as u32;
        for &(name, weight) in faults {
            if pick < weight {
                return name;
            }
            pick -= weight;
        }
        "ok"
    }
}

/// The upstream's answer for a fault's name.
fn fault(kind: &str) -> Fault {
    match kind {
        "hang" => Fault::Hang,
        "reset" => Fault::Reset,
        "close_mid_body" => Fault::CloseMidBody,
        "long_length" => Fault::LongContentLength,
        "trickle" => Fault::Trickle {
            per_byte: Duration::from_millis(1),
        },
        "garbage" => Fault::garbage_headers(200),
        "r429" => Fault::status(429, &["retry-after-ms: 2"]),
        "r503" => Fault::status(503, &[]),
        "not_http" => Fault::NotHttp,
        _ => Fault::Ok,
    }
}

/// `(kind, n)` of a `/fault/{kind}/{n}` target.
fn parse_target(target: &str) -> Option<(&str, u64)> {
    let rest = target.strip_prefix("/fault/")?;
    let (kind, n) = rest.split_once('/')?;
    let n = n.split(['?', '/']).next()?.parse().ok()?;
    Some((kind, n))
}

fn config(dir: &Path, upstream: &str, redis: &str, rate: u32, shared: bool) -> PathBuf {
    let burst = (rate / 10).max(1);
    let toml = format!(
        r#"
[defaults]
deadline = "2s"
backoff_base = "20ms"
backoff_cap = "200ms"
max_attempts = {MAX_ATTEMPTS}
turn_cache_ttl = "1s"

[credentials.api]
base_url = "{upstream}"
secret_env = "SOAK_API_KEY"
rate = "{rate}/1s"
burst = {burst}
max_in_flight = 256
queue = 2048
shared = {shared}

[tools.read]
credential = "api"
method = "GET"
path = "/fault/{{kind}}/{{n}}"
read = true

[tools.write]
credential = "api"
method = "POST"
path = "/fault/{{kind}}/{{n}}"
read = false

[shared]
redis_url = "{redis}"
"#
    );
    let path = dir.join("soak.toml");
    std::fs::write(&path, toml).unwrap();
    path
}

/// Everything the workers share.
struct Tally {
    report: Mutex<SoakReport>,
    calls: AtomicU64,
    next_n: AtomicU64,
    stop: AtomicBool,
}

impl Tally {
    fn count(&self, fault: &str, status: &str, reason: Option<&str>) {
        let mut report = self.report.lock().unwrap();
        *report.statuses.entry(status.to_owned()).or_default() += 1;
        if let Some(reason) = reason {
            *report.reasons.entry(reason.to_owned()).or_default() += 1;
        }
        *report
            .by_fault
            .entry(fault.to_owned())
            .or_default()
            .entry(status.to_owned())
            .or_default() += 1;
    }
}

struct PlannedCall {
    id: String,
    tool: &'static str,
    kind: &'static str,
    n: u64,
    deadline_ms: u64,
}

/// Runs a soak: starts Redis, the misbehaving upstream and the sidecar
/// (`launch(config, env)` must start `sluice serve --config CONFIG` or an
/// equivalent with `env` added), drives it, and reports.
pub async fn run(
    options: &SoakOptions,
    launch: impl FnOnce(&Path, &[(&str, &str)]) -> SluiceProcess,
) -> SoakReport {
    let attempts: Arc<Mutex<HashMap<u64, u32>>> = Arc::default();
    let counted = attempts.clone();
    let upstream = Upstream::with_records(
        move |seen| {
            let Some((kind, n)) = parse_target(&seen.target) else {
                return Fault::status(404, &[]);
            };
            *counted.lock().unwrap().entry(n).or_default() += 1;
            fault(kind)
        },
        0,
    )
    .await;
    let redis = RedisServer::start();
    let dir = std::env::temp_dir().join(format!(
        "sluice-soak-{}-{}",
        std::process::id(),
        options.seed
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let config = config(
        &dir,
        &upstream.url(),
        &redis.url(),
        options.rate,
        options.shared,
    );
    let mut sidecar = launch(&config, &[("SOAK_API_KEY", SECRET), ("RUST_LOG", "warn")]);
    let pid = sidecar.pid();
    let base = sidecar.url.clone();
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(options.workers * 2)
        .build()
        .unwrap();

    let tally = Arc::new(Tally {
        report: Mutex::new(SoakReport::default()),
        calls: AtomicU64::new(0),
        next_n: AtomicU64::new(0),
        stop: AtomicBool::new(false),
    });
    let idle = proc_stats(pid).unwrap_or_default();
    tally.report.lock().unwrap().samples.push(Sample {
        label: "idle",
        at: Duration::ZERO,
        calls: 0,
        stats: idle,
    });
    let started = Instant::now();

    // Redis: killed at half time, restarted after the outage.
    let outage = options.redis_outage;
    let half = options.duration / 2;
    let redis_thread = std::thread::spawn(move || {
        let mut redis = redis;
        std::thread::sleep(half);
        let killed = started.elapsed();
        redis.kill();
        std::thread::sleep(outage);
        redis.restart();
        (redis, killed, started.elapsed())
    });

    // Samples and the shared backend's modes, while the load runs.
    let monitor = {
        let (tally, client, base) = (tally.clone(), client.clone(), base.clone());
        let duration = options.duration;
        tokio::spawn(async move {
            let mut marks = vec![(duration / 10, "start"), (duration / 2, "middle")];
            marks.reverse();
            while !tally.stop.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(500)).await;
                let Some(stats) = proc_stats(pid) else { break };
                let at = started.elapsed();
                let calls = tally.calls.load(Ordering::SeqCst);
                {
                    let mut report = tally.report.lock().unwrap();
                    report.peak_rss_kib = report.peak_rss_kib.max(stats.rss_kib);
                    report.peak_fds = report.peak_fds.max(stats.fds);
                    report.series.push(Sample {
                        label: "",
                        at,
                        calls,
                        stats,
                    });
                    if let Some(&(when, label)) = marks.last()
                        && at >= when
                    {
                        marks.pop();
                        report.samples.push(Sample {
                            label,
                            at,
                            calls,
                            stats,
                        });
                    }
                }
                if let Some(modes) = shared_modes(&client, &base).await {
                    tally.report.lock().unwrap().modes.extend(modes);
                }
            }
        })
    };

    let mut workers = tokio::task::JoinSet::new();
    for w in 0..options.workers {
        let (tally, client, base) = (tally.clone(), client.clone(), base.clone());
        let options = options.clone();
        let mut mix = Mix(crate::SplitMix(
            options.seed.wrapping_mul(1_000_003).wrapping_add(w as u64),
        ));
        workers.spawn(async move {
            let until = started + options.duration;
            while Instant::now() < until
                && tally.calls.load(Ordering::SeqCst) < options.max_calls
                && !tally.stop.load(Ordering::SeqCst)
            {
                let pause = if mix.below(10) == 0 {
                    proxy_once(&tally, &client, &base, &mut mix, &options).await
                } else {
                    turn_once(&tally, &client, &base, &mut mix, &options, w).await
                };
                if let Some(pause) = pause {
                    // Told "not yet", a model waits before asking again.
                    tokio::time::sleep(pause.min(Duration::from_millis(200))).await;
                }
            }
        });
    }
    while workers.join_next().await.is_some() {}
    let load_ended = started.elapsed();
    let end_stats = proc_stats(pid).unwrap_or_default();
    {
        let mut report = tally.report.lock().unwrap();
        report.elapsed = load_ended;
        report.samples.push(Sample {
            label: "end",
            at: load_ended,
            calls: tally.calls.load(Ordering::SeqCst),
            stats: end_stats,
        });
    }
    tally.stop.store(true, Ordering::SeqCst);
    let _ = monitor.await;
    let (redis, killed, restarted) = redis_thread.join().unwrap();

    // Every permit and queue slot must come back once nothing is running.
    let mut stuck = Vec::new();
    for _ in 0..50 {
        stuck = stuck_scopes(&client, &base).await;
        if stuck.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = proc_stats(pid).unwrap_or_default();
    let final_modes = final_modes(&client, &base).await;
    let calls = tally.calls.load(Ordering::SeqCst);
    let stderr = sidecar.stop();
    drop(redis);
    let _ = std::fs::remove_dir_all(&dir);

    let mut report = tally.report.lock().unwrap().clone();
    report.samples.push(Sample {
        label: "after",
        at: started.elapsed(),
        calls,
        stats: after,
    });
    report.peak_rss_kib = report.peak_rss_kib.max(after.peak_rss_kib);
    report.calls = calls;
    report.redis_outage = Some((killed, restarted));
    report.stuck = stuck;
    report.final_modes = final_modes;
    report.secret_leaked = stderr.contains(SECRET) || stderr.contains("sk-soak");
    report.upstream_requests = upstream.requests();
    report.upstream_connections = upstream.connections();
    report.max_requests_per_call = attempts
        .lock()
        .unwrap()
        .values()
        .copied()
        .max()
        .unwrap_or(0);
    report
}

/// One `/v1/turns` request of 1 to 8 calls; the pause a model would take.
async fn turn_once(
    tally: &Tally,
    client: &reqwest::Client,
    base: &str,
    mix: &mut Mix,
    options: &SoakOptions,
    worker: usize,
) -> Option<Duration> {
    let size = 1 + mix.below(8) as usize;
    let mut planned: Vec<PlannedCall> = Vec::with_capacity(size);
    for i in 0..size {
        let id = format!("w{worker}-{}-{i}", tally.next_n.load(Ordering::Relaxed));
        // Now and then, a read repeated in the same turn: it must coalesce,
        // and both ids must still be answered.
        if i > 0 && mix.below(10) == 0 && planned[0].tool == "read" {
            let first = &planned[0];
            let (kind, n, deadline_ms) = (first.kind, first.n, first.deadline_ms);
            planned.push(PlannedCall {
                id,
                tool: "read",
                kind,
                n,
                deadline_ms,
            });
            continue;
        }
        planned.push(PlannedCall {
            id,
            tool: if mix.below(5) == 0 { "write" } else { "read" },
            kind: mix.fault(&options.faults),
            n: tally.next_n.fetch_add(1, Ordering::SeqCst),
            deadline_ms: 300 + mix.below(1_200),
        });
    }
    let calls: Vec<Value> = planned
        .iter()
        .map(|c| json!({"id": c.id, "tool": c.tool, "args": {"kind": c.kind, "n": c.n}, "deadline_ms": c.deadline_ms}))
        .collect();
    let mut body = json!({ "calls": calls });
    if options.turn_ids {
        body["turn_id"] = json!(format!("soak-{worker}-{}", mix.below(4)));
    }
    let body = body.to_string();
    tally.calls.fetch_add(size as u64, Ordering::SeqCst);
    let deadline = planned.iter().map(|c| c.deadline_ms).max().unwrap_or(0);
    let sent = Instant::now();
    let answer = client
        .post(format!("{base}/v1/turns"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await;
    let text = match answer {
        Ok(response) if response.status() == 200 => response.bytes().await.ok(),
        _ => None,
    };
    let elapsed = sent.elapsed();
    let results: Vec<Value> = text
        .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok())
        .and_then(|v| v["results"].as_array().cloned())
        .unwrap_or_default();
    let mut report_pause = None;
    {
        let mut report = tally.report.lock().unwrap();
        report.turns += 1;
        late(&mut report, elapsed, deadline, options.slack);
        if results.is_empty() {
            report.lost += size as u64;
        } else if results.len() != size {
            report.wrong_ids += size as u64;
        }
    }
    if results.len() != size {
        return None;
    }
    let mut answered = 0;
    for (call, result) in planned.iter().zip(&results) {
        if result["id"].as_str() != Some(call.id.as_str()) {
            tally.report.lock().unwrap().wrong_ids += 1;
            continue;
        }
        answered += 1;
        let status = result["status"].as_str().unwrap_or("missing");
        tally.count(call.kind, status, result["reason"].as_str());
        if status == "rate_limited"
            && let Some(ms) = result["retry_after_ms"].as_u64()
        {
            report_pause = Some(Duration::from_millis(ms));
        }
    }
    tally.report.lock().unwrap().answered += answered;
    report_pause
}

/// One proxied GET (a read): one call, its outcome in `x-sluice-outcome`.
async fn proxy_once(
    tally: &Tally,
    client: &reqwest::Client,
    base: &str,
    mix: &mut Mix,
    options: &SoakOptions,
) -> Option<Duration> {
    let kind = mix.fault(&options.faults);
    let n = tally.next_n.fetch_add(1, Ordering::SeqCst);
    let deadline = 300 + mix.below(1_200);
    tally.calls.fetch_add(1, Ordering::SeqCst);
    let sent = Instant::now();
    let answer = client
        .get(format!("{base}/proxy/api/fault/{kind}/{n}"))
        .header("x-sluice-deadline-ms", deadline.to_string())
        .send()
        .await;
    let (outcome, wait, reason) = match answer {
        Ok(response) => {
            let header = |name: &str| {
                response
                    .headers()
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned)
            };
            let outcome = header("x-sluice-outcome");
            let reason = header("x-sluice-reason").filter(|r| r != "quota_exhausted");
            let wait = response
                .headers()
                .get("retry-after-ms")
                .and_then(|v| v.to_str().ok()?.parse().ok())
                .map(Duration::from_millis);
            // Read the body whole: the answer is only complete then.
            let complete = response.bytes().await.is_ok();
            (outcome.filter(|_| complete), wait, reason)
        }
        Err(_) => (None, None, None),
    };
    let elapsed = sent.elapsed();
    let mut report = tally.report.lock().unwrap();
    report.turns += 1;
    report.proxied += 1;
    late(&mut report, elapsed, deadline, options.slack);
    match outcome {
        Some(status) => {
            report.answered += 1;
            drop(report);
            tally.count(kind, &status, reason.as_deref());
            wait.filter(|_| status == "rate_limited")
        }
        None => {
            report.lost += 1;
            None
        }
    }
}

fn late(report: &mut SoakReport, elapsed: Duration, deadline_ms: u64, slack: Duration) {
    let deadline = Duration::from_millis(deadline_ms);
    if elapsed > deadline + slack {
        report.late += 1;
    }
    report.worst_late = report.worst_late.max(elapsed.saturating_sub(deadline));
}

async fn status(client: &reqwest::Client, base: &str) -> Option<Value> {
    let response = client
        .get(format!("{base}/v1/status"))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .ok()?;
    serde_json::from_slice(&response.bytes().await.ok()?).ok()
}

async fn shared_modes(client: &reqwest::Client, base: &str) -> Option<Vec<String>> {
    let status = status(client, base).await?;
    Some(
        status["shared_backend"]["credentials"]
            .as_array()?
            .iter()
            .filter_map(|c| c["mode"].as_str().map(str::to_owned))
            .collect(),
    )
}

async fn final_modes(client: &reqwest::Client, base: &str) -> Vec<String> {
    shared_modes(client, base).await.unwrap_or_default()
}

/// `credential/scope` of every scope with calls in flight or queued.
async fn stuck_scopes(client: &reqwest::Client, base: &str) -> Vec<String> {
    let Some(status) = status(client, base).await else {
        return vec!["/v1/status did not answer".to_owned()];
    };
    let mut stuck = Vec::new();
    for credential in status["credentials"].as_array().into_iter().flatten() {
        if credential["in_flight"].as_u64() != Some(0) {
            stuck.push(format!(
                "{}: in_flight {}",
                credential["name"], credential["in_flight"]
            ));
        }
        for scope in credential["scopes"].as_array().into_iter().flatten() {
            if scope["in_flight"].as_u64() != Some(0) || scope["queued"].as_u64() != Some(0) {
                stuck.push(format!(
                    "{}/{}: in_flight {} queued {}",
                    scope["credential"], scope["scope"], scope["in_flight"], scope["queued"]
                ));
            }
        }
    }
    stuck
}
