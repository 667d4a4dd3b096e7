//! The `sluice bench` command: which benchmark to run.

use std::process::ExitCode;

use super::{mcp, overhead, scale, scenarios, shared};

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
    /// The shared limiter's scale curve: 1 to 32 processes on one key, 1 and 3 Cluster masters, sluice beside the peers.
    Scale(scale::Args),
    /// What `sluice mcp --listen` adds per tools/call, next to the MCP server directly.
    Mcp(mcp::Args),
}

pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.what {
        What::Scenarios(args) => scenarios::run(args).await,
        What::Overhead(args) => overhead::run(args).await,
        What::Shared(args) => shared::run(args).await,
        What::Scale(args) => scale::run(args).await,
        What::Mcp(args) => mcp::run(args).await,
    }
}
