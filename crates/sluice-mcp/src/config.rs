//! What `sluice mcp` reads from `sluice.toml`: the engine's limits, the
//! credential the upstream server's tools spend, and per-tool overrides.
//!
//! The file is the sidecar's, read through a narrower view, so that one
//! file can serve both and every limit means the same in both:
//!
//! - `[defaults]`, the limits of `[credentials.*]` and `[shared]` are
//!   checked by the sidecar's own parser ([`sluice_server::Config`]), with
//!   the same fields and messages;
//! - a credential's signing fields (`base_url`, `secret_env`, `auth_header`,
//!   `auth_prefix`) and `[server]` are the sidecar's business: the proxy
//!   never sends HTTP, so they are optional here and ignored, and no secret
//!   has to be set to run it. (The sidecar requires `base_url`; rather than
//!   change that rule, the view hands its parser a placeholder destination
//!   under the reserved `.invalid` domain, which nothing ever contacts, and
//!   keeps only the engine's part of the result.)
//! - `[tools.NAME]` is read here: an MCP tool has no `method` or `path`
//!   (a sidecar tool's are accepted and ignored);
//! - `[mcp]` is only ours: `credential = "NAME"`.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use sluice::GateConfig;
use sluice_server::ConfigError;
use toml::{Table, Value};

/// The sections a file may have: the sidecar's and `[mcp]`.
const SECTIONS: [&str; 6] = [
    "server",
    "defaults",
    "credentials",
    "tools",
    "shared",
    "mcp",
];
/// Credential fields that say where and how the sidecar sends HTTP requests.
const SIGNING: [&str; 4] = ["base_url", "secret_env", "auth_header", "auth_prefix"];
/// The destination the sidecar's parser is given for every credential: a
/// name under `.invalid` (RFC 2606), which never resolves. Never contacted.
const NOWHERE: &str = "http://sluice-mcp.invalid/";

/// The proxy's configuration: build it with [`McpConfig::from_toml`] or [`McpConfig::load`].
///
/// ```
/// use sluice_mcp::McpConfig;
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
}

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
}

impl McpConfig {
    /// Reads and checks the file at `path`. `credential` is `--credential`.
    pub fn load(path: &Path, credential: Option<&str>) -> Result<McpConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        McpConfig::from_toml(&text, credential)
    }

    /// Parses and checks a TOML document. `credential` (`--credential`)
    /// wins over `[mcp] credential`, which wins over the only credential.
    pub fn from_toml(text: &str, credential: Option<&str>) -> Result<McpConfig, ConfigError> {
        let mut table: Table = text.parse().map_err(|error| syntax(text, &error))?;
        if let Some(unknown) = table.keys().find(|key| !SECTIONS.contains(&key.as_str())) {
            return Err(ConfigError::invalid(
                unknown.clone(),
                format!("unknown section; expected one of {}", SECTIONS.join(", ")),
            ));
        }
        let mcp = table.remove("mcp").map(mcp_section).transpose()?;
        let tools = table.remove("tools").map(tools_section).transpose()?;
        table.remove("server");
        let mut shared = Vec::new();
        if let Some(Value::Table(credentials)) = table.get_mut("credentials") {
            for (name, entry) in credentials.iter_mut() {
                if let Value::Table(entry) = entry {
                    for field in SIGNING {
                        entry.remove(field);
                    }
                    entry.insert("base_url".to_owned(), Value::String(NOWHERE.to_owned()));
                    if entry.get("shared").and_then(Value::as_bool) == Some(true) {
                        shared.push(name.clone());
                    }
                }
            }
        }
        // The sidecar's parser checks the rest, naming the same fields.
        let view = toml::to_string(&table).map_err(|error| ConfigError::Syntax {
            message: error.to_string(),
        })?;
        let gate = sluice_server::Config::from_toml(&view, |_| None)?.gate;
        if let Some(name) = shared.first() {
            return Err(ConfigError::invalid(
                format!("credentials.{name}.shared"),
                "shared budgets need the Redis backend, which is not wired into sluice mcp yet; set shared = false",
            ));
        }
        let credential = choose(&gate, credential, mcp.flatten().as_deref())?;
        let tools = tools.unwrap_or_default();
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
        Ok(McpConfig {
            gate,
            credential,
            tools,
        })
    }
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

