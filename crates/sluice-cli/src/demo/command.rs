//! The `sluice demo` command: its flags, both runs against one fake API, then the table, JSON or chart.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use sluice_fake::{FakeApi, FakeServer};

use super::{chart, progress, replay, report, scenario};
use crate::harness::Strategy;

/// Flags of `sluice demo`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// How long each harness runs, in seconds.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=600))]
    seconds: u64,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
    /// Also write a timeline of both runs as an SVG chart to this file.
    #[arg(long, value_name = "FILE.svg")]
    chart: Option<PathBuf>,
    /// Seed for the model's choices, the fake's latencies and sluice's jitter.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let duration = Duration::from_secs(args.seconds);
    let fake = FakeApi::new(scenario::fake_config(args.seed)).context("building the fake API")?;
    let server = FakeServer::spawn(fake)
        .await
        .context("starting the fake API on loopback")?;
    let progress = progress::Progress::new(!args.json);
    let mut recorded = Vec::new();
    for harness in [Strategy::Naive, Strategy::Sluice] {
        // Each run starts against a freshly reset API.
        server.api().reset();
        recorded.push(replay::run(harness, &server, duration, args.seed, &progress).await?);
    }
    // The second phase, "twelve calls, four now".
    let mut twelve = Vec::new();
    for harness in [Strategy::Naive, Strategy::Sluice] {
        server.api().reset();
        twelve.push(replay::run_twelve(harness, &server, args.seed, &progress).await?);
    }
    server.shutdown().await.context("stopping the fake API")?;

    let runs: Vec<report::Summary> = recorded.iter().map(report::summarize).collect();
    let twelve_runs: Vec<report::Summary> = twelve.iter().map(report::summarize).collect();
    recorded.extend(twelve);
    if let Some(path) = &args.chart {
        chart::write(path, &recorded, duration)
            .with_context(|| format!("writing the chart to {}", path.display()))?;
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report::Json {
                seconds: args.seconds,
                runs: &runs,
                twelve_calls: &twelve_runs,
            })?
        );
    } else {
        print!("{}", report::table(&runs, args.seconds));
        print!("{}", report::twelve_table(&twelve_runs));
        if let Some(path) = &args.chart {
            println!("chart written to {}", path.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}
