//! The `sluice` command line: every subcommand is a module; `main` only dispatches.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod bench;
mod demo;
mod fake_api;
mod hangup;
mod harness;
mod inspect;
mod logging;
mod mcp;
mod serve;
mod telemetry;

/// Backpressure for AI agents' parallel tool calls.
#[derive(Debug, Parser)]
#[command(name = "sluice", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Benchmarks: sluice next to what people use instead, on loopback.
    Bench(bench::Args),
    /// Replay the shared-key incident: a naive harness, then sluice, side by side.
    Demo(demo::Args),
    /// Serve a throttling fake API that records every request.
    FakeApi(fake_api::Args),
    /// Explain what sluice makes of an HTTP response head (a file or standard input).
    Inspect(inspect::Args),
    /// Proxy an MCP server over stdio, with its tool calls through the gate.
    Mcp(mcp::Args),
    /// Serve the sidecar: POST /v1/turns, a per-credential proxy, status and metrics.
    Serve(serve::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("sluice: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    // `sluice mcp` runs on one thread. Its added latency is hand-offs
    // between tasks (a client's POST, the call's task in the gate, the
    // upstream connection, the answer back), and on a multi-thread
    // runtime each is a wake-up of another thread: measured, most of the
    // hop's cost (docs/PERFORMANCE.md, "The MCP hop"). On one thread a
    // hand-off is a queue push.
    let mut builder = match &cli.command {
        Command::Mcp(_) => tokio::runtime::Builder::new_current_thread(),
        _ => tokio::runtime::Builder::new_multi_thread(),
    };
    let runtime = builder.enable_all().build()?;
    runtime.block_on(async move {
        match cli.command {
            Command::Bench(args) => bench::run(args).await,
            Command::Demo(args) => demo::run(args).await,
            Command::FakeApi(args) => fake_api::run(args).await,
            Command::Inspect(args) => inspect::run(args),
            Command::Mcp(args) => mcp::run(args).await,
            Command::Serve(args) => serve::run(args).await,
        }
    })
}
