//! Why the proxy cannot run.

/// Why `sluice mcp` could not start or keep running.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    /// The gate rejected the configuration.
    #[error(transparent)]
    Gate(#[from] sluice::ConfigError),
    /// The MCP server's command could not be started.
    #[error("cannot start the MCP server {program:?}: {source}")]
    Spawn {
        /// The command.
        program: String,
        /// Why.
        source: std::io::Error,
    },
    /// The Redis backend of `shared = true` refused the configuration or
    /// this client (Redis merely down is not an error: it starts in fallback).
    #[error("the shared budget's backend (Redis): {0}")]
    Shared(#[from] sluice_redis::Error),
    /// Waiting for the MCP server, or reading standard input, failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: &'static str,
        /// Why it failed.
        source: std::io::Error,
    },
}
