//! `sluice bench`: sluice against what people use instead, side by side, on
//! real loopback HTTP against the fake API.

mod scenarios;

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
}

pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.what {
        What::Scenarios(args) => scenarios::run(args).await,
    }
}
