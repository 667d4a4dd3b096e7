//! `sluice fake-api`: serve the throttling fake API from the command line.

/// Flags of `sluice fake-api`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {}

pub(crate) async fn run(_args: Args) -> anyhow::Result<std::process::ExitCode> {
    anyhow::bail!("not built yet")
}
