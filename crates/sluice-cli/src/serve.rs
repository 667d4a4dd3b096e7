//! `sluice serve`: the sidecar, from a configuration file.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use sluice_config::SidecarConfig;
use sluice_server::{AppState, bind, serve_workers};

/// Flags of `sluice serve`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The configuration file (TOML); see docs/sidecar.md.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,

    /// Address to listen on, overriding `server.listen`; port 0 picks a free port.
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,

    /// Shadow mode for every credential (as `enforce = false`): run the
    /// whole pipeline and record what it would do, but delay, shed and
    /// defer nothing. A trial run before enforcing; see docs/operating.md.
    #[arg(long)]
    shadow: bool,
}

pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    crate::logging::init();
    let mut config = SidecarConfig::load(&args.config)
        .with_context(|| format!("invalid configuration in {}", args.config.display()))?;
    if let Some(listen) = args.listen {
        config.set_listen(listen).context("invalid --listen")?;
    }
    if args.shadow {
        config.shadow_all();
    }
    let shadow: Vec<&str> = config
        .gate
        .credentials
        .iter()
        .filter(|(_, credential)| !credential.enforce)
        .map(|(name, _)| name.as_str())
        .collect();
    if !shadow.is_empty() {
        tracing::info!(
            credentials = ?shadow,
            "shadow mode: decisions are recorded, and no call is delayed, shed or deferred"
        );
    }
    let credentials: Vec<String> = config.credentials.keys().cloned().collect();
    let tools = config.tools.len();
    let tracer = crate::telemetry::start(&config.telemetry)?;
    let state = AppState::connect_traced(config, None, tracer.clone())
        .await
        .context("cannot start the sidecar")?;
    // SIGHUP and `POST /v1/reload` read the file again, with the same overrides.
    let (listen, shadow_all) = (args.listen, args.shadow);
    state.reload_from(
        &args.config,
        Box::new(move |config| {
            if let Some(listen) = listen {
                config.set_listen(listen)?;
            }
            if shadow_all {
                config.shadow_all();
            }
            Ok(())
        }),
    );
    let addr = state.config().server.listen;
    // One worker per CPU unless `[server] workers` says otherwise.
    let workers = state.config().server.workers.map_or_else(
        || std::thread::available_parallelism().map_or(1, usize::from),
        |workers| usize::try_from(workers).unwrap_or(1),
    );
    let listeners = bind(addr, workers).with_context(|| format!("cannot listen on {addr}"))?;
    let local = listeners.local_addr();
    // Register the signals before announcing the address: a supervisor may
    // send SIGTERM as soon as it has read the line.
    let shutdown = shutdown_signal()?;
    let reloading = state.clone();
    crate::hangup::on_hangup(move || {
        // The outcome is logged, naming the field of a refused file.
        let _ = reloading.reload();
    })?;

    let mut stdout = std::io::stdout();
    writeln!(stdout, "listening on http://{local}")?;
    // Scripts wait for this line to learn the port; a pipe would otherwise hold it back.
    stdout.flush()?;
    tracing::info!(
        addr = %local,
        credentials = ?credentials,
        tools,
        workers,
        auth = state.config().server.auth_token.is_some(),
        "sidecar ready"
    );

    serve_workers(listeners, state, shutdown).await?;
    crate::telemetry::flush(tracer.as_ref()).await;
    tracing::info!("sidecar stopped");
    Ok(ExitCode::SUCCESS)
}

/// A future that resolves on SIGINT or, on Unix, SIGTERM.
pub(crate) fn shutdown_signal() -> std::io::Result<impl Future<Output = ()> + Send + 'static> {
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
        assert!(!parsed.args.shadow);
        let shadow = Wrapper::try_parse_from(["serve", "--config", "s.toml", "--shadow"]).unwrap();
        assert!(shadow.args.shadow);
        assert!(Wrapper::try_parse_from(["serve"]).is_err());
        assert!(
            Wrapper::try_parse_from(["serve", "--config", "s", "--listen", "nowhere"]).is_err()
        );
    }
}
