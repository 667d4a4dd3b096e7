//! The sidecar's shared state: the configuration, the gate over the HTTP
//! executor, the metrics and the registry of turns by id, built once at start.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use sluice::Gate;
use sluice_config::{ConfigError, SidecarConfig};
use sluice_http::scrub::Scrubber;
use sluice_http::trace::{TraceObserver, Tracer};
use sluice_http::{ClientError, HttpExecutor, redis_config};
use sluice_redis::RedisBudget;

use crate::metrics::Metrics;
use crate::reload::{Adjust, Live, Loaded, ReloadError};
use crate::turn_registry::{MAX_TURNS, TurnRegistry};

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
    pub(crate) config: SidecarConfig,
    /// The gate in force, swapped by a reload (`reload.rs`).
    pub(crate) live: Live,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) turn_registry: TurnRegistry<HttpExecutor>,
    pub(crate) deadline_cap: Duration,
    /// The shared budget, when a credential has `shared = true`.
    pub(crate) shared: Option<Arc<RedisBudget>>,
    /// Masks the credentials' secrets in every response; `None` without a secret.
    pub(crate) scrubber: Option<Arc<Scrubber>>,
    /// Proxy labels by credential, then by first path segment (`""`: none).
    /// foldhash: two look-ups per proxied request, on short keys.
    proxy_labels: Mutex<foldhash::HashMap<String, foldhash::HashMap<String, Arc<str>>>>,
    /// Where calls' spans go; `None` when traces are off.
    pub(crate) tracer: Option<Arc<Tracer>>,
    /// Set when the sidecar shuts down: endless responses (`/v1/events`) end.
    closing: tokio::sync::watch::Sender<bool>,
}

impl AppState {
    /// Builds the state from a checked configuration, with jitter from the OS.
    /// Must run inside a tokio runtime (the engine reads tokio's clock).
    /// A configuration with shared credentials needs [`AppState::connect`].
    pub fn new(config: SidecarConfig) -> Result<Self, StartError> {
        Self::build(config, None, None, None)
    }

    /// As [`AppState::new`], with the jitter seeded (tests, reproducible runs).
    pub fn with_seed(config: SidecarConfig, seed: u64) -> Result<Self, StartError> {
        Self::build(config, Some(seed), None, None)
    }

    /// Builds the state, connecting to the shared backend (Redis) when a
    /// credential has `shared = true`. Redis being down is not an error:
    /// the backend starts in fallback and recovers by itself.
    pub async fn connect(config: SidecarConfig, seed: Option<u64>) -> Result<Self, StartError> {
        Self::connect_traced(config, seed, None).await
    }

    /// As [`AppState::connect`], with each call's span sent to `tracer`
    /// (the `traceparent` of `/v1/turns` and `/proxy` requests parents them).
    pub async fn connect_traced(
        config: SidecarConfig,
        seed: Option<u64>,
        tracer: Option<Arc<Tracer>>,
    ) -> Result<Self, StartError> {
        let shared = match (
            &config.shared,
            config.credentials.values().any(|c| c.shared),
        ) {
            (Some(settings), true) => Some(Arc::new(
                RedisBudget::connect(redis_config(settings)).await?,
            )),
            _ => None,
        };
        Self::build(config, seed, shared, tracer)
    }

