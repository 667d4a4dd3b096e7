//! `sluice bench overhead`: what the sidecar adds to a request, next to
//! nginx's `proxy_pass`, with the load from this process and the servers in
//! their own processes.
//!
//! For each target — the fake API directly, `sluice serve`'s proxy with
//! limits far above the load, nginx in front of the same fake — a
//! fixed-rate open-loop load measures latency from each request's scheduled
//! start (so a slow server cannot hide queueing), then a closed-loop load
//! measures the highest rate it sustains.

use std::fmt::Write as _;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use serde::Serialize;
use tokio::time::Instant;

use super::children::Server;

/// Flags of `sluice bench overhead`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The fixed rate, requests per second.
    #[arg(long, default_value_t = 2_000)]
    rate: u32,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Connections for the highest-rate measurement.
    #[arg(long, default_value_t = 64)]
    connections: usize,
    /// Print JSON.
    #[arg(long)]
    json: bool,
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
    pub(crate) max_rate: f64,
}

pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let fake = Server::sluice(&[
        "fake-api",
        "--listen",
        "127.0.0.1:0",
        "--limit",
        "1000000/1s",
        "--headers",
        "none",
    ])?;
    let dir = std::env::temp_dir().join(format!("sluice-bench-overhead-{}", std::process::id()));
    std::fs::create_dir_all(&dir).context("creating a temporary directory")?;
    let config = dir.join("sluice.toml");
    std::fs::write(
        &config,
        format!(
            "[credentials.api]\nbase_url = \"{}\"\nrate = \"1000000/1s\"\nmax_in_flight = 100000\nqueue = 100000\n",
            fake.url
        ),
    )?;
    let config_path = config.to_str().context("temporary path is not UTF-8")?;
    let sidecar = Server::sluice(&["serve", "--config", config_path, "--listen", "127.0.0.1:0"])?;
    let nginx = nginx(&dir, &fake.url).await;

    let mut targets = vec![
        (
            "fake API directly".to_owned(),
            format!("{}/api/item", fake.url),
        ),
        (
            "sluice serve proxy".to_owned(),
            format!("{}/proxy/api/api/item", sidecar.url),
        ),
    ];
    match &nginx {
        Ok(nginx) => targets.push((
            "nginx proxy_pass".to_owned(),
            format!("{}/api/item", nginx.url),
        )),
        Err(error) => eprintln!("nginx skipped: {error:#}"),
    }
    let mut results = Vec::new();
    for (name, url) in targets {
        eprintln!(
            "{name}: {} req/s for {} s, then {} connections",
            args.rate, args.seconds, args.connections
        );
        results.push(measure(&name, &url, &args).await?);
    }
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
        "worker_processes 1;\ndaemon off;\nerror_log stderr error;\npid {dir}/nginx.pid;\nevents {{ worker_connections 4096; }}\n\
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

async fn measure(name: &str, url: &str, args: &Args) -> anyhow::Result<Figures> {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(args.connections * 2)
        .build()?;
    // Warm the connection pool and the servers.
    for _ in 0..200 {
        let _ = client.get(url).send().await.map(|r| r.bytes());
    }
    let (sent, failed, mut latencies) =
        fixed_rate(&client, url, args.rate, Duration::from_secs(args.seconds)).await;
    latencies.sort_unstable();
    let pick = |p: usize| {
        latencies
            .get((latencies.len() * p / 100).min(latencies.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0)
    };
    let max_rate = closed_loop(
        &client,
        url,
        args.connections,
        Duration::from_secs(args.seconds),
    )
    .await;
    Ok(Figures {
        target: name.to_owned(),
        rate: args.rate,
        sent,
        failed,
        p50_us: pick(50),
        p99_us: pick(99),
        max_rate,
    })
}

/// Requests at `rate` per second, each measured from its scheduled start.
async fn fixed_rate(
    client: &reqwest::Client,
    url: &str,
    rate: u32,
    duration: Duration,
) -> (usize, usize, Vec<u64>) {
    let every = Duration::from_secs(1) / rate;
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    let mut n = 0u32;
    loop {
        let scheduled = start + every * n;
        if scheduled >= start + duration {
            break;
        }
        tokio::time::sleep_until(scheduled).await;
        let (client, url) = (client.clone(), url.to_owned());
        tasks.spawn(async move {
            let ok = match client.get(&url).send().await {
                Ok(response) => response.status().is_success() && response.bytes().await.is_ok(),
                Err(_) => false,
            };
            (
                ok,
                u64::try_from(scheduled.elapsed().as_micros()).unwrap_or(u64::MAX),
            )
        });
        n += 1;
    }
    let (mut sent, mut failed, mut latencies) = (0, 0, Vec::new());
    while let Some(result) = tasks.join_next().await {
        sent += 1;
        match result {
            Ok((true, latency)) => latencies.push(latency),
            _ => failed += 1,
        }
    }
    (sent, failed, latencies)
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
    let nginx = results.iter().find(|r| r.target.starts_with("nginx"));
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n| target | p50 at {} req/s | p99 | added p50 | added p99 | failed | highest rate ({} connections) | vs nginx |",
        args.rate, args.connections
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|");
    for r in results {
        let added = |value: u64, base: u64| value as i64 - base as i64;
        let (added50, added99) = direct.map_or((0, 0), |d| {
            (added(r.p50_us, d.p50_us), added(r.p99_us, d.p99_us))
        });
        let versus = nginx.map_or("-".to_owned(), |n| {
            format!("{:.2}", r.max_rate / n.max_rate)
        });
        let _ = writeln!(
            out,
            "| {} | {:.2} ms | {:.2} ms | {:+.2} ms | {:+.2} ms | {} of {} | {:.0}/s | {} |",
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
    out
}
