//! The file as `sluice serve` reads it: every section checked, every
//! credential signed, every tool a request on its credential's base URL.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use sluice::GateConfig;

use crate::defaults::defaults;
use crate::error::ConfigError;
use crate::file::File;
use crate::limits::limits;
use crate::secret::Env;
use crate::server::{self, ServerSettings};
use crate::shared::{self, SharedSettings};
use crate::telemetry::{self, Telemetry};
use crate::tool::{ToolSpec, sidecar_tool};
use crate::upstream::{Upstream, upstream};
use crate::{load, value};

/// Everything `sluice serve` needs, checked: build it with
/// [`SidecarConfig::from_toml`] or [`SidecarConfig::load`]. `Debug` never
/// shows a secret. `[mcp]` is `sluice mcp`'s and ignored here.
///
/// ```
/// use sluice_config::SidecarConfig;
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
/// let config = SidecarConfig::from_toml(toml, env).unwrap();
/// assert_eq!(config.tools["search_tickets"].credential, "support");
/// assert!(!format!("{config:?}").contains("k-123"));
///
/// let error = SidecarConfig::from_toml(&toml.replace("10/1s", "0/1s"), env).unwrap_err();
/// assert_eq!(error.field(), Some("credentials.support.rate"));
/// ```
#[derive(Debug, Clone)]
pub struct SidecarConfig {
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
    /// `[telemetry]`; [`Telemetry::resolve`] adds the `OTEL_*` variables.
    pub telemetry: Telemetry,
}

impl SidecarConfig {
    /// Parses and checks a TOML document; `env` looks up environment
    /// variables (secrets and the bearer token). The error names the field.
    pub fn from_toml(
        text: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<SidecarConfig, ConfigError> {
        build(load::parse(text)?, &env)
    }

    /// Reads and checks the file at `path`, with secrets from the process environment.
    pub fn load(path: &Path) -> Result<SidecarConfig, ConfigError> {
        SidecarConfig::from_toml(&load::read(path)?, |name| std::env::var(name).ok())
    }

    /// Listens on `listen` instead (`--listen`), checking again that a
    /// non-loopback address has a bearer token.
    pub fn set_listen(&mut self, listen: SocketAddr) -> Result<(), ConfigError> {
        self.server.listen = listen;
        self.check_exposure()
    }

    /// Puts every credential in shadow mode (`sluice serve --shadow`): a
    /// trial run that records what sluice would do and throttles nothing.
    pub fn shadow_all(&mut self) {
        for credential in self.gate.credentials.values_mut() {
            credential.enforce = false;
        }
    }

    /// Refuses a non-loopback listener without `server.auth_token_env`.
    pub fn check_exposure(&self) -> Result<(), ConfigError> {
        self.server.check_exposure()
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

fn build(file: File, env: Env<'_>) -> Result<SidecarConfig, ConfigError> {
    let server = server::settings(&file.server, env)?;
    let mut gate = GateConfig::default().defaults(defaults(&file.defaults)?);
    let mut credentials = BTreeMap::new();
    for (name, credential) in &file.credentials {
        value::name(name, &format!("credentials.{name}"))?;
        let upstream = upstream(name, credential, env)?;
        gate = gate.credential(name, limits(name, credential)?);
        credentials.insert(name.clone(), upstream);
    }
    let mut tools = BTreeMap::new();
    for (name, tool) in &file.tools {
        value::name(name, &format!("tools.{name}"))?;
        let (route, spec) = sidecar_tool(name, tool, &credentials)?;
        gate = gate.tool(name, route);
        tools.insert(name.clone(), spec);
    }
    let shared = file.shared.as_ref().map(shared::settings).transpose()?;
    shared::check_section(shared.as_ref(), &file.credentials)?;
    let telemetry = telemetry::section(file.telemetry.as_ref())?;
    // The engine checks what it owns (limits, defaults); its errors name the same fields.
    gate.validate()?;
    let config = SidecarConfig {
        server,
        gate,
        credentials,
        tools,
        shared,
        telemetry,
    };
    config.check_exposure()?;
    Ok(config)
}
