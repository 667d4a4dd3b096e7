//! The one error a configuration can fail with: which field, and what is wrong with it.

/// A configuration value that cannot work, and the field that holds it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ConfigError {
    /// The field's dotted path, e.g. `credentials.support.rate`.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl ConfigError {
    /// An error about `field`.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError {
            field: field.into(),
            message: message.into(),
        }
    }
}