    fn build(
        config: SidecarConfig,
        seed: Option<u64>,
        shared: Option<Arc<RedisBudget>>,
        tracer: Option<Arc<Tracer>>,
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
        metrics.record_modes(
            config
                .gate
                .credentials
                .iter()
                .map(|(name, credential)| (name.as_str(), credential.enforce)),
        );
        let mut builder = Gate::builder(config.gate.clone(), executor);
        let observer: Arc<dyn sluice::Observer> = metrics.clone();
        if let Some(observer) = TraceObserver::wrap(tracer.as_ref(), Some(observer)) {
            builder = builder.observer(observer);
        }
        if let Some(seed) = seed {
            builder = builder.seed(seed);
        }
        if let Some(budget) = &shared {
            builder = builder.shared(budget.clone());
        }
        let gate = builder.build().map_err(ConfigError::from)?;
        let turn_registry = TurnRegistry::new(config.gate.defaults.turn_cache_ttl, MAX_TURNS);
        let deadline_cap = config.longest_deadline().max(MIN_DEADLINE_CAP);
        let scrubber = Scrubber::new(
            config
                .credentials
                .values()
                .filter_map(|upstream| upstream.secret.as_ref())
                .map(|secret| secret.expose()),
        );
        Ok(AppState {
            inner: Arc::new(Inner {
                live: Live::new(gate, &config),
                config,
                metrics,
                turn_registry,
                deadline_cap,
                shared,
                scrubber,
                tracer,
                proxy_labels: Mutex::new(foldhash::HashMap::default()),
                closing: tokio::sync::watch::Sender::new(false),
            }),
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> &SidecarConfig {
        &self.inner.config
    }

    /// The gate new calls go through (a reload swaps it).
    pub fn gate(&self) -> Gate<HttpExecutor> {
        self.inner.gate()
    }

    /// Makes the configuration reloadable from `path` (SIGHUP, `POST
    /// /v1/reload`): each reload reads it again and applies `adjust` (the
    /// command line's overrides) before using it.
    pub fn reload_from(&self, path: &std::path::Path, adjust: Adjust) {
        self.inner.live.set_source(path, adjust);
    }

    /// Re-reads the configuration file and applies it: new limits for
    /// calls that start after, the spend kept. Refused, naming the field,
    /// with the configuration in force unchanged, when the file does not
    /// load or changes what cannot change while serving.
    pub fn reload(&self) -> Result<Loaded, ReloadError> {
        let result = self.inner.live.reload();
        match &result {
            Ok(loaded) => tracing::info!(
                sha256 = loaded.sha256.as_deref().unwrap_or(""),
                "configuration reloaded: new limits apply to calls that start from now"
            ),
            Err(error) => tracing::warn!(
                field = error.field().unwrap_or(""),
                %error,
                "configuration reload refused; the configuration in force is unchanged"
            ),
        }
        result
    }

    /// When and from what file the configuration in force was loaded.
    pub fn loaded(&self) -> Loaded {
        self.inner.live.loaded()
    }

    /// The metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// The shared backend's state (mode per credential, Redis errors), if any.
    pub fn shared_status(&self) -> Option<sluice_redis::Status> {
        self.inner.shared.as_ref().map(|budget| budget.status())
    }

    /// Ends the responses that would otherwise never end (`/v1/events`),
    /// so that a graceful shutdown does not wait on an open page.
    pub(crate) fn close_streams(&self) {
        self.inner.closing.send_replace(true);
    }

    /// How long shutdown waits for calls in flight: the longest deadline a
    /// call can have, plus a little for its outcome to be written.
    pub fn shutdown_grace(&self) -> Duration {
        self.inner.deadline_cap + GRACE_SLACK
    }
}

impl Inner {
    /// The gate new calls go through.
    pub(crate) fn gate(&self) -> Gate<HttpExecutor> {
        self.live.gate()
    }

    /// Resolves when the sidecar starts shutting down.
    pub(crate) fn closing(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut closing = self.closing.subscribe();
        async move {
            // An error means the state is gone: nothing is left to serve.
            let _ = closing.wait_for(|closing| *closing).await;
        }
    }

    /// The label of a proxied call: `proxy:CRED:/SEGMENT` for the first few
    /// first path segments, `proxy:CRED` past them, so labels stay bounded.
    /// Labels are made once and looked up after that, without allocating.
    pub(crate) fn proxy_label(&self, credential: &str, path: &str) -> Arc<str> {
        let segment = path.trim_start_matches('/').split('/').next().unwrap_or("");
        let printable = segment.len() <= 64
            && segment
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
        let segment = if printable { segment } else { "" };
        let mut labels = self.proxy_labels.lock();
        if let Some(label) = labels.get(credential).and_then(|known| known.get(segment)) {
            return label.clone();
        }
        let known = labels.entry(credential.to_owned()).or_default();
        // The plain label (no segment) does not count against the bound.
        let plain = known
            .entry(String::new())
            .or_insert_with(|| Arc::from(format!("proxy:{credential}")))
            .clone();
        if segment.is_empty() || known.len() > MAX_PROXY_LABELS {
            return plain;
        }
        known
            .entry(segment.to_owned())
            .or_insert_with(|| Arc::from(format!("{plain}:/{segment}")))
            .clone()
    }
}
