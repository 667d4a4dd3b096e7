//! A bounded soak of the sidecar: hundreds of thousands of calls, many turns
//! at once, random upstream faults, and the shared budget's Redis killed and
//! restarted in the middle; prints a summary table and exits 1 if a call was
//! lost or answered twice, a permit stuck, the secret leaked, or memory or
//! file descriptors grew with the number of calls.
//!
//! ```text
//! cargo run --release -p sluice-cli --example soak -- --seconds 300
//! cargo run --release -p sluice-cli --example soak -- --seconds 120 --redis-tls
//! cargo run --release -p sluice-cli --example soak -- --seconds 120 --cluster-failover
//! ```
//!
//! `--redis-tls` puts the shared budget's Redis on TLS with an ACL user;
//! `--cluster-failover` makes it a 3-master, 3-replica Cluster whose master
//! for the credential is killed at half time (both may be given).
//!
//! Everything runs on loopback: a private `redis-server` (it must be on
//! `PATH`), the misbehaving upstream of `sluice-testkit`, and the sidecar as a
//! process of its own, so that its memory and descriptors are its own. By
//! default that process is this example re-run with `--sidecar CONFIG`,
//! which does what `sluice serve --config CONFIG --listen 127.0.0.1:0` does
//! (`SidecarConfig::load`, `AppState::connect`, `serve`); `--sluice PATH` runs a
//! `sluice` binary instead (`cargo build --release -p sluice-cli` first).

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use sluice_config::SidecarConfig;
use sluice_server::{AppState, serve};
use sluice_testkit::SluiceProcess;
use sluice_testkit::soak::{self, SoakOptions};

/// The longest soak allowed: the issue bounds it at ten minutes.
const MAX_SECONDS: u64 = 600;

#[derive(Debug, Parser)]
#[command(about = "Soak the sluice sidecar with faults and a Redis outage.")]
struct Args {
    /// How long to send calls, in seconds (at most 600).
    #[arg(long, default_value_t = 60)]
    seconds: u64,

    /// Stop after this many calls, if earlier.
    #[arg(long, default_value_t = 5_000_000)]
    max_calls: u64,

    /// Clients sending requests back to back.
    #[arg(long, default_value_t = 48)]
    workers: usize,

    /// Seeds the choice of faults, tools, deadlines and calls per request.
    #[arg(long, default_value_t = 1)]
    seed: u64,

    /// How long Redis stays down, in seconds [default: a tenth of the run, at most 15].
    #[arg(long)]
    outage: Option<u64>,

    /// The fault mix, as `name=weight,...` (names: ok, hang, reset,
    /// close_mid_body, long_length, trickle, garbage, r429, r503, not_http)
    /// [default: the mix in sluice_testkit::soak::FAULTS].
    #[arg(long, value_name = "MIX")]
    faults: Option<String>,

    /// The credential's rate per second (a bucket with a tenth of it as burst).
    #[arg(long, default_value_t = 5_000)]
    rate: u32,

    /// Redis on TLS with an ACL user: the sidecar connects by
    /// `rediss://user:password@...` with `tls_ca_file` (certificates made with `openssl`).
    #[arg(long)]
    redis_tls: bool,

    /// Redis is a Cluster of 3 masters and 3 replicas; at half time the
    /// master owning the credential's slot is killed and a replica
    /// promoted (instead of the outage). Needs `redis-cli` on `PATH`.
    #[arg(long)]
    cluster_failover: bool,

    /// Keep the credential's budget local (`shared = false`), for comparison.
    #[arg(long)]
    local: bool,

    /// Send no turn ids: every request is a turn of its own.
    #[arg(long)]
    no_turn_ids: bool,

    /// Run this `sluice` binary as the sidecar instead of this example.
    #[arg(long, value_name = "PATH")]
    sluice: Option<PathBuf>,

