//! From text to the file as written: reading it, and the one formatter of
//! TOML and schema errors (line and column, or the field at fault).

use std::path::Path;

use crate::error::ConfigError;
use crate::file::File;

/// The text of the file at `path`.
pub(crate) fn read(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })
}

/// Parses a TOML document against the schema. A structural error (an
/// unknown field, a wrong type) names its field.
pub(crate) fn parse(text: &str) -> Result<File, ConfigError> {
    let deserializer = toml::Deserializer::parse(text).map_err(|error| syntax(text, &error))?;
    serde_path_to_error::deserialize(deserializer).map_err(|error| {
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
    })
}

/// Checks a document given as a JSON value against the same schema; an
/// error names its field, as for TOML.
pub(crate) fn parse_value(value: serde_json::Value) -> Result<File, ConfigError> {
    serde_path_to_error::deserialize(value).map_err(|error| {
        let field = error.path().to_string();
        let inner = error.into_inner();
        let message = if field.starts_with("shared.") && inner.to_string().starts_with("invalid ") {
            "has the wrong type (the value is not shown)".to_owned()
        } else {
            inner.to_string()
        };
        if field == "." {
            return ConfigError::Syntax { message };
        }
        ConfigError::invalid(field, message)
    })
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
