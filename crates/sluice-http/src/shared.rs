//! `[shared]` as the Redis backend's settings: the sidecar and the Python
//! package connect their shared budget with the same mapping.

use sluice_config::SharedSettings;
use sluice_redis::RedisConfig;

/// The Redis backend's settings from `[shared]`: `redis_urls` means a
/// cluster (its seeds), `redis_url` one node. The Python package's gate
/// connects with the same settings.
pub fn redis_config(settings: &SharedSettings) -> RedisConfig {
    let mut config = if settings.redis_urls.is_empty() {
        let url = settings
            .redis_url
            .as_ref()
            .map(|url| url.expose().to_owned())
            .unwrap_or_default();
        RedisConfig::single(url)
    } else {
        RedisConfig::cluster(
            settings
                .redis_urls
                .iter()
                .map(|url| url.expose().to_owned()),
        )
    };
    config = config.timeout(settings.timeout);
    if let Some(share) = settings.fallback_share {
        config = config.fallback_share(share);
    }
    if let Some(path) = &settings.tls_ca_file {
        config = config.tls_ca_file(path);
    }
    config
}