    /// Internal: run as the sidecar with this configuration.
    #[arg(long, value_name = "CONFIG", hide = true)]
    sidecar: Option<PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("soak: cannot start a runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let result = match &args.sidecar {
        Some(config) => runtime.block_on(sidecar(config)),
        None => runtime.block_on(drive(&args)),
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("soak: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// The sidecar, as `sluice serve --config CONFIG --listen 127.0.0.1:0` runs it.
async fn sidecar(path: &std::path::Path) -> anyhow::Result<ExitCode> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    let mut config = SidecarConfig::load(path).context("invalid configuration")?;
    config.set_listen("127.0.0.1:0".parse()?)?;
    let state = AppState::connect(config, None).await?;
    let listener = tokio::net::TcpListener::bind(state.config().server.listen).await?;
    let mut stdout = std::io::stdout();
    writeln!(stdout, "listening on http://{}", listener.local_addr()?)?;
    stdout.flush()?;
    serve(listener, state, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await?;
    Ok(ExitCode::SUCCESS)
}

/// `ok=90,hang=10` as weights; names must be the soak's.
fn parse_mix(text: &str) -> anyhow::Result<Vec<(&'static str, u32)>> {
    text.split(',')
        .map(|pair| {
            let (name, weight) = pair
                .split_once('=')
                .with_context(|| format!("--faults: {pair:?} is not name=weight"))?;
            let name = soak::FAULTS
                .iter()
                .map(|(known, _)| *known)
                .find(|known| *known == name.trim())
                .with_context(|| format!("--faults: unknown fault {name:?}"))?;
            Ok((name, weight.trim().parse()?))
        })
        .collect()
}

async fn drive(args: &Args) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        (1..=MAX_SECONDS).contains(&args.seconds),
        "--seconds must be 1 to {MAX_SECONDS}"
    );
    let duration = Duration::from_secs(args.seconds);
    let outage = args.outage.map_or(
        (duration / 10).min(Duration::from_secs(15)),
        Duration::from_secs,
    );
    let faults = match &args.faults {
        None => soak::FAULTS.to_vec(),
        Some(mix) => parse_mix(mix)?,
    };
    let options = SoakOptions {
        faults,
        duration,
        max_calls: args.max_calls,
        workers: args.workers.max(1),
        redis_outage: outage,
        seed: args.seed,
        shared: !args.local,
        turn_ids: !args.no_turn_ids,
        rate: args.rate.max(10),
        redis_tls: args.redis_tls,
        cluster_failover: args.cluster_failover,
        ..SoakOptions::default()
    };
    let (binary, prefix): (PathBuf, Vec<String>) = match &args.sluice {
        Some(path) => (path.clone(), vec!["serve".into(), "--config".into()]),
        None => (
            std::env::current_exe().context("cannot find this example's binary")?,
            vec!["--sidecar".into()],
        ),
    };
    let fault = if args.cluster_failover {
        "the master of the credential's slot killed at half time".to_owned()
    } else {
        format!("Redis down for {} s at half time", outage.as_secs())
    };
    eprintln!(
        "soak: {} s, {} workers, {fault}{}; sidecar: {}",
        args.seconds,
        options.workers,
        if args.redis_tls { ", Redis on TLS" } else { "" },
        binary.display()
    );
    let report = soak::run(&options, |config, env| {
        let mut argv: Vec<&str> = prefix.iter().map(String::as_str).collect();
        let config = config.to_str().unwrap_or_default();
        argv.push(config);
        if args.sluice.is_some() {
            argv.extend(["--listen", "127.0.0.1:0"]);
        }
        SluiceProcess::start(&binary, &argv, env)
    })
    .await;
    print!("{}", report.table());
    let problems = report.problems();
    if problems.is_empty() {
        println!("\nall properties held");
        Ok(ExitCode::SUCCESS)
    } else {
        for problem in &problems {
            println!("PROBLEM: {problem}");
        }
        Ok(ExitCode::FAILURE)
    }
}