/// `[mcp]`: `credential = "NAME"`.
fn mcp_section(value: Value) -> Result<Option<String>, ConfigError> {
    let Value::Table(table) = value else {
        return Err(ConfigError::invalid("mcp", "must be a table"));
    };
    let mut credential = None;
    for (key, value) in table {
        match (key.as_str(), value) {
            ("credential", Value::String(name)) => credential = Some(name),
            ("credential", _) => {
                return Err(ConfigError::invalid("mcp.credential", "must be a string"));
            }
            (other, _) => {
                return Err(ConfigError::invalid(
                    format!("mcp.{other}"),
                    "unknown field; expected credential",
                ));
            }
        }
    }
    Ok(credential)
}

/// `[tools.NAME]`: credential, read, idempotent, deadline; a sidecar tool's
/// `method` and `path` are accepted and mean nothing to an MCP tool.
fn tools_section(value: Value) -> Result<BTreeMap<String, ToolOverride>, ConfigError> {
    let Value::Table(tools) = value else {
        return Err(ConfigError::invalid("tools", "must be a table"));
    };
    let mut overrides = BTreeMap::new();
    for (name, entry) in tools {
        let Value::Table(entry) = entry else {
            return Err(ConfigError::invalid(
                format!("tools.{name}"),
                "must be a table",
            ));
        };
        let mut tool = ToolOverride::default();
        for (key, value) in entry {
            let field = format!("tools.{name}.{key}");
            match (key.as_str(), value) {
                ("credential", Value::String(credential)) => tool.credential = Some(credential),
                ("read", Value::Boolean(read)) => tool.read = Some(read),
                ("idempotent", Value::Boolean(idempotent)) => tool.idempotent = Some(idempotent),
                ("deadline", Value::String(text)) => tool.deadline = Some(duration(&text, &field)?),
                ("method" | "path", _) => {}
                ("credential" | "deadline", _) => {
                    return Err(ConfigError::invalid(field, "must be a string"));
                }
                ("read" | "idempotent", _) => {
                    return Err(ConfigError::invalid(field, "must be true or false"));
                }
                _ => {
                    return Err(ConfigError::invalid(
                        field,
                        "unknown field; expected credential, read, idempotent or deadline",
                    ));
                }
            }
        }
        overrides.insert(name, tool);
    }
    Ok(overrides)
}

