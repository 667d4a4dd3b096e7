//! The sluice sidecar: any agent harness, in any language, gets sluice's
//! backpressure over local HTTP.
//!
//! # Mental model
//!
//! - A [`Config`] (TOML, checked at start, every error naming its field)
//!   declares **credentials** (a base URL, a secret read from the
//!   environment, limits) and **tools** (a method and a path template on one
//!   credential).
//! - [`AppState`] builds one engine [`sluice::Gate`] over an
//!   [`HttpExecutor`], which signs requests with the credential's secret,
//!   follows no redirect and contacts nothing but the base URL.
//! - [`app`] is the axum router: `POST /v1/turns` runs a turn's calls and
//!   answers one outcome per call, in order; `ANY /proxy/{credential}/{*path}`
//!   forwards plain HTTP through the same gate; `GET /v1/status`,
//!   `GET /metrics` and `GET /healthz` report. A `turn_id` (or the
//!   `x-sluice-turn-id` header) makes requests share one turn: its
//!   single-flight and read cache.
//! - [`serve`] runs it with a graceful shutdown.
//!
//! Secrets live in [`Secret`], which prints `***`; no response, status page,
//! metric or log line carries one.
//!
//! # Example
//!
//! ```
//! use sluice_server::{AppState, Config, app};
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
//! let config = Config::from_toml(toml, |_| None)?;
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

mod config;
mod executor;
mod forward;
#[doc(hidden)]
pub mod fuzzing;
mod metrics;
mod payload;
mod routes;
mod secret;
mod serve;
mod state;
mod template;
mod tool;
mod turns;

pub use config::{
    Config, ConfigError, DEFAULT_AUTH_HEADER, DEFAULT_AUTH_PREFIX, DEFAULT_LISTEN,
    DEFAULT_MAX_BODY, DEFAULT_SHARED_TIMEOUT, ServerSettings, SharedSettings, Upstream,
};
pub use executor::{ClientError, HttpExecutor};
pub use metrics::Metrics;
pub use payload::{HttpRequest, Outbound};
pub use reqwest::Url;
pub use routes::{DEADLINE_HEADER, OUTCOME_HEADER, REASON_HEADER, SCOPE_HEADER, TURN_HEADER, app};
pub use secret::Secret;
pub use serve::serve;
pub use state::{AppState, MIN_DEADLINE_CAP, StartError};
pub use template::{FillError, Filled, PathTemplate, TemplateError};
pub use tool::{ToolRequest, ToolSpec};
