//! `sluice mcp`: an MCP server behind sluice, over stdio.

use std::ffi::OsString;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use sluice_mcp::{Command, McpConfig, exit_code};

/// Flags of `sluice mcp`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Example, as an MCP client's server command:\n  sluice mcp --config sluice.toml -- npx -y @modelcontextprotocol/server-github"
)]
pub(crate) struct Args {
    /// The configuration file (TOML): defaults, credentials' limits, `[tools.NAME]` overrides, `[mcp]`.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,

    /// The credential the MCP server's tools spend (default: `[mcp]` credential, else the only one).
    #[arg(long, value_name = "NAME")]
    credential: Option<String>,

    /// The MCP server's command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<OsString>,
}

pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    crate::logging::init();
    let config = McpConfig::load(&args.config, args.credential.as_deref())
        .with_context(|| format!("invalid configuration in {}", args.config.display()))?;
    let (program, rest) = args
        .command
        .split_first()
        .context("missing the MCP server's command after --")?;
    tracing::info!(
        credential = %config.credential,
        server = %program.to_string_lossy(),
        "sluice mcp: the server's tools/call requests go through the gate"
    );
    let command = Command {
        program: program.clone(),
        args: rest.to_vec(),
    };
    let status = sluice_mcp::run(config, &command).await?;
    // The server's status is ours: a client sees the same exit either way.
    Ok(ExitCode::from(exit_code(status)))
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
    }
}
