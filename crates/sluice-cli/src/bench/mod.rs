//! `sluice bench`: sluice against what people use instead, side by side, on
//! real loopback HTTP against the fake API.

mod children;
mod load;
mod overhead;
mod scenarios;
mod shared;

use std::process::ExitCode;

/// Flags of `sluice bench`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(Debug, clap::Subcommand)]
enum What {
    /// Every strategy on every scenario: goodput, throttling, amplification, victims, latency.
    Scenarios(scenarios::Args),
    /// What the sidecar adds per request, next to nginx proxy_pass.
    Overhead(overhead::Args),
    /// The shared limiter on Redis: decisions per second, round trips, accuracy.
    Shared(shared::Args),
}

pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.what {
        What::Scenarios(args) => scenarios::run(args).await,
        What::Overhead(args) => overhead::run(args).await,
        What::Shared(args) => shared::run(args).await,
    }
}
