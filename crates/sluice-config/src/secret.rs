//! Secrets read from the environment, held in a type that never prints them.

use std::fmt;

use crate::error::ConfigError;

/// How a view looks up environment variables: the process's, or a test's.
pub(crate) type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// A credential's key, the sidecar's bearer token, or a URL that may carry a
/// password. `Debug` and `Display` print `***`; only [`Secret::expose`]
/// gives the value, and only the code that sends it calls that.
///
/// ```
/// use sluice_config::Secret;
/// let key = Secret::new("sk-live-123");
/// assert_eq!(format!("{key} {key:?}"), "*** ***");
/// assert_eq!(key.expose(), "sk-live-123");
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Box<str>);

impl Secret {
    /// Wraps a value.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into().into_boxed_str())
    }

    /// The value itself. Never log or format it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// Reads a secret from the environment variable `variable`, which `field`
/// names; the error names the variable, never a value.
pub(crate) fn from_env(variable: &str, field: &str, env: Env<'_>) -> Result<Secret, ConfigError> {
    if variable.is_empty() {
        return Err(ConfigError::invalid(
            field,
            "must name an environment variable",
        ));
    }
    match env(variable) {
        None => Err(ConfigError::invalid(
            field,
            format!("the environment variable {variable} is not set"),
        )),
        Some(value) if value.is_empty() => Err(ConfigError::invalid(
            field,
            format!("the environment variable {variable} is empty"),
        )),
        Some(value) => Ok(Secret::new(value)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_prints_its_value() {
        let secret = Secret::new("hunter2");
        let shown = format!("{secret} {secret:?} {:?}", Some(&secret));
        assert!(!shown.contains("hunter2"), "{shown}");
        assert_eq!(secret.expose(), "hunter2");
    }
}
