//! The file as a program embedding the engine reads it (the Python
//! package): the sidecar's schema, with a credential's destination optional
//! for credentials whose requests the program sends itself.

use std::collections::BTreeMap;
use std::time::Duration;

use sluice::GateConfig;

use crate::defaults::defaults;
use crate::error::ConfigError;
use crate::file::File;
use crate::limits::limits;
use crate::secret::Env;
use crate::shared::{self, SharedSettings};
use crate::tool::{ToolSpec, sidecar_tool};
use crate::upstream::{Upstream, upstream};
use crate::{load, value};

/// `defaults.window_margin` when the file does not set it, instead of the
/// engine's 20 ms. An embedding program's executor starts a request after
/// the engine gave it its slot (Python: as an asyncio task, on the loop's
/// next turn), so arrivals lag slots by more, and more unevenly: with 20 ms,
/// `python/bench/compare.py` on a loaded 2-core machine saw 11 to 14 starts
/// in a rolling second at `10/1s`; with 50 ms, none over 10. The engine caps
/// it at a tenth of each window.
pub const EMBEDDED_WINDOW_MARGIN: Duration = Duration::from_millis(50);

/// The configuration of an engine embedded in another program: build it
/// with [`EmbeddedConfig::from_toml`] or [`EmbeddedConfig::from_json`].
///
/// It reads the same schema as [`SidecarConfig`](crate::SidecarConfig),
/// with the same fields and messages, and differs in one rule: a
/// credential needs a `base_url` only when something sends HTTP on it for
/// the engine, that is when a `[tools.NAME]` entry names it. A credential
/// the program spends by itself (its own functions, its own HTTP client)
/// is just limits. `[server]` and `[mcp]` belong to the commands and are
/// checked for shape only. `defaults.window_margin` defaults to
/// [`EMBEDDED_WINDOW_MARGIN`]. `Debug` never shows a secret.
///
/// ```
/// use sluice_config::EmbeddedConfig;
/// let toml = r#"
///     [credentials.support]
///     base_url = "http://127.0.0.1:9000"
///     rate = "10/1s"
///
///     [credentials.billing]
///     rate = "5/1s"
///
///     [tools.search_tickets]
///     credential = "support"
///     path = "/api/v2/search.json?query={query}"
/// "#;
/// let config = EmbeddedConfig::from_toml(toml, |_| None).unwrap();
/// assert!(config.credentials.contains_key("support"));
/// assert!(!config.credentials.contains_key("billing"));
/// assert!(config.gate.credentials.contains_key("billing"));
///
/// let error = EmbeddedConfig::from_toml(&toml.replace("\"support\"\n", "\"billing\"\n"), |_| None)
///     .unwrap_err();
/// assert_eq!(error.field(), Some("tools.search_tickets.credential"));
/// ```
#[derive(Debug, Clone)]
pub struct EmbeddedConfig {
    /// The engine's view: defaults, credentials' limits, tools' routes.
    pub gate: GateConfig,
    /// The credentials that have a `base_url`: where their requests go and
    /// how they are signed.
    pub credentials: BTreeMap<String, Upstream>,
    /// How each configured tool becomes a request.
    pub tools: BTreeMap<String, ToolSpec>,
    /// `[shared]`, if present.
    pub shared: Option<SharedSettings>,
    /// `[telemetry]`; [`Telemetry::resolve`](crate::Telemetry::resolve) adds the `OTEL_*` variables.
    pub telemetry: crate::Telemetry,
}

