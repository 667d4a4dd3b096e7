//! Why a configuration cannot be used: the file, its syntax, or one field's value.

use std::path::PathBuf;

/// A configuration that cannot be used, by `sluice serve` or `sluice mcp`.
/// Every variant but `Read` and `Syntax` names the field at fault, e.g. `credentials.support.rate`; none ever
/// contains a secret's value.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML.
    #[error("invalid TOML: {message}")]
    Syntax {
        /// The parser's message, with line and column.
        message: String,
    },
    /// A field is unknown, of the wrong type, or holds a value that cannot work.
    #[error("{field}: {message}")]
    Invalid {
        /// The field's dotted path, e.g. `credentials.support.rate`.
        field: String,
        /// What is wrong with it.
        message: String,
    },
}

impl ConfigError {
    /// An error about `field`.
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError::Invalid {
            field: field.into(),
            message: message.into(),
        }
    }

    /// The dotted path of the field at fault, when there is one.
    pub fn field(&self) -> Option<&str> {
        match self {
            ConfigError::Invalid { field, .. } => Some(field),
            _ => None,
        }
    }
}

impl From<sluice::ConfigError> for ConfigError {
    fn from(error: sluice::ConfigError) -> Self {
        ConfigError::Invalid {
            field: error.field,
            message: error.message,
        }
    }
}