/// A positive duration such as `30s`, `500ms` or `1m 30s` (the sidecar's rule).
fn duration(text: &str, field: &str) -> Result<Duration, ConfigError> {
    match humantime::parse_duration(text.trim()) {
        Ok(parsed) if !parsed.is_zero() => Ok(parsed),
        Ok(_) => Err(ConfigError::invalid(
            field,
            format!("{text:?} must be longer than zero"),
        )),
        Err(_) => Err(ConfigError::invalid(
            field,
            format!("{text:?} is not a duration such as \"30s\", \"500ms\" or \"5m\""),
        )),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(text: &str, credential: Option<&str>, field: &str) -> String {
        let error = McpConfig::from_toml(text, credential).unwrap_err();
        assert_eq!(error.field(), Some(field), "{error}");
        error.to_string()
    }

    const TWO: &str = r#"
        [credentials.search]
        rate = "5/1s"
        [credentials.github]
        base_url = "https://api.github.com"
        secret_env = "GITHUB_TOKEN_NOT_SET_HERE"
        rate = "10/1s"
    "#;

    #[test]
    fn the_credential_is_the_flag_then_the_section_then_the_only_one() {
        let only = McpConfig::from_toml("[credentials.a]\nrate = \"1/1s\"", None).unwrap();
        assert_eq!(only.credential, "a");

        let message = refused(TWO, None, "mcp.credential");
        assert!(message.contains("github, search"), "{message}");

        let flagged = McpConfig::from_toml(TWO, Some("search")).unwrap();
        assert_eq!(flagged.credential, "search");
        let sectioned =
            McpConfig::from_toml(&format!("[mcp]\ncredential = \"github\"\n{TWO}"), None).unwrap();
        assert_eq!(sectioned.credential, "github");
        let both = McpConfig::from_toml(
            &format!("[mcp]\ncredential = \"github\"\n{TWO}"),
            Some("search"),
        )
        .unwrap();
        assert_eq!(both.credential, "search");

        let message = refused(TWO, Some("nope"), "--credential");
        assert!(message.contains("configured: github, search"), "{message}");
        refused(
            &format!("[mcp]\ncredential = \"nope\"\n{TWO}"),
            None,
            "mcp.credential",
        );
        refused("", None, "credentials");
    }

    #[test]
    fn a_credential_needs_no_base_url() {
        let config = McpConfig::from_toml("[credentials.mcp_only]\nrate = \"2/1s\"", None).unwrap();
        assert_eq!(config.credential, "mcp_only");
        assert_eq!(
            config.gate.credentials["mcp_only"]
                .rate
                .map(|r| r.to_string()),
            Some("2/1s".to_owned())
        );
    }

    #[test]
    fn the_sidecars_signing_fields_and_secrets_are_not_needed() {
        // GITHUB_TOKEN_NOT_SET_HERE is not set: the sidecar would refuse to start.
        let config = McpConfig::from_toml(TWO, Some("github")).unwrap();
        assert_eq!(
            config.gate.credentials["github"]
                .rate
                .map(|r| r.to_string()),
            Some("10/1s".to_owned())
        );
        let with_server = format!("[server]\nlisten = \"0.0.0.0:1\"\n{TWO}");
        assert!(McpConfig::from_toml(&with_server, Some("search")).is_ok());
    }

    #[test]
    fn limits_are_checked_by_the_sidecars_rules() {
        refused(
            "[credentials.a]\nrate = \"0/1s\"",
            None,
            "credentials.a.rate",
        );
        refused("[credentials.a]\nrat = \"1/1s\"", None, "credentials.a.rat");
        refused(
            "[defaults]\ndeadline = \"0s\"\n[credentials.a]",
            None,
            "defaults.deadline",
        );
        refused(
            "[credentials.a]\nshared = true\n[shared]\nredis_url = \"redis://x\"",
            None,
            "credentials.a.shared",
        );
        refused("[credentials.a]\n[extra]\nx = 1", None, "extra");
        let error = McpConfig::from_toml("[credentials.a\n", None).unwrap_err();
        assert!(error.to_string().contains("line 1"), "{error}");
    }

    #[test]
    fn tool_overrides() {
        let text = r#"
            [credentials.a]
            [credentials.b]
            [mcp]
            credential = "a"
            [tools.search]
            read = true
            idempotent = true
            deadline = "20s"
            [tools.write_it]
            credential = "b"
            read = false
            [tools.from_the_sidecar]
            credential = "a"
            method = "GET"
            path = "/x"
        "#;
        let config = McpConfig::from_toml(text, None).unwrap();
        assert_eq!(
            config.tools["search"],
            ToolOverride {
                credential: None,
                read: Some(true),
                idempotent: Some(true),
                deadline: Some(Duration::from_secs(20)),
            }
        );
        assert_eq!(config.tools["write_it"].credential.as_deref(), Some("b"));
        assert!(config.tools.contains_key("from_the_sidecar"));

        refused(
            "[credentials.a]\n[tools.t]\ncredential = \"z\"",
            None,
            "tools.t.credential",
        );
        refused(
            "[credentials.a]\n[tools.t]\ndeadline = \"0s\"",
            None,
            "tools.t.deadline",
        );
        refused(
            "[credentials.a]\n[tools.t]\nread = \"yes\"",
            None,
            "tools.t.read",
        );
        refused(
            "[credentials.a]\n[tools.t]\nreed = true",
            None,
            "tools.t.reed",
        );
        refused(
            "[credentials.a]\n[mcp]\ncredentials = \"a\"",
            None,
            "mcp.credentials",
        );
    }
}
