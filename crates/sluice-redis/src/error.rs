//! The errors this crate reports: configuration, and what went wrong talking to Redis.

use std::time::Duration;

/// Why a configuration was rejected or a Redis command failed.
///
/// Messages never contain a Redis password: URLs are redacted and error
/// text from the client is scrubbed of the configured secrets.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A configuration field is invalid; `field` names it.
    #[error("{field}: {message}")]
    Config {
        /// The field, as `redis.timeout`.
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// Redis did not answer in time. The command may still have run: its
    /// fate is unknown, so it is never sent again.
    #[error("Redis did not answer within {0:?}")]
    Timeout(Duration),
    /// The connection failed or dropped.
    #[error("Redis connection failed: {0}")]
    Connection(String),
    /// Redis refused this client as configured: a wrong user or password,
    /// an ACL user without the rights, or a certificate that does not
    /// check. Retrying cannot fix it, so [`crate::RedisBudget::connect`]
    /// reports it instead of starting in fallback.
    #[error("{0}")]
    Refused(String),
    /// Redis answered with an error (a script error, BUSY, MOVED...).
    #[error("Redis answered with an error: {0}")]
    Server(String),
    /// A script answered something this crate does not understand.
    #[error("unexpected reply from a sluice script: {0}")]
    Reply(String),
}

impl Error {
    pub(crate) fn config(field: &str, message: impl Into<String>) -> Self {
        Error::Config {
            field: field.to_owned(),
            message: message.into(),
        }
    }

    /// A short machine-readable kind, for status and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Config { .. } => "config",
            Error::Timeout(_) => "timeout",
            Error::Connection(_) => "connection",
            Error::Refused(_) => "refused",
            Error::Server(_) => "server",
            Error::Reply(_) => "reply",
        }
    }

    /// Sorts a client error, scrubbing `secrets` from its text; `timeout`
    /// is the one the client enforced.
    pub(crate) fn from_redis(
        error: &redis::RedisError,
        secrets: &[&str],
        timeout: Duration,
    ) -> Self {
        let text = crate::redact::scrub(&error.to_string(), secrets);
        if error.is_timeout() {
            Error::Timeout(timeout)
        } else if error.is_io_error()
            || error.is_connection_dropped()
            || error.is_connection_refusal()
        {
            Error::Connection(text)
        } else {
            Error::Server(text)
        }
    }
}
