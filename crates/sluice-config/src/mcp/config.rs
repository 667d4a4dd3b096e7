//! The file as `sluice mcp` reads it: the engine's limits, the credential
//! the upstream server's tools spend, and per-tool overrides.
//!
//! It is the sidecar's file, through a narrower view, so that one file can
//! serve both and every limit means the same in both:
//!
//! - `[defaults]`, the limits of `[credentials.*]` and `[shared]` are
//!   checked by the same rules, with the same fields and messages, as for
//!   `sluice serve` ([`SidecarConfig`](crate::SidecarConfig));
//! - a credential's signing fields (`base_url`, `secret_env`, `auth_header`,
//!   `auth_prefix`) and `[server]` are the sidecar's business: the proxy
//!   never sends HTTP, so they are optional here and not checked beyond
//!   their shape, and no secret has to be set to run it;
//! - `[tools.NAME]` entries are overrides: an MCP tool has no `method` or
//!   `path` (a sidecar tool's are accepted and ignored);
//! - `[mcp]` is only ours: `credential`, `deferral`, `rate_limit_patterns`,
//!   `trust_annotations`, `max_message_size`, `shutdown_grace`, and for
//!   `--listen` `session_idle`, `max_sessions`, `session_queue`,
//!   `allowed_hosts`, `allowed_origins`.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use sluice::GateConfig;

use super::exposure::{self, McpExposure};
use super::remote::{self, McpHttp, UpstreamAuth};
use super::sessions::{self, McpSessions};
use crate::defaults::defaults;
use crate::error::ConfigError;
use crate::file::{File, ServerFile, ToolFile};
use crate::limits::limits;
use crate::server::{self, ServerSettings};
use crate::shared::SharedSettings;
use crate::{load, shared, value};

/// The proxy's configuration: build it with [`McpConfig::from_toml`] or [`McpConfig::load`].
///
/// ```
/// use sluice_config::McpConfig;
/// let toml = r#"
///     [credentials.search_api]
///     rate = "5/1s"
///     max_in_flight = 2
///
///     [tools.index_document]
///     read = false
///     deadline = "2m"
/// "#;
/// let config = McpConfig::from_toml(toml, None).unwrap();
/// assert_eq!(config.credential, "search_api");
/// assert_eq!(config.tools["index_document"].read, Some(false));
///
/// let error = McpConfig::from_toml(toml, Some("other")).unwrap_err();
/// assert_eq!(error.field(), Some("--credential"));
/// ```
#[derive(Debug, Clone)]
pub struct McpConfig {
    /// The engine's view: defaults and credentials' limits (no tools: MCP
    /// tools are routed per call, see [`McpConfig::tools`]).
    pub gate: GateConfig,
    /// The credential the upstream server's tools spend, unless a
    /// `[tools.NAME]` entry names another.
    pub credential: String,
    /// `[tools.NAME]` overrides, by tool name.
    pub tools: BTreeMap<String, ToolOverride>,
    /// How sluice tells the agent a call was deferred (`[mcp] deferral`).
    pub deferral: Deferral,
    /// `[mcp] rate_limit_patterns`: extra texts that mark a tool error as a
    /// rate limit; a pattern's first capture group, when it matches, is
    /// the wait (`"30s"`, `"1500ms"`, `"2m"`, or plain seconds).
    pub rate_limit_patterns: Vec<regex::Regex>,
    /// `[mcp] trust_annotations` (default true): when false, the server's
    /// annotations are ignored (read as the spec's defaults, the narrowest
    /// reading of each), so they never widen what sluice retries, coalesces
    /// or leaves uncharged; `[tools.NAME]` still decides.
    pub trust_annotations: bool,
    /// `[mcp] max_message_size` (default 16 MiB): the longest line taken
    /// from either peer.
    pub max_message_size: usize,
    /// `[mcp] shutdown_grace` (default 5 s): how long the server has to
    /// exit after its input closes or a signal is passed on, before it is killed.
    pub shutdown_grace: Duration,
    /// How a Streamable HTTP upstream is authenticated (`[mcp]`).
    pub http: McpHttp,
    /// The bounds on `--listen` sessions (`[mcp] session_idle`,
    /// `max_sessions`, `session_queue`).
    pub sessions: McpSessions,
    /// The `Host` and `Origin` values `--listen` answers besides loopback
    /// ones (`[mcp] allowed_hosts`, `allowed_origins`; the CLI's
    /// `--allow-host` and `--allow-origin` add to them).
    pub exposure: McpExposure,
    /// `[shared]`: where the budgets of `shared = true` credentials live
    /// (Redis), as for the sidecar; `None` without the section.
    pub shared: Option<SharedSettings>,
    /// `[telemetry]`; [`Telemetry::resolve`](crate::Telemetry::resolve)
    /// adds the `OTEL_*` variables.
    pub telemetry: crate::Telemetry,
    /// `[server]`, read only when `sluice mcp --listen` serves clients.
    pub(crate) server: ServerFile,
    /// Each credential's `secret_env`, by credential: scrubbed from what
    /// the proxy returns when set (see `secrets.rs`).
    pub(crate) secret_envs: Vec<String>,
}

