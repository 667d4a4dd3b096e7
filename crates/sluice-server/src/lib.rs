//! The sluice sidecar: any agent harness, in any language, gets sluice's
//! backpressure over local HTTP.
//!
//! # Mental model
//!
//! - A [`SidecarConfig`] (`sluice.toml`, read by `sluice-config`: checked
//!   at start, every error naming its field) declares **credentials** (a
//!   base URL, a secret read from the environment, limits) and **tools** (a
//!   method and a path template on one credential).
//! - [`AppState`] builds one engine [`sluice::Gate`] over an
//!   [`HttpExecutor`], which signs requests with the credential's secret,
//!   follows no redirect and contacts nothing but the base URL.
//! - [`app`] is the axum router: `POST /v1/turns` runs a turn's calls and
//!   answers one outcome per call, in order; `ANY /proxy/{credential}/{*path}`
//!   forwards plain HTTP through the same gate; `GET /v1/status`,
//!   `GET /metrics` and `GET /healthz` report. A `turn_id` (or the
//!   `x-sluice-turn-id` header) names one engine turn in a registry, so
//!   requests carrying it share its single-flight and read cache.
//! - A proxied answer's body streams to its client as it arrives (an event
//!   stream, NDJSON, anything past 1 MiB) while the call keeps its
//!   concurrency permit; a read other requests of a named turn may share is
//!   read whole. Every configured secret is masked as `***` in everything
//!   the sidecar returns.
//! - [`serve`] runs it on a listener with header-read and idle timeouts, a
//!   bound on connections and accept errors backed off; [`serve_workers`]
//!   does the same on one current-thread runtime per worker, each with its
//!   own socket ([`bind`]). Both stop with a graceful shutdown. Deadlines a client sets
//!   (`deadline_ms`, `x-sluice-deadline-ms`) are refused past
//!   [`sluice_config::MAX_DURATION`], then capped so that the shutdown grace
//!   period covers them (see [`MIN_DEADLINE_CAP`]).
//!
//! Secrets live in [`sluice_config::Secret`], which prints `***`; no
//! response, status page, metric or log line carries one.
//!
//! # Example
//!
//! ```
//! use sluice_server::{AppState, SidecarConfig, app};
//! use tower::ServiceExt;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let toml = r#"
//!     [credentials.support]
//!     base_url = "http://127.0.0.1:9"
//!     rate = "10/1s"
//!
//!     [tools.search_tickets]
//!     credential = "support"
//!     path = "/api/v2/search.json?query={query}"
//! "#;
//! let config = SidecarConfig::from_toml(toml, |_| None)?;
//! let router = app(AppState::new(config)?);
//!
//! let request = http::Request::post("/v1/turns")
//!     .body(axum::body::Body::from(r#"{"calls":[{"id":"c1","tool":"search_tickets","args":{}}]}"#))?;
//! let response = router.oneshot(request).await?;
//! let body = axum::body::to_bytes(response.into_body(), usize::MAX).await?;
//! let answer: serde_json::Value = serde_json::from_slice(&body)?;
//! // Nothing was sent: the call's own outcome names what is missing.
//! assert_eq!(answer["results"][0]["status"], "error");
//! assert_eq!(answer["results"][0]["message"], "search_tickets: missing argument \"query\"");
//! # Ok(())
//! # }
//! ```

#[doc(hidden)]
pub mod fuzzing;
mod metrics;
mod reload;
mod routes;
mod serve_app;
mod state;
mod turn_registry;

pub use metrics::Metrics;
pub use reload::{Adjust, Loaded, ReloadError};
pub use routes::{
    DEADLINE_HEADER, OUTCOME_HEADER, PRIORITY_HEADER, REASON_HEADER, SCOPE_HEADER, TURN_HEADER, app,
};
pub use serve_app::{serve, serve_workers};
// The HTTP plumbing the sidecar is built on (`sluice-http`), named here
// for the sidecar's callers.
pub use sluice_http::{ClientError, HttpExecutor, HttpRequest, Listeners, Outbound, Url, bind};
pub use state::{AppState, MIN_DEADLINE_CAP, StartError};
// The configuration this crate is built from (`AppState::new` takes it,
// `StartError::Config` carries its error).
pub use sluice_config::{ConfigError, SidecarConfig};
