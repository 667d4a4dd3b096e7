//! `sluice bench overhead`: what the sidecar adds to a request, next to
//! nginx's `proxy_pass`, with the load from this process and the servers in
//! their own processes.
//!
//! For each target — the fake API directly, `sluice serve`'s proxy with
//! limits far above the load, the same with a credential secret that the
//! scrubber looks for in every answer, nginx in front of the same fake — a
//! fixed-rate open-loop load measures latency from each request's scheduled
//! start (so a slow server cannot hide queueing), and a closed-loop load
//! measures the highest rate it sustains, both in rounds interleaved across
//! the targets; then the time to the first body byte of an event stream
//! (directly, and through each sidecar).

use std::fmt::Write as _;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use serde::Serialize;
use tokio::time::Instant;

use super::children::Server;
use super::{load, ttfb};

/// Connections of the fixed-rate load (each sends every 1/N-th request).
const FIXED_RATE_CONNECTIONS: usize = 16;

/// Flags of `sluice bench overhead`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The fixed rate, requests per second.
    #[arg(long, default_value_t = 2_000)]
    rate: u32,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Rounds per target (a fixed-rate load, then a closed loop),
    /// interleaved across targets; the figures are the median round's.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Connections for the highest-rate measurement.
    #[arg(long, default_value_t = 64)]
    connections: usize,
    /// The rate-limit fields the fake API answers every request with:
    /// none (the default), ietf, github, openai or anthropic. A real API's
    /// fields cost the sidecar their reading; nginx passes them on unread.
    #[arg(long, value_name = "STYLE", default_value = "none", value_parser = parse_headers)]
    upstream_headers: sluice_fake::HeaderStyle,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

fn parse_headers(text: &str) -> Result<sluice_fake::HeaderStyle, String> {
    text.parse()
        .map_err(|error: sluice_fake::ParseNameError| error.to_string())
}

/// One target's figures.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Figures {
    pub(crate) target: String,
    pub(crate) rate: u32,
    pub(crate) sent: usize,
    pub(crate) failed: usize,
    pub(crate) p50_us: u64,
    pub(crate) p99_us: u64,
    /// Every round's p99, in the order measured.
    pub(crate) p99_rounds_us: Vec<u64>,
    /// CPU time the serving process spent per request at the fixed rate
    /// (the fake for the direct target, the proxy alone for the others).
    pub(crate) cpu_us_per_request: Option<f64>,
    /// The median round's highest rate.
    pub(crate) max_rate: f64,
    /// Every round's highest rate, in the order measured.
    pub(crate) max_rate_rounds: Vec<f64>,
    /// The median over rounds of this target's highest rate against
    /// nginx's in the same round (`None` without nginx).
    pub(crate) max_rate_vs_nginx: Option<f64>,
    /// Median time to the first body byte of an event stream whose events
    /// come 100 ms apart: the streaming upstream itself for the direct
    /// target, through the proxy for the sidecars.
    pub(crate) ttfb_us: Option<u64>,
}

/// One thing to measure: where to send, and whose CPU time to count.
struct Target {
    name: &'static str,
    url: String,
    pid: u32,
    /// Where its time to first byte of a stream is measured, if it is.
    ttfb_url: Option<String>,
}

/// The secret of the scrubbing sidecar's credential: every answer passes
/// the scrubber, so its cost shows next to the plain sidecar's.
const SCRUBBED_SECRET: &str = "sk-bench-5f1e9c2a7d3b4e60";

/// Samples of the time to first byte per target (each about 100 ms).
const TTFB_SAMPLES: usize = 21;

pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let fake = Server::unlimited_fake_with(args.upstream_headers)?;
    let stream = ttfb::spawn_stream().await?;
    let dir = std::env::temp_dir().join(format!("sluice-bench-overhead-{}", std::process::id()));
    std::fs::create_dir_all(&dir).context("creating a temporary directory")?;
    // Limits in force on every call, far above the load.
    let limits = "rate = \"1000000/1s\"\nmax_in_flight = 100000\nqueue = 100000\n";
    let sidecar_config = |name: &str, secret: &str| -> anyhow::Result<String> {
        let path = dir.join(name);
        std::fs::write(
            &path,
            format!(
                "[credentials.api]\nbase_url = \"{}\"\n{limits}{secret}\n[credentials.stream]\nbase_url = \"{stream}\"\n{limits}",
                fake.url
            ),
        )?;
        Ok(path
            .to_str()
            .context("temporary path is not UTF-8")?
            .to_owned())
    };
    let plain = sidecar_config("sluice.toml", "")?;
    let scrubbing = sidecar_config("scrub.toml", "secret_env = \"SLUICE_BENCH_SECRET\"\n")?;
    let sidecar = Server::sluice(&["serve", "--config", &plain, "--listen", "127.0.0.1:0"])?;
    let scrubber = Server::sluice_with_env(
        &["serve", "--config", &scrubbing, "--listen", "127.0.0.1:0"],
        &[("SLUICE_BENCH_SECRET", SCRUBBED_SECRET)],
    )?;
    let nginx = nginx(&dir, &fake.url).await;

    let mut targets = vec![
        Target {
            name: "fake API directly",
            url: format!("{}/api/item", fake.url),
            pid: fake.pid(),
            ttfb_url: Some(format!("{stream}/events")),
        },
        Target {
            name: "sluice serve proxy",
            url: format!("{}/proxy/api/api/item", sidecar.url),
            pid: sidecar.pid(),
            ttfb_url: Some(format!("{}/proxy/stream/events", sidecar.url)),
        },
        Target {
            name: "sluice serve proxy, a secret scrubbed",
            url: format!("{}/proxy/api/api/item", scrubber.url),
            pid: scrubber.pid(),
            ttfb_url: Some(format!("{}/proxy/stream/events", scrubber.url)),
        },
    ];
    match &nginx {
        Ok(nginx) => targets.push(Target {
            name: "nginx proxy_pass",
            url: format!("{}/api/item", nginx.url),
            pid: nginx.pid(),
            ttfb_url: None,
        }),
        Err(error) => eprintln!("nginx skipped: {error:#}"),
    }
    let results = measure(&targets, &fake.url, &args).await?;
    let _ = std::fs::remove_dir_all(&dir);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&results)?);
    } else {
        print!("{}", table(&results, &args));
    }
    Ok(ExitCode::SUCCESS)
}

async fn nginx(dir: &std::path::Path, upstream: &str) -> anyhow::Result<Server> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let upstream = upstream.trim_start_matches("http://");
    let conf = format!(
        "worker_processes 1;\nmaster_process off;\ndaemon off;\nerror_log stderr error;\npid {dir}/nginx.pid;\nevents {{ worker_connections 4096; }}\n\
         http {{\n  access_log off;\n  client_body_temp_path {dir}/body;\n  proxy_temp_path {dir}/proxy;\n  fastcgi_temp_path {dir}/fastcgi;\n  uwsgi_temp_path {dir}/uwsgi;\n  scgi_temp_path {dir}/scgi;\n\
         upstream fake {{ server {upstream}; keepalive 128; }}\n\
         server {{ listen 127.0.0.1:{port}; location / {{ proxy_pass http://fake; proxy_http_version 1.1; proxy_set_header Connection \"\"; }} }}\n}}\n",
        dir = dir.display()
    );
    let path = dir.join("nginx.conf");
    std::fs::write(&path, conf)?;
    let path = path
        .to_str()
        .context("temporary path is not UTF-8")?
        .to_owned();
    let prefix = dir
        .to_str()
        .context("temporary path is not UTF-8")?
        .to_owned();
    Server::other(
        "nginx",
        &["-c", &path, "-p", &prefix],
        format!("http://127.0.0.1:{port}"),
    )
    .await
}