/// How a deferred call is answered (`[mcp] deferral`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Deferral {
    /// A tool result with `isError: true` and the outcome as
    /// `structuredContent` (the default): the model reads it.
    #[default]
    Result,
    /// A JSON-RPC error `-32023` (SEP-3304's RateLimited) with
    /// `data: {retryAfterMs, scope, reason, hint}`: for clients that
    /// handle rate limits themselves.
    Error,
}

/// The default `[mcp] max_message_size`: 16 MiB (issue 19).
pub const DEFAULT_MAX_MESSAGE_SIZE: usize = 16 << 20;
/// The default `[mcp] shutdown_grace`; the MCP spec leaves "a reasonable
/// time" to the client.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// Most `[mcp] rate_limit_patterns`, and the longest one: patterns are
/// matched against every tool error.
const MAX_PATTERNS: usize = 64;
const MAX_PATTERN_LEN: usize = 1_000;

/// `[tools.NAME]` for an MCP tool: what to decide instead of the server's annotations.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolOverride {
    /// The credential it spends, instead of the proxy's.
    pub credential: Option<String>,
    /// A read (coalesced, cached within a turn, retried after a server
    /// error), whatever `annotations.readOnlyHint` says.
    pub read: Option<bool>,
    /// Safe to repeat after a failure, whatever `annotations.idempotentHint` says.
    pub idempotent: Option<bool>,
    /// Its deadline, instead of `defaults.deadline`.
    pub deadline: Option<Duration>,
    /// Destructive (never retried after an ambiguous failure unless
    /// idempotent), whatever `annotations.destructiveHint` says.
    pub destructive: Option<bool>,
    /// Calls a third-party API (charged to the credential), whatever
    /// `annotations.openWorldHint` says; `false` sends its calls straight
    /// to the server without spending the credential.
    pub open_world: Option<bool>,
    /// Its group, costs, settles and default priority.
    pub spend: sluice::Spend,
}

