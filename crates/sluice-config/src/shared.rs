//! `[shared]`: where shared budgets live (the Redis backend), and the rule
//! that a credential with `shared = true` needs it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use url::Url;

use crate::error::ConfigError;
use crate::file::{CredentialFile, SharedFile};
use crate::secret::Secret;
use crate::value;

/// How long one call to the shared backend may take: above the slowest
/// answer of a live Redis on a loaded machine, so that a slow answer is
/// not taken for an outage (the same default as `sluice-redis`'s
/// `RedisConfig`; docs/shared-limiter.md, "The bound, and the timeout").
/// A call never waits past its own deadline for it.
pub const DEFAULT_SHARED_TIMEOUT: Duration = Duration::from_millis(500);

/// `[shared]`: the shared budget backend (Redis): `redis_url` is one node,
/// `redis_urls` the seeds of a Redis Cluster.
#[derive(Debug, Clone, PartialEq)]
pub struct SharedSettings {
    /// One Redis URL (it may carry a password, so it is kept as a secret).
    pub redis_url: Option<Secret>,
    /// Several (Redis Cluster seeds), also kept as secrets.
    pub redis_urls: Vec<Secret>,
    /// How long one call to the backend may take.
    pub timeout: Duration,
    /// The share of a credential's rate to fall back to while the backend is
    /// unreachable; `None`: rate / processes seen recently.
    pub fallback_share: Option<f64>,
    /// A PEM file of CA certificates to check the servers' certificates
    /// against (a private CA) instead of the platform's roots; every URL
    /// must then be `rediss://`. Read when the backend starts.
    pub tls_ca_file: Option<PathBuf>,
}

/// `[shared]` checked; no URL is ever quoted in an error.
pub(crate) fn settings(file: &SharedFile) -> Result<SharedSettings, ConfigError> {
    let redis = |text: &str, field: &str| -> Result<Secret, ConfigError> {
        // Never quoted: a Redis URL may carry a password.
        let url = Url::parse(text.trim())
            .map_err(|_| ConfigError::invalid(field, "is not a URL (the value is not shown)"))?;
        if !matches!(url.scheme(), "redis" | "rediss" | "redis+unix" | "unix") {
            return Err(ConfigError::invalid(
                field,
                "must be a redis://, rediss:// or unix:// URL",
            ));
        }
        Ok(Secret::new(text.trim()))
    };
    let redis_url = file
        .redis_url
        .as_deref()
        .map(|text| redis(text, "shared.redis_url"))
        .transpose()?;
    let mut redis_urls = Vec::new();
    for (index, text) in file.redis_urls.iter().flatten().enumerate() {
        redis_urls.push(redis(text, &format!("shared.redis_urls[{index}]"))?);
    }
    if redis_url.is_none() && redis_urls.is_empty() {
        return Err(ConfigError::invalid(
            "shared.redis_url",
            "is required (or redis_urls) when [shared] is present",
        ));
    }
    let timeout = file
        .timeout
        .as_deref()
        .map(|text| value::duration_field(text, "shared.timeout"))
        .transpose()?
        .unwrap_or(DEFAULT_SHARED_TIMEOUT);
    if let Some(share) = file.fallback_share
        && !(share > 0.0 && share <= 1.0)
    {
        return Err(ConfigError::invalid(
            "shared.fallback_share",
            format!("{share} must be above 0 and at most 1"),
        ));
    }
    let tls_ca_file = match file.tls_ca_file.as_deref().map(str::trim) {
        None => None,
        Some("") => {
            return Err(ConfigError::invalid(
                "shared.tls_ca_file",
                "must be the path of a PEM file of CA certificates",
            ));
        }
        Some(path) => {
            let plain = redis_url
                .iter()
                .chain(&redis_urls)
                .any(|url| !url.expose().starts_with("rediss://"));
            if plain {
                return Err(ConfigError::invalid(
                    "shared.tls_ca_file",
                    "needs rediss:// URLs (a CA file means TLS; redis:// is plain text)",
                ));
            }
            Some(PathBuf::from(path))
        }
    };
    Ok(SharedSettings {
        redis_url,
        redis_urls,
        timeout,
        fallback_share: file.fallback_share,
        tls_ca_file,
    })
}

/// A credential with `shared = true` needs a `[shared]` section to say where
/// its budget lives.
pub(crate) fn check_section(
    shared: Option<&SharedSettings>,
    credentials: &BTreeMap<String, CredentialFile>,
) -> Result<(), ConfigError> {
    if shared.is_none()
        && let Some((name, _)) = credentials.iter().find(|(_, credential)| credential.shared)
    {
        return Err(ConfigError::invalid(
            format!("credentials.{name}.shared"),
            "true needs a [shared] section with redis_url or redis_urls",
        ));
    }
    Ok(())
}
