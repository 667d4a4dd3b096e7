//! The configuration file as written: one schema for every command that
//! reads `sluice.toml`, TOML sections with unknown fields refused.
//!
//! Values that need parsing (durations, sizes, rates, URLs) stay text here,
//! and a field only one command needs is optional: each view (`sidecar.rs`
//! for `sluice serve`, `mcp.rs` for `sluice mcp`) requires what it needs and
//! turns the text into typed values with errors that name the field.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

/// The whole file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct File {
    #[serde(default)]
    pub(crate) server: ServerFile,
    #[serde(default)]
    pub(crate) defaults: DefaultsFile,
    #[serde(default)]
    pub(crate) credentials: BTreeMap<String, CredentialFile>,
    #[serde(default)]
    pub(crate) tools: BTreeMap<String, ToolFile>,
    pub(crate) shared: Option<SharedFile>,
    pub(crate) mcp: Option<McpFile>,
    pub(crate) telemetry: Option<TelemetryFile>,
}

/// `[server]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ServerFile {
    pub(crate) listen: Option<String>,
    #[serde(default, deserialize_with = "size_text")]
    pub(crate) max_body: Option<String>,
    pub(crate) auth_token_env: Option<String>,
    pub(crate) header_read_timeout: Option<String>,
    pub(crate) idle_timeout: Option<String>,
    pub(crate) max_connections: Option<u32>,
    pub(crate) workers: Option<u32>,
}

/// `[defaults]`: every engine default, all optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DefaultsFile {
    pub(crate) deadline: Option<String>,
    pub(crate) inline_wait: Option<String>,
    pub(crate) turn_cache_ttl: Option<String>,
    pub(crate) quota_after: Option<String>,
    pub(crate) turn_budget: Option<u32>,
    pub(crate) max_attempts: Option<u32>,
    pub(crate) backoff_base: Option<String>,
    pub(crate) backoff_cap: Option<String>,
    pub(crate) retry_ratio: Option<f64>,
    pub(crate) retry_floor: Option<u32>,
    pub(crate) retry_window: Option<String>,
    pub(crate) expected_latency: Option<String>,
    pub(crate) window_margin: Option<String>,
    pub(crate) scope_idle: Option<String>,
}

/// `[credentials.NAME]`: where and how the sidecar signs its requests
/// (`base_url`, `secret_env`, `auth_header`, `auth_prefix`: `sluice mcp`
/// sends no HTTP and ignores them), then the engine's limits.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CredentialFile {
    pub(crate) base_url: Option<String>,
    pub(crate) secret_env: Option<String>,
    pub(crate) auth_header: Option<String>,
    pub(crate) auth_prefix: Option<String>,
    pub(crate) rate: Option<RateText>,
    pub(crate) burst: Option<u32>,
    #[serde(default, deserialize_with = "number_or_text")]
    pub(crate) max_in_flight: Option<NumberOrText>,
    pub(crate) queue: Option<u32>,
    pub(crate) expected_latency: Option<String>,
    /// `[credentials.NAME.groups.G]`: limits inside the credential.
    #[serde(default)]
    pub(crate) groups: BTreeMap<String, GroupFile>,
    /// `[credentials.NAME.units.U]`: currencies besides requests.
    #[serde(default)]
    pub(crate) units: BTreeMap<String, UnitFile>,
    /// `[credentials.NAME.priorities]`.
    pub(crate) priorities: Option<PrioritiesFile>,
    pub(crate) learn: Option<bool>,
    pub(crate) policy_window: Option<String>,
    #[serde(default, deserialize_with = "number_or_text")]
    pub(crate) reserve: Option<NumberOrText>,
    #[serde(default)]
    pub(crate) shared: bool,
    /// `false`: shadow mode, decisions recorded and none enforced.
    pub(crate) enforce: Option<bool>,
    /// `"errors"` (default) or `"graphql"`: which bodies are read for signals.
    pub(crate) body_signals: Option<String>,
}

/// `[tools.NAME]`: a sidecar tool needs `credential` and `path`; for an
/// MCP tool every field is an override and `method` and `path` mean nothing.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ToolFile {
    pub(crate) credential: Option<String>,
    pub(crate) method: Option<String>,
    pub(crate) path: Option<String>,
    pub(crate) read: Option<bool>,
    pub(crate) idempotent: Option<bool>,
    pub(crate) deadline: Option<String>,
    /// MCP only: overrides `annotations.destructiveHint`.
    pub(crate) destructive: Option<bool>,
    /// MCP only: overrides `annotations.openWorldHint`.
    pub(crate) open_world: Option<bool>,
    /// The credential's group its calls also spend.
    pub(crate) group: Option<String>,
    /// Per call, by unit: a whole number or `"{arg}"`.
    #[serde(default)]
    pub(crate) cost: BTreeMap<String, CostText>,
    /// Where the true cost is read, by unit: `"/json/pointer"` or `"header:NAME"`.
    #[serde(default)]
    pub(crate) settle: BTreeMap<String, String>,
    /// `"high"`, `"normal"` or `"low"`.
    pub(crate) priority: Option<String>,
}