impl McpConfig {
    /// `[server]` for `sluice mcp --listen ADDR`: the listener's timeouts
    /// and connection cap, and the clients' bearer token
    /// (`server.auth_token_env`, read from `env`). When `listen` is not a
    /// loopback address both the token and `[mcp] allowed_hosts` are
    /// required. `listen` wins over `server.listen`.
    pub fn listener(
        &self,
        listen: Option<std::net::SocketAddr>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<ServerSettings, ConfigError> {
        let mut settings = server::settings(&self.server, env)?;
        if let Some(listen) = listen {
            settings.listen = listen;
        }
        settings.check_exposure()?;
        let listen = settings.listen;
        if !listen.ip().is_loopback() && self.exposure.allowed_hosts.is_empty() {
            return Err(ConfigError::invalid(
                "mcp.allowed_hosts",
                format!(
                    "required to listen on {listen}, which is not a loopback address: list the Host names clients reach it by (or pass --allow-host); requests naming any other host are refused"
                ),
            ));
        }
        Ok(settings)
    }

    /// The header sent to a Streamable HTTP upstream on every request
    /// (`[mcp] upstream_secret_env`, read from `env`), or `None`.
    pub fn upstream_auth(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<UpstreamAuth>, ConfigError> {
        remote::resolve(&self.http, env)
    }

    /// Reads and checks the file at `path`. `credential` is `--credential`.
    pub fn load(path: &Path, credential: Option<&str>) -> Result<McpConfig, ConfigError> {
        McpConfig::from_toml(&load::read(path)?, credential)
    }

    /// Parses and checks a TOML document. `credential` (`--credential`)
    /// wins over `[mcp] credential`, which wins over the only credential.
    pub fn from_toml(text: &str, credential: Option<&str>) -> Result<McpConfig, ConfigError> {
        build(load::parse(text)?, credential)
    }
}

fn build(file: File, credential: Option<&str>) -> Result<McpConfig, ConfigError> {
    let mut gate = GateConfig::default().defaults(defaults(&file.defaults)?);
    for (name, credential) in &file.credentials {
        value::name(name, &format!("credentials.{name}"))?;
        gate = gate.credential(name, limits(name, credential)?);
    }
    let shared = file.shared.as_ref().map(shared::settings).transpose()?;
    shared::check_section(shared.as_ref(), &file.credentials)?;
    let telemetry = crate::telemetry::section(file.telemetry.as_ref())?;
    gate.validate()?;
    let mut tools = BTreeMap::new();
    for (name, tool) in &file.tools {
        tools.insert(name.clone(), tool_override(name, tool)?);
    }
    let mcp = file.mcp.unwrap_or_default();
    let http = remote::section(&mcp)?;
    let sessions = sessions::section(&mcp)?;
    let exposure = exposure::section(&mcp)?;
    let section = mcp;
    let credential = choose(&gate, credential, section.credential.as_deref())?;
    let deferral = match section.deferral.as_deref() {
        None | Some("result") => Deferral::Result,
        Some("error") => Deferral::Error,
        Some(other) => {
            return Err(ConfigError::invalid(
                "mcp.deferral",
                format!("{other:?} is not a deferral: use \"result\" or \"error\""),
            ));
        }
    };
    let rate_limit_patterns = patterns(section.rate_limit_patterns.as_deref().unwrap_or(&[]))?;
    let max_message_size = match section.max_message_size.as_deref() {
        None => DEFAULT_MAX_MESSAGE_SIZE,
        Some(text) => value::size(text)
            .and_then(|bytes| {
                usize::try_from(bytes)
                    .ok()
                    .filter(|bytes| *bytes <= 1 << 30)
                    .ok_or_else(|| format!("{text:?} is more than 1GiB"))
            })
            .map_err(|message| ConfigError::invalid("mcp.max_message_size", message))?,
    };
    let shutdown_grace = section
        .shutdown_grace
        .as_deref()
        .map(|text| value::duration_field(text, "mcp.shutdown_grace"))
        .transpose()?
        .unwrap_or(DEFAULT_SHUTDOWN_GRACE);
    for (name, tool) in &tools {
        if let Some(other) = &tool.credential
            && !gate.credentials.contains_key(other)
        {
            return Err(ConfigError::invalid(
                format!("tools.{name}.credential"),
                format!("names unknown credential {other:?}"),
            ));
        }
    }
    // A tool's group, costs and settles name what its credential has: the
    // engine's own check, on a gate holding just that tool.
    for (name, tool) in &tools {
        if tool.spend == sluice::Spend::default() {
            continue;
        }
        let mut check = sluice::ToolConfig::read(tool.credential.as_deref().unwrap_or(&credential));
        check.spend = tool.spend.clone();
        let single = GateConfig {
            tools: BTreeMap::from([(name.clone(), check)]),
            ..gate.clone()
        };
        single.validate()?;
    }
    let secret_envs = file
        .credentials
        .values()
        .filter_map(|credential| credential.secret_env.clone())
        .collect();
    Ok(McpConfig {
        gate,
        credential,
        tools,
        deferral,
        rate_limit_patterns,
        trust_annotations: section.trust_annotations.unwrap_or(true),
        max_message_size,
        shutdown_grace,
        http,
        sessions,
        exposure,
        shared,
        telemetry,
        server: file.server,
        secret_envs,
    })
}

/// `[mcp] rate_limit_patterns`, compiled; an error names the pattern's index.
fn patterns(texts: &[String]) -> Result<Vec<regex::Regex>, ConfigError> {
    if texts.len() > MAX_PATTERNS {
        return Err(ConfigError::invalid(
            "mcp.rate_limit_patterns",
            format!("{} patterns; at most {MAX_PATTERNS}", texts.len()),
        ));
    }
    texts
        .iter()
        .enumerate()
        .map(|(index, text)| {
            let field = format!("mcp.rate_limit_patterns[{index}]");
            if text.len() > MAX_PATTERN_LEN {
                return Err(ConfigError::invalid(
                    field,
                    format!("longer than {MAX_PATTERN_LEN} characters"),
                ));
            }
            regex::RegexBuilder::new(text)
                .size_limit(1 << 20)
                .build()
                .map_err(|error| {
                    // The regex crate's message spans lines (the pattern, a caret).
                    let message = error.to_string().replace('\n', " ");
                    ConfigError::invalid(field, format!("not a regular expression: {message}"))
                })
        })
        .collect()
}

/// `[tools.NAME]` as an MCP tool's overrides; `method` and `path` are a
/// sidecar tool's and mean nothing here.
fn tool_override(name: &str, file: &ToolFile) -> Result<ToolOverride, ConfigError> {
    let deadline = file
        .deadline
        .as_deref()
        .map(|text| value::duration_field(text, &format!("tools.{name}.deadline")))
        .transpose()?;
    Ok(ToolOverride {
        credential: file.credential.clone(),
        read: file.read,
        idempotent: file.idempotent,
        deadline,
        destructive: file.destructive,
        open_world: file.open_world,
        spend: crate::limits::spend(name, file)?,
    })
}

/// The credential the proxy's tools spend.
fn choose(
    gate: &GateConfig,
    flag: Option<&str>,
    section: Option<&str>,
) -> Result<String, ConfigError> {
    let known = || {
        let names: Vec<&str> = gate.credentials.keys().map(String::as_str).collect();
        if names.is_empty() {
            "none is configured".to_owned()
        } else {
            format!("configured: {}", names.join(", "))
        }
    };
    let (field, name) = match (flag, section) {
        (Some(name), _) => ("--credential", name),
        (None, Some(name)) => ("mcp.credential", name),
        (None, None) => {
            let mut names = gate.credentials.keys();
            return match (names.next(), names.next()) {
                (Some(only), None) => Ok(only.clone()),
                (None, _) => Err(ConfigError::invalid(
                    "credentials",
                    "sluice mcp needs a credential: add [credentials.NAME] with the limits of the API behind the MCP server",
                )),
                (Some(_), Some(_)) => Err(ConfigError::invalid(
                    "mcp.credential",
                    format!(
                        "several credentials are configured ({}): choose the one the MCP server's tools spend with --credential NAME or [mcp] credential = \"NAME\"",
                        gate.credentials
                            .keys()
                            .cloned()
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )),
            };
        }
    };
    if gate.credentials.contains_key(name) {
        Ok(name.to_owned())
    } else {
        Err(ConfigError::invalid(
            field,
            format!("names unknown credential {name:?} ({})", known()),
        ))
    }
}

#[cfg(test)]
mod tests;
