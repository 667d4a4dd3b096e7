//! `[server]`: where the sidecar listens, how large a body it takes, the
//! bearer token that guards it, and the listener's timeouts and limits.

use std::net::SocketAddr;
use std::time::Duration;

use crate::error::ConfigError;
use crate::file::ServerFile;
use crate::secret::{self, Env, Secret};
use crate::value;

/// Where the sidecar listens when neither the file nor `--listen` says.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7878";
/// The largest request body accepted when `server.max_body` is not set: 1 MiB.
pub const DEFAULT_MAX_BODY: u64 = 1 << 20;

/// How long a client may take to send a request's head when
/// `server.header_read_timeout` is not set: nginx's `client_header_timeout`
/// is 60 s; an agent on loopback sends a head in microseconds, so 10 s
/// is generous and still closes a slowloris connection quickly.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a keep-alive connection may wait for its next request when
/// `server.idle_timeout` is not set (nginx's `keepalive_timeout` is 75 s;
/// common HTTP clients keep idle connections for 60 to 90 s).
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Connections open at once when `server.max_connections` is not set.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 4_096;
/// The most `server.workers` may be.
pub const MAX_WORKERS: u32 = 256;

/// `[server]`: the listener and its protection.
#[derive(Debug, Clone)]
pub struct ServerSettings {
    /// The address to listen on.
    pub listen: SocketAddr,
    /// The largest request body accepted, in bytes.
    pub max_body: u64,
    /// The variable the bearer token was read from.
    pub auth_token_env: Option<String>,
    /// The bearer token every endpoint but `/healthz` requires, if set.
    pub auth_token: Option<Secret>,
    /// The longest a client may take to send a request's head, counted from
    /// its first byte; then the connection is closed.
    pub header_read_timeout: Duration,
    /// The longest a connection may stay open with no request on it.
    pub idle_timeout: Duration,
    /// Connections open at once; past it the listener stops accepting and
    /// closes idle keep-alive connections to make room.
    pub max_connections: u32,
    /// Threads serving connections, each with its own runtime and its own
    /// socket on the port (`SO_REUSEPORT`); `None` means one per CPU.
    pub workers: Option<u32>,
}

impl ServerSettings {
    /// Refuses a non-loopback listener without `server.auth_token_env`.
    pub(crate) fn check_exposure(&self) -> Result<(), ConfigError> {
        let listen = self.listen;
        if !listen.ip().is_loopback() && self.auth_token.is_none() {
            return Err(ConfigError::invalid(
                "server.auth_token_env",
                format!(
                    "required to listen on {listen}, which is not a loopback address: set it to a variable holding a bearer token"
                ),
            ));
        }
        Ok(())
    }
}

/// `[server]` checked, the token read from the environment.
pub(crate) fn settings(file: &ServerFile, env: Env<'_>) -> Result<ServerSettings, ConfigError> {
    let listen_text = file.listen.as_deref().unwrap_or(DEFAULT_LISTEN);
    let listen: SocketAddr = listen_text.trim().parse().map_err(|_| {
        ConfigError::invalid(
            "server.listen",
            format!(
                "{listen_text:?} is not an address such as \"127.0.0.1:7878\" or \"[::1]:7878\""
            ),
        )
    })?;
    let max_body = match &file.max_body {
        None => DEFAULT_MAX_BODY,
        Some(text) => value::size(text).map_err(|m| ConfigError::invalid("server.max_body", m))?,
    };
    let auth_token = match &file.auth_token_env {
        None => None,
        Some(variable) => Some(secret::from_env(variable, "server.auth_token_env", env)?),
    };
    let duration = |text: &Option<String>, field: &str, default: Duration| match text {
        None => Ok(default),
        Some(text) => value::duration_field(text, field),
    };
    let header_read_timeout = duration(
        &file.header_read_timeout,
        "server.header_read_timeout",
        DEFAULT_HEADER_READ_TIMEOUT,
    )?;
    let idle_timeout = duration(
        &file.idle_timeout,
        "server.idle_timeout",
        DEFAULT_IDLE_TIMEOUT,
    )?;
    let max_connections = match file.max_connections {
        None => DEFAULT_MAX_CONNECTIONS,
        Some(0) => {
            return Err(ConfigError::invalid(
                "server.max_connections",
                "must be at least 1",
            ));
        }
        Some(max) => max,
    };
    let workers = match file.workers {
        Some(workers) if workers == 0 || workers > MAX_WORKERS => {
            return Err(ConfigError::invalid(
                "server.workers",
                format!("must be 1 to {MAX_WORKERS}, got {workers}"),
            ));
        }
        workers => workers,
    };
    Ok(ServerSettings {
        listen,
        max_body,
        auth_token_env: file.auth_token_env.clone(),
        auth_token,
        header_read_timeout,
        idle_timeout,
        max_connections,
        workers,
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::SidecarConfig;

    fn load(server: &str) -> Result<SidecarConfig, crate::ConfigError> {
        SidecarConfig::from_toml(&format!("[server]\n{server}\n"), |_| None)
    }

    #[test]
    fn listener_limits_have_defaults_and_named_errors() {
        let server = load("").unwrap().server;
        assert_eq!(server.header_read_timeout, Duration::from_secs(10));
        assert_eq!(server.idle_timeout, Duration::from_secs(60));
        assert_eq!(server.max_connections, 4_096);
        assert_eq!(server.workers, None);

        let server = load(
            "header_read_timeout = \"2s\"\nidle_timeout = \"500ms\"\nmax_connections = 9\nworkers = 1",
        )
        .unwrap()
        .server;
        assert_eq!(server.header_read_timeout, Duration::from_secs(2));
        assert_eq!(server.idle_timeout, Duration::from_millis(500));
        assert_eq!(server.max_connections, 9);
        assert_eq!(server.workers, Some(1));

        for (bad, field) in [
            ("header_read_timeout = \"0s\"", "server.header_read_timeout"),
            ("idle_timeout = \"soon\"", "server.idle_timeout"),
            ("idle_timeout = \"8d\"", "server.idle_timeout"),
            ("max_connections = 0", "server.max_connections"),
            ("workers = 0", "server.workers"),
            ("workers = 1000", "server.workers"),
        ] {
            let error = load(bad).unwrap_err();
            assert_eq!(error.field(), Some(field), "{bad}: {error}");
        }
    }
}
