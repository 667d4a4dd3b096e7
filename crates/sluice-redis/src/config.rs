//! How to reach Redis and how the shared limiter behaves: [`RedisConfig`], checked where it is built.

use std::path::PathBuf;
use std::time::Duration;

use crate::Error;
use crate::keys::valid_prefix;
use crate::redact::RedisUrl;

/// Where Redis is and how the shared limiter uses it.
///
/// One URL with `cluster = false` ([`RedisConfig::single`]) is a single
/// node, reached through a `ConnectionManager`. `cluster = true`
/// ([`RedisConfig::cluster`]) treats every URL as a seed of a Redis Cluster
/// (one seed is enough; more survive a seed being down). The sidecar maps
/// `redis_url = "redis://..."` to the first and `redis_urls = [...]` to the
/// second.
///
/// ```
/// use std::time::Duration;
/// use sluice_redis::RedisConfig;
///
/// let config = RedisConfig::single("redis://:secret@127.0.0.1:6379")
///     .timeout(Duration::from_millis(30))
///     .fallback_share(0.25);
/// assert!(config.validate().is_ok());
/// assert!(!format!("{config:?}").contains("secret"));
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RedisConfig {
    /// The node (single) or the cluster's seed nodes.
    pub urls: Vec<RedisUrl>,
    /// Treat `urls` as Redis Cluster seeds.
    pub cluster: bool,
    /// Every command's timeout; a command that takes longer is a failure
    /// whose fate is unknown (never retried).
    pub timeout: Duration,
    /// How long one connection attempt may take (in the background).
    pub connect_timeout: Duration,
    /// While Redis is unreachable, each process spends this fraction of the
    /// rate. Unset: one over the processes seen recently.
    pub fallback_share: Option<f64>,
    /// The first part of every key (`[A-Za-z0-9._-]`).
    pub key_prefix: String,
    /// Consecutive failures that open the circuit breaker.
    pub breaker_failures: u32,
    /// How long the breaker first stays open before a probe.
    pub breaker_open_for: Duration,
    /// The longest it stays open (the backoff doubles up to this).
    pub breaker_max_open_for: Duration,
    /// The most slots one lease may take (the fair-share cap may be lower).
    pub max_lease: u32,
    /// A process counts as present this long after its last reservation.
    pub heartbeat: Duration,
    /// Subscribe to the penalties other processes publish, so that a block
    /// one process learns also stops the slots the others already hold.
    pub events: bool,
    /// A PEM file of the CA certificates that sign the servers' (for a
    /// private CA); `None`: the platform's roots. Only with `rediss://`.
    /// The server's certificate and name are always checked.
    pub tls_ca_file: Option<PathBuf>,
}

/// The default command timeout, picked from the bound on starts
/// (docs/shared-limiter.md, "The bound, and the timeout"): while every
/// answer comes within it no window holds more than N, and a timeout on a
/// live Redis (a process deciding locally beside processes still shared)
/// is what lets a window overspend. On two busy cores a PING took up to
/// 347 ms (`redis-cli --latency`, two `yes` loads beside); 50 ms, the
/// default before, timed live answers out. Its price is paid only when
/// Redis is really away: at most twice this (the reservation, then its
/// void) on a call before the breaker opens.
const DEFAULT_TIMEOUT: Duration = Duration::from_millis(500);

impl RedisConfig {
    /// A single Redis node.
    pub fn single(url: impl Into<String>) -> Self {
        Self::with_urls(vec![RedisUrl::new(url)], false)
    }

    /// A Redis Cluster, reached through these seed nodes.
    pub fn cluster<I, S>(seeds: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::with_urls(seeds.into_iter().map(RedisUrl::new).collect(), true)
    }

    fn with_urls(urls: Vec<RedisUrl>, cluster: bool) -> Self {
        RedisConfig {
            urls,
            cluster,
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: Duration::from_secs(1),
            fallback_share: None,
            key_prefix: "sluice".to_owned(),
            // Three in a row: one slow reply is noise, three is an outage.
            breaker_failures: 3,
            // Short enough that a restarted Redis is used again within
            // a second or two, doubling so a long outage costs one probe
            // per second.
            breaker_open_for: Duration::from_millis(250),
            breaker_max_open_for: Duration::from_secs(1),
            max_lease: 32,
            heartbeat: Duration::from_secs(5),
            events: true,
            tls_ca_file: None,
        }
    }

    /// Sets the command timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets the fallback share (a fraction in (0, 1]).
    pub fn fallback_share(mut self, share: f64) -> Self {
        self.fallback_share = Some(share);
        self
    }

    /// Sets the key prefix.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }

    /// Sets the largest lease (1 switches leases off: one round trip per call).
    pub fn max_lease(mut self, slots: u32) -> Self {
        self.max_lease = slots;
        self
    }

    /// Sets the breaker: failures to open, first and longest open time.
    pub fn breaker(mut self, failures: u32, open_for: Duration, max_open_for: Duration) -> Self {
        self.breaker_failures = failures;
        self.breaker_open_for = open_for;
        self.breaker_max_open_for = max_open_for;
        self
    }

    /// Sets the heartbeat window.
    pub fn heartbeat(mut self, window: Duration) -> Self {
        self.heartbeat = window;
        self
    }