/// `rate = "10/1s"` or `rate = ["15/1s", "5000/1h"]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub(crate) enum RateText {
    One(String),
    Many(Vec<String>),
}

/// A cost: a whole number or `"{arg}"`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub(crate) enum CostText {
    Number(i64),
    Text(String),
}

/// `[credentials.NAME.groups.G]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GroupFile {
    pub(crate) rate: Option<RateText>,
    pub(crate) burst: Option<u32>,
    pub(crate) max_in_flight: Option<u32>,
    pub(crate) queue: Option<u32>,
}

/// `[credentials.NAME.units.U]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct UnitFile {
    pub(crate) rate: Option<RateText>,
    pub(crate) burst: Option<u32>,
}

/// `[credentials.NAME.priorities]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PrioritiesFile {
    /// The share of every window low-priority calls may start: `"50%"`.
    pub(crate) low: Option<String>,
}

/// `[shared]`: where shared budgets live (the Redis backend).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SharedFile {
    pub(crate) redis_url: Option<String>,
    pub(crate) redis_urls: Option<Vec<String>>,
    pub(crate) timeout: Option<String>,
    pub(crate) fallback_share: Option<f64>,
    pub(crate) tls_ca_file: Option<String>,
}

/// `[telemetry]`: where OpenTelemetry spans go (`telemetry.rs`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TelemetryFile {
    pub(crate) endpoint: Option<String>,
    pub(crate) traces_endpoint: Option<String>,
    pub(crate) service_name: Option<String>,
    pub(crate) sampler: Option<String>,
    pub(crate) sampler_ratio: Option<f64>,
}

/// `[mcp]`: only `sluice mcp` reads it.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct McpFile {
    pub(crate) credential: Option<String>,
    pub(crate) deferral: Option<String>,
    pub(crate) rate_limit_patterns: Option<Vec<String>>,
    pub(crate) trust_annotations: Option<bool>,
    pub(crate) max_message_size: Option<String>,
    pub(crate) shutdown_grace: Option<String>,
    pub(crate) session_idle: Option<String>,
    pub(crate) max_sessions: Option<i64>,
    pub(crate) session_queue: Option<i64>,
    pub(crate) allowed_hosts: Option<Vec<String>>,
    pub(crate) allowed_origins: Option<Vec<String>>,
    pub(crate) upstream_secret_env: Option<String>,
    pub(crate) upstream_auth_header: Option<String>,
    pub(crate) upstream_auth_prefix: Option<String>,
    pub(crate) forward_authorization: Option<bool>,
}

/// A field that takes a whole number or a word: `max_in_flight = 4` or
/// `"auto"`, `reserve = 3` or `"10%"`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum NumberOrText {
    Number(i64),
    Text(String),
}

fn number_or_text<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<NumberOrText>, D::Error> {
    struct NumberOrTextVisitor;

    impl Visitor<'_> for NumberOrTextVisitor {
        type Value = Option<NumberOrText>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a whole number or a string")
        }

        fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
            Ok(Some(NumberOrText::Text(text.to_owned())))
        }

        fn visit_i64<E: de::Error>(self, number: i64) -> Result<Self::Value, E> {
            Ok(Some(NumberOrText::Number(number)))
        }

        fn visit_u64<E: de::Error>(self, number: u64) -> Result<Self::Value, E> {
            let number = i64::try_from(number).map_err(|_| E::custom("the number is too large"))?;
            Ok(Some(NumberOrText::Number(number)))
        }
    }

    deserializer.deserialize_any(NumberOrTextVisitor)
}

/// A size as text (`"1MiB"`) or as a whole number of bytes.
fn size_text<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    struct SizeVisitor;

    impl Visitor<'_> for SizeVisitor {
        type Value = Option<String>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a size such as \"1MiB\" or a number of bytes")
        }

        fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
            Ok(Some(text.to_owned()))
        }

        fn visit_i64<E: de::Error>(self, bytes: i64) -> Result<Self::Value, E> {
            Ok(Some(bytes.to_string()))
        }

        fn visit_u64<E: de::Error>(self, bytes: u64) -> Result<Self::Value, E> {
            Ok(Some(bytes.to_string()))
        }
    }

    deserializer.deserialize_any(SizeVisitor)
}
