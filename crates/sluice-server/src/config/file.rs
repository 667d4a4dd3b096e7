//! The configuration file as written: TOML sections with unknown fields refused.
//!
//! Values that need parsing (durations, sizes, rates, URLs) stay text here;
//! `validate` turns them into typed values with errors that name the field.

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
}

/// `[server]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ServerFile {
    pub(crate) listen: Option<String>,
    #[serde(default, deserialize_with = "size_text")]
    pub(crate) max_body: Option<String>,
    pub(crate) auth_token_env: Option<String>,
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

/// `[credentials.NAME]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CredentialFile {
    pub(crate) base_url: String,
    pub(crate) secret_env: Option<String>,
    pub(crate) auth_header: Option<String>,
    pub(crate) auth_prefix: Option<String>,
    pub(crate) rate: Option<String>,
    pub(crate) burst: Option<u32>,
    #[serde(default, deserialize_with = "number_or_text")]
    pub(crate) max_in_flight: Option<NumberOrText>,
    pub(crate) queue: Option<u32>,
    pub(crate) expected_latency: Option<String>,
    pub(crate) learn: Option<bool>,
    pub(crate) policy_window: Option<String>,
    #[serde(default, deserialize_with = "number_or_text")]
    pub(crate) reserve: Option<NumberOrText>,
    #[serde(default)]
    pub(crate) shared: bool,
}

/// `[tools.NAME]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ToolFile {
    pub(crate) credential: String,
    pub(crate) method: Option<String>,
    pub(crate) path: String,
    pub(crate) read: Option<bool>,
    pub(crate) idempotent: Option<bool>,
    pub(crate) deadline: Option<String>,
}

/// `[shared]`: where shared budgets live (the Redis backend).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SharedFile {
    pub(crate) redis_url: Option<String>,
    pub(crate) redis_urls: Option<Vec<String>>,
    pub(crate) timeout: Option<String>,
    pub(crate) fallback_share: Option<f64>,
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
