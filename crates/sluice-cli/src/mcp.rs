//! `sluice mcp`: an MCP server behind sluice, over stdio or Streamable HTTP on either side.

use std::ffi::OsString;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use sluice_config::McpConfig;
use sluice_mcp::{Command, Proxy, Remote, Server, exit_code};

/// Flags of `sluice mcp`.
#[derive(Debug, Clone, clap::Args)]
#[command(
    after_help = "Examples:\n  sluice mcp --config sluice.toml -- npx -y @modelcontextprotocol/server-github\n  sluice mcp --config sluice.toml --upstream https://mcp.example.com/mcp\n  sluice mcp --config sluice.toml --listen 127.0.0.1:7879 -- python server.py"
)]
pub(crate) struct Args {
    /// The configuration file (TOML): defaults, credentials' limits, `[tools.NAME]` overrides, `[mcp]`.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,

    /// The credential the MCP server's tools spend (default: `[mcp]` credential, else the only one).
    #[arg(long, value_name = "NAME")]
    credential: Option<String>,

    /// A remote MCP server's Streamable HTTP endpoint, instead of a command.
    #[arg(long, value_name = "URL", conflicts_with = "command")]
    upstream: Option<String>,

    /// Serve clients over Streamable HTTP at http://ADDR/mcp instead of on stdio.
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,

    /// A Host name `--listen` answers besides loopback ones (adds to `[mcp] allowed_hosts`; repeatable).
    #[arg(long = "allow-host", value_name = "HOST")]
    allow_host: Vec<String>,

    /// An Origin `--listen` accepts besides loopback ones (adds to `[mcp] allowed_origins`; repeatable).
    #[arg(long = "allow-origin", value_name = "ORIGIN")]
    allow_origin: Vec<String>,

    /// Shadow mode for every credential: decisions are recorded, no call is delayed, shed or deferred.
    #[arg(long)]
    shadow: bool,

    /// The MCP server's command and its arguments, after `--`.
    #[arg(
        last = true,
        required_unless_present = "upstream",
        value_name = "COMMAND"
    )]
    command: Vec<OsString>,
}

/// `--upstream`: an `http://` or `https://` URL.
fn upstream_url(text: &str) -> anyhow::Result<http::Uri> {
    let url: http::Uri = text
        .parse()
        .map_err(|_| anyhow::anyhow!("--upstream: not a URL"))?;
    match url.scheme_str() {
        Some("http" | "https") if url.host().is_some() => Ok(url),
        _ => anyhow::bail!("--upstream: must be an http:// or https:// URL with a host"),
    }
}

/// The configuration file as `sluice mcp` uses it: the file, then the
/// command line's overrides (`--allow-host`, `--allow-origin`, `--shadow`),
/// at start and again on each reload.
fn load(args: &Args) -> anyhow::Result<McpConfig> {
    let mut config = McpConfig::load(&args.config, args.credential.as_deref())
        .with_context(|| format!("invalid configuration in {}", args.config.display()))?;
    for host in &args.allow_host {
        config.exposure.add_host(host, "--allow-host")?;
    }
    for origin in &args.allow_origin {
        config.exposure.add_origin(origin, "--allow-origin")?;
    }
    if args.shadow {
        config.gate = config.gate.shadow_all();
    }
    Ok(config)
}

pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    crate::logging::init();
    let config = load(&args)?;
    if args.shadow {
        tracing::info!(
            "shadow mode: decisions are recorded, and no call is delayed, shed or deferred"
        );
    }
    let tracer = crate::telemetry::start(&config.telemetry)?;
    // Every secret is masked in what clients are sent (issue 19).
    let proxy = Proxy::new(config.clone())
        .scrub_env_secrets()
        .trace(tracer.clone());
    // SIGHUP never ends the proxy (its default action would): it reads the
    // file again and puts its limits in force for the calls that start
    // after, keeping what each window has spent (docs/operating.md#reload).
    // A file that does not load, or changes what needs a restart, is
    // refused, naming the field; the limits in force stay.
    let reloader = proxy.reloader();
    let reread = Args {
        command: Vec::new(),
        ..args.clone()
    };
    crate::hangup::on_hangup(move || match load(&reread) {
        Ok(config) => match reloader.reload(config) {
            Ok(()) => tracing::info!("SIGHUP: the configuration file's limits are in force"),
            Err(error) => tracing::warn!(
                field = error.field().unwrap_or(""),
                %error,
                "SIGHUP: the configuration file was refused; the configuration in force is unchanged"
            ),
        },
        Err(error) => {
            let field = error
                .chain()
                .find_map(|cause| cause.downcast_ref::<sluice_config::ConfigError>())
                .and_then(sluice_config::ConfigError::field)
                .unwrap_or("");
            tracing::warn!(
                field,
                error = format!("{error:#}"),
                "SIGHUP: the configuration file does not load; the configuration in force is unchanged"
            );
        }
    })?;
    let env = |name: &str| std::env::var(name).ok();
    let server = match &args.upstream {
        Some(text) => Server::Remote(Remote {
            url: upstream_url(text)?,
            auth: config
                .upstream_auth(&env)
                .with_context(|| format!("invalid configuration in {}", args.config.display()))?,
            forward_authorization: config.http.forward_authorization,
        }),
        None => {
            let (program, rest) = args
                .command
                .split_first()
                .context("missing the MCP server's command after --")?;
            Server::Command(Command {
                program: program.clone(),
                args: rest.to_vec(),
            })
        }
    };
    tracing::info!(
        credential = %config.credential,
        upstream = args.upstream.is_some(),
        listen = ?args.listen,
        "sluice mcp: the server's tools/call requests go through the gate"
    );
    if let Some(listen) = args.listen {
        let settings = config
            .listener(Some(listen), &env)
            .with_context(|| format!("invalid configuration in {}", args.config.display()))?;
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .with_context(|| format!("cannot listen on {listen}"))?;
        let local = listener.local_addr()?;
        let shutdown = crate::serve::shutdown_signal()?;
        let mut stdout = std::io::stdout();
        writeln!(stdout, "listening on http://{local}")?;
        stdout.flush()?;
        tracing::info!(addr = %local, auth = settings.auth_token.is_some(), "sluice mcp: clients connect at /mcp");
        sluice_mcp::serve_http(proxy, server, listener, settings, shutdown).await?;
        crate::telemetry::flush(tracer.as_ref()).await;
        return Ok(ExitCode::SUCCESS);
    }
    let code = match server {
        Server::Remote(remote) => {
            sluice_mcp::run_upstream(proxy, remote).await?;
            ExitCode::SUCCESS
        }
        Server::Command(command) => {
            let status = sluice_mcp::run(proxy, &command).await?;
            // The server's status is ours: a client sees the same exit either way.
            ExitCode::from(exit_code(status))
        }
    };
    crate::telemetry::flush(tracer.as_ref()).await;
    Ok(code)
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
    fn the_command_follows_a_double_dash() {
        let parsed = Wrapper::try_parse_from([
            "mcp",
            "--config",
            "s.toml",
            "--credential",
            "github",
            "--",
            "npx",
            "-y",
            "server",
            "--config",
            "x",
        ])
        .unwrap();
        assert_eq!(parsed.args.config, PathBuf::from("s.toml"));
        assert_eq!(parsed.args.credential.as_deref(), Some("github"));
        assert_eq!(
            parsed.args.command,
            ["npx", "-y", "server", "--config", "x"].map(OsString::from)
        );
        assert!(Wrapper::try_parse_from(["mcp", "--config", "s.toml"]).is_err());
        assert!(Wrapper::try_parse_from(["mcp", "--config", "s.toml", "--"]).is_err());
        assert!(Wrapper::try_parse_from(["mcp", "--", "server"]).is_err());
        let remote = Wrapper::try_parse_from([
            "mcp",
            "--config",
            "s.toml",
            "--upstream",
            "http://127.0.0.1:9/mcp",
            "--listen",
            "127.0.0.1:0",
        ])
        .unwrap();
        assert_eq!(
            remote.args.upstream.as_deref(),
            Some("http://127.0.0.1:9/mcp")
        );
        assert!(remote.args.command.is_empty());
        assert!(
            Wrapper::try_parse_from([
                "mcp",
                "--config",
                "s.toml",
                "--upstream",
                "http://h/mcp",
                "--",
                "x"
            ])
            .is_err()
        );
        assert!(!remote.args.shadow);
        let exposed = Wrapper::try_parse_from([
            "mcp",
            "--config",
            "s.toml",
            "--listen",
            "0.0.0.0:7879",
            "--allow-host",
            "a.example",
            "--allow-host",
            "b.example",
            "--allow-origin",
            "https://app.example",
            "--",
            "x",
        ])
        .unwrap();
        assert_eq!(exposed.args.allow_host, ["a.example", "b.example"]);
        assert_eq!(exposed.args.allow_origin, ["https://app.example"]);
        let shadow =
            Wrapper::try_parse_from(["mcp", "--config", "s.toml", "--shadow", "--", "x"]).unwrap();
        assert!(shadow.args.shadow);
        assert!(upstream_url("ftp://h/x").is_err());
        assert!(upstream_url("http://127.0.0.1:1/mcp").is_ok());
    }
}
