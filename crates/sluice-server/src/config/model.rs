//! The validated configuration: typed values, defaults filled in, secrets read.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use http::HeaderName;
use reqwest::Url;
use sluice::GateConfig;

use super::error::ConfigError;
use super::file::File;
use crate::secret::Secret;
use crate::tool::ToolSpec;

/// Where the sidecar listens when neither the file nor `--listen` says.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7878";
/// The largest request body accepted when `server.max_body` is not set: 1 MiB.
pub const DEFAULT_MAX_BODY: u64 = 1 << 20;
/// The header a credential's secret goes in by default.
pub const DEFAULT_AUTH_HEADER: &str = "authorization";
/// What precedes the secret in that header by default.
pub const DEFAULT_AUTH_PREFIX: &str = "Bearer ";
/// How long one call to the shared backend may take (DESIGN.md: 50 ms).
pub const DEFAULT_SHARED_TIMEOUT: Duration = Duration::from_millis(50);

/// Everything `sluice serve` needs, checked: build it with
/// [`Config::from_toml`] or [`Config::load`]. `Debug` never shows a secret.
///
/// ```
/// use sluice_server::Config;
/// let toml = r#"
///     [credentials.support]
///     base_url = "http://127.0.0.1:9000"
///     secret_env = "SUPPORT_API_KEY"
///     rate = "10/1s"
///
///     [tools.search_tickets]
///     credential = "support"
///     method = "GET"
///     path = "/api/v2/search.json?query={query}"
///     read = true
/// "#;
/// let env = |name: &str| (name == "SUPPORT_API_KEY").then(|| "k-123".to_owned());
/// let config = Config::from_toml(toml, env).unwrap();
/// assert_eq!(config.tools["search_tickets"].credential, "support");
/// assert!(!format!("{config:?}").contains("k-123"));
///
/// let error = Config::from_toml(&toml.replace("10/1s", "0/1s"), env).unwrap_err();
/// assert_eq!(error.field(), Some("credentials.support.rate"));
/// ```
#[derive(Debug, Clone)]
pub struct Config {
    /// `[server]`.
    pub server: ServerSettings,
    /// The engine's view: defaults, credentials' limits, tools' routes.
    pub gate: GateConfig,
    /// Where each credential's requests go and how they are signed.
    pub credentials: BTreeMap<String, Upstream>,
    /// How each tool becomes a request.
    pub tools: BTreeMap<String, ToolSpec>,
    /// `[shared]`, if present.
    pub shared: Option<SharedSettings>,
}

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
}

/// A credential's destination and signature.
#[derive(Debug, Clone)]
pub struct Upstream {
    /// The only origin its requests go to; paths are joined below its path.
    pub base_url: Url,
    /// The variable the secret was read from.
    pub secret_env: Option<String>,
    /// The secret, if the credential has one.
    pub secret: Option<Secret>,
    /// The header the secret goes in.
    pub auth_header: HeaderName,
    /// What precedes the secret in that header.
    pub auth_prefix: String,
    /// True when the budget should live in the shared backend.
    pub shared: bool,
}

/// `[shared]`: the shared budget backend (Redis): `redis_url` is one node,
/// `redis_urls` the seeds of a Redis Cluster.
#[derive(Debug, Clone, PartialEq)]
pub struct SharedSettings {
    /// One Redis URL (it may carry a password, so it is kept as a secret).
    pub redis_url: Option<Secret>,
    /// Several (Redis Cluster seeds), also kept as secrets.
    pub redis_urls: Vec<Secret>,
    /// How long one call to the backend may take.
    pub timeout: Duration,
    /// The share of a credential's rate to fall back to while the backend is
    /// unreachable; `None`: rate / processes seen recently.
    pub fallback_share: Option<f64>,
}

impl Config {
    /// Parses and checks a TOML document; `env` looks up environment
    /// variables (secrets and the bearer token). The error names the field.
    pub fn from_toml(
        text: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let deserializer = toml::Deserializer::parse(text).map_err(|error| syntax(text, &error))?;
        let file: File = serde_path_to_error::deserialize(deserializer).map_err(|error| {
            let field = error.path().to_string();
            let inner = error.into_inner();
            if field == "." {
                return syntax(text, &inner);
            }
            // A wrong type is described by quoting the value; a [shared] URL
            // may carry a password, so there the value is not quoted.
            let quotes_value = inner.message().starts_with("invalid ");
            let message = if field.starts_with("shared.") && quotes_value {
                "has the wrong type (the value is not shown)".to_owned()
            } else {
                inner.message().to_owned()
            };
            ConfigError::invalid(field, message)
        })?;
        super::validate::config(file, &env)
    }

    /// Reads and checks the file at `path`, with secrets from the process environment.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Config::from_toml(&text, |name| std::env::var(name).ok())
    }

    /// Listens on `listen` instead (`--listen`), checking again that a
    /// non-loopback address has a bearer token.
    pub fn set_listen(&mut self, listen: SocketAddr) -> Result<(), ConfigError> {
        self.server.listen = listen;
        self.check_exposure()
    }

    /// Refuses a non-loopback listener without `server.auth_token_env`.
    pub fn check_exposure(&self) -> Result<(), ConfigError> {
        let listen = self.server.listen;
        if !listen.ip().is_loopback() && self.server.auth_token.is_none() {
            return Err(ConfigError::invalid(
                "server.auth_token_env",
                format!(
                    "required to listen on {listen}, which is not a loopback address: set it to a variable holding a bearer token"
                ),
            ));
        }
        Ok(())
    }

    /// The longest deadline any configured call can have (the default or a
    /// tool's): the base of the shutdown grace period.
    pub fn longest_deadline(&self) -> Duration {
        self.gate
            .tools
            .values()
            .filter_map(|tool| tool.deadline)
            .fold(self.gate.defaults.deadline, Duration::max)
    }
}

/// A TOML error as `line L, column C: message`, without quoting the line
/// (it could hold a Redis URL with a password).
fn syntax(text: &str, error: &toml::de::Error) -> ConfigError {
    let message = match error.span() {
        Some(span) => {
            let before = text.get(..span.start).unwrap_or(text);
            let line = before.matches('\n').count() + 1;
            let column = before.len() - before.rfind('\n').map_or(0, |at| at + 1) + 1;
            format!("line {line}, column {column}: {}", error.message())
        }
        None => error.message().to_owned(),
    };
    ConfigError::Syntax { message }
}
