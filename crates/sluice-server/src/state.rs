//! The sidecar's shared state: the configuration, the gate over the HTTP
//! executor, the metrics and the turns, built once at start.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluice::Gate;

use sluice_redis::{RedisBudget, RedisConfig};

use crate::config::{Config, ConfigError, SharedSettings};
use crate::executor::{ClientError, HttpExecutor};
use crate::metrics::Metrics;
use crate::turns::{MAX_TURNS, Turns};

/// Client-given deadlines (`deadline_ms`, `x-sluice-deadline-ms`) are capped
/// at the longest configured deadline or this, whichever is longer, so the
/// shutdown grace period covers every accepted call.
pub const MIN_DEADLINE_CAP: Duration = Duration::from_secs(300);

/// Slack on top of the deadline cap for the last outcomes to be written.
const GRACE_SLACK: Duration = Duration::from_secs(1);

/// Distinct proxy labels per credential (one per first path segment, so
/// that a scope the server reports for `/search` does not hold `/repos`);
/// past it, further segments share the credential's plain label.
const MAX_PROXY_LABELS: usize = 32;

/// Why the sidecar cannot start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A credential asks for a shared budget, which needs
    /// [`AppState::connect`] (it connects to Redis).
    #[error(
        "credentials.{credential}.shared: a shared budget needs the Redis backend: start with AppState::connect"
    )]
    SharedNeedsConnect {
        /// The credential.
        credential: String,
    },
    /// The shared backend's settings are invalid.
    #[error("shared: {0}")]
    Shared(#[from] sluice_redis::Error),
    /// The HTTP client could not be built.
    #[error(transparent)]
    Client(#[from] ClientError),
}

/// Everything the handlers share. Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

pub(crate) struct Inner {
    pub(crate) config: Config,
    pub(crate) gate: Gate<HttpExecutor>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) turns: Turns<HttpExecutor>,
    pub(crate) deadline_cap: Duration,
    /// The shared budget, when a credential has `shared = true`.
    pub(crate) shared: Option<Arc<RedisBudget>>,
    proxy_labels: Mutex<HashMap<String, HashSet<String>>>,
}

impl AppState {
    /// Builds the state from a checked configuration, with jitter from the OS.
    /// Must run inside a tokio runtime (the engine reads tokio's clock).
    /// A configuration with shared credentials needs [`AppState::connect`].
    pub fn new(config: Config) -> Result<Self, StartError> {
        Self::build(config, None, None)
    }

    /// As [`AppState::new`], with the jitter seeded (tests, reproducible runs).
    pub fn with_seed(config: Config, seed: u64) -> Result<Self, StartError> {
        Self::build(config, Some(seed), None)
    }

    /// Builds the state, connecting to the shared backend (Redis) when a
    /// credential has `shared = true`. Redis being down is not an error:
    /// the backend starts in fallback and recovers by itself.
    pub async fn connect(config: Config, seed: Option<u64>) -> Result<Self, StartError> {
        let shared = match (
            &config.shared,
            config.credentials.values().any(|c| c.shared),
        ) {
            (Some(settings), true) => Some(Arc::new(
                RedisBudget::connect(redis_config(settings)).await?,
            )),
            _ => None,
        };
        Self::build(config, seed, shared)
    }

    fn build(
        config: Config,
        seed: Option<u64>,
        shared: Option<Arc<RedisBudget>>,
    ) -> Result<Self, StartError> {
        config.check_exposure()?;
        if shared.is_none()
            && let Some((name, _)) = config.credentials.iter().find(|(_, c)| c.shared)
        {
            return Err(StartError::SharedNeedsConnect {
                credential: name.clone(),
            });
        }
        let executor = HttpExecutor::new(&config.credentials)?;
        let metrics = Arc::new(Metrics::new());
        let mut builder = Gate::builder(config.gate.clone(), executor).observer(metrics.clone());
        if let Some(seed) = seed {
            builder = builder.seed(seed);
        }
        if let Some(budget) = &shared {
            builder = builder.shared(budget.clone());
        }
        let gate = builder.build().map_err(ConfigError::from)?;
        let turns = Turns::new(config.gate.defaults.turn_cache_ttl, MAX_TURNS);
        let deadline_cap = config.longest_deadline().max(MIN_DEADLINE_CAP);
        Ok(AppState {
            inner: Arc::new(Inner {
                config,
                gate,
                metrics,
                turns,
                deadline_cap,
                shared,
                proxy_labels: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// The gate every call goes through.
    pub fn gate(&self) -> &Gate<HttpExecutor> {
        &self.inner.gate
    }

    /// The metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// The shared backend's state (mode per credential, Redis errors), if any.
    pub fn shared_status(&self) -> Option<sluice_redis::Status> {
        self.inner.shared.as_ref().map(|budget| budget.status())
    }

    /// How long shutdown waits for calls in flight: the longest deadline a
    /// call can have, plus a little for its outcome to be written.
    pub fn shutdown_grace(&self) -> Duration {
        self.inner.deadline_cap + GRACE_SLACK
    }
}

impl Inner {
    /// A client-given deadline, capped.
    pub(crate) fn cap_deadline(&self, deadline: Duration) -> Duration {
        deadline.min(self.deadline_cap)
    }

    /// The label of a proxied call: `proxy:CRED:/SEGMENT` for the first few
    /// first path segments, `proxy:CRED` past them, so labels stay bounded.
    pub(crate) fn proxy_label(&self, credential: &str, path: &str) -> String {
        let segment = path.trim_start_matches('/').split('/').next().unwrap_or("");
        let plain = format!("proxy:{credential}");
        let printable = segment.len() <= 64
            && segment
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
        if segment.is_empty() || !printable {
            return plain;
        }
        let label = format!("{plain}:/{segment}");
        let mut labels = self
            .proxy_labels
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let known = labels.entry(credential.to_owned()).or_default();
        if known.contains(&label) || known.len() < MAX_PROXY_LABELS {
            known.insert(label.clone());
            label
        } else {
            plain
        }
    }
}

/// The Redis backend's settings from `[shared]`: `redis_urls` means a
/// cluster (its seeds), `redis_url` one node.
fn redis_config(settings: &SharedSettings) -> RedisConfig {
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
    config
}