/// Interleaved rounds over every target, each a fixed-rate load and then a
/// closed loop (so a noisy moment of the machine lands on one round of one
/// target, not on a whole target, and a target's highest rate is compared
/// with nginx's of the same round).
async fn measure(targets: &[Target], fake: &str, args: &Args) -> anyhow::Result<Vec<Figures>> {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(args.connections * 2)
        .build()?;
    let mut rounds: Vec<Vec<Round>> = targets.iter().map(|_| Vec::new()).collect();
    for round in 0..args.rounds.max(1) {
        for (target, measured) in targets.iter().zip(&mut rounds) {
            eprintln!(
                "{}: round {}, {} req/s for {} s",
                target.name,
                round + 1,
                args.rate,
                args.seconds
            );
            // Warm the connections and the servers.
            for _ in 0..200 {
                let _ = client.get(&target.url).send().await.map(|r| r.bytes());
            }
            // The fake records every request; start each round with an empty
            // record so that earlier history is not copied around during it.
            client
                .post(format!("{fake}/_fake/reset"))
                .send()
                .await?
                .error_for_status()?;
            let (url, rate, seconds) = (target.url.clone(), args.rate, args.seconds);
            let cpu_before = cpu_seconds(target.pid);
            let fixed = tokio::task::spawn_blocking(move || {
                load::fixed_rate(
                    &url,
                    rate,
                    Duration::from_secs(seconds),
                    FIXED_RATE_CONNECTIONS,
                )
            })
            .await??;
            let cpu = cpu_before
                .zip(cpu_seconds(target.pid))
                .map(|(before, after)| (after - before) * 1e6 / fixed.sent.max(1) as f64);
            eprintln!(
                "{}: round {}, {} connections back to back for {} s",
                target.name,
                round + 1,
                args.connections,
                args.seconds
            );
            let max_rate = closed_loop(
                &client,
                &target.url,
                args.connections,
                Duration::from_secs(args.seconds),
            )
            .await;
            measured.push(Round {
                sent: fixed.sent,
                failed: fixed.failed,
                p50_us: fixed.percentile(50),
                p99_us: fixed.percentile(99),
                cpu_us_per_request: cpu,
                max_rate,
            });
        }
    }
    let nginx = targets
        .iter()
        .position(|target| target.name.starts_with("nginx"))
        .map(|at| rounds[at].iter().map(|r| r.max_rate).collect::<Vec<_>>());
    let mut results = Vec::new();
    for (target, measured) in targets.iter().zip(rounds) {
        let median = |pick: fn(&Round) -> u64| {
            let mut values: Vec<u64> = measured.iter().map(pick).collect();
            values.sort_unstable();
            values.get(values.len() / 2).copied().unwrap_or(0)
        };
        let max_rate_rounds: Vec<f64> = measured.iter().map(|r| r.max_rate).collect();
        let max_rate_vs_nginx = nginx
            .as_ref()
            .and_then(|nginx| ratio_by_round(&max_rate_rounds, nginx));
        let ttfb_us = match &target.ttfb_url {
            Some(url) => {
                eprintln!("{}: time to the first byte of a stream", target.name);
                let url = url.clone();
                Some(
                    tokio::task::spawn_blocking(move || ttfb::measure(&url, TTFB_SAMPLES))
                        .await??,
                )
            }
            None => None,
        };
        let cpu = measured
            .iter()
            .filter_map(|r| r.cpu_us_per_request)
            .collect();
        results.push(Figures {
            target: target.name.to_owned(),
            rate: args.rate,
            sent: measured.iter().map(|r| r.sent).sum(),
            failed: measured.iter().map(|r| r.failed).sum(),
            p50_us: median(|r| r.p50_us),
            p99_us: median(|r| r.p99_us),
            p99_rounds_us: measured.iter().map(|r| r.p99_us).collect(),
            cpu_us_per_request: median_of(cpu),
            max_rate: median_of(max_rate_rounds.clone()).unwrap_or(0.0),
            max_rate_rounds,
            max_rate_vs_nginx,
            ttfb_us,
        });
    }
    Ok(results)
}

/// The median of `values` (the upper one of an even count), if any.
fn median_of(mut values: Vec<f64>) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied()
}

/// The median over rounds of `ours` against `theirs` of the same round:
/// a round the machine slowed down counts against both sides at once.
fn ratio_by_round(ours: &[f64], theirs: &[f64]) -> Option<f64> {
    let ratios = ours
        .iter()
        .zip(theirs)
        .filter(|(_, theirs)| **theirs > 0.0)
        .map(|(ours, theirs)| ours / theirs)
        .collect();
    median_of(ratios)
}

/// One fixed-rate round on one target.
struct Round {
    sent: usize,
    failed: usize,
    p50_us: u64,
    p99_us: u64,
    cpu_us_per_request: Option<f64>,
    /// Successes per second of the closed loop that followed.
    max_rate: f64,
}

/// User plus system CPU time of process `pid` so far, from `/proc/PID/stat`
/// (`None` where there is no procfs). Linux reports it in USER_HZ ticks,
/// 100 per second on every architecture it supports.
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces; count from after it.
    let mut fields = stat.get(stat.rfind(')')? + 1..)?.split_whitespace();
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((utime + stime) as f64 / 100.0)
}

