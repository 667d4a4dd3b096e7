//! `sluice bench shared`: the shared limiter's cost and accuracy on a real
//! `redis-server` of its own.
//!
//! - decisions per second one process makes, with leases and without
//!   (`max_lease = 1`: one round trip per decision);
//! - Redis round trips per admitted call (`INFO commandstats`);
//! - the rate three `sluice serve` processes on one key reach together, as
//!   a fraction of what the key allows (from the fake API's records);
//! - side by side in the same run, sluice next to a fixed-window `INCR` +
//!   `EXPIRE` limiter and a sliding-log Lua limiter ([`super::peers`]):
//!   decisions per second, round trips, and the most starts in any second
//!   at three times the limit.

use std::fmt::Write as _;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context;
use serde::Serialize;
use sluice::shared::{Decision, ReserveRequest, SharedBudget, SharedLimit};
use sluice_redis::{RedisBudget, RedisConfig};
use tokio::time::Instant;

use super::children::Server;
use super::peers::Kind;
use super::redis_nodes::RedisNodes;

/// Flags of `sluice bench shared`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Seconds per measurement.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Callers asking at once in one process.
    #[arg(long, default_value_t = 64)]
    callers: usize,
    /// The key's limit for the three-process run, per second.
    #[arg(long, default_value_t = 50)]
    limit: u32,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Serialize)]
struct Figures {
    decisions_per_second_with_leases: f64,
    round_trips_per_decision_with_leases: f64,
    decisions_per_second_without_leases: f64,
    round_trips_per_decision_without_leases: f64,
    three_processes_busiest_second: usize,
    three_processes_allowed: u32,
    three_processes_ratio: f64,
    three_processes_round_trips_per_admitted_call: f64,
    /// Where the three processes' calls were decided, from their
    /// `/v1/status` at the end: what the round trips were spent on.
    three_processes_decisions: Tally,
    peers: Vec<super::peers::Peer>,
}

pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let dir = std::env::temp_dir().join(format!("sluice-bench-shared-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let redis = RedisNodes::single("shared").await?;
    let url = redis.urls().first().context("no node")?.clone();

    let (with_rate, with_trips) = decisions(&url, &redis, None, &args).await?;
    let (without_rate, without_trips) = decisions(&url, &redis, Some(1), &args).await?;
    let (busiest, trips, tally) = three_processes(&url, &redis, &dir, &args).await?;
    let mut peers = Vec::new();
    for kind in [Kind::Sluice, Kind::FixedWindow, Kind::SlidingLog] {
        redis.reset().await?;
        let trips = || redis.round_trips();
        peers.push(
            super::peers::measure(kind, &url, args.callers, args.seconds, args.limit, trips)
                .await?,
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    let figures = Figures {
        decisions_per_second_with_leases: with_rate,
        round_trips_per_decision_with_leases: with_trips,
        decisions_per_second_without_leases: without_rate,
        round_trips_per_decision_without_leases: without_trips,
        three_processes_busiest_second: busiest,
        three_processes_allowed: args.limit,
        three_processes_ratio: busiest as f64 / f64::from(args.limit),
        three_processes_round_trips_per_admitted_call: trips,
        three_processes_decisions: tally,
        peers,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&figures)?);
    } else {
        print!("{}", table(&figures, &args));
    }
    Ok(ExitCode::SUCCESS)
}

/// `callers` tasks reserving back to back on one budget, under a limit far
/// above what they ask: every decision is a grant.
async fn decisions(
    url: &str,
    redis: &RedisNodes,
    max_lease: Option<u32>,
    args: &Args,
) -> anyhow::Result<(f64, f64)> {
    redis.reset().await?;
    let mut config = RedisConfig::single(url);
    if let Some(slots) = max_lease {
        config = config.max_lease(slots);
    }
    let budget = Arc::new(RedisBudget::connect(config).await?);
    // As the engine asks for a limit of a million a second: the window
    // widened by the default margin, a slot allowed to start that late.
    let limit = SharedLimit {
        rate: super::peers::engine_rate(1_000_000)?,
        burst: None,
    };
    let late_start = super::peers::engine_late(limit.rate);
    let granted = Arc::new(AtomicU64::new(0));
    let until = Instant::now() + Duration::from_secs(args.seconds);
    let mut callers = tokio::task::JoinSet::new();
    for _ in 0..args.callers {
        let (budget, granted) = (budget.clone(), granted.clone());
        callers.spawn(async move {
            while Instant::now() < until {
                let request = ReserveRequest {
                    credential: "bench",
                    scopes: &["api_key"],
                    limit: Some(limit),
                    windows: &[],
                    not_before: Duration::ZERO,
                    max_wait: Duration::from_secs(1),
                    late_start,
                    priority: sluice::Priority::Normal,
                };
                if let Decision::Granted { .. } = budget.reserve(request).await {
                    granted.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    }
    while callers.join_next().await.is_some() {}
    let granted = granted.load(Ordering::Relaxed);
    let trips = redis.round_trips().await?;
    Ok((
        granted as f64 / args.seconds as f64,
        trips as f64 / granted.max(1) as f64,
    ))
}

/// The three processes' decision counters, summed (`/v1/status`'s
/// `shared_backend`): `commands` is every script call they sent, grants
/// (`shared`), denials Redis gave and refunds included.
#[derive(Debug, Default, Serialize)]
struct Tally {
    commands: u64,
    shared: u64,
    leased: u64,
    denied: u64,
    returned: u64,
}

impl Tally {
    fn add(&mut self, status: &serde_json::Value) {
        let backend = &status["shared_backend"];
        let count = |value: &serde_json::Value| value.as_u64().unwrap_or(0);
        self.commands += count(&backend["commands"]);
        for credential in backend["credentials"].as_array().into_iter().flatten() {
            let decisions = &credential["decisions"];
            self.shared += count(&decisions["shared"]);
            self.leased += count(&decisions["leased"]);
            self.denied += count(&decisions["denied"]);
            self.returned += count(&decisions["returned"]);
        }
    }
}

/// Three `sluice serve` processes with `shared = true` on one key, driven
/// hard; returns the busiest second at the fake and round trips per call.
async fn three_processes(
    url: &str,
    redis: &RedisNodes,
    dir: &std::path::Path,
    args: &Args,
) -> anyhow::Result<(usize, f64, Tally)> {
    redis.reset().await?;
    let fake = Server::unlimited_fake()?;
    let config = dir.join("shared.toml");
    std::fs::write(
        &config,
        format!(
            "[credentials.api]\nbase_url = \"{}\"\nrate = \"{}/1s\"\nmax_in_flight = 64\nqueue = 256\nshared = true\n\n\
             [tools.get]\ncredential = \"api\"\nmethod = \"GET\"\npath = \"/api/item?n={{n}}\"\nread = false\n\n[shared]\nredis_url = \"{url}\"\n",
            fake.url, args.limit
        ),
    )?;
    let config = config.to_str().context("temporary path is not UTF-8")?;
    let sidecars = (0..3)
        .map(|_| Server::sluice(&["serve", "--config", config, "--listen", "127.0.0.1:0"]))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let client = reqwest::Client::new();
    let until = Instant::now() + Duration::from_secs(args.seconds.max(5));
    let admitted = Arc::new(AtomicU64::new(0));
    let mut workers = tokio::task::JoinSet::new();
    for (p, sidecar) in sidecars.iter().enumerate() {
        for w in 0..16 {
            let (client, turns_url, admitted) = (
                client.clone(),
                format!("{}/v1/turns", sidecar.url),
                admitted.clone(),
            );
            workers.spawn(async move {
                let mut n = 0u64;
                while Instant::now() < until {
                    n += 1;
                    let body = format!(r#"{{"calls":[{{"id":"c","tool":"get","args":{{"n":"{p}-{w}-{n}"}},"deadline_ms":1500}}]}}"#);
                    let text = match client.post(&turns_url).header("content-type", "application/json").body(body).send().await {
                        Ok(response) => response.text().await.unwrap_or_default(),
                        Err(_) => String::new(),
                    };
                    if text.contains(r#""status":"ok""#) {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    } else {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            });
        }
    }
    while workers.join_next().await.is_some() {}
    let stats = get_json(&client, &format!("{}/_fake/stats", fake.url)).await?;
    let mut starts: Vec<f64> = stats["requests"]
        .as_array()
        .map(|requests| requests.iter().filter_map(|r| r["t_ms"].as_f64()).collect())
        .unwrap_or_default();
    starts.sort_by(f64::total_cmp);
    let mut busiest = 0;
    let mut lo = 0;
    for hi in 0..starts.len() {
        while starts[hi] - starts[lo] >= 1_000.0 {
            lo += 1;
        }
        busiest = busiest.max(hi - lo + 1);
    }
    let trips = redis.round_trips().await?;
    let mut tally = Tally::default();
    for sidecar in &sidecars {
        tally.add(&get_json(&client, &format!("{}/v1/status", sidecar.url)).await?);
    }
    drop(sidecars);
    Ok((
        busiest,
        trips as f64 / admitted.load(Ordering::Relaxed).max(1) as f64,
        tally,
    ))
}

async fn get_json(client: &reqwest::Client, url: &str) -> anyhow::Result<serde_json::Value> {
    let body = client.get(url).send().await?.bytes().await?;
    Ok(serde_json::from_slice(&body)?)
}

fn table(f: &Figures, args: &Args) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "\n| measurement | figure |");
    let _ = writeln!(out, "|---|---:|");
    let _ = writeln!(
        out,
        "| decisions per second, one process, {} callers, with leases | {:.0} |",
        args.callers, f.decisions_per_second_with_leases
    );
    let _ = writeln!(
        out,
        "| Redis round trips per decision, with leases | {:.3} |",
        f.round_trips_per_decision_with_leases
    );
    let _ = writeln!(
        out,
        "| decisions per second, without leases (one round trip each) | {:.0} |",
        f.decisions_per_second_without_leases
    );
    let _ = writeln!(
        out,
        "| Redis round trips per decision, without leases | {:.3} |",
        f.round_trips_per_decision_without_leases
    );
    let _ = writeln!(
        out,
        "| three `sluice serve` processes on one key at {}/s: busiest second | {} ({:.2} x allowed) |",
        f.three_processes_allowed, f.three_processes_busiest_second, f.three_processes_ratio
    );
    let _ = writeln!(
        out,
        "| Redis round trips per admitted call, three processes | {:.3} |",
        f.three_processes_round_trips_per_admitted_call
    );
    let d = &f.three_processes_decisions;
    let _ = writeln!(
        out,
        "| three processes' decisions: script calls, grants from Redis, leased slots taken, denied (by Redis or by what it said), leased slots returned | {}, {}, {}, {}, {} |",
        d.commands, d.shared, d.leased, d.denied, d.returned
    );
    let _ = writeln!(
        out,
        "\n| limiter | decisions/s | round trips per decision | at 3x the limit: admitted/s | round trips per admitted | most starts in any second (limit) |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|");
    for p in &f.peers {
        let _ = writeln!(
            out,
            "| {} | {:.0} | {:.3} | {:.1} | {:.3} | {} ({}) |",
            p.limiter,
            p.decisions_per_second,
            p.round_trips_per_decision,
            p.admitted_per_second,
            p.round_trips_per_admitted,
            p.busiest_second,
            p.limit
        );
    }
    out
}
