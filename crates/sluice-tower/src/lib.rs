//! sluice as Rust middleware: a tower [`Layer`](tower_layer::Layer) for any
//! HTTP client service, and (feature `reqwest`) a `reqwest-middleware`
//! middleware, both sending through one sluice gate.
//!
//! # Mental model
//!
//! A [`Sluice`] is a [`sluice::Gate`] for HTTP requests. Stacks built on it
//! ([`Sluice::layer`], `Sluice::middleware`) hand it each request together
//! with the way to send it: a clone of the inner tower service, or the
//! reqwest client. A classifying function, a plain `Fn` of the request,
//! says what each request is to sluice: a [`Target`] naming the credential
//! it spends (a configured tool, or a route: credential, read, idempotent,
//! deadline), or `None` to send it as is. Then the engine's pipeline runs:
//! admission, concurrency, rate, deadline, the server's rate-limit headers
//! read from every response, retries of what is retryable through the same
//! bucket, and, among requests sharing a [`Turn`], single-flight and the
//! read cache.
//!
//! - Upstream responses, whatever their status, come back as they are.
//! - A request sluice does not complete with a response resolves to a
//!   [`SluiceError`] carrying the [`sluice::Outcome`]: `Deferred` for
//!   `rate_limited` (with `retry_after_ms`), `quota_exhausted` and
//!   `timed_out`; `Failed` when the stack below failed on every attempt.
//! - Requests are re-sent on retries, so bodies are [`Bytes`](bytes::Bytes):
//!   the service takes `http::Request<Bytes>` and its inner service returns
//!   `http::Response<Bytes>`. To put it in front of a client with other
//!   body types, adapt at the edges: collect the request body into `Bytes`
//!   before this layer (e.g. `http_body_util::BodyExt::collect`), and wrap
//!   the client in a service that converts `Bytes` into its body type and
//!   collects its response body (`examples/tower.rs` does this for reqwest).
//!
//! # Example
//!
//! A stack over an in-process fake API allowing 2 requests per second:
//! sluice keeps to a budget of 1 per second with a 100 ms inline wait, so
//! of three requests at once the first is sent and the others come back as
//! `rate_limited` errors, nothing sent.
//!
//! ```
//! use std::time::Duration;
//!
//! use bytes::Bytes;
//! use sluice::{CredentialConfig, Defaults, GateConfig, Outcome};
//! use sluice_tower::{Sluice, SluiceError, Target};
//! use tower::{ServiceBuilder, ServiceExt, service_fn};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let fake = sluice_fake::FakeApi::new(sluice_fake::Config::new(sluice_fake::Limits::new(
//!     2,
//!     Duration::from_secs(1),
//! )))?;
//! let api = fake.clone();
//! let client = service_fn(move |request: http::Request<Bytes>| {
//!     let api = api.clone();
//!     async move { Ok::<_, std::convert::Infallible>(api.handle(request).await) }
//! });
//!
//! let config = GateConfig::default()
//!     .defaults(Defaults { inline_wait: Duration::from_millis(100), ..Defaults::default() })
//!     .credential("api", CredentialConfig::with_rate("1/1s".parse()?));
//! let sluice = Sluice::builder(config).seed(1).build()?;
//! let service = ServiceBuilder::new()
//!     .layer(sluice.layer(|request: &http::Request<Bytes>| {
//!         Some(Target::http("api", request.method(), request.uri().path(), request.headers()))
//!     }))
//!     .service(client);
//!
//! let mut answers = Vec::new();
//! for n in 0..3 {
//!     let request = http::Request::post(format!("/items/{n}")).body(Bytes::new())?;
//!     answers.push(service.clone().oneshot(request));
//! }
//! let answers = futures_util::future::join_all(answers).await;
//! assert_eq!(answers[0].as_ref().map(|r| r.status()).ok(), Some(http::StatusCode::OK));
//! for deferred in &answers[1..] {
//!     let Err(SluiceError::Deferred(deferred)) = deferred else { panic!("{deferred:?}") };
//!     assert!(matches!(deferred.outcome, Outcome::RateLimited { .. }));
//! }
//! assert_eq!(fake.requests().len(), 1);
//! # Ok(())
//! # }
//! ```

mod call;
mod error;
mod gate;
mod layer;
#[cfg(feature = "reqwest")]
mod reqwest;
mod service;
mod target;
mod turn;

pub use crate::call::{BoxError, Dispatch, HttpCall};
pub use crate::error::{Deferred, Failed, SluiceError};
pub use crate::gate::{Sluice, SluiceBuilder};
pub use crate::layer::SluiceLayer;
#[cfg(feature = "reqwest")]
pub use crate::reqwest::SluiceMiddleware;
pub use crate::service::SluiceService;
pub use crate::target::Target;
pub use crate::turn::Turn;

/// The Rust examples of the README and the manuals in `docs/`, compiled and
/// run as doctests so they stay true: here, where every crate they use is a
/// dependency (the reqwest examples need the `reqwest` feature, which the
/// test command enables; the Redis one, the dev-dependency `sluice-redis`).
/// One item per file, so that a failure names its file.
#[cfg(all(doctest, feature = "reqwest"))]
pub mod guides {
    #[doc = include_str!("../../../README.md")]
    pub struct Readme;
    #[doc = include_str!("../../../docs/adaptive-limits.md")]
    pub struct AdaptiveLimits;
    #[doc = include_str!("../../../docs/cli.md")]
    pub struct Cli;
    #[doc = include_str!("../../../docs/configuration.md")]
    pub struct Configuration;
    #[doc = include_str!("../../../docs/design-notes.md")]
    pub struct DesignNotes;
    #[doc = include_str!("../../../docs/development.md")]
    pub struct Development;
    #[doc = include_str!("../../../docs/fake-api.md")]
    pub struct FakeApi;
    #[doc = include_str!("../../../docs/mcp.md")]
    pub struct Mcp;
    #[doc = include_str!("../../../docs/outcomes.md")]
    pub struct Outcomes;
    #[doc = include_str!("../../../docs/PERFORMANCE.md")]
    pub struct Performance;
    #[doc = include_str!("../../../docs/RELIABILITY.md")]
    pub struct Reliability;
    #[doc = include_str!("../../../docs/rust.md")]
    pub struct Rust;
    #[doc = include_str!("../../../docs/shared-budgets.md")]
    pub struct SharedBudgets;
    #[doc = include_str!("../../../docs/shared-limiter.md")]
    pub struct SharedLimiter;
    #[doc = include_str!("../../../docs/sidecar.md")]
    pub struct Sidecar;
    #[doc = include_str!("../../../docs/signals.md")]
    pub struct Signals;
}