    /// Switches the penalty subscription on or off.
    pub fn events(mut self, events: bool) -> Self {
        self.events = events;
        self
    }

    /// Trusts the CA certificates in this PEM file (instead of the
    /// platform's roots) for `rediss://` URLs.
    pub fn tls_ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.tls_ca_file = Some(path.into());
        self
    }

    /// Checks every field; the error names the first bad one.
    pub fn validate(&self) -> Result<(), Error> {
        if self.urls.is_empty() {
            return Err(Error::config("redis.urls", "at least one URL is needed"));
        }
        if !self.cluster && self.urls.len() > 1 {
            return Err(Error::config(
                "redis.urls",
                "several URLs need cluster = true (a single node takes one URL)",
            ));
        }
        for url in &self.urls {
            let text = url.expose();
            if !(text.starts_with("redis://") || text.starts_with("rediss://")) {
                return Err(Error::config(
                    "redis.urls",
                    format!("{url} must start with redis:// or rediss://"),
                ));
            }
            if let Err(error) = redis::Client::open(text) {
                let message = crate::redact::scrub(&error.to_string(), &[text]);
                let message = match url.password() {
                    Some(password) => crate::redact::scrub(&message, &[password]),
                    None => message,
                };
                return Err(Error::config("redis.urls", format!("{url}: {message}")));
            }
        }
        if self.tls_ca_file.is_some() && !self.urls.iter().all(RedisUrl::is_tls) {
            return Err(Error::config(
                "redis.tls_ca_file",
                "needs rediss:// URLs (a CA file means TLS; redis:// is plain text)",
            ));
        }
        if self.timeout.is_zero() {
            return Err(Error::config("redis.timeout", "must be longer than zero"));
        }
        if self.connect_timeout.is_zero() {
            return Err(Error::config(
                "redis.connect_timeout",
                "must be longer than zero",
            ));
        }
        if let Some(share) = self.fallback_share
            && !(share > 0.0 && share <= 1.0)
        {
            return Err(Error::config(
                "redis.fallback_share",
                "must be a fraction in (0, 1]: the fallback is never unlimited",
            ));
        }
        if !valid_prefix(&self.key_prefix) {
            return Err(Error::config(
                "redis.key_prefix",
                "must be non-empty and use only letters, digits, '.', '_' and '-'",
            ));
        }
        if self.breaker_failures == 0 {
            return Err(Error::config(
                "redis.breaker_failures",
                "must be at least 1",
            ));
        }
        if self.breaker_open_for.is_zero() || self.breaker_max_open_for < self.breaker_open_for {
            return Err(Error::config(
                "redis.breaker_open_for",
                "must be longer than zero and at most breaker_max_open_for",
            ));
        }
        if self.max_lease == 0 {
            return Err(Error::config("redis.max_lease", "must be at least 1"));
        }
        if self.heartbeat < Duration::from_millis(100) {
            return Err(Error::config("redis.heartbeat", "must be at least 100ms"));
        }
        Ok(())
    }

    /// Every secret in the URLs, to scrub from error text.
    pub(crate) fn secrets(&self) -> Vec<&str> {
        self.urls
            .iter()
            .flat_map(|url| [Some(url.expose()), url.password()])
            .flatten()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(config: &RedisConfig) -> String {
        match config.validate() {
            Err(Error::Config { field, .. }) => field,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bad_fields_are_named() {
        assert_eq!(
            field(&RedisConfig::cluster(Vec::<String>::new())),
            "redis.urls"
        );
        assert_eq!(field(&RedisConfig::single("http://x")), "redis.urls");
        let mut two = RedisConfig::single("redis://a:1");
        two.urls.push(RedisUrl::new("redis://b:1"));
        assert_eq!(field(&two), "redis.urls");
        let base = RedisConfig::single("redis://127.0.0.1:6379");
        assert_eq!(
            field(&base.clone().timeout(Duration::ZERO)),
            "redis.timeout"
        );
        assert_eq!(
            field(&base.clone().fallback_share(0.0)),
            "redis.fallback_share"
        );
        assert_eq!(
            field(&base.clone().fallback_share(f64::NAN)),
            "redis.fallback_share"
        );
        assert_eq!(field(&base.clone().key_prefix("a{b}")), "redis.key_prefix");
        assert_eq!(field(&base.clone().max_lease(0)), "redis.max_lease");
        assert_eq!(
            field(&base.clone().tls_ca_file("/etc/ca.pem")),
            "redis.tls_ca_file"
        );
        assert!(
            RedisConfig::single("rediss://u:p@127.0.0.1:6379")
                .tls_ca_file("/etc/ca.pem")
                .validate()
                .is_ok()
        );
        assert!(base.validate().is_ok());
        assert!(
            RedisConfig::cluster(["redis://a:1", "redis://b:2"])
                .validate()
                .is_ok()
        );
    }

    #[test]
    fn errors_and_debug_hide_the_password() {
        let config = RedisConfig::single("redis://u:hunter2@127.0.0.1:6379/not-a-db");
        let text = format!("{:?} {}", config, config.validate().unwrap_err());
        assert!(!text.contains("hunter2"), "{text}");
    }
}
