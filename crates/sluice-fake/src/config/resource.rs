//! Where limits apply: resources (parts of the API chosen by path prefix, with names fit for headers) and per-key overrides.

use super::error::ConfigError;
use super::limits::Limits;

/// A scope of the API with its own limits: requests whose path starts with `path_prefix`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resource {
    /// The scope's name, shown by the header styles (GitHub's `search`, an IETF policy name).
    pub name: String,
    /// Requests whose path (without the query) starts with this belong to the resource.
    pub path_prefix: String,
    /// The limits, applied to each key separately.
    pub limits: Limits,
    /// A group inside the default resource: its requests spend the default resource's
    /// limits too, all or nothing (sluice's `[credentials.X.groups.G]`). Otherwise the
    /// resource is independent of the default one (GitHub's `search` beside `core`).
    pub nested: bool,
}

impl Resource {
    /// A resource `name` for paths starting with `path_prefix`, limited by `limits`.
    pub fn new(name: impl Into<String>, path_prefix: impl Into<String>, limits: Limits) -> Self {
        Resource {
            name: name.into(),
            path_prefix: path_prefix.into(),
            limits,
            nested: false,
        }
    }

    /// Makes it a group inside the default resource: its requests spend both.
    pub fn nested(mut self) -> Self {
        self.nested = true;
        self
    }
}

/// Limits that replace the configured ones for one key on one resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyLimits {
    /// The key (`Authorization` or `x-api-key` value, or `anonymous`).
    pub key: String,
    /// The resource name; `None` is the default resource.
    pub resource: Option<String>,
    /// The limits for this key on that resource.
    pub limits: Limits,
}

/// Resource names appear inside header values and IETF structured-field strings, so they
/// keep to characters that need no escaping anywhere.
pub(super) fn check_name(name: &str, field: &str) -> Result<(), ConfigError> {
    let fits = !name.is_empty()
        && name
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.'));
    if fits {
        return Ok(());
    }
    Err(ConfigError::Resource {
        field: field.to_owned(),
        reason: format!("{name:?} must be non-empty ASCII letters, digits, '-', '_' or '.'"),
    })
}