impl EmbeddedConfig {
    /// Parses and checks a TOML document; `env` looks up environment
    /// variables (secrets). The error names the field.
    pub fn from_toml(
        text: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<EmbeddedConfig, ConfigError> {
        build(load::parse(text)?, &env)
    }

    /// Checks a document of the same schema given as a JSON value (a
    /// Python `dict`, say): durations as text (`"30s"`), numbers as numbers.
    pub fn from_json(
        value: serde_json::Value,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<EmbeddedConfig, ConfigError> {
        build(load::parse_value(value)?, &env)
    }
}

fn build(file: File, env: Env<'_>) -> Result<EmbeddedConfig, ConfigError> {
    let mut engine_defaults = defaults(&file.defaults)?;
    if file.defaults.window_margin.is_none() {
        engine_defaults.window_margin = EMBEDDED_WINDOW_MARGIN;
    }
    let mut gate = GateConfig::default().defaults(engine_defaults);
    let mut credentials = BTreeMap::new();
    for (name, credential) in &file.credentials {
        value::name(name, &format!("credentials.{name}"))?;
        gate = gate.credential(name, limits(name, credential)?);
        if credential.base_url.is_some() {
            credentials.insert(name.clone(), upstream(name, credential, env)?);
        } else if let Some(signing) = [
            ("secret_env", credential.secret_env.is_some()),
            ("auth_header", credential.auth_header.is_some()),
            ("auth_prefix", credential.auth_prefix.is_some()),
        ]
        .into_iter()
        .find_map(|(field, set)| set.then_some(field))
        {
            return Err(ConfigError::invalid(
                format!("credentials.{name}.{signing}"),
                "signs requests to a base_url, and this credential has none",
            ));
        }
    }
    let mut tools = BTreeMap::new();
    for (name, tool) in &file.tools {
        value::name(name, &format!("tools.{name}"))?;
        if let Some(credential) = &tool.credential
            && file.credentials.contains_key(credential)
            && !credentials.contains_key(credential)
        {
            return Err(ConfigError::invalid(
                format!("tools.{name}.credential"),
                format!(
                    "names {credential:?}, which has no base_url: a configured tool is a request on its credential's base_url"
                ),
            ));
        }
        let (route, spec) = sidecar_tool(name, tool, &credentials)?;
        gate = gate.tool(name, route);
        tools.insert(name.clone(), spec);
    }
    let shared = file.shared.as_ref().map(shared::settings).transpose()?;
    shared::check_section(shared.as_ref(), &file.credentials)?;
    let telemetry = crate::telemetry::section(file.telemetry.as_ref())?;
    // The engine checks what it owns (limits, defaults); its errors name the same fields.
    gate.validate()?;
    Ok(EmbeddedConfig {
        gate,
        credentials,
        tools,
        shared,
        telemetry,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn refused(value: serde_json::Value, field: &str) -> String {
        let error = EmbeddedConfig::from_json(value, |_| None).unwrap_err();
        assert_eq!(error.field(), Some(field), "{error}");
        error.to_string()
    }

    #[test]
    fn json_reads_the_same_schema_as_toml() {
        let toml = r#"
            [defaults]
            deadline = "20s"
            [credentials.support]
            base_url = "http://127.0.0.1:9000"
            rate = "10/1s"
            max_in_flight = 4
            [tools.search]
            credential = "support"
            path = "/search?q={q}"
        "#;
        let value = json!({
            "defaults": {"deadline": "20s"},
            "credentials": {"support": {"base_url": "http://127.0.0.1:9000", "rate": "10/1s", "max_in_flight": 4}},
            "tools": {"search": {"credential": "support", "path": "/search?q={q}"}},
        });
        let from_toml = EmbeddedConfig::from_toml(toml, |_| None).unwrap();
        let from_json = EmbeddedConfig::from_json(value, |_| None).unwrap();
        assert_eq!(from_toml.gate, from_json.gate);
        assert_eq!(from_toml.tools, from_json.tools);
    }

    #[test]
    fn errors_name_the_field() {
        let message = refused(
            json!({"credentials": {"support": {"rate": "0/1s"}}}),
            "credentials.support.rate",
        );
        assert!(
            message.starts_with("credentials.support.rate: "),
            "{message}"
        );
        refused(
            json!({"credentials": {"support": {"rate": "1/1s", "colour": "red"}}}),
            "credentials.support.colour",
        );
        refused(
            json!({"credentials": {"support": {"max_in_flight": "many"}}}),
            "credentials.support.max_in_flight",
        );
        refused(
            json!({"credentials": {"billing": {"secret_env": "KEY"}}}),
            "credentials.billing.secret_env",
        );
        refused(
            json!({"credentials": {"billing": {}}, "tools": {"t": {"credential": "billing", "path": "/x"}}}),
            "tools.t.credential",
        );
        refused(
            json!({"tools": {"t": {"credential": "nobody", "path": "/x"}}}),
            "tools.t.credential",
        );
        refused(
            json!({"credentials": {"billing": {"shared": true}}}),
            "credentials.billing.shared",
        );
    }

    #[test]
    fn the_window_margin_defaults_to_the_embedded_one_unless_set() {
        let unset = EmbeddedConfig::from_json(json!({}), |_| None).unwrap();
        assert_eq!(unset.gate.defaults.window_margin, EMBEDDED_WINDOW_MARGIN);
        let set =
            EmbeddedConfig::from_json(json!({"defaults": {"window_margin": "0ms"}}), |_| None)
                .unwrap();
        assert_eq!(set.gate.defaults.window_margin, Duration::ZERO);
    }

    #[test]
    fn a_bare_credential_needs_no_destination() {
        let config =
            EmbeddedConfig::from_json(json!({"credentials": {"openai": {"rate": "3/1s"}}}), |_| {
                None
            })
            .unwrap();
        assert!(config.credentials.is_empty());
        assert!(config.gate.credentials["openai"].rate.is_some());
    }
}
