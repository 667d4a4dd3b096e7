//! `[mcp]`'s bounds on `sluice mcp --listen` sessions: how long one may sit
//! idle, how many may be open, and how many requests one may have in
//! progress at once.

use std::time::Duration;

use crate::error::ConfigError;
use crate::file::McpFile;
use crate::value;

/// The default `[mcp] session_idle`: a client quiet for half an hour has
/// most likely gone without a DELETE.
pub const DEFAULT_SESSION_IDLE: Duration = Duration::from_secs(30 * 60);
/// The default `[mcp] max_sessions`.
pub const DEFAULT_MAX_SESSIONS: usize = 256;
/// The default `[mcp] session_queue`: well above what one agent runs in
/// parallel, well below what would let one session hold the gate's queues.
pub const DEFAULT_SESSION_QUEUE: usize = 64;
/// The largest `max_sessions` and `session_queue` accepted: each session
/// may hold a child process, so more is a typo, not a plan.
const MAX_COUNT: u64 = 100_000;

/// `[mcp]` for the sessions of `sluice mcp --listen`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct McpSessions {
    /// `session_idle` (default 30 m): a session that has had no request in
    /// progress for this long is closed, its server session ended (a stdio
    /// server's child stopped); a later request naming it gets 404.
    pub idle: Duration,
    /// `max_sessions` (default 256): past it, a new session closes the
    /// least recently used idle one; when every one is busy, the
    /// `initialize` is answered 503 with `Retry-After`.
    pub max_sessions: usize,
    /// `session_queue` (default 64): requests one session may have in
    /// progress at once; a POST that would go past it is refused at once
    /// (a `tools/call` gets the `rate_limited` outcome, reason `shed`).
    pub queue: usize,
}

impl Default for McpSessions {
    fn default() -> Self {
        McpSessions {
            idle: DEFAULT_SESSION_IDLE,
            max_sessions: DEFAULT_MAX_SESSIONS,
            queue: DEFAULT_SESSION_QUEUE,
        }
    }
}

pub(crate) fn section(file: &McpFile) -> Result<McpSessions, ConfigError> {
    let idle = file
        .session_idle
        .as_deref()
        .map(|text| value::duration_field(text, "mcp.session_idle"))
        .transpose()?
        .unwrap_or(DEFAULT_SESSION_IDLE);
    Ok(McpSessions {
        idle,
        max_sessions: count(file.max_sessions, "mcp.max_sessions", DEFAULT_MAX_SESSIONS)?,
        queue: count(
            file.session_queue,
            "mcp.session_queue",
            DEFAULT_SESSION_QUEUE,
        )?,
    })
}

fn count(value: Option<i64>, field: &str, default: usize) -> Result<usize, ConfigError> {
    let Some(value) = value else {
        return Ok(default);
    };
    u64::try_from(value)
        .ok()
        .filter(|n| (1..=MAX_COUNT).contains(n))
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| {
            ConfigError::invalid(field, format!("{value} is not between 1 and {MAX_COUNT}"))
        })
}

#[cfg(test)]
mod tests {
    use crate::McpConfig;

    use super::*;

    #[test]
    fn defaults_and_values() {
        let config = McpConfig::from_toml("[credentials.a]", None).unwrap();
        assert_eq!(config.sessions, McpSessions::default());
        let config = McpConfig::from_toml(
            "[credentials.a]\n[mcp]\nsession_idle = \"300ms\"\nmax_sessions = 2\nsession_queue = 3",
            None,
        )
        .unwrap();
        assert_eq!(config.sessions.idle, Duration::from_millis(300));
        assert_eq!(config.sessions.max_sessions, 2);
        assert_eq!(config.sessions.queue, 3);
    }

    #[test]
    fn bad_values_name_their_field() {
        for (line, field) in [
            ("session_idle = \"soon\"", "mcp.session_idle"),
            ("session_idle = \"0s\"", "mcp.session_idle"),
            ("max_sessions = 0", "mcp.max_sessions"),
            ("max_sessions = -1", "mcp.max_sessions"),
            ("session_queue = 0", "mcp.session_queue"),
            ("session_queue = 1000000", "mcp.session_queue"),
        ] {
            let error =
                McpConfig::from_toml(&format!("[credentials.a]\n[mcp]\n{line}"), None).unwrap_err();
            assert_eq!(error.field(), Some(field), "{line}: {error}");
        }
    }
}
