//! Logs for the long-running subcommands: to stderr (stdout carries their
//! protocol or the address line), filtered by `RUST_LOG`, default `info`.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Installs the subscriber; one already installed (a test) is kept.
pub(crate) fn init() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}