/// `connections` workers sending back to back; returns successes per second.
async fn closed_loop(
    client: &reqwest::Client,
    url: &str,
    connections: usize,
    duration: Duration,
) -> f64 {
    let until = Instant::now() + duration;
    let done = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..connections {
        let (client, url, done) = (client.clone(), url.to_owned(), done.clone());
        workers.spawn(async move {
            while Instant::now() < until {
                if let Ok(response) = client.get(&url).send().await
                    && response.status().is_success()
                    && response.bytes().await.is_ok()
                {
                    done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
        });
    }
    while workers.join_next().await.is_some() {}
    done.load(std::sync::atomic::Ordering::Relaxed) as f64 / duration.as_secs_f64()
}

pub(crate) fn table(results: &[Figures], args: &Args) -> String {
    let direct = results.first();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n| target | p50 at {} req/s | p99 (median of {} rounds) | p99 of each round | added p50 | added p99 | CPU per request | failed | highest rate ({} connections, median round) | of each round | vs nginx (median of each round's) | first byte of a stream | added |",
        args.rate, args.rounds, args.connections
    );
    let _ = writeln!(
        out,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for r in results {
        let added = |value: u64, base: u64| value as i64 - base as i64;
        let (added50, added99) = direct.map_or((0, 0), |d| {
            (added(r.p50_us, d.p50_us), added(r.p99_us, d.p99_us))
        });
        let versus = r
            .max_rate_vs_nginx
            .map_or("-".to_owned(), |ratio| format!("{ratio:.2}"));
        let rates = r
            .max_rate_rounds
            .iter()
            .map(|rate| format!("{rate:.0}"))
            .collect::<Vec<_>>()
            .join(", ");
        let rounds = r
            .p99_rounds_us
            .iter()
            .map(|us| format!("{:.2}", *us as f64 / 1_000.0))
            .collect::<Vec<_>>()
            .join(", ");
        let cpu = r
            .cpu_us_per_request
            .map_or("-".to_owned(), |us| format!("{us:.0} µs"));
        let ttfb = r.ttfb_us.map_or("-".to_owned(), |us| {
            format!("{:.2} ms", us as f64 / 1_000.0)
        });
        let ttfb_added = match (r.ttfb_us, direct.and_then(|d| d.ttfb_us)) {
            (Some(us), Some(base)) => format!("{:+.2} ms", (us as f64 - base as f64) / 1_000.0),
            _ => "-".to_owned(),
        };
        let _ = writeln!(
            out,
            "| {} | {:.2} ms | {:.2} ms | {rounds} | {:+.2} ms | {:+.2} ms | {cpu} | {} of {} | {:.0}/s | {rates} | {} | {ttfb} | {ttfb_added} |",
            r.target,
            r.p50_us as f64 / 1_000.0,
            r.p99_us as f64 / 1_000.0,
            added50 as f64 / 1_000.0,
            added99 as f64 / 1_000.0,
            r.failed,
            r.sent,
            r.max_rate,
            versus
        );
    }
    let plain = results.iter().find(|r| r.target == "sluice serve proxy");
    let scrubbed = results.iter().find(|r| r.target.contains("scrubbed"));
    if let (Some(plain), Some(scrubbed)) = (plain, scrubbed)
        && let (Some(a), Some(b)) = (plain.cpu_us_per_request, scrubbed.cpu_us_per_request)
    {
        let _ = writeln!(
            out,
            "\nScrubbing one secret from every answer: {:+.1} µs of CPU per request ({:+.0}%), {:+.2} ms at p50.",
            b - a,
            (b - a) / a * 100.0,
            (scrubbed.p50_us as f64 - plain.p50_us as f64) / 1_000.0
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_compared_round_by_round() {
        assert_eq!(median_of(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median_of(Vec::new()), None);
        // Each round's ratio (0.5, 1.0, 0.8), not the ratio of the two
        // medians (1.0: 1,000 against 1,000).
        let ours = [500.0, 1_000.0, 1_600.0];
        let theirs = [1_000.0, 1_000.0, 2_000.0];
        assert_eq!(ratio_by_round(&ours, &theirs), Some(0.8));
        // A round nginx served nothing in says nothing.
        assert_eq!(ratio_by_round(&[500.0], &[0.0]), None);
    }
}
