//! `sluice serve`: the sidecar, from a configuration file.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use sluice_server::{AppState, Config, serve};
use tokio::net::TcpListener;

/// Flags of `sluice serve`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The configuration file (TOML); see docs/sidecar.md.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,

    /// Address to listen on, overriding `server.listen`; port 0 picks a free port.
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,
}

pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    crate::logging::init();
    let mut config = Config::load(&args.config)
        .with_context(|| format!("invalid configuration in {}", args.config.display()))?;
    if let Some(listen) = args.listen {
        config.set_listen(listen).context("invalid --listen")?;
    }
    let credentials: Vec<String> = config.credentials.keys().cloned().collect();
    let tools = config.tools.len();
    let state = AppState::connect(config, None)
        .await
        .context("cannot start the sidecar")?;
    let addr = state.config().server.listen;
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    let local = listener.local_addr()?;
    // Register the signals before announcing the address: a supervisor may
    // send SIGTERM as soon as it has read the line.
    let shutdown = shutdown_signal()?;

    let mut stdout = std::io::stdout();
    writeln!(stdout, "listening on http://{local}")?;
    // Scripts wait for this line to learn the port; a pipe would otherwise hold it back.
    stdout.flush()?;
    tracing::info!(
        addr = %local,
        credentials = ?credentials,
        tools,
        auth = state.config().server.auth_token.is_some(),
        "sidecar ready"
    );

    serve(listener, state, shutdown).await?;
    tracing::info!("sidecar stopped");
    Ok(ExitCode::SUCCESS)
}

/// A future that resolves on SIGINT or, on Unix, SIGTERM.
fn shutdown_signal() -> std::io::Result<impl Future<Output = ()> + Send + 'static> {
    #[cfg(unix)]
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    Ok(async move {
        #[cfg(unix)]
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = terminate.recv() => {}
        }
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("signal received");
    })
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Wrapper {
        #[command(flatten)]
        args: Args,
    }

    #[test]
    fn parses_its_flags() {
        let parsed =
            Wrapper::try_parse_from(["serve", "--config", "s.toml", "--listen", "127.0.0.1:0"])
                .unwrap();
        assert_eq!(parsed.args.config, PathBuf::from("s.toml"));
        assert_eq!(parsed.args.listen, Some("127.0.0.1:0".parse().unwrap()));
        assert!(Wrapper::try_parse_from(["serve"]).is_err());
        assert!(
            Wrapper::try_parse_from(["serve", "--config", "s", "--listen", "nowhere"]).is_err()
        );
    }
}
